// One model, up to n_seq generations at once: a bounded queue of requests in front of a single worker thread
// that owns the runner and one KV cache per slot. A new request takes the free slot whose cache shares the
// longest prefix with its prompt and evaluates the rest; then every running slot's next token goes through
// the forward pass in one batch, so an expert several slots chose is read and computed once per step.
// Requests are admitted in arrival order. Cancellation (client gone, shutdown) is checked between tokens.
//
// Recurrent models (qwen35moe) cannot cut their state back to an arbitrary prefix: the worker evaluates a
// prompt in pieces that end at checkpoint positions (the request's hints, every kCheckpointEvery tokens, and
// 4 tokens before the prompt's end, as llama-server does) and snapshots the state there; a later request
// restarts from the newest snapshot at or below the prefix it shares.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/forward/runner.h"
#include "engine/forward/speculative.h"
#include "engine/server/histogram.h"
#include "engine/sampler/sampler.h"
#include "engine/sampler/token_constraint.h"
#include "engine/tokenizer/tokenizer.h"

namespace moe {

class PromptCache;

// A generated token's log-probability and the most likely alternatives, from the distribution the sampler
// drew from before truncation: log-softmax of the logits over the temperature (1 when greedy).
struct TokenLogprob {
    int32_t id = 0;
    double logprob = 0;
    std::vector<std::pair<int32_t, double>> top;  // (id, logprob), most likely first
};

struct GenerationRequest {
    std::vector<int32_t> prompt;
    SamplerParams sampling;
    int max_tokens = 256;
    bool ignore_eos = false;                          // llama-server's extension: end-of-generation tokens are never drawn (benchmarks, tests)
    std::vector<std::string> stop;                    // stop strings (not included in the text)
    std::function<bool(const std::string&)> on_text;  // streaming: each complete UTF-8 piece; false cancels
    std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
    // Set by the consumer (from on_text) when the answer is complete, e.g. one tool call was asked for: the
    // generation ends with finish_reason "stop".
    std::shared_ptr<std::atomic<bool>> finish_now = std::make_shared<std::atomic<bool>>(false);
    // Constrained output (response_format, forced tool calls): only tokens the grammar allows are drawn.
    std::shared_ptr<const JsonGrammar> grammar;
    int logprobs = -1;                                    // -1: none; else each token's logprob with this many alternatives (0-20)
    std::function<void(const TokenLogprob&)> on_logprob;  // streaming: called before on_text gets the token's text
    // Prompt positions worth a recurrent-state checkpoint (recurrent models): where a later request is likely
    // to diverge, such as the start of the last user message.
    std::vector<int> checkpoint_at;
    // Control tokens whose text goes into the output: the chat family's markers, which its parser reads.
    std::vector<int32_t> shown_controls;
};

// What one request cost the expert cache: its share of each forward step it took part in (a decode step
// shared by several slots is split evenly among them).
struct RequestExpertIo {
    uint64_t bytes_read = 0;  // expert bytes read from disk (demand and prefetch)
    uint64_t hits = 0, misses = 0;
    double io_wait_ms = 0;  // time the forward pass blocked on expert reads
};

// Why a generation ended. The APIs name it their way (openai_api: "stop"/"length", anthropic_api: end_turn,
// max_tokens, stop_sequence); Cancelled (the client went away) and Error (a disk fault) never reach a client as such.
enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason f);  // "stop" | "length" | "cancelled" | "error"

struct GenerationResult {
    std::string text;
    std::vector<int32_t> tokens;         // generated, without the end-of-generation token
    std::vector<TokenLogprob> logprobs;  // one per generated token when asked for
    FinishReason finish_reason = FinishReason::Stop;
    std::string stop_string;  // the stop string that ended it, if one did
    std::string error;
    int prompt_tokens = 0;
    int prompt_reused = 0;    // taken from the KV cache instead of evaluated
    int prompt_restored = 0;  // of those, read from the prompt cache on disk
    int completion_tokens = 0;
    int drafted = 0, draft_accepted = 0;  // speculative decoding: drafts verified, and kept
    double prompt_ms = 0, gen_ms = 0;
    RequestExpertIo experts;
};

struct GenerationStats {
    std::atomic<uint64_t> prompt_tokens{0}, prompt_reused{0}, generated_tokens{0}, requests{0};
    std::atomic<uint64_t> gen_ms_total{0};
    std::atomic<double> last_tok_per_s{0};
    // Constrained decoding: tokens checked against the grammar, full masks built (the drawn token was not
    // allowed), and the time spent on both.
    std::atomic<uint64_t> grammar_tokens{0}, grammar_masks{0}, grammar_ns{0};
    // Live, as tokens go (the totals above move when a request ends): for the engine view's rates.
    std::atomic<uint64_t> tokens_decoded{0}, prompt_evaluated{0}, busy_ns{0};
    std::atomic<uint64_t> prompt_eval_ns{0};                                   // time spent evaluating prompts (what restored prefixes save)
    std::atomic<uint64_t> draft_steps{0}, draft_tokens{0}, draft_accepted{0};  // speculative decoding
};

class Generator {
public:
    static constexpr int kCheckpointEvery = 4096;  // long prompts: a snapshot every this many tokens
    // A prompt arriving while other slots generate is evaluated this many tokens per decode step, so their
    // streams keep flowing instead of waiting for the whole prompt.
    static constexpr int kPrefillChunk = 256;
    // A decode step's rows at most (slots' tokens and drafts): the runner's batch.
    static constexpr int kMaxBatchRows = 512;
    Generator(const Model& model, std::shared_ptr<const Tokenizer> tok, RunnerOptions opt, size_t max_queue);
    ~Generator();

    // Queues a request; nullopt when the queue is full (the caller answers 503).
    std::optional<std::future<GenerationResult>> submit(GenerationRequest req);
    size_t queued() const;
    bool busy() const { return busy_.load(); }
    int slots() const { return runner_.n_seq(); }
    int slots_busy() const { return slots_busy_.load(); }
    int n_ctx() const { return runner_.n_ctx(); }
    bool recurrent() const { return recurrent_; }
    const RunnerStats& runner_stats() const { return runner_.stats(); }
    GenerationStats& stats() { return stats_; }
    // The expert source's counters, refreshed every few decode steps and at each request's end (safe from any
    // thread).
    ExpertSourceStats expert_stats() const;
    // /metrics histograms of the finished requests' expert bytes read, hit rate and time blocked on reads.
    std::string request_io_metrics() const;
    // How often the router chose each expert, [layer * n_expert + expert], refreshed like expert_stats().
    std::vector<uint64_t> expert_heat() const;
    // Prefixes saved to and restored from disk (serve --prompt-cache); set before the first request. The cache
    // must outlive the generator.
    void use_prompt_cache(PromptCache* cache) { prompt_cache_ = cache; }
    const PromptCache* prompt_cache() const { return prompt_cache_; }
    // Speculative decoding (serve --draft): each slot drafts with its own Drafter; the slots' tokens and drafts
    // are verified in one batch (under a grammar, against the constrained sampler). Set before the first request.
    void use_drafts(DraftMode mode, int max_draft, StepCost cost, int min_draft = 0);
    DraftMode draft_mode() const { return draft_mode_; }
    // Measured prompt evaluation time per token so far (0 before any prompt was evaluated).
    double prompt_seconds_per_token() const {
        const uint64_t n = stats_.prompt_evaluated.load();
        return n ? static_cast<double>(stats_.prompt_eval_ns.load()) / 1e9 / static_cast<double>(n) : 0.0;
    }
    // Cancels the running requests and fails queued ones; the worker exits.
    void shutdown();

    // Assistant turns this server generated, by the text it returned (and by that text without its think
    // block): the chat renderer splices the exact tokens back in.
    std::optional<std::vector<int32_t>> remembered_turn(const std::string& key) const;
    // Remembers a generated turn under another key too (its answer and tool calls as parsed, see turn_key).
    void remember_turn(const std::string& key, const std::vector<int32_t>& tokens);

private:
    struct Slot;
    void worker();
    // Takes a request into a slot: the prefix its cache shares is kept, the rest of the prompt evaluated, at
    // once or (beside generating slots) in chunks.
    void start(Slot& slot);
    void prefill_some(Slot& slot, int budget);
    // Draws and handles each running slot's next token, then evaluates those that go on in one batch.
    void step();
    // A decode step with drafts: each slot's token (taken, not yet evaluated) and its drafts in one batch; the
    // drafts each slot's sampler accepts are taken, the rest forgotten. The step's expert I/O since `before` is
    // charged to the slots.
    void verify(const std::vector<Slot*>& going, const std::vector<int32_t>& tokens, const std::vector<std::vector<int32_t>>& drafts,
                const ExpertSourceStats& before);
    // Handles slot's token `next`: text, stop strings, limits. False when the generation is over. `position`:
    // where next goes in the slot's sequence (-1: at its end, as in a plain step).
    bool take_token(Slot& slot, int32_t next, int position = -1);
    void finish(Slot& slot);
    void fail(Slot& slot, const std::string& error);  // finish with an error, the slot's cache forgotten
    // After a batched decode step failed: each slot's token again on its own (recurrent models first rebuild the
    // state from the slot's newest snapshot).
    void retry_alone(const std::vector<Slot*>& going, const std::vector<int32_t>& tokens);
    // Prompt cache: restores a longer prefix than the slot holds, if one is on disk (start) / queues the
    // evaluated prompt's save (prefill done) / finishes at full speed, or else stops, a save whose rows are
    // about to change.
    size_t restore_prefix(Slot& slot, size_t common);
    void save_prefix(Slot& slot);
    void stop_save_above(Slot& slot, size_t kept);
    void publish_counters();  // expert_stats_ and heat_ from the worker's runner and source
    // Charges the expert source's counters since `before` to these slots' results, split evenly.
    void charge(const std::vector<Slot*>& slots, const ExpertSourceStats& before);
    void remember(const std::string& text, const std::vector<int32_t>& tokens);
    // Draws the next token within the grammar: the sampler's choice when allowed, else a draw from the
    // logits masked to the allowed tokens.
    int32_t constrained_sample(Sampler& sampler, std::span<const float> logits, const std::vector<int32_t>& history, TokenConstraint& constraint);
    std::shared_ptr<const VocabTrie> vocab_trie();

    const Model& model_;
    std::shared_ptr<const Tokenizer> tok_;
    Runner runner_;
    RunnerOptions runner_options_;   // what runner_ was made with (a NextN draft block's runner takes the same)
    std::unique_ptr<MtpDraft> mtp_;  // serve --draft mtp: the block the slots draft from
    const bool recurrent_;           // the model has recurrent layers (fixed at construction; read from request threads)
    std::vector<std::unique_ptr<Slot>> slots_;
    size_t max_queue_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::pair<GenerationRequest, std::promise<GenerationResult>>> queue_;
    std::vector<std::shared_ptr<std::atomic<bool>>> running_cancels_;  // of the requests in slots (under mu_)
    bool stop_ = false;
    std::atomic<bool> busy_{false};
    std::atomic<int> slots_busy_{0};
    GenerationStats stats_;
    mutable std::mutex expert_stats_mu_;
    ExpertSourceStats expert_stats_;
    Histogram request_bytes_{{1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 4.0 * (1 << 30), 16.0 * (1 << 30), 64.0 * (1 << 30)}};
    Histogram request_hit_rate_{{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0}};
    Histogram request_io_wait_{{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}};
    std::vector<uint64_t> heat_;
    uint64_t steps_ = 0;
    uint64_t slot_uses_ = 0;  // admissions so far: the least recently used free slot wins ties
    mutable std::mutex memory_mu_;
    std::map<std::string, std::vector<int32_t>> memory_;
    std::deque<std::string> memory_order_;
    std::shared_ptr<const VocabTrie> trie_;  // built on the first constrained request (worker thread only)
    std::vector<float> masked_;
    PromptCache* prompt_cache_ = nullptr;
    DraftMode draft_mode_ = DraftMode::Off;
    std::thread thread_;
};

}  // namespace moe

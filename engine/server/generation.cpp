#include "engine/server/generation.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "engine/server/chat_template.h"

namespace moe {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
constexpr size_t kMemoryTurns = 256;
}  // namespace

Generator::Generator(const Model& model, std::shared_ptr<const Tokenizer> tok, RunnerOptions opt, size_t max_queue)
    : model_(model), tok_(std::move(tok)), runner_(model, opt), recurrent_(runner_.has_recurrent_state()), max_queue_(max_queue) {
    thread_ = std::thread([this] { worker(); });
}

Generator::~Generator() {
    shutdown();
    if (thread_.joinable()) thread_.join();
}

std::optional<std::future<GenerationResult>> Generator::submit(GenerationRequest req) {
    std::lock_guard<std::mutex> lk(mu_);
    // max_queue counts requests waiting behind the running one; an idle worker always takes one.
    const bool idle = !busy_ && queue_.empty();
    if (stop_ || (!idle && queue_.size() >= max_queue_)) return std::nullopt;
    std::promise<GenerationResult> p;
    auto f = p.get_future();
    queue_.emplace_back(std::move(req), std::move(p));
    cv_.notify_one();
    return f;
}

size_t Generator::queued() const {
    std::lock_guard<std::mutex> lk(mu_);
    return queue_.size();
}

void Generator::shutdown() {
    std::deque<std::pair<GenerationRequest, std::promise<GenerationResult>>> dropped;
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
        if (current_cancel_) current_cancel_->store(true);
        dropped.swap(queue_);
    }
    cv_.notify_all();
    for (auto& [req, p] : dropped) {
        GenerationResult r;
        r.finish_reason = "cancelled";
        r.error = "the server is shutting down";
        p.set_value(r);
    }
}

void Generator::worker() {
    for (;;) {
        std::pair<GenerationRequest, std::promise<GenerationResult>> job;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
            if (stop_ && queue_.empty()) return;
            job = std::move(queue_.front());
            queue_.pop_front();
            current_cancel_ = job.first.cancel;
            busy_ = true;
        }
        GenerationResult r;
        try {
            r = run(job.first);
        } catch (const std::exception& e) {
            r.finish_reason = "error";
            r.error = e.what();
            cached_.clear();  // the runner's cache is in an unknown state: start over next time
            runner_.truncate(0);
        }
        {
            std::lock_guard<std::mutex> lk(expert_stats_mu_);
            expert_stats_ = model_.experts->stats();
        }
        {
            std::lock_guard<std::mutex> lk(mu_);
            current_cancel_.reset();
            busy_ = false;
        }
        job.second.set_value(std::move(r));
    }
}

GenerationResult Generator::run(GenerationRequest& req) {
    GenerationResult r;
    const auto& prompt = req.prompt;
    r.prompt_tokens = static_cast<int>(prompt.size());
    // Reuse the longest common prefix; at least the last prompt token is evaluated to get logits.
    size_t common = 0;
    while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common]) ++common;
    if (common == prompt.size()) --common;
    common = static_cast<size_t>(runner_.truncate(static_cast<int>(common)));  // a recurrent model may go back further
    cached_.resize(common);
    r.prompt_reused = static_cast<int>(common);
    auto t0 = Clock::now();
    const int P = static_cast<int>(prompt.size());
    std::vector<int> cuts;
    if (runner_.has_recurrent_state()) {
        for (int h : req.checkpoint_at) cuts.push_back(h);
        cuts.push_back(P - 4);
        for (int p = kCheckpointEvery; p < P; p += kCheckpointEvery) cuts.push_back(p);
        std::erase_if(cuts, [&](int c) { return c <= static_cast<int>(common) || c >= P; });
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    }
    cuts.push_back(P);
    for (int end : cuts) {
        const int begin = runner_.n_past();
        runner_.eval(std::span<const int32_t>(prompt.data() + begin, static_cast<size_t>(end - begin)));
        if (end < P) runner_.checkpoint();
    }
    cached_.insert(cached_.end(), prompt.begin() + static_cast<long>(common), prompt.end());
    r.prompt_ms = ms_since(t0);

    Sampler sampler(req.sampling);
    std::optional<TokenConstraint> constraint;
    if (req.grammar) constraint.emplace(req.grammar, vocab_trie());
    std::vector<int32_t> history = prompt;
    StreamDecoder stream(*tok_);
    auto t1 = Clock::now();
    r.finish_reason = "length";
    std::string held;  // text not yet sent: it may be the start of a stop string
    size_t max_stop = 0;
    for (const auto& s : req.stop) max_stop = std::max(max_stop, s.size());
    for (int i = 0; i < req.max_tokens; ++i) {
        if (req.cancel->load()) { r.finish_reason = "cancelled"; break; }
        const std::span<const float> logits{runner_.logits(), static_cast<size_t>(runner_.n_vocab())};
        const int32_t next = constraint ? constrained_sample(sampler, logits, history, *constraint) : sampler.sample(logits, history);
        if (next < 0) { r.finish_reason = "stop"; break; }  // the grammar allows nothing more
        if (tok_->is_eog(next)) { r.finish_reason = "stop"; break; }
        if (req.logprobs >= 0) {
            const auto lp = token_logprobs(logits, next, req.logprobs, req.sampling.temperature > 0 ? req.sampling.temperature : 1.f);
            TokenLogprob t{next, lp.first, lp.second};
            if (req.on_logprob) req.on_logprob(t);
            r.logprobs.push_back(std::move(t));
        }
        if (constraint) constraint->accept(next);
        r.tokens.push_back(next);
        history.push_back(next);
        held += stream.push(next);
        bool stopped = false;
        for (const auto& s : req.stop) {
            auto pos = held.find(s);
            if (!s.empty() && pos != std::string::npos) {
                held.resize(pos);
                stopped = true;
                r.stop_string = s;
            }
        }
        // Send what can no longer be the beginning of a stop string.
        const size_t keep = stopped ? 0 : std::min(held.size(), max_stop ? max_stop - 1 : 0);
        std::string ready = held.substr(0, held.size() - keep);
        ready.resize(utf8_complete_prefix(ready));
        held.erase(0, ready.size());
        r.text += ready;
        if (req.on_text && !ready.empty() && !req.on_text(ready)) { r.finish_reason = "cancelled"; break; }
        if (stopped || req.finish_now->load()) { r.finish_reason = "stop"; break; }
        if (runner_.n_past() >= runner_.n_ctx()) break;  // context full: finish as "length"
        if (i + 1 < req.max_tokens) {
            runner_.eval(std::span<const int32_t>(&next, 1));
            cached_.push_back(next);
        }
    }
    if (r.finish_reason != "cancelled") {
        held += stream.flush();
        r.text += held;
        if (req.on_text && !held.empty()) req.on_text(held);
    }
    r.gen_ms = ms_since(t1);
    r.completion_tokens = static_cast<int>(r.tokens.size());
    stats_.requests++;
    stats_.prompt_tokens += static_cast<uint64_t>(r.prompt_tokens);
    stats_.prompt_reused += static_cast<uint64_t>(r.prompt_reused);
    stats_.generated_tokens += static_cast<uint64_t>(r.completion_tokens);
    stats_.gen_ms_total += static_cast<uint64_t>(r.gen_ms);
    if (r.completion_tokens > 1 && r.gen_ms > 0) stats_.last_tok_per_s = (r.completion_tokens - 1) * 1000.0 / r.gen_ms;
    if (r.finish_reason != "cancelled") remember(r.text, r.tokens);
    return r;
}

void Generator::remember(const std::string& raw_text, const std::vector<int32_t>& tokens) {
    for (const std::string& key : {raw_text, strip_thinking(raw_text)}) remember_turn(key, tokens);
}

void Generator::remember_turn(const std::string& raw_key, const std::vector<int32_t>& tokens) {
    // Key by the text as the client receives it: invalid UTF-8 replaced by U+FFFD on the wire.
    using json = nlohmann::json;
    const std::string key = json::parse(json(raw_key).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
    std::lock_guard<std::mutex> lk(memory_mu_);
    if (!memory_.count(key)) memory_order_.push_back(key);
    memory_[key] = tokens;
    while (memory_order_.size() > kMemoryTurns) {
        memory_.erase(memory_order_.front());
        memory_order_.pop_front();
    }
}

std::shared_ptr<const VocabTrie> Generator::vocab_trie() {
    if (!trie_) {
        // Special tokens by their text (a forced call's markers are special tokens in DeepSeek and Kimi);
        // end-of-generation tokens empty: the grammar decides when the output may end.
        std::vector<std::string> pieces(static_cast<size_t>(tok_->n_vocab()));
        for (int32_t id = 0; id < tok_->n_vocab(); ++id)
            if (!tok_->is_eog(id)) pieces[static_cast<size_t>(id)] = tok_->piece(id, true);
        trie_ = std::make_shared<VocabTrie>(std::move(pieces));
    }
    return trie_;
}

int32_t Generator::constrained_sample(Sampler& sampler, std::span<const float> logits, const std::vector<int32_t>& history, TokenConstraint& constraint) {
    const auto t0 = Clock::now();
    int32_t next = sampler.sample(logits, history);
    stats_.grammar_tokens++;
    if (!constraint.allows(next, tok_->is_eog(next))) {
        std::vector<uint8_t> allowed;
        constraint.mask(allowed);
        const bool can_end = constraint.can_end();
        masked_.assign(logits.begin(), logits.end());
        bool any = false;
        for (size_t i = 0; i < masked_.size(); ++i) {
            const bool ok = tok_->is_eog(static_cast<int32_t>(i)) ? can_end : allowed[i] != 0;
            if (!ok) masked_[i] = -std::numeric_limits<float>::infinity();
            any = any || ok;
        }
        next = any ? sampler.sample(masked_, history) : -1;
        stats_.grammar_masks++;
    }
    stats_.grammar_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    return next;
}

ExpertSourceStats Generator::expert_stats() const {
    std::lock_guard<std::mutex> lk(expert_stats_mu_);
    return expert_stats_;
}

std::optional<std::vector<int32_t>> Generator::remembered_turn(const std::string& key) const {
    std::lock_guard<std::mutex> lk(memory_mu_);
    auto it = memory_.find(key);
    if (it == memory_.end()) return std::nullopt;
    return it->second;
}

}  // namespace moe

// The fast forward pass, one for every architecture: batched prompt processing, threaded matmuls with the SIMD
// kernels, tokens grouped by expert so each expert's weights are fetched once per batch. Each layer runs its
// attention kind and its feed-forward kind, each a unit of its own (layer_unit.h: attention_gqa.cpp, ...,
// ffn_moe.cpp; the heads' flash attention in attention_heads.cpp). The numerics are the reference's
// (reference.h): same formulas, same summation orders, the same bits.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/forward/layer_unit.h"
#include "engine/forward/hyper_connection.h"
#include "engine/forward/sequence_cache.h"
#include "engine/kernels/float_ops.h"
#include "engine/kernels/kernels.h"
#include "engine/model/model.h"
#include "engine/model/model_facts.h"
#include "engine/runtime/routing_trace.h"
#include "engine/runtime/thread_pool.h"

namespace moe {

// An eval's final hidden states (set_hidden_sink): one chunk's rows of one sequence, positions
// [pos0, pos0 + n) holding `tokens` (null for Runner::eval_embedded), before and after the output norm. With
// hyper-connections (deepseek4) both are the rows' streams before the output head (Runner::hidden_width wide),
// what llama.cpp hands its MTP block.
struct HiddenRows {
    int seq, pos0, n;
    const int32_t* tokens;
    const float* pre;
    const float* post;
};

struct RunnerOptions {
    int n_ctx = 4096;  // cache positions
    int n_threads = 2;
    // Prompt tokens per forward chunk: llama.cpp's default micro-batch, so that a prompt's matmuls sum in the
    // same order as there (one token and several differ, see kernels::matmul_dots).
    int n_batch = 512;
    kernels::Flavor flavor = kernels::default_flavor();  // which llama.cpp build's float arithmetic to follow
    // Recurrent-state snapshots kept for prefix reuse (recurrent models only); the planner budgets this many.
    int max_checkpoints = ModelFacts::kDefaultCheckpoints;
    // Streaming: MoE layers ahead whose likely experts are prefetched (1: the next; 2: also the one after,
    // predicted from the same hidden state, so less accurately).
    int prefetch_layers = 1;
    // Independent sequences (server slots), each with its own cache of n_ctx positions and checkpoints.
    int n_seq = 1;
    // Where each forward step's routing goes (--routing-trace); not owned, may be null.
    RoutingRecorder* routing_trace = nullptr;
    // The caches' types (--cache-type-k / --cache-type-v); the constructor refuses types the model cannot use.
    // (Two scalars, not a KvCacheTypes: designated initializers elsewhere leave them out without a warning.)
    GgmlType cache_type_k = GgmlType::F16, cache_type_v = GgmlType::F16;
    kernels::KvCacheTypes kv_types() const { return {cache_type_k, cache_type_v}; }
    // Sliding-window layers keep every position (llama.cpp's --swa-full) instead of a ring of window + n_batch
    // rows: prefix reuse at any point without snapshots, for that much more memory.
    bool swa_full = false;
};

// Rows of one eval chunk (the runner's scratch is sized for this many): n_batch, or llama.cpp's 512 when unset.
inline size_t batch_rows(const RunnerOptions& opt) { return static_cast<size_t>(opt.n_batch > 0 ? opt.n_batch : 512); }

struct RunnerStats {
    uint64_t tokens_evaluated = 0;
    uint64_t expert_activations = 0;                                     // (token, expert) pairs computed
    uint64_t expert_loads = 0;                                           // distinct experts fetched per batch
    uint64_t prefetch_predicted_hits = 0, prefetch_predicted_total = 0;  // next-layer router prediction accuracy
    // Wall time of the layers' attention (projections, cache writes, softmax) and feed-forward (router, experts,
    // shared experts), summed over every eval: what a long prompt spends where (bench prints the split).
    double attention_seconds = 0, feed_forward_seconds = 0, eval_seconds = 0;
};

// Rows [r0, r1) of a matmul with prepared activations (n_tok rows act_bytes apart) into out[t * out_stride + r].
void matmul_rows(const kernels::MatmulDots& dots, const uint8_t* w, size_t row_bytes, int64_t cols, int64_t r0, int64_t r1, const uint8_t* act,
                 size_t act_bytes, int n_tok, float* out, int64_t out_stride);

class Runner {
    friend class LayerContext;  // what a layer kind may use of the runner

public:
    Runner(const Model& model, RunnerOptions opt);

    // The sequence that eval, truncate, checkpoint and n_past act on (0 .. n_seq-1).
    void select_sequence(int seq);
    int sequence() const { return active_; }
    int n_seq() const { return static_cast<int>(caches_.size()); }
    // Bytes a runner of these options allocates beyond the weights and its KV caches (activations, scratch,
    // logits), from the model's layout alone: what --ram-budget must leave for it.
    static uint64_t working_bytes(const Model& layout, const RunnerOptions& opt);
    int n_past_of(int seq) const { return past_.at(static_cast<size_t>(seq)); }
    // How a batch's rows are computed. Batch: as llama.cpp computes a batch of that many tokens (its kernels and
    // summation orders change with the row count). OneByOne: every row with the kernels of a one-token step,
    // so its logits are the bits evaluating the tokens one at a time would give (each weight still read once
    // for all rows): what verifying drafted tokens needs for greedy output to equal decoding without drafts.
    enum class Rows { Batch, OneByOne };
    // One decode step for several sequences at once: token i goes to sequence seqs[i] at that sequence's next
    // position (a sequence's tokens together, in order: several for a verification batch); logits(i) is row i.
    // The feed-forward sees all rows together, so an expert chosen by several rows is fetched and its weights
    // read once; attention runs per sequence.
    void eval_batch(std::span<const int> seqs, std::span<const int32_t> tokens, Rows rows = Rows::Batch);

    // Evaluates `tokens` at positions n_past().. and appends them to the cache. Logits are kept for every
    // token when want_all_logits, else for the last one only. Throws std::length_error when the context would
    // overflow and std::out_of_range for a token id outside the vocabulary.
    void eval(std::span<const int32_t> tokens, bool want_all_logits = false, Rows rows = Rows::Batch);
    // Called after each chunk with every row's final hidden state (NextN/MTP drafts read them). A prompt chunk
    // then also runs its last layer's feed-forward over all rows (apart from the rows whose logits are wanted,
    // which keep llama.cpp's row count and so their bits). hidden_sink_bytes: the buffers it adds.
    void set_hidden_sink(std::function<void(const HiddenRows&)> sink);
    static uint64_t hidden_sink_bytes(const Model& layout, const RunnerOptions& opt);
    // The same with the first layer's input rows given (n rows of hidden_width(): n_embd, or with
    // hyper-connections every stream's) instead of token embeddings; logits of the last row only, when
    // want_logits (a NextN/MTP model's input is computed, see mtp_draft.h).
    void eval_embedded(const float* rows, int n, bool want_logits);
    // A dense matmul of n_tok rows of w.ne0 (x) into n_tok rows of w.ne1 (out), in llama.cpp's order.
    void project(const Tensor& w, const float* x, int n_tok, float* out) { matmul(w, x, w.ne0, n_tok, out, w.ne1); }
    const ops::FloatOps& float_ops() const { return fops_; }
    // Logits of token i of the last eval (i = -1: the last token).
    const float* logits(int i = -1) const;
    int n_past() const { return n_past_; }
    int n_ctx() const { return opt_.n_ctx; }
    int n_batch() const { return opt_.n_batch; }
    // The last row's final hidden state before the output norm, after an eval that kept the last row's logits:
    // hidden_width() floats (with hyper-connections the streams before the output head, as set_hidden_sink's rows).
    const float* last_hidden() const { return m_.hp.hyper.n ? hc_.data() : x_.data(); }
    static int hidden_width(const Model& m) { return static_cast<int>(m.hp.n_embd * std::max(1u, m.hp.hyper.n)); }
    int n_vocab() const { return static_cast<int>(m_.hp.n_vocab); }
    const Model& model() const { return m_; }
    // Forgets cache positions >= n (prefix reuse keeps what is below) and returns the positions kept. That is n,
    // except where a cut cannot keep what the next token needs: a recurrent state (qwen35moe's DeltaNet) has no
    // history, and a sliding-window ring (swa_full off) keeps its window only for cuts within its slack
    // (SequenceCache::reach). There the newest checkpoint at or below n is restored (0 when there is none).
    // Checkpoints above the positions kept are dropped.
    int truncate(int n);
    // Where truncate may need them (keeps_snapshots()): keeps a snapshot of the recurrent state and of the
    // sliding windows at n_past (replacing an older snapshot at the same position; the oldest go beyond
    // max_checkpoints). No-op for other models.
    void checkpoint();
    bool has_recurrent_state() const { return cache_->has_recurrent(); }
    bool keeps_snapshots() const { return cache_->has_recurrent() || cache_->has_ring(); }
    // A snapshot after `pos` positions: the recurrent state, and the sliding-window rows before pos.
    struct Checkpoint {
        int pos;
        std::vector<float> state;
        std::vector<uint8_t> window;
    };
    // The selected sequence's state at n_past (recurrent models: its recurrent state; others: the position
    // only), and going back to such a mark: positions past it are forgotten, checkpoints past it dropped. A
    // speculative step marks before its drafts and rewinds past the first rejected one (a ring's slack holds a
    // batch, so a step's rows never reach its window).
    Checkpoint mark() const;
    void rewind(const Checkpoint& mark);
    // The selected sequence's snapshots, oldest first.
    const std::vector<Checkpoint>& checkpoints() const { return *checkpoints_; }
    // The selected sequence's cache, for a prompt cache to copy rows out of or into.
    SequenceCache& sequence_cache() { return *cache_; }
    // Takes positions [0, n) as filled in from outside (a prompt cache on disk wrote their rows) with these
    // snapshots (recurrent models: one of them at n, whose state becomes the current one).
    void adopt_prefix(int n, std::vector<Checkpoint> snapshots);
    size_t checkpoint_count() const { return checkpoints_->size(); }
    uint64_t checkpoint_bytes() const { return checkpoints_->size() * (cache_->recurrent_bytes() + cache_->window_bytes()); }
    const RunnerStats& stats() const { return stats_; }
    // How often the router chose each expert: [layer * n_expert + expert], for routing profiles.
    const std::vector<uint64_t>& expert_selections() const { return selections_; }

private:
    // The row count whose kernels a batch of n rows uses (1 while evaluating Rows::OneByOne).
    int kernel_rows(int n) const { return one_by_one_ ? 1 : n; }
    // Per-chunk row counts: n tokens, and the rows whose last-layer feed-forward runs (llama.cpp's inp_out_ids).
    // `embedded`: the rows' input instead of the tokens' embeddings (tokens then null).
    void eval_chunk(const int32_t* tokens, int n, bool want_all_logits, int out_base, Rows row_mode, const float* embedded = nullptr);
    // set_hidden_sink: the last layer's feed-forward over all n rows of a chunk whose logits rows skip
    // it, their final hidden rows kept, the stream put back as it was; and the call per segment.
    void hidden_all_rows(uint32_t l, int n);
    void report_hidden(const int32_t* tokens, int n, bool computed);

    // Matmuls. `dense`: a MUL_MAT in llama.cpp's graph (its batched order may differ from one token's);
    // otherwise an expert's MUL_MAT_ID. `strided`: the activations are a strided view in llama.cpp, which keeps
    // F32 weights on the one-token order even for batches.
    void matmul(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int n_tok,
                float* out, int64_t out_stride, bool dense, bool strided = false);
    void matmul(const Tensor& t, const float* x, int64_t x_stride, int n_tok, float* out, int64_t out_stride) {
        matmul(t.data, t.type, t.row_bytes, t.ne1, t.ne0, x, x_stride, n_tok, out, out_stride, true);
    }
    // Several dense matmuls of the same input as one parallel loop over all their rows (q/k/v; MLA's q_a and
    // kv_a; the indexer's projections): one thread-pool round instead of one per matmul.
    void matmul_group(std::initializer_list<MatmulOut> outs, const float* x, int64_t x_stride, int n_tok);
    // Per-head matmuls of a 3-D weight (MLA's k_b and v_b): head h multiplies `rows` rows starting at h*rows
    // with the activations of head h (x + h*x_head), for every token.
    void matmul_heads(const Tensor& w, int heads, int64_t rows, const float* x, int64_t x_head, int64_t x_stride, int n_tok, float* out,
                      int64_t out_head, int64_t out_stride);

    // Runs layer l's attention kind (layer_unit.h: reads xn_, the normed input of n rows, writes tmp_, n rows
    // of n_embd) for each segment against its own sequence's cache.
    void attention_by_sequence(uint32_t l, int n);
    void attention_kind(uint32_t l, int n);
    // Every scratch buffer sized at construction: size(&Runner::buffer, elements) for each (the constructor
    // resizes them, working_bytes() adds them up, so the two cannot disagree).
    template <class Size>
    static void scratch_plan(const Model& m, const RunnerOptions& opt, Size&& size);
    // Flash attention of n query rows against the selected sequence's cache. sel: each row sees only the positions
    // it selects; window > 0: only its last `window` positions; sinks: one logit per query head; ring > 0: the
    // layer keeps a ring of that many rows, which once wrapped (SequenceCache::wrapped) are read in row order as
    // llama.cpp reads its cells, each row's window masked.
    void attention_heads(const ops::KvView& base, const float* q, int64_t q_tok_stride, int64_t q_head_stride, int heads, int kv_heads, int n,
                         float scale, float* out, int64_t out_tok_stride, int64_t out_head_stride, const KeySelection* sel, int window = 0,
                         const float* sinks = nullptr, int ring = 0);
    // attention_heads' split rows through the group chunk kernel, where every row splits (at most kSplitGroupRows).
    static constexpr int kSplitGroupRows = 16;
    bool split_lone_rows(const ops::KvView& base, const float* q, int64_t q_tok_stride, int64_t q_head_stride, int heads, int kv_heads, int n,
                         float scale, float* out, int64_t out_tok_stride, int64_t out_head_stride, const KeySelection* sel, int window,
                         const float* sinks, int ring);

    // Layer l's feed-forward kind (layer_unit.h): reads xn_ (n rows), adds its output to x_.
    void feed_forward(uint32_t l, int n) {
        LayerContext cx(*this);
        ffn_units_[static_cast<size_t>(m_.layers[l].ffn())]->forward(cx, l, n);
    }
    // track: the prediction is the one whose accuracy the stats count (the nearest layer's).
    void predict_and_prefetch(uint32_t layer, int n, bool track);
    // Residual attention (Hparams::res_block): the stream x_ mixed with the chunk's banked layer inputs, normed
    // by `norm` into xn_; bank_input copies x_ in as the next banked input.
    void mixed_norm(const Tensor& score, const Tensor& norm, int n);
    // Hyper-connections (Hparams::hyper): hyper_pre mixes hc_ into the sub-block's input x_ (keeping each row's
    // mix), hyper_post remixes hc_ with the sub-block's output y, hyper_head collapses hc_ into x_ for the output.
    void hyper_mixes(const HyperWeights& w, int n);
    void hyper_pre(const HyperWeights& w, int n);
    void hyper_post(const float* y, int n);
    void hyper_head(int n);
    void bank_input(int n);
    // Banked inputs each token has room for (res_banked_ is [n_batch][banks][n_embd]): one per res_block layers.
    size_t res_banks() const { return m_.hp.res_block ? (m_.hp.n_layer + m_.hp.res_block - 1) / m_.hp.res_block : 0; }
    // Rows [0, rows) over the pool, every range starting and ending on a multiple of `group` (ik's _R4 rows).
    void parallel_rows(int64_t rows, int group, const std::function<void(int64_t, int64_t)>& fn) {
        if (group <= 1) return pool_.parallel_for(rows, fn);
        pool_.parallel_for(rows / group, [&](int64_t a, int64_t b) { fn(a * group, b * group); });
    }

    const Model& m_;
    RunnerOptions opt_;
    ThreadPool pool_;
    const kernels::KernelTable& kt_;
    const kernels::KernelTable& kv_kt_;  // typed caches' K dots: the mainline table, also for ik files (ik's expects its activations)
    const ops::FloatOps& fops_;
    ops::AttendFn attend_, attend_typed_, attend_tiled_;
    ops::AttendGroupFn attend_tiled_group_;  // null where the reference kernels are in use
    std::vector<float> kv_f32_;              // the tiled attention's f32 keys and values of the current batch
    std::vector<uint16_t> kv_cast_;          // an f32 cache's layer cast to f16 for attention (as llama.cpp's graph)
    std::vector<float> split_partials_;      // split_lone_rows' chunk results [row][kv head][chunk][head of it][M, S, acc]
    bool one_by_one_ = false;                // the current eval's Rows
    int n_past_ = 0;                         // the positions the selected sequence (or the segment being computed) holds
    std::vector<int> past_;                  // per sequence
    int active_ = 0;
    std::vector<Segment> segs_;
    std::vector<float> seg_in_, seg_out_;  // per-segment attention: its rows of xn_, and all segments' outputs
    int last_layer_rows_ = 0;              // rows of the current chunk whose last-layer feed-forward runs (the last ones)
    RunnerStats stats_;
    std::vector<SequenceCache> caches_;
    SequenceCache* cache_ = nullptr;  // the selected sequence's

    // Activations for one chunk of up to n_batch tokens (row-major, one row per token).
    std::vector<float> x_, xn_, tmp_;  // [n][n_embd]
    // One unit per attention kind and per feed-forward kind the model's layers use, indexed by kind.
    std::vector<std::unique_ptr<AttentionUnit>> attention_units_;
    std::vector<std::unique_ptr<FeedForwardUnit>> ffn_units_;
    // deepseek4's hyper-connections: the n copies of the stream [n][copies][n_embd], their RMS-normed flattening
    // (then the expansion's scratch), the mixer outputs, each row's mix, and each sub-block's input (x_ is
    // reused for its output)
    std::vector<float> hc_, hc_norm_, hc_mixes_, hc_in_;
    std::vector<HyperMix> hc_mix_;
    std::vector<int32_t> row_tokens_;  // the chunk's token ids by row (deepseek4's hash-routed layers)
    std::vector<float> res_banked_;    // [n][banks][n_embd] residual attention's banked inputs
    int n_banked_ = 0;
    std::vector<uint8_t> act_;  // prepared activations
    std::function<void(const HiddenRows&)> on_hidden_;
    bool hidden_pass_ = false;                          // hidden_all_rows is running: its routing goes to no trace or profile
    std::vector<float> hid_save_, hid_pre_, hid_post_;  // on_hidden_: the stream before the all-rows pass, final rows
    std::vector<float> logits_;                         // [kept][n_vocab]
    int logits_rows_ = 0;
    std::vector<uint64_t> selections_;  // [n_layer][n_expert] router choices
    std::vector<uint32_t> predicted_;   // experts prefetched for predicted_layer_
    int predicted_layer_ = -1;
    std::vector<std::vector<Checkpoint>> seq_checkpoints_;  // per sequence, by position, oldest first
    std::vector<Checkpoint>* checkpoints_ = nullptr;        // the selected sequence's
};

}  // namespace moe

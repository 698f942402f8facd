// What the runner lends a layer kind for one step (llama.cpp's llm_graph_context with its build_attn and matmul
// helpers): the chunk's normed input rows and the output rows, the sequence segments and the selected
// sequence's cache, the threads and kernels, the batched matmuls and the flash attention every kind shares. A
// kind (layer_unit.h) keeps its own weights' view, scratch and state; the runner keeps the layer loop.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include "engine/forward/sequence_cache.h"
#include "engine/kernels/float_ops.h"
#include "engine/kernels/kernels.h"
#include "engine/model/model.h"
#include "engine/runtime/thread_pool.h"

namespace moe {

class Runner;
struct RunnerOptions;
struct RunnerStats;

// Rows of a chunk that belong to one sequence (a decode batch has one per sequence; a prompt chunk one).
struct Segment {
    int row0, n, seq;
};

// One output of a group of dense matmuls over the same input (matmul_group).
struct MatmulOut {
    const Tensor* w;
    float* out;
    int64_t out_stride;
};

// Which positions each query row may attend to, where not all: entry (token t, group g) lists counts[t * groups
// + g] items at items + (t * groups + g) * stride, item i covering positions [i * span, (i + 1) * span). DSA: one
// group, positions (span 1); MSA: a group per kv head, blocks. `gather`: attend over the items' positions copied
// out in the listed order (llama.cpp's MSA decode) rather than masking.
struct KeySelection {
    const int* items;
    const int* counts;
    int stride, groups, span;
    bool gather = false;
};

class LayerContext {
public:
    explicit LayerContext(Runner& r);

    // (Read inside the kinds' inner loops: plain fields, no call.)
    const Model& model() const { return m_; }
    const Hparams& hp() const { return m_.hp; }
    const RunnerOptions& options() const { return opt_; }
    ThreadPool& pool() { return pool_; }
    const ops::FloatOps& fops() const { return fops_; }
    const kernels::KernelTable& kernels() const { return kt_; }        // the weights' dots (ik's table for ik files)
    const kernels::KernelTable& kv_kernels() const { return kv_kt_; }  // typed caches' dots

    // The chunk: n normed input rows of n_embd (xn) and the rows the kind writes (out), n_embd each.
    float* xn() { return xn_; }
    float* out() { return out_; }
    // The chunk's sequences; the selected one's cache and positions before the rows being computed.
    std::span<const Segment> segments() const;
    void select_sequence(int seq);
    int sequence() const;
    int n_past() const;
    SequenceCache& cache();
    // The row count whose kernels a batch of n rows uses (1 while the runner evaluates rows one by one).
    int kernel_rows(int n) const;

    // Dense matmuls in llama.cpp's order for n_tok rows: one, a group over the same input (one thread-pool
    // round), and the per-head matmuls of a 3-D weight (head h: `rows` rows from h*rows, activations x + h*x_head).
    void matmul(const Tensor& w, const float* x, int64_t x_stride, int n_tok, float* out, int64_t out_stride);
    void matmul_group(std::initializer_list<MatmulOut> outs, const float* x, int64_t x_stride, int n_tok);
    void matmul_heads(const Tensor& w, int heads, int64_t rows, const float* x, int64_t x_head, int64_t x_stride, int n_tok, float* out,
                      int64_t out_head, int64_t out_stride);
    // Flash attention of n query rows against the selected sequence's cache view (Runner::attention_heads).
    void attention_heads(const ops::KvView& base, const float* q, int64_t q_tok_stride, int64_t q_head_stride, int heads, int kv_heads, int n,
                         float scale, float* out, int64_t out_tok_stride, int64_t out_head_stride, const KeySelection* sel, int window = 0,
                         const float* sinks = nullptr, int ring = 0);
    // An expert's matmul (llama.cpp's MUL_MAT_ID: its kernel chosen by the expert's row count) of raw weights.
    void matmul_expert(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int n_tok,
                       float* out, int64_t out_stride);
    // Rows [0, rows) over the threads, every range on a multiple of `group` (row-interleaved types).
    void parallel_rows(int64_t rows, int group, const std::function<void(int64_t, int64_t)>& fn);
    // The runner's activation buffer, at least `bytes` long (valid until the next matmul).
    uint8_t* activations(size_t bytes);

    // What feed-forward kinds share with the runner: the residual stream the output is added to, the chunk's
    // token ids by row (hash-routed layers), the counters, and the look-ahead prefetch of the next MoE layers'
    // likely experts (it reads the stream and their norms and routers) with the score of its last guess.
    float* stream() { return stream_; }
    const int32_t* row_tokens() const;
    RunnerStats& stats();
    // A routing choice of layer l: counted for routing profiles and traced (not during the hidden-state pass,
    // which repeats a layer).
    void count_routing(uint32_t l, int n, int used, const int* sel, const float* weights);
    void prefetch_ahead(uint32_t l, int n);
    void score_prefetch(uint32_t l, const std::vector<uint32_t>& needed);

    // The one-row and tiled attention kernels the runner chose (DeepSeek-V4's per-token step calls them itself).
    ops::AttendFn attend_one_row() const;
    ops::AttendFn attend_tiled() const;
    ops::AttendFn attend_typed() const;  // caches of other types

private:
    Runner& r_;
    const Model& m_;
    const RunnerOptions& opt_;
    ThreadPool& pool_;
    const ops::FloatOps& fops_;
    const kernels::KernelTable& kt_;
    const kernels::KernelTable& kv_kt_;
    float* xn_;
    float* out_;
    float* stream_;
};

}  // namespace moe

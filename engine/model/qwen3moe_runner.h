// The fast qwen3moe forward: batched prompt processing, threaded matmuls, tokens grouped by expert so each
// expert's weights are read once per batch. Numerically the same formulas as the reference (qwen3moe_ref).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/kernels/kernels.h"
#include "engine/model/qwen3moe.h"
#include "engine/runtime/thread_pool.h"

namespace moe {

struct RunnerOptions {
    int n_ctx = 4096;    // KV cache positions
    int n_threads = 2;
    // Prompt tokens per forward chunk: llama.cpp's default micro-batch, so that a prompt's float-weight matmuls
    // sum in the same order as there (one token and several differ, see kernels::dense_dot).
    int n_batch = 512;
};

struct RunnerStats {
    uint64_t tokens_evaluated = 0;
    uint64_t expert_activations = 0;  // (token, expert) pairs computed
    uint64_t expert_loads = 0;        // distinct experts fetched per batch
    uint64_t prefetch_predicted_hits = 0, prefetch_predicted_total = 0;  // next-layer router prediction accuracy
};

class Qwen3MoeRunner {
public:
    Qwen3MoeRunner(const Qwen3MoeModel& model, RunnerOptions opt);

    // Evaluates `tokens` at positions n_past().. and appends them to the KV cache. Logits are kept for every
    // token when want_all_logits, else for the last one only. Throws std::length_error when the context would
    // overflow and std::out_of_range for a token id outside the vocabulary.
    void eval(std::span<const int32_t> tokens, bool want_all_logits = false);
    // Logits of token i of the last eval (i = -1: the last token).
    const float* logits(int i = -1) const;
    int n_past() const { return n_past_; }
    int n_ctx() const { return opt_.n_ctx; }
    int n_vocab() const { return static_cast<int>(m_.hp.n_vocab); }
    // Forgets cache positions >= n (prefix reuse keeps what is below).
    void truncate(int n);
    const RunnerStats& stats() const { return stats_; }
    // How often the router chose each expert: [layer * n_expert + expert], for routing profiles.
    const std::vector<uint64_t>& expert_selections() const { return selections_; }

private:
    void eval_chunk(const int32_t* tokens, int n, bool want_all_logits, int out_base);
    // dense: a MUL_MAT in llama.cpp's graph (its batched order may differ); otherwise an expert's MUL_MAT_ID.
    void matmul(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
                int64_t x_stride, int n_tok, float* out, int64_t out_stride, bool dense);
    void matmul(const Tensor& t, const float* x, int64_t x_stride, int n_tok, float* out, int64_t out_stride) {
        matmul(t.data, t.type, t.row_bytes, t.ne1, t.ne0, x, x_stride, n_tok, out, out_stride, true);
    }
    void matmul3(const Tensor& a, float* oa, int64_t sa, const Tensor& b, float* ob, int64_t sb, const Tensor& c, float* oc,
                 int64_t sc, const float* x, int64_t x_stride, int n_tok);
    void moe_ffn(uint32_t layer, int n);
    void predict_and_prefetch(uint32_t layer, int n);
    void decode_experts_in_parallel(uint32_t layer, const std::vector<uint32_t>& needed, const std::vector<std::vector<int>>& users);
    void matvec_serial(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, float* out,
                       uint8_t* act) const;

    const Qwen3MoeModel& m_;
    RunnerOptions opt_;
    ThreadPool pool_;
    const kernels::KernelTable& kt_;
    int n_past_ = 0;
    int last_layer_rows_ = 0;  // rows of the current chunk whose last-layer feed-forward runs (the last ones)
    RunnerStats stats_;

    // KV cache, fp16: [n_layer][n_ctx][n_head_kv*head_dim]
    std::vector<uint16_t> k_cache_, v_cache_;
    // Activations for one chunk of up to n_batch tokens (row-major, one row per token).
    std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_;
    std::vector<float> probs_;               // [n][n_expert]
    std::vector<int> sel_;                   // [n][n_expert_used] chosen experts, selection order
    std::vector<float> sel_w_;               // [n][n_expert_used] renormalised weights
    std::vector<float> expert_out_;          // [n][n_expert_used][n_embd]
    std::vector<float> gx_, gg_, gu_, gy_;   // per-expert gathered inputs / hidden / outputs
    std::vector<uint8_t> act_;               // prepared activations
    std::vector<float> par_scratch_;         // decode_experts_in_parallel: per (expert, token) gate|up|out
    std::vector<uint8_t> par_act_;           // ... and its activation bytes
    std::vector<float> logits_;              // [kept][n_vocab]
    int logits_rows_ = 0;
    std::vector<uint64_t> selections_;  // [n_layer][n_expert] router choices
    std::vector<uint32_t> predicted_;  // experts prefetched for predicted_layer_
    int predicted_layer_ = -1;
};

}  // namespace moe

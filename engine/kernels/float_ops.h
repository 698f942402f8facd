// The float building blocks of every forward pass, written to reproduce ggml's CPU numerics: double sums
// where ggml uses ggml_float, fp16 KV caches, fp16 accumulation in flash attention, FMAs where GCC fuses
// ggml's C++. The reference and fast passes share them; the fast path differs in kernels, batching and
// threads, not in these formulas. Where llama.cpp's AVX2 and AVX-512 builds differ (vector exp, register
// width), the function comes from the flavor's FloatOps table. The FMA-heavy ones live in float_ops.cpp.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/kernels/flavor.h"
#include "engine/kernels/fp16.h"

namespace moe::kernels {
struct KernelTable;
}

namespace moe::ops {
using kernels::Flavor;

// y = x / sqrt(mean(x^2) + eps) * w   (w may be null; y may be x)
inline void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / n);
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < n; ++i) y[i] = x[i] * scale;
    if (w)
        for (int i = 0; i < n; ++i) y[i] *= w[i];
}

// x / max(||x||, eps), as ggml_l2_norm.
inline void l2_norm(float* x, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float scale = 1.0f / std::fmax(std::sqrt(static_cast<float>(sum)), eps);
    for (int i = 0; i < n; ++i) x[i] *= scale;
}

// 1 / (1 + expf(-x)), as ggml_sigmoid (libm's expf, not the vector one).
inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
// log(1 + exp(x)), linear above 20, as ggml_softplus.
inline float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }
// gpt-oss's expert activation, as ggml_compute_forward_swiglu_oai_f32 (alpha 1.702, limit 7): g = min(g, 7),
// u = clamp(u, -7, 7), g = g / (1 + exp(-1.702 g)) * (u + 1), in place.
inline void swiglu_oai(float* g, const float* u, int n) {
    constexpr float alpha = 1.702f, limit = 7.0f;
    for (int k = 0; k < n; ++k) {
        const float x = std::min(g[k], limit);
        const float y = std::clamp(u[k], -limit, limit);
        const float out_glu = x / (1.f + std::exp(alpha * (-x)));
        g[k] = out_glu * (y + 1.f);
    }
}

// RoPE as ggml_rope_ext: the first n_rot dims of a head rotate; NORM pairs adjacent dims (2i, 2i+1), NEOX pairs
// i with i + n_rot/2. YaRN mixes interpolated and extrapolated angles per pair between corr_dims and scales
// cos/sin by attn_factor (times its own log correction when ext_factor is on).
struct RopeParams {
    int n_rot = 0;
    bool neox = true;
    float freq_base = 10000.f;
    float freq_scale = 1.f;
    float ext_factor = 0.f;
    float attn_factor = 1.f;
    float corr_dims[2] = {0.f, 0.f};
    // Interleaved multi-section RoPE (qwen35moe's IMROPE): for text, llama.cpp gives the t, h and w position
    // streams the token's position and the 4th stream 0, so pairs whose sector falls in the 4th stream do not
    // rotate; the others rotate NEOX-style exactly as above.
    bool imrope = false;
    int sections[4] = {0, 0, 0, 0};
};
// cos/sin pairs for one position: cs[2i] = cos, cs[2i+1] = sin of pair i.
void rope_cache(const RopeParams& p, int pos, std::vector<float>& cs);
void rope(float* x, const RopeParams& p, const std::vector<float>& cs);
// ggml_rope_yarn_corr_dims: the dims where YaRN's ramp starts and ends.
void rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]);

// Indices of the k largest of n values, as ggml_top_k: std::partial_sort of 0..n-1 by value (ties as
// libstdc++ leaves them), then the first two swapped ("the order is not important"; it is for sums).
void top_k(const float* v, int n, int k, int* idx);
// The same k indices as top_k, ascending, found in linear time (a selection of the k-th value) wherever that is
// unambiguous: no NaN and no tie across the k-th place; otherwise through top_k itself. For callers that use
// the picks as a set (DSA's mask, DeepSeek-V4's rows in cache order): a 2,048 of 65,536 pick is a heap sort
// of the row in top_k.
void top_k_set(const float* v, int n, int k, std::vector<int>& idx);

// One token of the gated delta rule for one v head, as ggml_compute_forward_gated_delta_net_one_chunk: the S x S
// state M (row j = the state's column j) decays by exp(g), takes the rank-1 update k (beta (v - M^T k))^T, and
// out = M^T q / sqrt(S) reads the updated state. `dot` is the build's ggml_vec_dot_f32 (a KernelTable's F32
// dot); `delta` is S floats of scratch.
void gated_delta_step(float* M, const float* q, const float* k, const float* v, float g, float beta, float* out, int S,
                      float (*dot)(int64_t, const void*, const void*), float* delta);
// The same with a decay per key channel (Kimi Delta Attention, the op's KDA branch): M[j][i] *= exp(g[i]).
void kda_delta_step(float* M, const float* q, const float* k, const float* v, const float* g, float beta, float* out, int S,
                    float (*dot)(int64_t, const void*, const void*), float* delta);
// ggml_ssm_conv for one channel over n new inputs: window = the K-1 previous inputs (oldest first) then x;
// y[t] = sum_i w[i] * window[t + i], then the window keeps its last K-1 values.
void causal_conv(float* window_state, const float* x, int64_t x_stride, const float* w, int K, int n, float* y, int64_t y_stride);
// ggml_norm (mean and variance, eps) then * w + b, each a separate rounding as llama.cpp's graph has them.
void layer_norm(Flavor f, const float* x, const float* w, const float* b, float* y, int n, float eps);

// ggml_compute_forward_fwht: the orthonormal Walsh-Hadamard transform of a power-of-two row, in place.
void hadamard(float* x, int n);

// One step of the one-row path's online softmax (ggml_compute_forward_flash_attn_ext_f16_one_chunk) for a
// score sc: above the running max M it becomes the max, the accumulator is to be scaled by ms = exp(old - new)
// and this value weighs vs = 1 (returns true); otherwise ms = 1 and vs = exp(sc - M). libm's expf either way.
inline bool online_softmax_step(float sc, float& M, float& ms, float& vs) {
    ms = vs = 1.f;
    if (sc > M) {
        const float m_old = M;
        M = sc;
        ms = std::exp(m_old - M);
        return true;
    }
    vs = std::exp(sc - M);
    return false;
}

// One query row against a view of an fp16 cache: keys and values `*_stride` halves apart (V may alias the
// first dv values of K, as MLA's latent cache does), positions 0..n_kv-1, of which those with visible[j] == 0
// are masked (visible null: all). ggml's flash attention: the one-row path (q rounded to fp16, K.Q as
// ggml_vec_dot_f16, online softmax with expf, V accumulated in fp16) below 64 query rows, the tiled path (q in
// f32, 64-position tiles, vector exp, f32 accumulator) from 64 rows when dv is a multiple of the register width.
struct KvView {
    const uint16_t* k = nullptr;
    const uint16_t* v = nullptr;
    size_t k_stride = 0, v_stride = 0;
    int dk = 0, dv = 0;
    int n_kv = 0;
    const uint8_t* visible = nullptr;
    // Optional f32 copies for the tiled path's SIMD kernel, made once per batch and shared by all its query rows:
    // keys per 64-position tile as [dk][64] (position fastest), values as [n_kv][dv]. Same values as the fp16.
    const float* k_tiles = nullptr;
    const float* v_f32 = nullptr;
    // Group calls over a block of consecutive tokens: > 0 means row r sees n_kv + r / rows_per_position
    // positions (causal), so one pass over the key/value tiles serves every row of the block.
    int rows_per_position = 0;
    // A cache of other types (llama.cpp's -ctk / -ctv, kernels/kv_cache_types.h): when k_raw is set, keys are
    // rows of k_type k_row bytes apart and values rows of v_type v_row bytes apart (k and v above unused), read
    // by attend_typed with `table`'s dot kernel for K.
    const uint8_t* k_raw = nullptr;
    const uint8_t* v_raw = nullptr;
    size_t k_row = 0, v_row = 0;
    GgmlType k_type = GgmlType::F16, v_type = GgmlType::F16;
    const kernels::KernelTable* table = nullptr;
    // Attention sinks (gpt-oss): row r of a call adds the logit sinks[r % n_sinks] to its softmax's sum, with no
    // value (null: none). One-row calls use sinks[0]; group calls point at their kv head's query heads.
    const float* sinks = nullptr;
    int n_sinks = 1;
    // The tiled path over a sparse view (deepseek4's window and picked rows): row j sits at position positions[j]
    // of llama.cpp's view (ascending), the other positions masked, so its 64-position tiles are taken over
    // positions; tiles with no row are skipped, as ggml skips a tile with nothing visible. Null: row j is position j.
    const int* positions = nullptr;
    bool typed() const { return k_raw != nullptr; }
};

// A row's sink joined to its softmax after the last position, as ggml's flash attention does (both its paths):
// the sum S gains exp(sink - M), or, where the sink is the larger, everything so far is rescaled to it. Returns
// the factor the row's accumulator is to be multiplied by before dividing by S (1 without a sink).
inline float apply_sink(const KvView& kv, int row, float M, float& S) {
    if (!kv.sinks) return 1.f;
    const float sink = kv.sinks[row % kv.n_sinks];
    float ms = 1.f, vs = 1.f;
    if (sink > M) ms = std::exp(M - sink);
    else vs = std::exp(sink - M);
    S = S * ms + vs;  // not contracted here (unlike the positions' loop): this is what matches llama.cpp's bits
    return ms;
}
// Fills the two f32 copies above for positions [0, n_kv) of a view: k_tiles needs ceil(n_kv / 64) * 64 * dk
// floats, v_f32 n_kv * dv.
void convert_kv_for_tiles(const KvView& kv, float* k_tiles, float* v_f32);
struct AttnScratch {
    std::vector<uint8_t> q_act;  // attend_typed: the query in K's dot type
    std::vector<float> scores;   // attend_typed (SIMD): every position's score, computed first
    std::vector<uint16_t> q16, acc16;
    std::vector<float> acc;
    std::vector<float> max_sum;   // per query row of a group: the running max and sum
    std::vector<float> kv_block;  // a block of keys and values converted once for a group's rows
};
inline bool tiled_attention(Flavor f, int n_query_rows, int dv) { return n_query_rows >= 64 && dv % kernels::f32_lanes(f) == 0; }

using AttendFn = void (*)(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s);
// One query row against a typed view (kv.typed()), as ggml_compute_forward_flash_attn_ext_f16_one_chunk runs
// every cache with a quantized K or V, or K and V of different types: q converted once to K's dot type (Q8_0 for
// q8_0/q4_0/q5_0/iq4_nl, Q8_1 for q4_1/q5_1, bf16, f16, f32), K.q by that type's vec_dot, online softmax with
// expf; an f16 V accumulates in fp16 (ggml_vec_mad_f16), any other V is dequantized per row and accumulated in
// f32 (ggml_vec_mad_f32). Every flavor: the dot kernel in kv.table carries the build's order.
void attend_typed(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s);
// `rows` query rows q_stride apart (heads sharing one kv head) against one view, outputs out_stride apart.
using AttendGroupFn = void (*)(const float* q, int64_t q_stride, int rows, const KvView& kv, float scale, float* out, int64_t out_stride,
                               AttnScratch& s);
// One tile's online-softmax step (ggml_numerics.h's tiled_softmax_step): kq[64] scores in, exps out.
using SoftmaxStepFn = bool (*)(float* kq, float& M, float& S, float* acc, int dim);

// The flavor-dependent operations, scalar (the reference); kernels/attention.h has the SIMD attention.
struct FloatOps {
    Flavor flavor;
    void (*softmax)(float* x, int n);                         // ggml_soft_max of a row (no scale, no mask)
    void (*swiglu)(float* g, const float* u, int n);          // g = silu(g) * u   (ggml_vec_swiglu_f32)
    void (*silu)(float* x, int n);                            // ggml_vec_silu_f32
    float (*dot_f32)(const float* x, const float* y, int n);  // ggml_vec_dot_f32
    AttendFn attend;                                          // one-row flash attention
    AttendFn attend_tiled;                                    // tiled flash attention, one row of a 64+ row batch
    // ik_llama.cpp's graph (kernels/ik/ik_ref.h): its fused norm (scale * w) * x, its routing and expert sum.
    bool ik = false;
    void (*rms_norm)(const float* x, const float* w, float* y, int n, float eps) = nullptr;  // null: ops::rms_norm
    AttendGroupFn attend_group = nullptr;  // ik: rows sharing a view in one pass, each row with `attend`'s bits (null: per row)
    // the DSA indexer's per-key sum of its heads' dots (null: ops::relu_weighted_sum, whose bits it gives)
    void (*relu_weighted_sum)(const float* part, int64_t stride, int heads, const float* w, int64_t m, float* out) = nullptr;
    void indexer_sum(const float* part, int64_t stride, int heads, const float* w, int64_t m, float* out) const;
    void norm(const float* x, const float* w, float* y, int n, float eps) const {
        if (rms_norm) rms_norm(x, w, y, n, eps);
        else ops::rms_norm(x, w, y, n, eps);
    }
};
const FloatOps& float_ops(Flavor f);
// The DSA lightning indexer's scores from its heads' dots: out[j] = the sum over heads h, in order, of
// max(part[h * stride + j], 0) * w[h], each step one fma, plus the mask's zero.
void relu_weighted_sum(const float* part, int64_t stride, int heads, const float* w, int64_t m, float* out);
inline void FloatOps::indexer_sum(const float* part, int64_t stride, int heads, const float* w, int64_t m, float* out) const {
    if (relu_weighted_sum) relu_weighted_sum(part, stride, heads, w, m, out);
    else ops::relu_weighted_sum(part, stride, heads, w, m, out);
}

// ggml's flash attention for one query row over many keys (>= 512) when it splits them across its threads: the
// one-row path per chunk (chunk_of[j] is key j's chunk, ascending; the sink only in chunk 0), the partial
// results merged in f32 (ggml_flash_attn_ext_reduce_partials). fp16 views only.
// One chunk of the one-row path left unnormalised: its running max M, sum S and accumulator (the fp16 values as
// f32), the sink folded in where kv.sinks is set.
using AttendChunkFn = void (*)(const float* q, const KvView& kv, float scale, float& M, float& S, float* acc_out, AttnScratch& s);
AttendChunkFn attend_chunk(Flavor f);  // the reference's
// `chunk` (null: the reference's) runs each chunk; kernels/attention.h has the F16C one, with the same bits.
void attend_split(Flavor f, const float* q, const KvView& kv, const int* chunk_of, int n_chunks, float scale, float* out, AttnScratch& s,
                  AttendChunkFn chunk = nullptr);
// llama.cpp splits a lone query row's view of `view` keys (use_split_kv_path) from 512 keys on: each of its
// n_threads threads takes a chunk of ceil(view / n_threads). The chunk size, or 0 where it keeps the one-row path.
inline int split_chunk(int view, int n_threads) { return n_threads > 1 && view >= 512 ? (view + n_threads - 1) / n_threads : 0; }
// ... over a KV cache: its view is the cells in use (n_used: positions 0..n_used-1) padded to 256, at least 256
// and at most the cache (n_ctx, which llama.cpp pads to 256 too).
inline int split_kv_chunk(int n_used, int n_ctx, int n_threads) {
    const auto pad = [](int x) { return (x + 255) / 256 * 256; };
    return split_chunk(std::min(pad(n_ctx), std::max(256, pad(n_used))), n_threads);
}
// attend_split over a view of consecutive positions 0..kv.n_kv-1 in chunks of `chunk` keys (split_kv_chunk).
void attend_split_causal(Flavor f, const float* q, const KvView& kv, int chunk, int n_threads, float scale, float* out, AttnScratch& s,
                         AttendChunkFn chunk_fn = nullptr);

// The chunk kernel for G query rows sharing one view (a kv head's query heads, MLA's heads), for H kv heads whose
// rows sit side by side in each position's row (kv points at head 0; head h's keys dk values on, its values dv
// on): row r (kv head r / G) has its query at q + r * q_stride, its result in M[r], S[r] and acc_out + r * dv,
// its sink kv.sinks[r] (where set); each row's bits are those of AttendChunkFn on it alone (kernels/attention.h
// has the F16C one).
using AttendChunkGroupFn = void (*)(const float* q, int64_t q_stride, int G, int H, const KvView& kv, float scale, float* M, float* S, float* acc_out,
                                    AttnScratch& s);
// Chunk c of attend_split_causal's view (keys [c * chunk, min(n_kv, (c + 1) * chunk)); the sink in chunk 0 only)
// for H G rows: row r's partial [M, S, acc (dv)] written at partials + r * (dv + 2). Run one per chunk, on any
// thread; merge_split_partials then gives each row what attend_split_causal gives it.
void attend_split_chunk_group(const float* q, int64_t q_stride, int G, int H, const KvView& kv, int chunk, int c, float scale, float* partials,
                              AttnScratch& s, AttendChunkGroupFn fn);
// ggml_flash_attn_ext_reduce_partials over n_chunks partials [M, S, acc] `stride` floats apart, in chunk order.
void merge_split_partials(const float* partials, int n_chunks, size_t stride, int dv, float* out);

}  // namespace moe::ops

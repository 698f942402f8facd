// Scalar building blocks of the forward pass, written to reproduce ggml's CPU numerics (double sums where
// ggml uses ggml_float, fp16 KV cache, fp16 accumulation in flash attention, FMAs where GCC fuses ggml's
// C++). Shared by the reference and fast forward passes: the fast path differs in kernels, batching and
// threading, not in these formulas. The FMA-heavy ones live in ops.cpp.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ggml_numerics.h"

namespace moe::ops {

// y = x / sqrt(mean(x^2) + eps) * w   (w may be null)
inline void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / n);
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < n; ++i) y[i] = x[i] * scale;
    if (w)
        for (int i = 0; i < n; ++i) y[i] *= w[i];
}

// cos/sin table for one position, as ggml builds it: theta multiplied up by powf(base, -2/n_dims) per pair.
inline void rope_cache(int pos, int n_dims, float freq_base, std::vector<float>& cs) {
    cs.resize(static_cast<size_t>(n_dims));
    const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_dims));
    float theta = static_cast<float>(pos);
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
        cs[i0] = std::cos(theta);
        cs[i0 + 1] = std::sin(theta);
        theta *= theta_scale;
    }
}

// NeoX-style rotation of one head: pairs (i, i + n_dims/2).
void rope_neox(float* x, int n_dims, const std::vector<float>& cs);

// In-place softmax as ggml_soft_max: full groups of 16 through the vector exp, each group summed as one
// register into a double, the tail through expf; then scaled by the reciprocal of the sum.
void softmax(float* x, int n);

// g[i] = silu(g[i]) * u[i] over one row, as ggml_vec_swiglu_f32: groups of 16 with the vector SiLU, the
// tail with expf.
void swiglu(float* g, const float* u, int n);

// One query head against n_kv cached positions (fp16 K and V rows of `dim`, `stride` halves apart), with
// ggml's CPU flash-attention numerics: q rounded to fp16, online softmax, V accumulated in fp16.
void attend_head(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                        float scale, float* out, std::vector<uint16_t>& q16, std::vector<uint16_t>& acc16);

// llama.cpp's flash attention takes a tiled path for a batch of 64 or more query rows when the head size is a
// multiple of 16 (ggml_compute_forward_flash_attn_ext_tiled), and its rounding differs from attend_head's.
inline bool tiled_attention(int n_query_rows, int dim) { return n_query_rows >= 64 && dim % 16 == 0; }

// One query head, as the tiled path computes each row: q stays f32; per tile of 64 cached positions the scores
// are one FMA chain over the head dimension, scaled; the running max and sum rescale an f32 accumulator; the
// tile's exponentials come from the vector exp (ggml_vec_soft_max_f32) and V is added as one FMA chain over
// the tile's positions (simd_gemm).
void attend_head_tiled(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                              float scale, float* out);

// Top-k of n probabilities, largest first (ties: lower index first).
inline void top_k(const float* p, int n, int k, int* idx) {
    std::vector<int> order(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int i = 0; i < k; ++i) idx[i] = order[i];
}

}  // namespace moe::ops

// Scalar building blocks of the forward pass, written to reproduce ggml's CPU numerics (double sums where
// ggml uses ggml_float, fp16 KV cache, fp16 accumulation in flash attention). Shared by the reference and
// fast forward passes: the fast path differs in kernels, batching and threading, not in these formulas.
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
inline void rope_neox(float* x, int n_dims, const std::vector<float>& cs) {
    const int half = n_dims / 2;
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
        const int ic = i0 / 2;
        const float c = cs[i0], s = cs[i0 + 1];
        const float x0 = x[ic], x1 = x[ic + half];
        // As GCC contracts ggml's rotate_pairs (x0*c - x1*s, x0*s + x1*c): the first product fused.
        x[ic] = std::fma(x0, c, -(x1 * s));
        x[ic + half] = std::fma(x0, s, x1 * c);
    }
}

// In-place softmax as ggml_soft_max: full groups of 16 through the vector exp, each group summed as one
// register into a double, the tail through expf; then scaled by the reciprocal of the sum.
inline void softmax(float* x, int n) {
    float max = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
    double sum = 0.0;
    int i = 0;
    for (; i + 15 < n; i += 16) {
        for (int l = 0; l < 16; ++l) x[i + l] = ggml::expf_v(x[i + l] - max);
        sum += static_cast<double>(ggml::reduce16(x + i));
    }
    for (; i < n; ++i) {
        x[i] = std::exp(x[i] - max);
        sum += static_cast<double>(x[i]);
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int k = 0; k < n; ++k) x[k] *= inv;
}

// g[i] = silu(g[i]) * u[i] over one row, as ggml_vec_swiglu_f32: groups of 16 with the vector SiLU, the
// tail with expf.
inline void swiglu(float* g, const float* u, int n) {
    int i = 0;
    for (; i + 15 < n; i += 16)
        for (int l = 0; l < 16; ++l) g[i + l] = ggml::silu_v(g[i + l]) * u[i + l];
    for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// One query head against n_kv cached positions (fp16 K and V rows of `dim`, `stride` halves apart), with
// ggml's CPU flash-attention numerics: q rounded to fp16, online softmax, V accumulated in fp16.
inline void attend_head(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                        float scale, float* out, std::vector<uint16_t>& q16, std::vector<uint16_t>& acc16) {
    q16.resize(static_cast<size_t>(dim));
    acc16.assign(static_cast<size_t>(dim), 0);
    for (int d = 0; d < dim; ++d) q16[d] = fp32_to_fp16(q[d]);
    float M = -std::numeric_limits<float>::infinity(), S = 0.f;
    for (int j = 0; j < n_kv; ++j) {
        const uint16_t* kj = k + static_cast<size_t>(j) * stride;
        const uint16_t* vj = v + static_cast<size_t>(j) * stride;
        const float s = ggml::dot_vec_order(kj, q16.data(), dim, ggml::half_as_float, true) * scale;  // ggml_vec_dot_f16
        float ms = 1.f, vs = 1.f;
        if (s > M) {
            const float m_old = M;
            M = s;
            ms = std::exp(m_old - M);
            for (int d = 0; d < dim; ++d) acc16[d] = fp32_to_fp16(fp16_to_fp32_lut(acc16[d]) * ms);
        } else {
            vs = std::exp(s - M);
        }
        for (int d = 0; d < dim; ++d) acc16[d] = fp32_to_fp16(std::fma(fp16_to_fp32_lut(vj[d]), vs, fp16_to_fp32_lut(acc16[d])));
        S = std::fma(S, ms, vs);  // S = S*ms + vs, contracted as GCC builds ggml
    }
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < dim; ++d) out[d] = fp16_to_fp32_lut(acc16[d]) * inv;
}

// llama.cpp's flash attention takes a tiled path for a batch of 64 or more query rows when the head size is a
// multiple of 16 (ggml_compute_forward_flash_attn_ext_tiled), and its rounding differs from attend_head's.
inline bool tiled_attention(int n_query_rows, int dim) { return n_query_rows >= 64 && dim % 16 == 0; }

// One query head, as the tiled path computes each row: q stays f32; per tile of 64 cached positions the scores
// are one FMA chain over the head dimension, scaled; the running max and sum rescale an f32 accumulator; the
// tile's exponentials come from the vector exp (ggml_vec_soft_max_f32) and V is added as one FMA chain over
// the tile's positions (simd_gemm).
inline void attend_head_tiled(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                              float scale, float* out) {
    constexpr int kTile = 64;
    std::vector<float> acc(static_cast<size_t>(dim), 0.f);
    float kq[kTile];
    float M = -std::numeric_limits<float>::infinity(), S = 0.f;
    for (int ic = 0; ic < n_kv; ic += kTile) {
        const int visible = std::min(kTile, n_kv - ic);  // the rest of the tile is masked (-inf)
        float tile_max = -std::numeric_limits<float>::infinity();
        for (int t = 0; t < kTile; ++t) {
            if (t >= visible) {
                kq[t] = -std::numeric_limits<float>::infinity();
                continue;
            }
            const uint16_t* kt = k + static_cast<size_t>(ic + t) * stride;
            float s = 0.f;
            for (int d = 0; d < dim; ++d) s = std::fma(fp16_to_fp32_lut(kt[d]), q[d], s);
            kq[t] = s * scale;
            tile_max = std::max(tile_max, kq[t]);
        }
        const float m_new = std::fmax(M, tile_max);
        if (m_new > M) {
            const float ms = std::exp(M - m_new);
            for (int d = 0; d < dim; ++d) acc[d] *= ms;
            S *= ms;
        }
        M = m_new;
        double sum = 0.0;
        for (int g = 0; g < kTile; g += 16) {
            for (int t = g; t < g + 16; ++t) kq[t] = ggml::expf_v(kq[t] - M);
            sum += static_cast<double>(ggml::reduce16(kq + g));
        }
        S = static_cast<float>(static_cast<double>(S) + sum);
        for (int d = 0; d < dim; ++d) {
            float a = acc[d];
            for (int t = 0; t < visible; ++t) a = std::fma(fp16_to_fp32_lut(v[static_cast<size_t>(ic + t) * stride + d]), kq[t], a);
            acc[d] = a;
        }
    }
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < dim; ++d) out[d] = acc[d] * inv;
}

// Top-k of n probabilities, largest first (ties: lower index first).
inline void top_k(const float* p, int n, int k, int* idx) {
    std::vector<int> order(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int i = 0; i < k; ++i) idx[i] = order[i];
}

}  // namespace moe::ops

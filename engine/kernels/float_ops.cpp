// The FMA-heavy building blocks of float_ops.h. Each is built twice (target_clones): with hardware FMA where the
// CPU has it, and for baseline x86-64, where std::fma is a library call; both give the same bits. The flavored
// ones are written once as templates and instantiated per llama.cpp build.
#include "engine/kernels/float_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "engine/kernels/ggml_numerics.h"

#define MOE_FMA_CLONES __attribute__((target_clones("fma", "default"), flatten))

namespace moe::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float rope_yarn_ramp(float low, float high, int i0) {
    const float y = (static_cast<float>(i0 / 2) - low) / std::max(0.001f, high - low);
    return 1 - std::min(1.f, std::max(0.f, y));
}

template <Flavor F>
void softmax_impl(float* x, int n) {
    float max = kNegInf;
    for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
    const double sum = ggml::vec_soft_max<F>(n, x, x, max);
    const float inv = static_cast<float>(1.0 / sum);
    for (int k = 0; k < n; ++k) x[k] *= inv;
}

template <Flavor F>
void swiglu_impl(float* g, const float* u, int n) {
    constexpr int L = kernels::f32_lanes(F);
    int i = 0;
    for (; i + L <= n; i += L)
        for (int l = 0; l < L; ++l) g[i + l] = ggml::silu_v<F>(g[i + l]) * u[i + l];
    for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

template <Flavor F>
void silu_impl(float* x, int n) {
    constexpr int L = kernels::f32_lanes(F);
    int i = 0;
    for (; i + L <= n; i += L)
        for (int l = 0; l < L; ++l) x[i + l] = ggml::silu_v<F>(x[i + l]);
    for (; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

template <Flavor F>
float dot_f32_impl(const float* x, const float* y, int n) {
    return ggml::dot_vec_order<F>(x, y, n, ggml::as_float, false);
}

template <Flavor F>
void attend_impl(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s) {
    s.q16.resize(static_cast<size_t>(kv.dk));
    s.acc16.assign(static_cast<size_t>(kv.dv), 0);
    for (int d = 0; d < kv.dk; ++d) s.q16[d] = fp32_to_fp16(q[d]);
    uint16_t* acc = s.acc16.data();
    float M = kNegInf, S = 0.f;
    for (int j = 0; j < kv.n_kv; ++j) {
        if (kv.visible && !kv.visible[j]) continue;
        const uint16_t* kj = kv.k + static_cast<size_t>(j) * kv.k_stride;
        const uint16_t* vj = kv.v + static_cast<size_t>(j) * kv.v_stride;
        float sc = ggml::dot_vec_order<F>(kj, s.q16.data(), kv.dk, ggml::half_as_float, true) * scale;  // ggml_vec_dot_f16
        sc += 0.0f;                                                                                     // the mask's zero
        float ms, vs;
        if (online_softmax_step(sc, M, ms, vs))
            for (int d = 0; d < kv.dv; ++d) acc[d] = fp32_to_fp16(fp16_to_fp32_lut(acc[d]) * ms);
        for (int d = 0; d < kv.dv; ++d) acc[d] = fp32_to_fp16(std::fma(fp16_to_fp32_lut(vj[d]), vs, fp16_to_fp32_lut(acc[d])));
        S = std::fma(S, ms, vs);  // S = S*ms + vs, contracted as GCC builds ggml
    }
    const float sink_scale = apply_sink(kv, 0, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < kv.dv; ++d) out[d] = fp16_to_fp32_lut(acc[d]) * sink_scale * inv;
}

// One chunk of attend_impl's loop left unnormalised: the running max, sum and accumulator (fp16, as f32).
template <Flavor F>
void attend_chunk_impl(const float* q, const KvView& kv, float scale, float& M, float& S, float* acc_out, AttnScratch& s) {
    s.q16.resize(static_cast<size_t>(kv.dk));
    s.acc16.assign(static_cast<size_t>(kv.dv), 0);
    for (int d = 0; d < kv.dk; ++d) s.q16[d] = fp32_to_fp16(q[d]);
    uint16_t* acc = s.acc16.data();
    M = kNegInf, S = 0.f;
    for (int j = 0; j < kv.n_kv; ++j) {
        if (kv.visible && !kv.visible[j]) continue;  // a masked key (DSA's unpicked positions)
        const uint16_t* kj = kv.k + static_cast<size_t>(j) * kv.k_stride;
        const uint16_t* vj = kv.v + static_cast<size_t>(j) * kv.v_stride;
        float sc = ggml::dot_vec_order<F>(kj, s.q16.data(), kv.dk, ggml::half_as_float, true) * scale;
        sc += 0.0f;
        float ms, vs;
        if (online_softmax_step(sc, M, ms, vs))
            for (int d = 0; d < kv.dv; ++d) acc[d] = fp32_to_fp16(fp16_to_fp32_lut(acc[d]) * ms);
        for (int d = 0; d < kv.dv; ++d) acc[d] = fp32_to_fp16(std::fma(fp16_to_fp32_lut(vj[d]), vs, fp16_to_fp32_lut(acc[d])));
        S = std::fma(S, ms, vs);
    }
    for (int d = 0; d < kv.dv; ++d) acc_out[d] = fp16_to_fp32_lut(acc[d]);
    const float sink_scale = apply_sink(kv, 0, M, S);
    if (kv.sinks) {
        M = std::max(M, kv.sinks[0]);
        for (int d = 0; d < kv.dv; ++d) acc_out[d] *= sink_scale;
    }
}

// attend_tiled_impl over a sparse view (KvView::positions): each tile holding rows gets their scores at their
// positions and -inf elsewhere; values are summed over its rows in position order.
template <Flavor F>
void attend_tiled_positions(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s) {
    constexpr int kTile = ggml::kFaTile;
    s.acc.assign(static_cast<size_t>(kv.dv), 0.f);
    float* acc = s.acc.data();
    float kq[kTile];
    float M = kNegInf, S = 0.f;
    for (int j0 = 0; j0 < kv.n_kv;) {
        const int base = kv.positions[j0] / kTile * kTile;
        int j1 = j0;
        while (j1 < kv.n_kv && kv.positions[j1] < base + kTile) ++j1;
        std::fill_n(kq, kTile, kNegInf);
        for (int j = j0; j < j1; ++j) {
            if (kv.visible && !kv.visible[j]) continue;
            const uint16_t* kt = kv.k + static_cast<size_t>(j) * kv.k_stride;
            float sc = 0.f;
            for (int d = 0; d < kv.dk; ++d) sc = std::fma(fp16_to_fp32_lut(kt[d]), q[d], sc);
            kq[kv.positions[j] - base] = sc * scale;
        }
        if (ggml::tiled_softmax_step<F>(kq, M, S, acc, kv.dv))
            for (int d = 0; d < kv.dv; ++d) {
                float a = acc[d];
                for (int j = j0; j < j1; ++j) {
                    const float w = kq[kv.positions[j] - base];
                    if (w != 0.f) a = std::fma(fp16_to_fp32_lut(kv.v[static_cast<size_t>(j) * kv.v_stride + d]), w, a);
                }
                acc[d] = a;
            }
        j0 = j1;
    }
    const float sink_scale = apply_sink(kv, 0, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < kv.dv; ++d) out[d] = acc[d] * sink_scale * inv;
}

template <Flavor F>
void attend_tiled_impl(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s) {
    if (kv.positions) return attend_tiled_positions<F>(q, kv, scale, out, s);
    constexpr int kTile = ggml::kFaTile;
    s.acc.assign(static_cast<size_t>(kv.dv), 0.f);
    float* acc = s.acc.data();
    float kq[kTile];
    float M = kNegInf, S = 0.f;
    for (int ic = 0; ic < kv.n_kv; ic += kTile) {
        const int in_tile = std::min(kTile, kv.n_kv - ic);
        for (int t = 0; t < kTile; ++t) {
            if (t >= in_tile || (kv.visible && !kv.visible[ic + t])) {
                kq[t] = kNegInf;
                continue;
            }
            const uint16_t* kt = kv.k + static_cast<size_t>(ic + t) * kv.k_stride;
            float sc = 0.f;
            for (int d = 0; d < kv.dk; ++d) sc = std::fma(fp16_to_fp32_lut(kt[d]), q[d], sc);
            kq[t] = sc * scale;
        }
        if (!ggml::tiled_softmax_step<F>(kq, M, S, acc, kv.dv)) continue;
        for (int d = 0; d < kv.dv; ++d) {
            float a = acc[d];
            for (int t = 0; t < in_tile; ++t)
                if (kq[t] != 0.f) a = std::fma(fp16_to_fp32_lut(kv.v[static_cast<size_t>(ic + t) * kv.v_stride + d]), kq[t], a);
            acc[d] = a;
        }
    }
    const float sink_scale = apply_sink(kv, 0, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < kv.dv; ++d) out[d] = acc[d] * sink_scale * inv;
}

// Entry points with FMA clones, per flavor.
MOE_FMA_CLONES void softmax_512(float* x, int n) { softmax_impl<Flavor::Avx512>(x, n); }
MOE_FMA_CLONES void softmax_256(float* x, int n) { softmax_impl<Flavor::Avx2>(x, n); }
MOE_FMA_CLONES void swiglu_512(float* g, const float* u, int n) { swiglu_impl<Flavor::Avx512>(g, u, n); }
MOE_FMA_CLONES void swiglu_256(float* g, const float* u, int n) { swiglu_impl<Flavor::Avx2>(g, u, n); }
MOE_FMA_CLONES void silu_512(float* x, int n) { silu_impl<Flavor::Avx512>(x, n); }
MOE_FMA_CLONES void silu_256(float* x, int n) { silu_impl<Flavor::Avx2>(x, n); }
MOE_FMA_CLONES float dot_f32_512(const float* x, const float* y, int n) { return dot_f32_impl<Flavor::Avx512>(x, y, n); }
MOE_FMA_CLONES float dot_f32_256(const float* x, const float* y, int n) { return dot_f32_impl<Flavor::Avx2>(x, y, n); }
MOE_FMA_CLONES void attend_512(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s) {
    attend_impl<Flavor::Avx512>(q, kv, scale, out, s);
}
MOE_FMA_CLONES void attend_256(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s) {
    attend_impl<Flavor::Avx2>(q, kv, scale, out, s);
}
MOE_FMA_CLONES void attend_tiled_512(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s) {
    attend_tiled_impl<Flavor::Avx512>(q, kv, scale, out, s);
}
MOE_FMA_CLONES void attend_tiled_256(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s) {
    attend_tiled_impl<Flavor::Avx2>(q, kv, scale, out, s);
}

}  // namespace

MOE_FMA_CLONES void rope_cache(const RopeParams& p, int pos, std::vector<float>& cs) {
    cs.resize(static_cast<size_t>(p.n_rot));
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    float theta = static_cast<float>(pos);
    const int sect_dims = p.sections[0] + p.sections[1] + p.sections[2] + p.sections[3];
    for (int i0 = 0; i0 < p.n_rot; i0 += 2) {
        // ggml_mrope_cache_init's interleaved sectors: t, h, w take `pos`, anything else the 4th stream's 0.
        bool still = false;
        if (p.imrope && sect_dims > 0) {
            const int sector = (i0 / 2) % sect_dims;
            const bool h = sector % 3 == 1 && sector < 3 * p.sections[1];
            const bool w = sector % 3 == 2 && sector < 3 * p.sections[2];
            const bool t = sector % 3 == 0 && sector < 3 * p.sections[0];
            still = !(h || w || t);
        }
        // rope_yarn, with GCC's contractions of ggml's C++.
        const float theta_extrap = still ? 0.0f : theta;
        const float theta_interp = p.freq_scale * theta_extrap;
        float t = theta_interp;
        float mscale = p.attn_factor;
        if (p.ext_factor != 0.0f) {
            const float ramp_mix = rope_yarn_ramp(p.corr_dims[0], p.corr_dims[1], i0) * p.ext_factor;
            t = std::fma(theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);
            mscale *= std::fma(0.1f, std::log(1.0f / p.freq_scale), 1.0f);
        }
        cs[i0] = std::cos(t) * mscale;
        cs[i0 + 1] = std::sin(t) * mscale;
        theta *= theta_scale;
    }
}

MOE_FMA_CLONES void rope(float* x, const RopeParams& p, const std::vector<float>& cs) {
    const int n = p.n_rot;
    for (int i0 = 0; i0 < n; i0 += 2) {
        // NEOX pairs (i0/2, i0/2 + n/2); NORM pairs (i0, i0 + 1).
        const int ic = p.neox ? i0 / 2 : i0;
        const int off = p.neox ? n / 2 : 1;
        const float c = cs[i0], s = cs[i0 + 1];
        const float x0 = x[ic], x1 = x[ic + off];
        // As GCC contracts ggml's rotate_pairs (x0*c - x1*s, x0*s + x1*c): the first product fused.
        x[ic] = std::fma(x0, c, -(x1 * s));
        x[ic + off] = std::fma(x0, s, x1 * c);
    }
}

// The delta rule after the decay: the rank-1 update and the read-out (both kinds share it).
static inline void delta_update_and_read(float* M, const float* q, const float* k, const float* v, float beta, float* out, int S,
                                         float (*dot)(int64_t, const void*, const void*), float* delta) {
    for (int j = 0; j < S; ++j) delta[j] = (v[j] - dot(S, M + static_cast<size_t>(j) * S, k)) * beta;
    // ggml_vec_mad_f32: y += x * v as one FMA per element.
    for (int j = 0; j < S; ++j) {
        float* row = M + static_cast<size_t>(j) * S;
        const float d = delta[j];
        for (int i = 0; i < S; ++i) row[i] = std::fma(k[i], d, row[i]);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(S));
    for (int j = 0; j < S; ++j) out[j] = dot(S, M + static_cast<size_t>(j) * S, q) * scale;
}

MOE_FMA_CLONES void gated_delta_step(float* M, const float* q, const float* k, const float* v, float g, float beta, float* out, int S,
                                     float (*dot)(int64_t, const void*, const void*), float* delta) {
    const float decay = std::exp(g);
    for (int i = 0; i < S * S; ++i) M[i] *= decay;
    delta_update_and_read(M, q, k, v, beta, out, S, dot, delta);
}

MOE_FMA_CLONES void kda_delta_step(float* M, const float* q, const float* k, const float* v, const float* g, float beta, float* out, int S,
                                   float (*dot)(int64_t, const void*, const void*), float* delta) {
    for (int i = 0; i < S; ++i) delta[i] = std::exp(g[i]);
    for (int j = 0; j < S; ++j)
        for (int i = 0; i < S; ++i) M[static_cast<size_t>(j) * S + i] *= delta[i];
    delta_update_and_read(M, q, k, v, beta, out, S, dot, delta);
}

MOE_FMA_CLONES void causal_conv(float* window_state, const float* x, int64_t x_stride, const float* w, int K, int n, float* y, int64_t y_stride) {
    float window[64];  // K <= 64 (the loader checks)
    std::copy_n(window_state, K - 1, window);
    for (int t = 0; t < n; ++t) {
        window[K - 1] = x[t * x_stride];
        // A plain float sum in ggml (not its double vec_dot), and not fused into FMAs in its builds: with
        // fused taps the oracle models' logits move by 1e-4 (F32) and flip a Q8_0 rounding by step 5.
        float sum = 0.0f;
        for (int i = 0; i < K; ++i) sum = sum + window[i] * w[i];
        y[t * y_stride] = sum;
        std::copy(window + 1, window + K, window);
    }
    std::copy_n(window, K - 1, window_state);
}

void rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]) {
    // (as ggml.c: no multiply-add here that a compiler could contract)
    auto corr_dim = [&](float beta) {
        const float num = static_cast<float>(n_rot) * std::log(static_cast<float>(n_ctx_orig) / (beta * 2 * static_cast<float>(M_PI)));
        return num / (2 * std::log(freq_base));
    };
    const float start = std::floor(corr_dim(beta_fast));
    const float end = std::ceil(corr_dim(beta_slow));
    dims[0] = std::max(0.f, start);
    dims[1] = std::min(static_cast<float>(n_rot - 1), end);
}

void top_k(const float* v, int n, int k, int* idx) {
    std::vector<int> order(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [v](int a, int b) { return v[a] > v[b]; });
    std::copy_n(order.begin(), k, idx);
    if (k > 1) std::swap(idx[0], idx[1]);
}

void top_k_set(const float* v, int n, int k, std::vector<int>& idx) {
    idx.clear();
    k = std::clamp(k, 0, n);
    if (k == 0) return;
    bool nan = false;
    for (int i = 0; i < n && !nan; ++i) nan = std::isnan(v[i]);
    if (!nan) {
        std::vector<float> sorted(v, v + n);
        std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
        const float kth = sorted[static_cast<size_t>(k - 1)];
        int above = 0, at = 0;
        for (int i = 0; i < n; ++i) above += v[i] > kth, at += v[i] == kth;
        if (above + at == k) {  // the k-th value is the only one of its value that is taken or left: one answer
            for (int i = 0; i < n; ++i)
                if (v[i] >= kth) idx.push_back(i);
            return;
        }
    }
    idx.resize(static_cast<size_t>(k));
    top_k(v, n, k, idx.data());
    std::sort(idx.begin(), idx.end());
}

template <Flavor F>
static void layer_norm_impl(const float* x, const float* w, const float* b, float* y, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
    const float mean = static_cast<float>(sum) / static_cast<float>(n);
    // ggml_vec_cvar_f32: deviations, their squares summed per register into a double.
    constexpr int L = kernels::f32_lanes(F);
    double var = 0.0;
    int i = 0;
    for (; i + L <= n; i += L) {
        float sq[L];
        for (int l = 0; l < L; ++l) {
            y[i + l] = x[i + l] - mean;
            sq[l] = y[i + l] * y[i + l];
        }
        var += static_cast<double>(ggml::reduce_register<F>(sq));
    }
    for (; i < n; ++i) {
        y[i] = x[i] - mean;
        var += static_cast<double>(y[i] * y[i]);
    }
    const float variance = static_cast<float>(var / n);
    const float scale = 1.0f / std::sqrt(variance + eps);
    for (int j = 0; j < n; ++j) y[j] *= scale;
    if (w)
        for (int j = 0; j < n; ++j) y[j] *= w[j];
    if (b)
        for (int j = 0; j < n; ++j) y[j] += b[j];
}

void layer_norm(Flavor f, const float* x, const float* w, const float* b, float* y, int n, float eps) {
    if (f == Flavor::Avx512) layer_norm_impl<Flavor::Avx512>(x, w, b, y, n, eps);
    else layer_norm_impl<Flavor::Avx2>(x, w, b, y, n, eps);
}

void hadamard(float* x, int n) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(n));
    for (int j = 0; j < n; ++j) x[j] *= scale;
    // Butterflies: u + v and u - v are exact in every order ggml runs them.
    for (int len = 1; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = 0; j < len; ++j) {
                const float u = x[i + j], v = x[i + len + j];
                x[i + j] = u + v;
                x[i + len + j] = u - v;
            }
}

void convert_kv_for_tiles(const KvView& kv, float* k_tiles, float* v_f32) {
    constexpr int kTile = ggml::kFaTile;
    const int tiles = (kv.n_kv + kTile - 1) / kTile;
    for (int tile = 0; tile < tiles; ++tile) {
        float* kt = k_tiles + static_cast<size_t>(tile) * kv.dk * kTile;
        for (int p = 0; p < kTile; ++p) {
            const int pos = tile * kTile + p;
            const uint16_t* k = kv.k + static_cast<size_t>(pos) * kv.k_stride;
            for (int d = 0; d < kv.dk; ++d) kt[static_cast<size_t>(d) * kTile + p] = pos < kv.n_kv ? fp16_to_fp32_lut(k[d]) : 0.f;
        }
    }
    for (int pos = 0; pos < kv.n_kv; ++pos)
        for (int d = 0; d < kv.dv; ++d)
            v_f32[static_cast<size_t>(pos) * kv.dv + d] = fp16_to_fp32_lut(kv.v[static_cast<size_t>(pos) * kv.v_stride + d]);
}

AttendChunkFn attend_chunk(Flavor f) { return f == Flavor::Avx512 ? &attend_chunk_impl<Flavor::Avx512> : &attend_chunk_impl<Flavor::Avx2>; }

namespace {

// Chunk c of a split view, keys [j0, j1), as a view of its own: the sink joins the first chunk only.
KvView split_chunk_view(const KvView& kv, int c, int j0, int j1) {
    KvView part = kv;
    part.k += static_cast<size_t>(j0) * kv.k_stride;
    part.v += static_cast<size_t>(j0) * kv.v_stride;
    part.n_kv = j1 - j0;
    if (kv.visible) part.visible = kv.visible + j0;
    if (c > 0) part.sinks = nullptr;
    return part;
}

// attend_split's loop, chunk c covering keys [j0, end_of(c, j0)).
template <class EndOf>
void split_and_merge(Flavor f, const float* q, const KvView& kv, int n_chunks, float scale, float* out, AttnScratch& s, AttendChunkFn chunk,
                     EndOf end_of) {
    if (!chunk) chunk = attend_chunk(f);
    const size_t stride = static_cast<size_t>(kv.dv) + 2;
    std::vector<float> partials(static_cast<size_t>(n_chunks) * stride);
    int j0 = 0;
    for (int c = 0; c < n_chunks; ++c) {
        const int j1 = end_of(c, j0);
        float* p = &partials[static_cast<size_t>(c) * stride];
        chunk(q, split_chunk_view(kv, c, j0, j1), scale, p[0], p[1], p + 2, s);
        j0 = j1;
    }
    merge_split_partials(partials.data(), n_chunks, stride, kv.dv, out);
}

}  // namespace

MOE_FMA_CLONES void merge_split_partials(const float* partials, int n_chunks, size_t stride, int dv, float* out) {
    std::vector<float> total(static_cast<size_t>(dv), 0.f);
    float M_total = kNegInf, S_total = 0.f;
    for (int c = 0; c < n_chunks; ++c) {
        const float* p = partials + static_cast<size_t>(c) * stride;
        const float M = p[0], S = p[1];
        const float* acc = p + 2;
        if (S == 0.0f) continue;
        // ggml_flash_attn_ext_reduce_partials
        const float M_new = std::fmax(M_total, M);
        const float scale_old = std::exp(M_total - M_new), scale_new = std::exp(M - M_new);
        // (a * b + c * d with the first product fused: what matches the recorded references)
        for (int d = 0; d < dv; ++d) total[d] = std::fma(total[d], scale_old, acc[d] * scale_new);
        S_total = std::fma(S_total, scale_old, S * scale_new);
        M_total = M_new;
    }
    const float inv = S_total != 0.0f ? 1.0f / S_total : 1.0f;
    for (int d = 0; d < dv; ++d) out[d] = S_total != 0.0f ? total[d] * inv : total[d];
}

void attend_split_chunk_group(const float* q, int64_t q_stride, int G, int H, const KvView& kv, int chunk, int c, float scale, float* partials,
                              AttnScratch& s, AttendChunkGroupFn fn) {
    const int j0 = std::min(kv.n_kv, c * chunk), j1 = std::min(kv.n_kv, (c + 1) * chunk), dv = kv.dv, R = H * G;
    std::vector<float> M(static_cast<size_t>(R)), S(static_cast<size_t>(R)), acc(static_cast<size_t>(R) * dv);
    fn(q, q_stride, G, H, split_chunk_view(kv, c, j0, j1), scale, M.data(), S.data(), acc.data(), s);
    for (int g = 0; g < R; ++g) {
        float* p = partials + static_cast<size_t>(g) * (dv + 2);
        p[0] = M[g], p[1] = S[g];
        std::copy_n(&acc[static_cast<size_t>(g) * dv], dv, p + 2);
    }
}

// (flatten: split_and_merge is inlined into each clone, so its fma is the instruction where there is one)
MOE_FMA_CLONES void attend_split(Flavor f, const float* q, const KvView& kv, const int* chunk_of, int n_chunks, float scale, float* out,
                                 AttnScratch& s, AttendChunkFn chunk) {
    split_and_merge(f, q, kv, n_chunks, scale, out, s, chunk, [&](int c, int j0) {
        int j1 = j0;
        while (j1 < kv.n_kv && chunk_of[j1] == c) ++j1;
        return j1;
    });
}

// (No per-key chunk list: at long contexts that would be a large fill per head and layer for every token.)
MOE_FMA_CLONES void attend_split_causal(Flavor f, const float* q, const KvView& kv, int chunk, int n_threads, float scale, float* out, AttnScratch& s,
                                        AttendChunkFn chunk_fn) {
    split_and_merge(f, q, kv, n_threads, scale, out, s, chunk_fn, [&](int c, int) { return std::min(kv.n_kv, (c + 1) * chunk); });
}

void relu_weighted_sum(const float* part, int64_t stride, int heads, const float* w, int64_t m, float* out) {
    for (int64_t j = 0; j < m; ++j) {
        float acc = 0.f;
        for (int h = 0; h < heads; ++h) acc = std::fma(std::max(part[h * stride + j], 0.0f), w[h], acc);
        out[j] = acc + 0.0f;
    }
}

const FloatOps& float_ops(Flavor f) {
    static const FloatOps avx512{Flavor::Avx512, softmax_512, swiglu_512, silu_512, dot_f32_512, attend_512, attend_tiled_512};
    static const FloatOps avx2{Flavor::Avx2, softmax_256, swiglu_256, silu_256, dot_f32_256, attend_256, attend_tiled_256};
    return f == Flavor::Avx512 ? avx512 : avx2;
}

}  // namespace moe::ops

// As llama.cpp computes them on the CPU: the fused ops ggml_dsv4_hc_comb / _hc_pre / _hc_post (on by default for
// trunk layers; plain float loops in ggml-cpu's ops.cpp) and, for the output head, the unfused graph (one rounding
// per ggml op, which gives the same bits as hc_pre's loop). Measured against the recorded references (README-2026):
// their build fuses the comb's multiply-adds but not the pre and post sums; any other choice moves the first
// logits by ~5e-4.
#include "engine/forward/hyper_connection.h"

#include <algorithm>
#include <cmath>

#include "engine/kernels/float_ops.h"

namespace moe {

void hyper_norm(const HyperConfig& c, const float* streams, int E, float rms_eps, float* out) {
    ops::rms_norm(streams, nullptr, out, static_cast<int>(c.n) * E, rms_eps);
}

namespace {

// ggml_sigmoid of (mix * scale + base), each op rounded.
float affine_sigmoid(float mix, float scale, float base) { return ops::sigmoid(mix * scale + base); }

// ggml_dsv4_hc_comb on comb[src * n + dst] (ggml's [dst, src], dst innermost): a softmax over dst per src (scalar
// expf, a float sum, times its inverse, + eps), a column normalisation (per dst, over src), then (iters - 1) x
// (row, column) normalisations, each sum starting from eps.
void sinkhorn(float* comb, uint32_t n, uint32_t iters, float eps) {
    for (uint32_t s = 0; s < n; ++s) {
        float* row = comb + s * n;
        float mx = -INFINITY;
        for (uint32_t d = 0; d < n; ++d) mx = std::max(mx, row[d]);
        float sum = 0.0f;
        for (uint32_t d = 0; d < n; ++d) sum += row[d] = std::exp(row[d] - mx);
        const float inv = 1.0f / sum;
        for (uint32_t d = 0; d < n; ++d) row[d] = std::fma(row[d], inv, eps);
    }
    // Each line (a column: fixed dst, over src; a row: fixed src, over dst) divided by its sum plus eps.
    auto normalise = [&](bool columns) {
        for (uint32_t a = 0; a < n; ++a) {
            auto at = [&](uint32_t b) -> float& { return columns ? comb[b * n + a] : comb[a * n + b]; };
            float sum = eps;
            for (uint32_t b = 0; b < n; ++b) sum += at(b);
            const float inv = 1.0f / sum;
            for (uint32_t b = 0; b < n; ++b) at(b) *= inv;
        }
    };
    normalise(true);
    for (uint32_t i = 1; i < iters; ++i) {
        normalise(false);
        normalise(true);
    }
}

}  // namespace

HyperMix hyper_mix(const HyperConfig& c, const float* mixes, const HyperWeights& w) {
    const uint32_t n = c.n;
    const float* scale = w.scale.f32();
    const float* base = w.base.f32();
    HyperMix m;
    for (uint32_t h = 0; h < n; ++h) {
        m.pre[h] = affine_sigmoid(mixes[h], scale[0], base[h]) + c.eps;
        m.post[h] = affine_sigmoid(mixes[n + h], scale[1], base[n + h]) * 2.0f;
    }
    for (uint32_t i = 0; i < n * n; ++i) m.comb[i] = std::fma(mixes[2 * n + i], scale[2], base[2 * n + i]);
    sinkhorn(m.comb, n, c.sinkhorn_iters, c.eps);
    return m;
}

HyperMix hyper_head_mix(const HyperConfig& c, const float* mixes, const HyperWeights& w) {
    HyperMix m;
    for (uint32_t h = 0; h < c.n; ++h) m.pre[h] = affine_sigmoid(mixes[h], w.scale.f32()[0], w.base.f32()[h]) + c.eps;
    return m;
}

void hyper_collapse(const HyperConfig& c, const HyperMix& mix, const float* streams, int E, float* out) {
    for (int i = 0; i < E; ++i) out[i] = streams[i] * mix.pre[0];
    for (uint32_t h = 1; h < c.n; ++h)
        for (int i = 0; i < E; ++i) out[i] += streams[h * E + i] * mix.pre[h];
}

void hyper_expand(const HyperConfig& c, const HyperMix& mix, const float* y, float* streams, int E, float* scratch) {
    const uint32_t n = c.n;
    // Every new copy reads all the old ones: build them in scratch (n * E), then copy back.
    for (uint32_t d = 0; d < n; ++d) {
        float* out = scratch + d * E;
        for (int i = 0; i < E; ++i) out[i] = y[i] * mix.post[d];
        for (uint32_t s = 0; s < n; ++s)
            for (int i = 0; i < E; ++i) out[i] += streams[s * E + i] * mix.comb[s * n + d];
    }
    std::copy_n(scratch, n * E, streams);
}

}  // namespace moe

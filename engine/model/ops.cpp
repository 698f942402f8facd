// The FMA-heavy building blocks of ops.h. Each is built twice (target_clones): with hardware FMA where the
// CPU has it, and for baseline x86-64, where std::fma is a library call; both give the same bits.
#include "engine/model/ops.h"

#define MOE_FMA_CLONES __attribute__((target_clones("fma", "default")))

namespace moe::ops {

MOE_FMA_CLONES void rope_neox(float* x, int n_dims, const std::vector<float>& cs) {
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

MOE_FMA_CLONES void softmax(float* x, int n) {
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

MOE_FMA_CLONES void swiglu(float* g, const float* u, int n) {
    int i = 0;
    for (; i + 15 < n; i += 16)
        for (int l = 0; l < 16; ++l) g[i + l] = ggml::silu_v(g[i + l]) * u[i + l];
    for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

MOE_FMA_CLONES void attend_head(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
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

MOE_FMA_CLONES void attend_head_tiled(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                              float scale, float* out) {
    constexpr int kTile = 64;
    std::vector<float> acc(static_cast<size_t>(dim), 0.f);
    float kq[kTile];
    float M = -std::numeric_limits<float>::infinity(), S = 0.f;
    for (int ic = 0; ic < n_kv; ic += kTile) {
        const int visible = std::min(kTile, n_kv - ic);  // the rest of the tile is masked (-inf)
        for (int t = 0; t < visible; ++t) {
            const uint16_t* kt = k + static_cast<size_t>(ic + t) * stride;
            float s = 0.f;
            for (int d = 0; d < dim; ++d) s = std::fma(fp16_to_fp32_lut(kt[d]), q[d], s);
            kq[t] = s * scale;
        }
        ggml::tiled_softmax_step(kq, visible, M, S, acc.data(), dim);
        for (int d = 0; d < dim; ++d) {
            float a = acc[d];
            for (int t = 0; t < visible; ++t) a = std::fma(fp16_to_fp32_lut(v[static_cast<size_t>(ic + t) * stride + d]), kq[t], a);
            acc[d] = a;
        }
    }
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < dim; ++d) out[d] = acc[d] * inv;
}

}  // namespace moe::ops

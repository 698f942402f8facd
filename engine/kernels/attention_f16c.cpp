// Compiled with -mavx2 -mfma -mf16c. Uses intrinsics only (no shared inline helpers), so nothing compiled
// with these flags can leak into baseline code through the linker.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kernels/attention.h"

namespace moe::kernels {
namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f2h(float f) { return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }
inline __m256 ld8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// ggml_vec_dot_f16 in its AVX-512 order (ggml::dot_vec_order): four 16-lane accumulators, each a pair of
// 256-bit halves, over 64-element steps; the tail in double.
float dot_f16_vec_order(const uint16_t* x, const uint16_t* y, int n) {
    __m256 acc[4][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j)
            for (int h = 0; h < 2; ++h) acc[j][h] = _mm256_fmadd_ps(ld8(x + i + 16 * j + 8 * h), ld8(y + i + 16 * j + 8 * h), acc[j][h]);
    for (int h = 0; h < 2; ++h) {
        acc[0][h] = _mm256_add_ps(acc[0][h], acc[2][h]);
        acc[1][h] = _mm256_add_ps(acc[1][h], acc[3][h]);
        acc[0][h] = _mm256_add_ps(acc[0][h], acc[1][h]);
    }
    double s = hsum8(_mm256_add_ps(acc[0][1], acc[0][0]));
    for (int i = np; i < n; ++i) s += static_cast<double>(h2f(x[i]) * h2f(y[i]));
    return static_cast<float>(s);
}

}  // namespace

void attend_head_f16c(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim, float scale,
                      float* out, std::vector<uint16_t>& q16, std::vector<uint16_t>& acc16) {
    q16.resize(static_cast<size_t>(dim));
    acc16.assign(static_cast<size_t>(dim), 0);
    for (int d = 0; d < dim; ++d) q16[d] = f2h(q[d]);
    float M = -std::numeric_limits<float>::infinity(), S = 0.f;
    uint16_t* acc = acc16.data();
    for (int j = 0; j < n_kv; ++j) {
        const uint16_t* kj = k + static_cast<size_t>(j) * stride;
        const uint16_t* vj = v + static_cast<size_t>(j) * stride;
        const float s = dot_f16_vec_order(kj, q16.data(), dim) * scale;
        float ms = 1.f, vs = 1.f;
        int d = 0;
        if (s > M) {
            const float m_old = M;
            M = s;
            ms = std::exp(m_old - M);
            const __m256 msv = _mm256_set1_ps(ms);
            for (; d + 8 <= dim; d += 8) {
                __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + d)));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + d), _mm256_cvtps_ph(_mm256_mul_ps(a, msv), _MM_FROUND_TO_NEAREST_INT));
            }
            for (; d < dim; ++d) acc[d] = f2h(h2f(acc[d]) * ms);
        } else {
            vs = std::exp(s - M);
        }
        const __m256 vsv = _mm256_set1_ps(vs);
        d = 0;
        for (; d + 8 <= dim; d += 8) {
            __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + d)));
            __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vj + d)));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + d), _mm256_cvtps_ph(_mm256_fmadd_ps(x, vsv, a), _MM_FROUND_TO_NEAREST_INT));
        }
        for (; d < dim; ++d) acc[d] = f2h(std::fma(h2f(vj[d]), vs, h2f(acc[d])));
        S = std::fma(S, ms, vs);  // contracted, as GCC builds ggml
    }
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < dim; ++d) out[d] = h2f(acc[d]) * inv;
}


namespace {

// ggml_v_expf (the scalar statement in ggml_numerics.h, restated here so that no inline function of baseline
// code is compiled under this file's flags).
float expf_v(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    if (std::fabs(n) > 192.f) return n <= 0.f ? 0.f : std::numeric_limits<float>::infinity();
    const float u = b * b;
    const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                             u, std::fma(0x1.ffffecp-1f, b, 1.0f));
    return std::ldexp(j, static_cast<int>(n));
}

// _mm512_reduce_add_ps's order over 16 floats.
float reduce16(const float* v) {
    const __m256 t = _mm256_add_ps(_mm256_loadu_ps(v + 8), _mm256_loadu_ps(v));
    return hsum8(t);
}

// 8x8 transpose: out[j] holds element j of the eight rows.
void transpose8(const __m256 r[8], __m256 out[8]) {
    const __m256 u0 = _mm256_unpacklo_ps(r[0], r[1]), u1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 u2 = _mm256_unpacklo_ps(r[2], r[3]), u3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 u4 = _mm256_unpacklo_ps(r[4], r[5]), u5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 u6 = _mm256_unpacklo_ps(r[6], r[7]), u7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xEE);
    const __m256 v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xEE);
    const __m256 v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xEE);
    const __m256 v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xEE);
    out[0] = _mm256_permute2f128_ps(v0, v4, 0x20), out[4] = _mm256_permute2f128_ps(v0, v4, 0x31);
    out[1] = _mm256_permute2f128_ps(v1, v5, 0x20), out[5] = _mm256_permute2f128_ps(v1, v5, 0x31);
    out[2] = _mm256_permute2f128_ps(v2, v6, 0x20), out[6] = _mm256_permute2f128_ps(v2, v6, 0x31);
    out[3] = _mm256_permute2f128_ps(v3, v7, 0x20), out[7] = _mm256_permute2f128_ps(v3, v7, 0x31);
}

}  // namespace

// ops::attend_head_tiled with the same operations per value: the score chains of eight positions run side by
// side (their K rows transposed eight dimensions at a time), V is added eight dimensions at a time.
void attend_head_tiled_f16c(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                            float scale, float* out) {
    constexpr int kTile = 64;
    std::vector<float> acc(static_cast<size_t>(dim), 0.f);
    alignas(32) float kq[kTile];
    float M = -std::numeric_limits<float>::infinity(), S = 0.f;
    for (int ic = 0; ic < n_kv; ic += kTile) {
        const int visible = std::min(kTile, n_kv - ic);
        int t = 0;
        for (; t + 8 <= visible; t += 8) {
            __m256 sc = _mm256_setzero_ps();
            for (int d = 0; d + 8 <= dim; d += 8) {
                __m256 rows[8], cols[8];
                for (int p = 0; p < 8; ++p) rows[p] = ld8(k + static_cast<size_t>(ic + t + p) * stride + d);
                transpose8(rows, cols);
                for (int j = 0; j < 8; ++j) sc = _mm256_fmadd_ps(cols[j], _mm256_set1_ps(q[d + j]), sc);
            }
            _mm256_store_ps(kq + t, _mm256_mul_ps(sc, _mm256_set1_ps(scale)));
        }
        for (; t < visible; ++t) {
            const uint16_t* kt = k + static_cast<size_t>(ic + t) * stride;
            float s = 0.f;
            for (int d = 0; d < dim; ++d) s = std::fma(h2f(kt[d]), q[d], s);
            kq[t] = s * scale;
        }
        float tile_max = -std::numeric_limits<float>::infinity();
        for (int i = 0; i < visible; ++i) tile_max = std::max(tile_max, kq[i]);
        for (int i = visible; i < kTile; ++i) kq[i] = -std::numeric_limits<float>::infinity();
        const float m_new = std::fmax(M, tile_max);
        if (m_new > M) {
            const float ms = std::exp(M - m_new);
            for (int d = 0; d < dim; ++d) acc[d] *= ms;
            S *= ms;
        }
        M = m_new;
        double sum = 0.0;
        for (int g = 0; g < kTile; g += 16) {
            for (int i = g; i < g + 16; ++i) kq[i] = expf_v(kq[i] - M);
            sum += static_cast<double>(reduce16(kq + g));
        }
        S = static_cast<float>(static_cast<double>(S) + sum);
        for (int d = 0; d + 8 <= dim; d += 8) {
            __m256 a = _mm256_loadu_ps(&acc[d]);
            for (int i = 0; i < visible; ++i)
                a = _mm256_fmadd_ps(ld8(v + static_cast<size_t>(ic + i) * stride + d), _mm256_set1_ps(kq[i]), a);
            _mm256_storeu_ps(&acc[d], a);
        }
    }
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < dim; ++d) out[d] = acc[d] * inv;
}

}  // namespace moe::kernels

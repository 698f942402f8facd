// Compiled with -mavx2 -mfma -mf16c. Uses intrinsics and internal-linkage helpers only (simd_common.h,
// ggml_numerics.h), so nothing compiled with these flags can leak into baseline code through the linker.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kernels/attention.h"
#include "engine/kernels/ggml_numerics.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {

inline uint16_t f2h(float f) { return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

// ggml_vec_dot_f16 in its AVX-512 order (ggml::dot_vec_order): four 16-lane accumulators, each a pair of
// 256-bit halves, over 64-element steps; the tail in double.
float dot_f16_vec_order(const uint16_t* x, const uint16_t* y, int n) {
    __m256 acc[4][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    const int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j)
            for (int h = 0; h < 2; ++h) acc[j][h] = _mm256_fmadd_ps(load_f16x8(x + i + 16 * j + 8 * h), load_f16x8(y + i + 16 * j + 8 * h), acc[j][h]);
    for (int h = 0; h < 2; ++h) {
        acc[0][h] = _mm256_add_ps(acc[0][h], acc[2][h]);
        acc[1][h] = _mm256_add_ps(acc[1][h], acc[3][h]);
        acc[0][h] = _mm256_add_ps(acc[0][h], acc[1][h]);
    }
    double s = hsum_float_8(_mm256_add_ps(acc[0][1], acc[0][0]));
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
                for (int p = 0; p < 8; ++p) rows[p] = load_f16x8(k + static_cast<size_t>(ic + t + p) * stride + d);
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
        ggml::tiled_softmax_step(kq, visible, M, S, acc.data(), dim);
        for (int d = 0; d + 8 <= dim; d += 8) {
            __m256 a = _mm256_loadu_ps(&acc[d]);
            for (int i = 0; i < visible; ++i)
                a = _mm256_fmadd_ps(load_f16x8(v + static_cast<size_t>(ic + i) * stride + d), _mm256_set1_ps(kq[i]), a);
            _mm256_storeu_ps(&acc[d], a);
        }
    }
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < dim; ++d) out[d] = acc[d] * inv;
}

}  // namespace moe::kernels

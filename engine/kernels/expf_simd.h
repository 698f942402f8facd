// ggml_v_expf and the softmax step of the tiled flash attention, eight lanes at a time, for translation units
// built with -mavx2 -mfma. Each lane computes ggml_numerics.h's expf_v<F> (the scalar statement of both
// builds' vector exp), so the results are the scalar reference's bits; attention spent about half its time
// in the scalar exp of every score. Internal linkage, as simd_common.h.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "engine/kernels/ggml_numerics.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {

// exp of eight lanes in build F's form (the AVX-512 build scales 1+poly by 2^n through VSCALEFPS).
template <Flavor F>
inline __m256 expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.f), n);
    const __m256 poly = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f)));
    if constexpr (F == Flavor::Avx512) {
        const __m256 j = _mm256_fmadd_ps(poly, u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
        // j x 2^n with one rounding, as VSCALEFPS and ldexp: one multiply where 2^n is a normal float; else
        // 2^(n - s) x 2^s with s = -100 below -126 and 100 above 126, the first product exact (normal) and the
        // second rounding once. |n| > 192 gives 0 or inf; NaN lanes stay NaN.
        const __m256 zero = _mm256_setzero_ps();
        const __m256 s = _mm256_blendv_ps(_mm256_blendv_ps(zero, _mm256_set1_ps(-100.f), _mm256_cmp_ps(n, _mm256_set1_ps(-126.f), _CMP_LT_OQ)),
                                          _mm256_set1_ps(100.f), _mm256_cmp_ps(n, _mm256_set1_ps(126.f), _CMP_GT_OQ));
        auto pow2 = [](__m256 e) {
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(e), _mm256_set1_epi32(127)), 23));
        };
        const __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(j, pow2(_mm256_sub_ps(n, s))), pow2(s));
        const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.f), _CMP_GT_OQ);
        const __m256 saturated = _mm256_and_ps(_mm256_cmp_ps(n, zero, _CMP_GT_OQ), _mm256_set1_ps(std::numeric_limits<float>::infinity()));
        return _mm256_blendv_ps(scaled, saturated, big);
    } else {
        const __m256 j = _mm256_fmadd_ps(poly, u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
        const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
        const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
        const __m256 c = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.f), _CMP_GT_OQ);
        if (!_mm256_movemask_ps(c)) return _mm256_fmadd_ps(j, k, k);
        const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                           _mm256_set1_epi32(static_cast<int>(0x82000000u)));
        const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
        const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        const __m256 d = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.f), _CMP_GT_OQ);
        const __m256 far = _mm256_mul_ps(s1, s1);
        const __m256 near = _mm256_blendv_ps(_mm256_fmadd_ps(j, k, k), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1), c);
        return _mm256_blendv_ps(near, far, d);
    }
}

// ggml_numerics.h's tiled_softmax_step on registers: the tile's max (exact in any order; NaN scores are
// passed over as std::max does), the rescale, and the exps summed one register of the build at a time (the
// AVX-512 build's 16-lane reduction is the 8-lane one of the two halves' sum) into a double.
template <Flavor F>
inline bool tiled_softmax_step8(float* kq, float& M, float& S, float* acc, int dim) {
    constexpr int kTile = ggml::kFaTile;
    __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (int i = 0; i < kTile; i += 8) mx = _mm256_max_ps(_mm256_loadu_ps(kq + i), mx);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mx);
    float tile_max = lanes[0];
    for (int l = 1; l < 8; ++l) tile_max = std::max(tile_max, lanes[l]);
    if (tile_max == -std::numeric_limits<float>::infinity()) return false;
    const float m_new = std::fmax(M, tile_max);
    if (m_new > M) {
        const float ms = std::exp(M - m_new);
        const __m256 msv = _mm256_set1_ps(ms);
        int d = 0;
        for (; d + 8 <= dim; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), msv));
        for (; d < dim; ++d) acc[d] *= ms;
        S *= ms;
    }
    M = m_new;
    const __m256 mv = _mm256_set1_ps(M);
    double sum = 0.0;
    constexpr int L = f32_lanes(F);
    for (int i = 0; i < kTile; i += L) {
        __m256 reg = _mm256_setzero_ps();
        for (int h = 0; h < L; h += 8) {
            const __m256 y = expf8<F>(_mm256_sub_ps(_mm256_loadu_ps(kq + i + h), mv));
            _mm256_storeu_ps(kq + i + h, y);
            reg = h == 0 ? y : _mm256_add_ps(reg, y);
        }
        sum += static_cast<double>(hsum_float_8(reg));
    }
    S = static_cast<float>(static_cast<double>(S) + sum);
    return true;
}

}  // namespace
}  // namespace moe::kernels

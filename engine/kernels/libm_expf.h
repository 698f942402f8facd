// glibc's expf, eight floats at a time: the one-row flash attention takes one libm expf per key and row (as
// llama.cpp's does), a fifth of a long-context decode step when called one by one. glibc (2.27 on) runs its
// __expf_fma on CPUs with FMA and AVX2: x in double, k = round(x * 32 / ln 2) by the 2^52 * 1.5 shift,
// r = x * 32 / ln 2 - k, 2^(k/32) from a 32-entry table, a cubic in r, each step an FMA where its disassembly has
// one. The lanes below do those double steps in the same order and contractions, so each gives libm's bits;
// |x| >= 88, inf and NaN go to libm itself. libm_expf_checked() compares the lanes with this process's expf once
// (another libm, or an unexpected build of it) and the callers fall back to it where they differ.
// Included by translation units compiled with AVX2 and FMA only.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace moe::kernels {
namespace {

alignas(64) inline constexpr uint64_t kExp2fTable[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238,
    0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82,
    0x3feeab07dd485429, 0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13, 0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

inline double bits_to_double(uint64_t b) {
    double d;
    std::memcpy(&d, &b, 8);
    return d;
}

// Four lanes of __expf_fma's main path (x as doubles).
inline __m256d expf4_main(__m256d xd) {
    const __m256d inv_ln2_n = _mm256_set1_pd(bits_to_double(0x40471547652b82feull)), shift = _mm256_set1_pd(bits_to_double(0x4338000000000000ull));
    const __m256d c0 = _mm256_set1_pd(bits_to_double(0x3ebc6af84b912394ull)), c1 = _mm256_set1_pd(bits_to_double(0x3f2ebfce50fac4f3ull));
    const __m256d c2 = _mm256_set1_pd(bits_to_double(0x3f962e42ff0c52d6ull)), one = _mm256_set1_pd(1.0);
    const __m256d kd_shifted = _mm256_fmadd_pd(inv_ln2_n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd_shifted);
    const __m256d kd = _mm256_sub_pd(kd_shifted, shift);
    const __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
    const __m256i t = _mm256_add_epi64(
        _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kExp2fTable), _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8),
        _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(r, c0, c1);
    const __m256d r2 = _mm256_mul_pd(r, r);
    const __m256d y = _mm256_fmadd_pd(z, r2, _mm256_fmadd_pd(r, c2, one));
    return _mm256_mul_pd(y, _mm256_castsi256_pd(t));
}

// expf of eight floats; lanes outside the main path (|x| >= 88, inf, NaN) through libm.
inline __m256 expf8_lanes(__m256 x) {
    const __m256 lo = _mm256_castps128_ps256(_mm256_cvtpd_ps(expf4_main(_mm256_cvtps_pd(_mm256_castps256_ps128(x)))));
    __m256 y = _mm256_insertf128_ps(lo, _mm256_cvtpd_ps(expf4_main(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)))), 1);
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    const int special = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a))));
    if (special) {
        alignas(32) float xs[8], ys[8];
        _mm256_store_ps(xs, x);
        _mm256_store_ps(ys, y);
        for (int i = 0; i < 8; ++i)
            if (special >> i & 1) ys[i] = std::exp(xs[i]);
        y = _mm256_load_ps(ys);
    }
    return y;
}

// Whether the lanes give this process's expf on a spread of softmax arguments (and a few others).
inline bool libm_expf_checked() {
    static const bool same = [] {
        alignas(32) float x[8], y[8];
        for (int i = 0; i < 40000; i += 8) {
            for (int l = 0; l < 8; ++l) {
                const int k = i + l;
                x[l] = k < 36000 ? -static_cast<float>(k) * 0.00277777f - static_cast<float>(k % 97) * 1e-7f
                                 : static_cast<float>(k - 38000) * 0.0437f;
            }
            _mm256_store_ps(y, expf8_lanes(_mm256_load_ps(x)));
            for (int l = 0; l < 8; ++l) {
                const float want = std::exp(x[l]);
                if (std::memcmp(&want, &y[l], 4) != 0) return false;
            }
        }
        return true;
    }();
    return same;
}

// y[i] = expf(x[i]) for n values, as libm gives them.
inline void expf_libm(const float* x, float* y, int n) {
    int i = 0;
    if (libm_expf_checked())
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf8_lanes(_mm256_loadu_ps(x + i)));
    for (; i < n; ++i) y[i] = std::exp(x[i]);
}

}  // namespace
}  // namespace moe::kernels

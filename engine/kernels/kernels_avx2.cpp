// AVX2 + FMA + F16C dot products. Integer sums are exact, so results differ from the scalar reference only
// in float summation order.
#include <immintrin.h>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/kernels_internal.h"

namespace moe::kernels {
namespace {

// Exact integer sum of the lanes (the float accumulation then follows the reference order exactly).
inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Signed x signed byte dot product of 32 pairs, as 8 int32 partial sums.
inline __m256i dot_i8(__m256i x, __m256i y) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// F32 weights: products in float, sums in double, as the reference (see kernels_avx512.cpp).
float dot_f32(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const float*>(w);
    auto* y = static_cast<const float*>(a);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
    }
    __m256d t = _mm256_add_pd(acc0, acc1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    double s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; ++i) s += static_cast<double>(x[i] * y[i]);
    return static_cast<float>(s);
}

// Exact float products summed in double, as the reference (see kernels_avx512.cpp).
inline void acc_pd(__m256 p, __m256d& a0, __m256d& a1) {
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
}
inline double hsum_pd(__m256d a0, __m256d a1) {
    __m256d t = _mm256_add_pd(a0, a1);
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

float dot_f16(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int64_t i = 0;
    auto ld = [](const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); };
    for (; i + 8 <= n; i += 8) acc_pd(_mm256_mul_ps(ld(x + i), ld(y + i)), a0, a1);
    double s = hsum_pd(a0, a1);
    for (; i < n; ++i) s += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
    return static_cast<float>(s);
}

float dot_bf16(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int64_t i = 0;
    auto ld = [](const uint16_t* p) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    };
    for (; i + 8 <= n; i += 8) acc_pd(_mm256_mul_ps(ld(x + i), ld(y + i)), a0, a1);
    double s = hsum_pd(a0, a1);
    for (; i < n; ++i) s += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    return static_cast<float>(s);
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ8_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    float s = 0.f;
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
        __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
        const float d = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
        s += static_cast<float>(hsum_i32(dot_i8(qx, qy))) * d;
    }
    return s;
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ4_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    float s = 0.f;
    const __m256i low4 = _mm256_set1_epi8(0xF), eight = _mm256_set1_epi8(8);
    for (int64_t b = 0; b < n / QK4_0; ++b) {
        __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
        __m256i qx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
        qx = _mm256_sub_epi8(qx, eight);
        __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
        const float d = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
        s += static_cast<float>(hsum_i32(dot_i8(qx, qy))) * d;
    }
    return s;
}

// Shared by Q4_K and Q5_K: `hbits` null for Q4_K.
inline float dot_q45_K(int64_t n, const uint8_t* base, size_t stride, size_t qs_off, size_t qh_off, bool five,
                       const BlockQ8_K* y) {
    const __m256i low4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    float s = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const uint8_t* blk = base + b * stride;
        uint16_t dh, dminh;
        std::memcpy(&dh, blk, 2);
        std::memcpy(&dminh, blk + 2, 2);
        const uint8_t* scales = blk + 4;
        const uint8_t* qs = blk + qs_off;
        uint8_t sc[8], mn[8];
        int summ = 0;
        for (int j = 0; j < 8; ++j) {
            k_scale_min(j, scales, sc[j], mn[j]);
            summ += mn[j] * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        }
        __m256i hbits = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qh_off)) : _mm256_setzero_si256();
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
            __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
            __m256i lo = _mm256_and_si256(bits, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one), 4));
            }
            __m256i ylo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs + 64 * j));
            __m256i yhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs + 64 * j + 32));
            __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_set1_epi16(sc[2 * j]));
            __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), _mm256_set1_epi16(sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
        }
        // Same float expression and order as the reference: bit-identical results.
        s += y[b].d * fp16_to_fp32(dh) * static_cast<float>(hsum_i32(sumi)) -
             y[b].d * fp16_to_fp32(dminh) * static_cast<float>(summ);
    }
    return s;
}

float dot_q4_K(int64_t n, const void* w, const void* a) {
    return dot_q45_K(n, static_cast<const uint8_t*>(w), sizeof(BlockQ4_K), offsetof(BlockQ4_K, qs), 0, false,
                     static_cast<const BlockQ8_K*>(a));
}

float dot_q5_K(int64_t n, const void* w, const void* a) {
    return dot_q45_K(n, static_cast<const uint8_t*>(w), sizeof(BlockQ5_K), offsetof(BlockQ5_K, qs),
                     offsetof(BlockQ5_K, qh), true, static_cast<const BlockQ8_K*>(a));
}

float dot_q6_K(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ6_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    const __m256i low4 = _mm256_set1_epi8(0xF), three = _mm256_set1_epi8(3);
    float s = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        __m256i sumi = _mm256_setzero_si256();
        // sum((q-32)*y*sc) = sum(q*y*sc) - 32*sum(sc*bsum): the second part from Q8_K's block sums.
        const __m256i corr = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales))),
                                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].bsums)));
        for (int half = 0; half < 2; ++half) {
            const uint8_t* ql = x[b].ql + 64 * half;
            const uint8_t* qh = x[b].qh + 32 * half;
            const int8_t* q8 = y[b].qs + 128 * half;
            const int8_t* sc = x[b].scales + 8 * half;
            __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
            __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
            __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
            __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_slli_epi16(_mm256_and_si256(h, three), 4)),
                _mm256_or_si256(_mm256_and_si256(l1, low4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), three), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), three), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), three), 4)),
            };
            for (int k = 0; k < 4; ++k) {
                __m256i yk = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * k));
                __m256i p = _mm256_maddubs_epi16(q[k], yk);
                // Low 128-bit lane holds elements 0..15 (scale 2k), high lane 16..31 (scale 2k+1).
                __m256i scale_v = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_v));
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 5));
        s += y[b].d * fp16_to_fp32(x[b].d) * static_cast<float>(hsum_i32(sumi));
    }
    return s;
}

}  // namespace

void fill_avx2_table(KernelTable& t) {
    t.isa = Isa::Avx2;
    t.dot[0] = dot_f32;
    t.dot[1] = dot_f16;
    t.dot[2] = dot_q4_0;
    t.dot[8] = dot_q8_0;
    t.dot[12] = dot_q4_K;
    t.dot[13] = dot_q5_K;
    t.dot[14] = dot_q6_K;
    t.dot[30] = dot_bf16;
    t.dot_rows[0] = dot_rows_of<dot_f32>;
    t.dot_rows[1] = dot_rows_of<dot_f16>;
    t.dot_rows[2] = dot_rows_of<dot_q4_0>;
    t.dot_rows[8] = dot_rows_of<dot_q8_0>;
    t.dot_rows[12] = dot_rows_of<dot_q4_K>;
    t.dot_rows[13] = dot_rows_of<dot_q5_K>;
    t.dot_rows[14] = dot_rows_of<dot_q6_K>;
    t.dot_rows[30] = dot_rows_of<dot_bf16>;
}

}  // namespace moe::kernels

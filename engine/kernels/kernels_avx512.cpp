// AVX-512 (F, BW, VL, VNNI) dot products: 512-bit float FMAs and VPDPBUSD for the integer blocks.
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
inline int hsum_i32(__m512i v) { return _mm512_reduce_add_epi32(v); }

// F32 weights: products in float, sums in double, as the reference. A float-accumulated dot drifts from
// llama.cpp by summation order, and small random-weight models amplify that past greedy-token margins.
float dot_f32(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const float*>(w);
    auto* y = static_cast<const float*>(a);
    __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i));
        acc0 = _mm512_add_pd(acc0, _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
        acc1 = _mm512_add_pd(acc1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p), 1))));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
    for (; i < n; ++i) s += static_cast<double>(x[i] * y[i]);
    return static_cast<float>(s);
}

// fp16 x fp16 and bf16 x bf16 products are exact in float; summing them in double keeps the result equal to
// the reference's up to the final rounding, whatever the order.
inline void acc_pd(__m512 p, __m512d& a0, __m512d& a1) {
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p), 1))));
}

float dot_f16(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = 0;
    auto ld = [](const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); };
    for (; i + 16 <= n; i += 16) acc_pd(_mm512_mul_ps(ld(x + i), ld(y + i)), a0, a1);
    double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; ++i) s += static_cast<double>(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
    return static_cast<float>(s);
}

float dot_bf16(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = 0;
    auto ld = [](const uint16_t* p) {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    };
    for (; i + 16 <= n; i += 16) acc_pd(_mm512_mul_ps(ld(x + i), ld(y + i)), a0, a1);
    double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; ++i) s += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    return static_cast<float>(s);
}

// Signed x signed bytes through VPDPBUSD: |x| (unsigned) times y carrying x's sign.
inline __m256i dot_i8(__m256i x, __m256i y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
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

// Eight rows at a time: their block sums reduced together (hadd tree), then each row's float update in its
// own lane with the reference's expression, so every row equals dot_q8_0 bit for bit.
void dot_rows_q8_0(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8_0*>(a);
    const int64_t nb = n / QK8_0;
    int64_t r = 0;
    // Worth it for short rows, where per-row overhead dominates (e.g. a 64-wide output head); long rows
    // stream better one at a time.
    if (nb > 4) r = rows;
    for (int64_t q = 0; q < r; ++q) out[q] = dot_q8_0(n, w + static_cast<size_t>(q) * row_bytes, a);
    for (; r + 8 <= rows; r += 8) {
        __m256 s = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
            const float dy = fp16_to_fp32(y[b].d);
            __m256i acc[8];
            alignas(32) float d[8];
            for (int i = 0; i < 8; ++i) {
                const BlockQ8_0* x = reinterpret_cast<const BlockQ8_0*>(w + static_cast<size_t>(r + i) * row_bytes) + b;
                const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs));
                acc[i] = dot_i8(qx, qy);
                d[i] = fp16_to_fp32(x->d) * dy;
            }
            const __m256i h01 = _mm256_hadd_epi32(acc[0], acc[1]), h23 = _mm256_hadd_epi32(acc[2], acc[3]);
            const __m256i h45 = _mm256_hadd_epi32(acc[4], acc[5]), h67 = _mm256_hadd_epi32(acc[6], acc[7]);
            const __m256i h0123 = _mm256_hadd_epi32(h01, h23), h4567 = _mm256_hadd_epi32(h45, h67);
            const __m256i sums = _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                                                  _mm256_permute2x128_si256(h0123, h4567, 0x31));
            s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_load_ps(d)));
        }
        _mm256_storeu_ps(out + r, s);
    }
    for (; r < rows; ++r) out[r] = dot_q8_0(n, w + static_cast<size_t>(r) * row_bytes, a);
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ4_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    float s = 0.f;
    const __m256i low4 = _mm256_set1_epi8(0xF);
    for (int64_t b = 0; b < n / QK4_0; ++b) {
        __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
        __m256i qx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);  // unsigned 0..15
        __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qx, qy);
        // (q - 8) * y = q*y - 8*y: the second sum through VPDPBUSD with a constant 8.
        __m256i s8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), qy);
        const float d = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
        s += static_cast<float>(hsum_i32(_mm256_sub_epi32(p, s8))) * d;
    }
    return s;
}

inline float dot_q45_K(int64_t n, const uint8_t* base, size_t stride, size_t qs_off, size_t qh_off, bool five,
                       const BlockQ8_K* y) {
    const __m512i low4 = _mm512_set1_epi8(0xF), one = _mm512_set1_epi8(1);
    float s = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const uint8_t* blk = base + b * stride;
        uint16_t dh, dminh;
        std::memcpy(&dh, blk, 2);
        std::memcpy(&dminh, blk + 2, 2);
        uint8_t sc[8], mn[8];
        int summ = 0;
        for (int j = 0; j < 8; ++j) {
            k_scale_min(j, blk + 4, sc[j], mn[j]);
            summ += mn[j] * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        }
        __m256i h256 = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qh_off)) : _mm256_setzero_si256();
        __m512i hbits = _mm512_inserti64x4(_mm512_castsi256_si512(h256), h256, 1);
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) {
            __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qs_off + 32 * j));
            // Low half of the register: low nibbles (sub-block 2j); high half: high nibbles (2j+1).
            __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(bits), _mm256_srli_epi16(bits, 4), 1);
            q = _mm512_and_si512(q, low4);
            if (five) {
                __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(hbits, _mm512_inserti64x4(
                    _mm512_set1_epi16(static_cast<short>(2 * j)), _mm256_set1_epi16(static_cast<short>(2 * j + 1)), 1)), one);
                q = _mm512_or_si512(q, _mm512_slli_epi16(hb, 4));
            }
            __m512i q8 = _mm512_loadu_si512(y[b].qs + 64 * j);
            // u8 x s8 pairs to i16 (at most 31*127*2), then times the sub-block scale into i32: no slow mullo.
            __m512i p16 = _mm512_maddubs_epi16(q, q8);
            __m512i scale_v = _mm512_inserti64x4(_mm512_set1_epi16(sc[2 * j]), _mm256_set1_epi16(sc[2 * j + 1]), 1);
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(p16, scale_v));
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
    const __m512i low4 = _mm512_set1_epi8(0xF);
    float s = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        // sum((q-32)*y*sc) = sum(q*y*sc) - 32*sum(sc*bsum): the second part from Q8_K's block sums.
        const __m256i corr = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales))),
                                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].bsums)));
        // Per-16-element scales, widened to one int32 per 4 bytes (4 lanes per scale).
        __m512i sumi = _mm512_setzero_si512();
        for (int half = 0; half < 2; ++half) {
            const uint8_t* ql = x[b].ql + 64 * half;
            __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qh + 32 * half));
            __m512i l = _mm512_loadu_si512(ql);  // ql[0..31] | ql[32..63]
            // Elements 0..63 of this half: low nibbles of ql[0..63] with qh bits 0-1 (first 32) and 2-3 (next 32).
            __m512i hlo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(h, _mm256_set1_epi8(3))),
                                             _mm256_and_si256(_mm256_srli_epi16(h, 2), _mm256_set1_epi8(3)), 1);
            __m512i hhi = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(h, 4), _mm256_set1_epi8(3))),
                _mm256_and_si256(_mm256_srli_epi16(h, 6), _mm256_set1_epi8(3)), 1);
            __m512i q_lo = _mm512_or_si512(_mm512_and_si512(l, low4), _mm512_slli_epi16(hlo, 4));
            __m512i q_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4), _mm512_slli_epi16(hhi, 4));
            __m512i y_lo = _mm512_loadu_si512(y[b].qs + 128 * half);
            __m512i y_hi = _mm512_loadu_si512(y[b].qs + 128 * half + 64);
            const int8_t* sc = x[b].scales + 8 * half;
            // One i16 scale per 16 elements = 8 i16 lanes each (maddubs pairs elements 2k, 2k+1).
            const __m512i s_lo = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]))),
                _mm256_set_m128i(_mm_set1_epi16(sc[3]), _mm_set1_epi16(sc[2])), 1);
            const __m512i s_hi = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(sc[5]), _mm_set1_epi16(sc[4]))),
                _mm256_set_m128i(_mm_set1_epi16(sc[7]), _mm_set1_epi16(sc[6])), 1);
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q_lo, y_lo), s_lo));
            sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q_hi, y_hi), s_hi));
        }
        sumi = _mm512_sub_epi32(sumi, _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
        s += y[b].d * fp16_to_fp32(x[b].d) * static_cast<float>(_mm512_reduce_add_epi32(sumi));
    }
    return s;
}

}  // namespace

void fill_avx512_table(KernelTable& t) {
    t.isa = Isa::Avx512;
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
    t.dot_rows[8] = dot_rows_q8_0;
    t.dot_rows[12] = dot_rows_of<dot_q4_K>;
    t.dot_rows[13] = dot_rows_of<dot_q5_K>;
    t.dot_rows[14] = dot_rows_of<dot_q6_K>;
    t.dot_rows[30] = dot_rows_of<dot_bf16>;
}

}  // namespace moe::kernels

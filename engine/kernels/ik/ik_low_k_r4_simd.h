// AVX2 kernels for ik_llama.cpp's Q2_K_R4 and Q3_K_R4 against Q8_K, a group of four rows at a time in ik's lanes
// (lane k: row k's first 16 of each 32 weights, lane 4 + k: its second 16), with the bits of ik_ref_r4_low_k.cpp:
// the mins or the offset through the sums of 16 first, then one FMA per sub-block with the lanes' float scales.
// Included by ik_r4_simd.h (AVX2 and AVX-512 translation units).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_k_r4_simd.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

// Lane j's exact integer sum of sub-block ib's quants (four 2-bit fields, Q3: plus the third bit) with the
// activations: weights 4f + i of the first 16 in lane k, 16 + 4f + i of the second in lane 4 + k.
struct LowKQuants {
    __m256i q[4];
    LowKQuants(const uint8_t* qs, const uint8_t* qh, int ib) {
        const __m256i bits = load32(qs + 32 * ib), m3 = _mm256_set1_epi8(3);
        for (int f = 0; f < 4; ++f) q[f] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * f), m3);
        if (qh) {
            const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16 * ib)));
            for (int f = 0; f < 4; ++f) q[f] = _mm256_or_si256(q[f], _mm256_slli_epi16(bit_of_bytes(hb, f, f + 4), 2));
        }
    }
    __m256i dot(const int8_t* y) const {
        const __m256i yv = load32(y);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
        __m256i s = _mm256_setzero_si256();
        for (int f = 0; f < 4; ++f) s = _mm256_dpbusd_epi32(s, q[f], _mm256_shuffle_epi32(yv, 0x55 * f));
        return s;
#else
        __m256i p = _mm256_setzero_si256();  // quants <= 7: the four fields' pair sums fit int16 (<= 7,112)
        for (int f = 0; f < 4; ++f) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q[f], _mm256_shuffle_epi32(yv, 0x55 * f)));
        return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
    }
};

// Q2_K_R4 / Q3_K_R4 (Three), NY tokens per pass (Lone: a lone column's scale products).
template <bool Three, bool Lone, int NY>
void low_k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    constexpr size_t kBlock = Three ? sizeof(ik::BlockQ3_K_R4) : sizeof(ik::BlockQ2_K_R4);
    const ik::BlockQ8K* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
            const uint8_t* block = group + ibl * kBlock;
            const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(block)));
            const __m256 dd = _mm256_set_m128(d4, d4);
            // per sub-block the lanes' scales (int16 pairs, for the sums of 16) and, Q2, their mins
            __m256i iscales[8], imins[8];
            for (int ib = 0; ib < 8; ++ib) {
                if constexpr (Three) {
                    const auto& b = *reinterpret_cast<const ik::BlockQ3_K_R4*>(block);
                    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(paired_bytes(b.scales_l + 8 * (ib % 4)), 4 * (ib / 4)),
                                                         _mm256_set1_epi16(0xF));
                    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(paired_bytes(b.scales_h + 8 * (ib % 2)), 2 * (ib / 2)),
                                                          _mm256_set1_epi16(3));
                    iscales[ib] = _mm256_sub_epi16(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi16(32));
                } else {
                    const __m256i code = paired_bytes(reinterpret_cast<const ik::BlockQ2_K_R4*>(block)->scales + 8 * ib);
                    iscales[ib] = _mm256_and_si256(code, _mm256_set1_epi16(0xF));
                    imins[ib] = _mm256_srli_epi16(code, 4);
                }
            }
            __m256 fscales[8];  // Lone: d * y.d comes first, so the lanes' scales stay apart from d
            for (int ib = 0; ib < 8; ++ib) {
                const __m256 s = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(iscales[ib], 16), 16));
                fscales[ib] = Lone ? s : _mm256_mul_ps(dd, s);
            }
            __m256 cm0;  // the mins' or the offset's factor before y.d
            if constexpr (Three) cm0 = _mm256_mul_ps(dd, _mm256_set1_ps(-4.f));
            else {
                const __m128 dmin4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 8)));
                cm0 = _mm256_mul_ps(_mm256_set1_ps(-1.f), _mm256_set_m128(dmin4, dmin4));
            }
            __m256 D[NY];
            for (int t = 0; t < NY; ++t) {
                const __m256 yd = _mm256_set1_ps(y[t][ibl].d);
                const __m256i msum = offset_sums(Three ? iscales : imins, y[t][ibl].bsums);
                __m256 cm;
                if constexpr (Three && Lone) {
                    D[t] = _mm256_mul_ps(dd, yd);
                    cm = _mm256_mul_ps(D[t], _mm256_set1_ps(-4.f));
                } else {
                    if constexpr (Lone) D[t] = _mm256_mul_ps(dd, yd);
                    cm = _mm256_mul_ps(cm0, yd);
                }
                acc[t] = _mm256_fmadd_ps(cm, _mm256_cvtepi32_ps(msum), acc[t]);
            }
            const uint8_t* qs = Three ? reinterpret_cast<const ik::BlockQ3_K_R4*>(block)->qs : reinterpret_cast<const ik::BlockQ2_K_R4*>(block)->qs;
            const uint8_t* qh = Three ? reinterpret_cast<const ik::BlockQ3_K_R4*>(block)->qh : nullptr;
            for (int ib = 0; ib < 8; ++ib) {
                const LowKQuants quants(qs, qh, ib);
                for (int t = 0; t < NY; ++t) {
                    const __m256 c = Lone ? _mm256_mul_ps(D[t], fscales[ib]) : _mm256_mul_ps(fscales[ib], _mm256_set1_ps(y[t][ibl].d));
                    acc[t] = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(quants.dot(y[t][ibl].qs + 32 * ib)), acc[t]);
                }
            }
        }
        for (int t = 0; t < NY; ++t) store_row_sums(acc[t], out + t * out_stride + 4 * g);
    }
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

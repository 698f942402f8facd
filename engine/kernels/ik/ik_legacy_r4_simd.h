// AVX2 kernels for ik_llama.cpp's interleaved legacy forms and IQ4_XS_R8, with the bits of ik_ref_r4_legacy.cpp:
// Q4_0_R8 and IQ4_XS_R8 eight rows in the lanes (lane k = row k); Q5_0_R4, Q6_0_R4 and IQ4_NL_R4 four rows in
// ik's two lanes per row (lane k: row k's first 16 of each 32 weights, lane 4 + k: its second 16). Integer sums
// are exact (maddubs pairs stay within int16 for these value ranges; VPDPBUSD where the CPU has AVX512-VNNI), so
// only the float steps, which follow the reference, decide the bits. Included by ik_r4_simd.h.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_k_r4_simd.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

// Lane sums of u (unsigned bytes) times y (signed bytes), four products per int32 lane; signed v with its sign
// moved onto y (simd_common.h).
inline __m256i dot_u8_i8(__m256i acc, __m256i u, __m256i y) { return _mm256_add_epi32(acc, dot_us8(u, y)); }
inline __m256i dot_i8_i8(__m256i acc, __m256i v, __m256i y) { return _mm256_add_epi32(acc, dot_ss8(v, y)); }

inline __m256i iq4nl_table() { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq4kValues))); }

// Q4_0_R8: per block the eight rows' exact sums of index x value; Lone: acc1 += d y.d S, acc2 += d m, then
// acc1 - 8 acc2; a batch takes -8 (the four blocks' d m summed) per group first, and per tail block after its sum.
template <bool Lone, int NY>
void q4_0_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t g = 0; g < rows / 8; ++g) {
        const auto* blocks = reinterpret_cast<const ik::BlockQ4_0_R8*>(w + 8 * g * row_bytes);
        __m256 acc[NY], acc2[NY];
        for (int t = 0; t < NY; ++t) acc[t] = acc2[t] = _mm256_setzero_ps();
        auto block = [&](int64_t b, int t, __m256& d8, __m256& S, float& dy, float& m) {
            d8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].d)));
            int ysum;
            const int8_t* qy = x4_block(act + t * act_bytes, b, grouped, dy, ysum);
            m = dy * static_cast<float>(ysum);
            __m256i s = _mm256_setzero_si256();
            for (int l = 0; l < 4; ++l) {
                const __m256i bits = load32(blocks[b].qs + 32 * l);
                int lo, hi;
                std::memcpy(&lo, qy + 4 * l, 4);
                std::memcpy(&hi, qy + 16 + 4 * l, 4);
                s = dot_u8_i8(s, _mm256_and_si256(bits, m4), _mm256_set1_epi32(lo));
                s = dot_u8_i8(s, _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), _mm256_set1_epi32(hi));
            }
            S = _mm256_cvtepi32_ps(s);
        };
        for (int t = 0; t < NY; ++t) {
            __m256 d8, S;
            float dy, m;
            if (Lone) {
                for (int64_t b = 0; b < nb; ++b) {
                    block(b, t, d8, S, dy, m);
                    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(dy)), S, acc[t]);
                    acc2[t] = _mm256_fmadd_ps(d8, _mm256_set1_ps(m), acc2[t]);
                }
                acc[t] = _mm256_fmadd_ps(acc2[t], _mm256_set1_ps(-8.f), acc[t]);
                continue;
            }
            for (int64_t b0 = 0; b0 < grouped; b0 += 4) {
                __m256 dd[4], Ss[4], sumf = _mm256_setzero_ps();
                for (int j = 0; j < 4; ++j) {
                    block(b0 + j, t, d8, Ss[j], dy, m);
                    dd[j] = _mm256_mul_ps(d8, _mm256_set1_ps(dy));
                    sumf = j == 0 ? _mm256_mul_ps(d8, _mm256_set1_ps(m)) : _mm256_fmadd_ps(d8, _mm256_set1_ps(m), sumf);
                }
                acc[t] = _mm256_fmadd_ps(sumf, _mm256_set1_ps(-8.f), acc[t]);
                for (int j = 0; j < 4; ++j) acc[t] = _mm256_fmadd_ps(dd[j], Ss[j], acc[t]);
            }
            for (int64_t b = grouped; b < nb; ++b) {
                block(b, t, d8, S, dy, m);
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(dy)), S, acc[t]);
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(-8.f)), _mm256_set1_ps(m), acc[t]);
            }
        }
        for (int t = 0; t < NY; ++t) _mm256_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
    }
}

// Q5_0_R4 / Q6_0_R4 / IQ4_NL_R4: per block the four fields' values (ik_r4_layout.h: field f holds weights 4f + i
// in lane k, 16 + 4f + i in lane 4 + k), the lanes' exact sums, fma(d y.d, sum) and, for the unsigned indices,
// fma(d, -8 m or -16 m) in each lane.
template <GgmlType T, int NY>
void legacy_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    constexpr size_t kBlock = T == GgmlType::Q5_0_R4   ? sizeof(ik::BlockQ5_0_R4)
                              : T == GgmlType::Q6_0_R4 ? sizeof(ik::BlockQ6_0_R4)
                                                       : sizeof(ik::BlockIQ4_NL_R4);
    constexpr size_t kQs = kBlock - 64;  // the quants' low nibbles come last
    constexpr float kOffset = T == GgmlType::Q5_0_R4 ? -8.f : -16.f;
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    const __m256i table = iq4nl_table();
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = group + b * kBlock;
            const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk)));
            const __m256 d8 = _mm256_set_m128(d4, d4);
            __m256i q[4];
            nibble_fields(blk + kQs, 0, q);
            if constexpr (T == GgmlType::Q5_0_R4) {
                const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8)));
                for (int f = 0; f < 4; ++f) q[f] = _mm256_or_si256(q[f], _mm256_slli_epi16(bit_of_bytes(hb, 2 * f, 2 * f + 1), 4));
            } else if constexpr (T == GgmlType::Q6_0_R4) {
                const __m256i hb = load32(blk + 8);
                for (int f = 0; f < 4; ++f)
                    q[f] = _mm256_or_si256(q[f], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * f), _mm256_set1_epi8(3)), 4));
            } else {
                for (auto& v : q) v = _mm256_shuffle_epi8(table, v);
            }
            for (int t = 0; t < NY; ++t) {
                float dy;
                int ysum;
                const int8_t* qy = x4_block(act + t * act_bytes, b, grouped, dy, ysum);
                const __m256i yv = load32(qy);
                const __m256i ys[4] = {_mm256_shuffle_epi32(yv, 0x00), _mm256_shuffle_epi32(yv, 0x55), _mm256_shuffle_epi32(yv, 0xaa),
                                       _mm256_shuffle_epi32(yv, 0xff)};
                __m256i s = _mm256_setzero_si256();
                for (int f = 0; f < 4; ++f) s = T == GgmlType::IQ4_NL_R4 ? dot_i8_i8(s, q[f], ys[f]) : dot_u8_i8(s, q[f], ys[f]);
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(dy)), _mm256_cvtepi32_ps(s), acc[t]);
                if constexpr (T != GgmlType::IQ4_NL_R4)
                    acc[t] = _mm256_fmadd_ps(d8, _mm256_set1_ps(kOffset * (dy * static_cast<float>(ysum))), acc[t]);
            }
        }
        for (int t = 0; t < NY; ++t) store_row_sums(acc[t], out + t * out_stride + 4 * g);
    }
}

// IQ4_XS_R8 against Q8_K32: eight rows in the lanes; per sub-block the rows' exact dots times (scale - 32), summed
// over the 256, then fma(d y.d, sum, acc).
template <int NY>
void iq4_xs_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    const __m256i table = iq4nl_table(), m4 = _mm256_set1_epi8(0x0F);
    const ik::BlockQ8K32* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K32*>(act + t * act_bytes);
    for (int64_t g = 0; g < rows / 8; ++g) {
        const auto* blocks = reinterpret_cast<const ik::BlockIQ4_XS_R8*>(w + 8 * g * row_bytes);
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
            const ik::BlockIQ4_XS_R8& b = blocks[ibl];
            const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
            __m256i isum[NY];
            for (auto& v : isum) v = _mm256_setzero_si256();
            for (int ib = 0; ib < 8; ++ib) {
                // lane k's scale, code 8 ib + k: the low nibble of scales_l[8 (ib % 4) + k] at 4 (ib / 4), the high
                // bits of scales_h[8 (ib % 2) + k] at 2 (ib / 2)
                const __m128i lo = _mm_and_si128(
                    _mm_srli_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales_l + 8 * (ib % 4))), 4 * (ib / 4)), _mm_set1_epi8(0x0F));
                const __m128i hi = _mm_and_si128(
                    _mm_srli_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales_h + 8 * (ib % 2))), 2 * (ib / 2)), _mm_set1_epi8(3));
                const __m256i scales = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_or_si128(lo, _mm_slli_epi16(hi, 4))), _mm256_set1_epi32(32));
                __m256i v[8];
                for (int l = 0; l < 4; ++l) {
                    const __m256i bits = load32(b.qs + 128 * ib + 32 * l);
                    v[2 * l] = _mm256_shuffle_epi8(table, _mm256_and_si256(bits, m4));
                    v[2 * l + 1] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4));
                }
                for (int t = 0; t < NY; ++t) {
                    const int8_t* qy = y[t][ibl].qs + 32 * ib;
                    __m256i s = _mm256_setzero_si256();
                    for (int h = 0; h < 8; ++h) {  // field h: weights 8 (h / 2) + 4 (h % 2) + i
                        int yv;
                        std::memcpy(&yv, qy + 4 * h, 4);
                        s = dot_i8_i8(s, v[h], _mm256_set1_epi32(yv));
                    }
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(s, scales));
                }
            }
            for (int t = 0; t < NY; ++t)
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(y[t][ibl].d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
        for (int t = 0; t < NY; ++t) _mm256_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
    }
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

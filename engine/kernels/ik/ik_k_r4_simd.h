// AVX2 kernels for ik_llama.cpp's row-interleaved IQ2_K_R4 ... IQ5_K_R4 and Q8_0_R8, a group of rows at a time in
// ik's lanes (lane k: row k's first 16 of each 32 weights, lane 4 + k: its second 16; Q8_0_R8: lane k = row k),
// with the bits of ik_ref_r4.cpp. Included by ik_r4_simd.h.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

// Per byte 0 or 1: bit `shift_lo` of each byte in the low 128-bit half, `shift_hi` in the high half.
inline __m256i bit_of_bytes(__m256i bytes, int shift_lo, int shift_hi) {
    const __m256i sh = _mm256_setr_epi32(shift_lo, shift_lo, shift_lo, shift_lo, shift_hi, shift_hi, shift_hi, shift_hi);
    return _mm256_and_si256(_mm256_srlv_epi32(bytes, sh), _mm256_set1_epi8(1));
}

// Each weight's table value for the four fields f of sub-block ib (field f: weights 4f + i of the first 16 in
// lane k, 16 + 4f + i of the second 16 in lane 4 + k; see ik_r4_layout.h), and the lanes' scales.
template <GgmlType T>
struct KR4Decoder {
    static constexpr int kQuantBytes = T == GgmlType::IQ4_K_R4 || T == GgmlType::IQ5_K_R4 ? 512 : 256;

    static void sub_block(const uint8_t* block, int ib, __m256i qx[4], int32_t scales[8]) {
        const uint8_t* extra = block + 8;
        // the table-half bit of each lane, as a byte 0/1 repeated over the lane's four bytes
        const __m256i xbit = _mm256_mullo_epi32(
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(extra))), _mm256_set1_epi32(ib)),
                             _mm256_set1_epi32(1)),
            _mm256_set1_epi32(0x01010101));
        if constexpr (T == GgmlType::IQ2_K_R4 || T == GgmlType::IQ3_K_R4) {
            const uint8_t* scales_l = T == GgmlType::IQ2_K_R4 ? block + 16 : block + 24;
            const uint8_t* qs = scales_l + 32;
            const __m256i bits = load32(qs + 32 * ib);
            const __m256i m3 = _mm256_set1_epi8(3);
            if constexpr (T == GgmlType::IQ2_K_R4) {
                const __m256i table = _mm256_broadcastsi128_si256(_mm_setr_epi8(-31, -13, 1, 17, -26, -8, 6, 22, 0, 0, 0, 0, 0, 0, 0, 0));
                const __m256i add = _mm256_slli_epi16(xbit, 2);  // + 4: the second half of the table
                for (int f = 0; f < 4; ++f)
                    qx[f] = _mm256_shuffle_epi8(table, _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * f), m3), add));
            } else {
                const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq3nlValues)));
                const __m256i add = _mm256_slli_epi16(xbit, 3);  // + 8
                const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 256 + 16 * ib)));
                for (int f = 0; f < 4; ++f) {
                    const __m256i idx = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * f), m3),
                                                        _mm256_slli_epi16(bit_of_bytes(hb, f, f + 4), 2));
                    qx[f] = _mm256_shuffle_epi8(table, _mm256_add_epi8(idx, add));
                }
            }
            // scale codes 8 ib + j: nibble j of the eight at scales_l[8 (ib % 4)], low or high by ib / 4
            const __m256i nib = _mm256_and_si256(
                _mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales_l + 8 * (ib % 4)))), 4 * (ib / 4)),
                _mm256_set1_epi32(0xF));
            __m256i s;
            if constexpr (T == GgmlType::IQ2_K_R4) {
                s = _mm256_sub_epi32(nib, _mm256_set1_epi32(8));
            } else {  // 2m + 1, negative where scales_h[j] bit ib is set
                const __m256i sign = _mm256_and_si256(
                    _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 16))), _mm256_set1_epi32(ib)),
                    _mm256_set1_epi32(1));
                const __m256i m = _mm256_add_epi32(_mm256_slli_epi32(nib, 1), _mm256_set1_epi32(1));
                s = _mm256_sub_epi32(_mm256_xor_si256(m, _mm256_sub_epi32(_mm256_setzero_si256(), sign)),
                                     _mm256_sub_epi32(_mm256_setzero_si256(), sign));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(scales), s);
        } else {  // IQ4_K_R4, IQ5_K_R4
            const uint8_t* scales_h = block + 16;
            const uint8_t* scales_l = block + 32;
            const uint8_t* qs = block + 64;
            const __m256i m4 = _mm256_set1_epi8(0x0F);
            const __m256i b1 = load32(qs + 64 * ib), b2 = load32(qs + 64 * ib + 32);
            const __m256i q4[4] = {_mm256_and_si256(b1, m4), _mm256_and_si256(b2, m4), _mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(b2, 4), m4)};
            if constexpr (T == GgmlType::IQ4_K_R4) {
                const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq4kValues)));
                const __m256i add = _mm256_slli_epi16(xbit, 2);  // the second half is the first + 4
                for (int f = 0; f < 4; ++f) qx[f] = _mm256_add_epi8(_mm256_shuffle_epi8(table, q4[f]), add);
            } else {
                const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq5nlValues)));
                const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq5nlValues + 16)));
                const __m256i add = _mm256_slli_epi16(xbit, 1);  // + 2
                const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 512 + 16 * ib)));
                constexpr int kLo[4] = {0, 4, 1, 5}, kHi[4] = {2, 6, 3, 7};  // fifth-bit positions of field f's weights
                for (int f = 0; f < 4; ++f) {
                    const __m256i fifth = _mm256_cmpeq_epi8(bit_of_bytes(hb, kLo[f], kHi[f]), _mm256_set1_epi8(1));
                    qx[f] = _mm256_add_epi8(_mm256_blendv_epi8(_mm256_shuffle_epi8(lo, q4[f]), _mm256_shuffle_epi8(hi, q4[f]), fifth), add);
                }
            }
            const __m256i low = _mm256_and_si256(
                _mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales_l + 8 * (ib % 4)))), 4 * (ib / 4)),
                _mm256_set1_epi32(0xF));
            const __m256i high = _mm256_and_si256(
                _mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales_h + 8 * (ib % 2)))), 2 * (ib / 2)),
                _mm256_set1_epi32(3));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(scales),
                                _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32)));
        }
    }
};

inline __m256i paired_int16(const int32_t s[8]) {  // each lane's scale in both of its int16 halves
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

// NY tokens per pass over a group of four rows, each sub-block decoded once. The IQ2/IQ3 kernels multiply unsigned
// values and take the offset back through the sums of 16 by sub-block: here the signed values, and the difference
// between the two splits moved from one accumulator to the other (same integers per accumulator).
template <GgmlType T, int NY>
void k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    constexpr int M = T == GgmlType::IQ2_K_R4 ? 32 : T == GgmlType::IQ3_K_R4 ? 64 : 0;
    constexpr size_t kBlock = T == GgmlType::IQ2_K_R4   ? sizeof(ik::BlockIQ2_K_R4)
                              : T == GgmlType::IQ3_K_R4 ? sizeof(ik::BlockIQ3_K_R4)
                              : T == GgmlType::IQ4_K_R4 ? sizeof(ik::BlockIQ4_K_R4)
                                                        : sizeof(ik::BlockIQ5_K_R4);
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
            __m256i isum[NY];
            for (auto& v : isum) v = _mm256_setzero_si256();
            alignas(32) int32_t sc[8][8];
            for (int ib = 0; ib < 8; ++ib) {
                __m256i qx[4];
                KR4Decoder<T>::sub_block(block, ib, qx, sc[ib]);
                const __m256i iscales = paired_int16(sc[ib]);
                __m256i ux[4];
                for (int f = 0; f < 4; ++f) ux[f] = _mm256_sign_epi8(qx[f], qx[f]);
                for (int t = 0; t < NY; ++t) {
                    const __m256i yv = load32(y[t][ibl].qs + 32 * ib);
                    const __m256i ys[4] = {_mm256_shuffle_epi32(yv, 0x00), _mm256_shuffle_epi32(yv, 0x55), _mm256_shuffle_epi32(yv, 0xaa),
                                           _mm256_shuffle_epi32(yv, 0xff)};
                    for (int f = 0; f < 4; ++f)
                        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(iscales, _mm256_maddubs_epi16(ux[f], _mm256_sign_epi8(ys[f], qx[f]))));
                }
            }
            for (int t = 0; t < NY; ++t) {
                if constexpr (M != 0) {
                    // lane k: + M (sum over sub-blocks 4..7 of its first-half scale x sums of 16, minus over 0..3 of
                    // its second-half scale x sums of 16); lane 4 + k: the negative
                    const int16_t* bs = y[t][ibl].bsums;
                    alignas(16) int32_t c[4];
                    for (int k = 0; k < 4; ++k) {
                        int v = 0;
                        for (int ib = 4; ib < 8; ++ib) v += sc[ib][k] * bs[2 * ib];
                        for (int ib = 0; ib < 4; ++ib) v -= sc[ib][k + 4] * bs[2 * ib + 1];
                        c[k] = M * v;
                    }
                    const __m128i c4 = _mm_load_si128(reinterpret_cast<const __m128i*>(c));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_set_m128i(_mm_sub_epi32(_mm_setzero_si128(), c4), c4));
                }
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_set1_ps(y[t][ibl].d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
            }
        }
        for (int t = 0; t < NY; ++t)
            _mm_storeu_ps(out + t * out_stride + 4 * g, _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1)));
    }
}

// Q8_0_R8 against Q8_2_X4: eight rows in the lanes, per 32 weights the exact integer sum and fma(d * y.d, sum, acc).
template <int NY>
void q8_0_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    for (int64_t g = 0; g < rows / 8; ++g) {
        const auto* blocks = reinterpret_cast<const ik::BlockQ8_0_R8*>(w + 8 * g * row_bytes);
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].d)));
            __m256i q[8], u[8];
            for (int l = 0; l < 8; ++l) q[l] = load32(blocks[b].qs + 32 * l), u[l] = _mm256_sign_epi8(q[l], q[l]);
            for (int t = 0; t < NY; ++t) {
                const uint8_t* row = act + t * act_bytes;
                float dy;
                const int8_t* qy;
                if (b < grouped) {
                    const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(row)[b / 4];
                    dy = bf16_to_fp32(yg.d[b % 4]), qy = yg.qs + 32 * (b % 4);
                } else {
                    uint16_t h;
                    std::memcpy(&h, row + 36 * b, 2);
                    dy = bf16_to_fp32(h), qy = reinterpret_cast<const int8_t*>(row + 36 * b + 4);
                }
                __m256i s = _mm256_setzero_si256();
                for (int l = 0; l < 8; ++l) {
                    int v;
                    std::memcpy(&v, qy + 4 * l, 4);
                    s = _mm256_add_epi32(
                        s, _mm256_madd_epi16(_mm256_maddubs_epi16(u[l], _mm256_sign_epi8(_mm256_set1_epi32(v), q[l])), _mm256_set1_epi16(1)));
                }
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(dy)), _mm256_cvtepi32_ps(s), acc[t]);
            }
        }
        for (int t = 0; t < NY; ++t) _mm256_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
    }
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

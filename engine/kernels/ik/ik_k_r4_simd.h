// AVX2 kernels for ik_llama.cpp's row-interleaved IQ2_K_R4 ... IQ5_K_R4, Q4_K_R4, Q6_K_R4 and Q8_0_R8 (and, in the
// AVX-512 translation unit, Q8_0_R8 sixteen rows per 512-bit register), a group of rows at a time in ik's lanes
// (lane k: row k's first 16 of each 32 weights, lane 4 + k: its second 16; Q8_0_R8: lane k = row k), with the
// bits of ik_ref_r4.cpp. Included by ik_r4_simd.h.
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

// Four rows' results: each row's two accumulators (lanes k and 4 + k) added.
inline void store_row_sums(__m256 acc, float* out) { _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1))); }

// The offset's share per block: sub-blocks (2i, 2i + 1)'s lane scales (int16 pairs) against the sums of 16 they
// meet; lane k of the result sums lanes k and 4 + k over sub-blocks 0..3, lane 4 + k over 4..7.
inline __m256i offset_sums(const __m256i iscales[8], const int16_t* bsums) {
    const __m256i pick0 = _mm256_setr_epi8(0, 1, 4, 5, 0, 1, 4, 5, 0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7, 2, 3, 6, 7, 2, 3, 6, 7);
    const __m256i pick1 = _mm256_add_epi8(pick0, _mm256_set1_epi8(8));
    const __m256i b03 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums)));
    const __m256i b47 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8)));
    __m256i pairs[4];
    for (int i = 0; i < 4; ++i) pairs[i] = _mm256_blend_epi16(iscales[2 * i], iscales[2 * i + 1], 0xAA);
    const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(pairs[0], _mm256_shuffle_epi8(b03, pick0)),
                                        _mm256_madd_epi16(pairs[1], _mm256_shuffle_epi8(b03, pick1)));
    const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(pairs[2], _mm256_shuffle_epi8(b47, pick0)),
                                        _mm256_madd_epi16(pairs[3], _mm256_shuffle_epi8(b47, pick1)));
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

// The four fields' 4-bit quants of sub-block ib (ik_r4_layout.h's nibble order).
inline void nibble_fields(const uint8_t* qs, int ib, __m256i q4[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i b1 = load32(qs + 64 * ib), b2 = load32(qs + 64 * ib + 32);
    q4[0] = _mm256_and_si256(b1, m4), q4[1] = _mm256_and_si256(b2, m4);
    q4[2] = _mm256_and_si256(_mm256_srli_epi16(b1, 4), m4), q4[3] = _mm256_and_si256(_mm256_srli_epi16(b2, 4), m4);
}

// Eight bytes b0..b7 as int16 [b0, b0, b1, b1, ..., b7, b7]: lane j's byte in both halves of its dword.
inline __m256i paired_bytes(const uint8_t* p) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
}

// One block of four rows, decoded per sub-block ib: each weight's kernel value for the four fields f (field f:
// weights 4f + i of the first 16 in lane k, 16 + 4f + i of the second 16 in lane 4 + k; ik_r4_layout.h) and the
// lanes' scales as int16 pairs. IQ2_K_R4 / IQ3_K_R4 give ik's unsigned values (table value + M); IQ4_K_R4 /
// IQ5_K_R4 the signed ones.
template <GgmlType T>
struct KR4Block {
    static constexpr bool kUnsigned = T == GgmlType::IQ2_K_R4 || T == GgmlType::IQ3_K_R4;
    const uint8_t* block;
    __m256i xbits;  // lane j's extra byte, repeated over its four bytes

    explicit KR4Block(const uint8_t* b) : block(b) {
        const __m256i e = _mm256_broadcastsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8)));
        xbits = _mm256_shuffle_epi8(e,
                                    _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7));
    }
    // 0 or 1 per byte: the table-half bit of sub-block ib
    __m256i xbit(int ib) const { return _mm256_and_si256(_mm256_srli_epi16(xbits, ib), _mm256_set1_epi8(1)); }

    __m256i scales(int ib) const {
        const int nib_shift = 4 * (ib / 4);
        if constexpr (kUnsigned) {
            const uint8_t* scales_l = T == GgmlType::IQ2_K_R4 ? block + 16 : block + 24;
            const __m256i nib = _mm256_and_si256(_mm256_srli_epi16(paired_bytes(scales_l + 8 * (ib % 4)), nib_shift), _mm256_set1_epi16(0xF));
            if constexpr (T == GgmlType::IQ2_K_R4) return _mm256_sub_epi16(nib, _mm256_set1_epi16(8));
            const __m256i sign = _mm256_and_si256(_mm256_srli_epi16(paired_bytes(block + 16), ib), _mm256_set1_epi16(1));
            const __m256i m = _mm256_add_epi16(_mm256_slli_epi16(nib, 1), _mm256_set1_epi16(1));
            return _mm256_sign_epi16(m, _mm256_sub_epi16(_mm256_set1_epi16(1), _mm256_slli_epi16(sign, 1)));
        } else {
            const __m256i low = _mm256_and_si256(_mm256_srli_epi16(paired_bytes(block + 32 + 8 * (ib % 4)), nib_shift), _mm256_set1_epi16(0xF));
            const __m256i high = _mm256_and_si256(_mm256_srli_epi16(paired_bytes(block + 16 + 8 * (ib % 2)), 2 * (ib / 2)), _mm256_set1_epi16(3));
            return _mm256_sub_epi16(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi16(32));
        }
    }

    void values(int ib, __m256i qx[4]) const {
        if constexpr (kUnsigned) {
            const uint8_t* qs = block + (T == GgmlType::IQ2_K_R4 ? 48 : 56);
            const __m256i bits = load32(qs + 32 * ib);
            const __m256i m3 = _mm256_set1_epi8(3);
            if constexpr (T == GgmlType::IQ2_K_R4) {  // iq2nl_values + 32, the second half via index + 4
                const __m256i table = _mm256_broadcastsi128_si256(_mm_setr_epi8(1, 19, 33, 49, 6, 24, 38, 54, 0, 0, 0, 0, 0, 0, 0, 0));
                const __m256i add = _mm256_slli_epi16(xbit(ib), 2);
                for (int f = 0; f < 4; ++f)
                    qx[f] = _mm256_shuffle_epi8(table, _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * f), m3), add));
            } else {  // iq3nl_values + 64, the second half via index + 8
                const __m256i table = _mm256_broadcastsi128_si256(_mm_setr_epi8(1, 24, 41, 54, 65, 77, 92, 111, 5, 28, 45, 58, 69, 81, 96, 115));
                const __m256i add = _mm256_slli_epi16(xbit(ib), 3);
                const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 256 + 16 * ib)));
                for (int f = 0; f < 4; ++f) {
                    const __m256i idx = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * f), m3),
                                                        _mm256_slli_epi16(bit_of_bytes(hb, f, f + 4), 2));
                    qx[f] = _mm256_shuffle_epi8(table, _mm256_add_epi8(idx, add));
                }
            }
        } else {
            const uint8_t* qs = block + 64;
            const __m256i m4 = _mm256_set1_epi8(0x0F);
            const __m256i b1 = load32(qs + 64 * ib), b2 = load32(qs + 64 * ib + 32);
            const __m256i q4[4] = {_mm256_and_si256(b1, m4), _mm256_and_si256(b2, m4), _mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(b2, 4), m4)};
            if constexpr (T == GgmlType::IQ4_K_R4) {
                const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq4kValues)));
                const __m256i add = _mm256_slli_epi16(xbit(ib), 2);  // the second half is the first + 4
                for (int f = 0; f < 4; ++f) qx[f] = _mm256_add_epi8(_mm256_shuffle_epi8(table, q4[f]), add);
            } else {
                const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq5nlValues)));
                const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq5nlValues + 16)));
                const __m256i add = _mm256_slli_epi16(xbit(ib), 1);  // + 2
                const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 512 + 16 * ib)));
                constexpr int kLo[4] = {0, 4, 1, 5}, kHi[4] = {2, 6, 3, 7};  // fifth-bit positions of field f's weights
                for (int f = 0; f < 4; ++f) {
                    const __m256i fifth = _mm256_cmpeq_epi8(bit_of_bytes(hb, kLo[f], kHi[f]), _mm256_set1_epi8(1));
                    qx[f] = _mm256_add_epi8(_mm256_blendv_epi8(_mm256_shuffle_epi8(lo, q4[f]), _mm256_shuffle_epi8(hi, q4[f]), fifth), add);
                }
            }
        }
    }
};

// NY tokens per pass over a group of four rows, each sub-block decoded once. Per 256 weights and token the two
// halves' integer sums (IQ2/IQ3: of unsigned values, their offset taken back through the sums of 16 with
// sub-blocks 0..3 in the first accumulator and 4..7 in the second, as ik's kernel does), then
// fma(d * y.d, sum, acc); the row is the two accumulators' sum.
template <GgmlType T, int NY>
void k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    using Block = KR4Block<T>;
    constexpr int kShift = T == GgmlType::IQ2_K_R4 ? 5 : 6;  // log2 of the offset (32, 64)
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
            const Block blk(group + ibl * kBlock);
            const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.block)));
            const __m256 dd = _mm256_set_m128(d4, d4);
            __m256i isum[NY];
            for (auto& v : isum) v = _mm256_setzero_si256();
            __m256i iscales[8];
            for (int ib = 0; ib < 8; ++ib) iscales[ib] = blk.scales(ib);
            for (int ib = 0; ib < 8; ++ib) {
                __m256i qx[4];
                blk.values(ib, qx);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                const __m256i scale32 = _mm256_srai_epi32(_mm256_slli_epi32(iscales[ib], 16), 16);  // the lane's scale as int32
#endif
                if constexpr (Block::kUnsigned) {
                    for (int t = 0; t < NY; ++t) {
                        const __m256i yv = load32(y[t][ibl].qs + 32 * ib);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                        // the same exact lane sums, four products per VPDPBUSD, then the lane's scale
                        __m256i dp = _mm256_setzero_si256();
                        for (int f = 0; f < 4; ++f) dp = _mm256_dpbusd_epi32(dp, qx[f], _mm256_shuffle_epi32(yv, 0x55 * f));
                        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dp, scale32));
                        continue;
#endif
                        __m256i p[4];
                        for (int f = 0; f < 4; ++f) p[f] = _mm256_maddubs_epi16(qx[f], _mm256_shuffle_epi32(yv, 0x55 * f));
                        if constexpr (T == GgmlType::IQ2_K_R4) {  // values <= 54: two pairs' sums still fit int16
                            isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(iscales[ib], _mm256_add_epi16(p[0], p[1])),
                                                                                 _mm256_madd_epi16(iscales[ib], _mm256_add_epi16(p[2], p[3]))));
                        } else {
                            for (int f = 0; f < 4; ++f) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(iscales[ib], p[f]));
                        }
                    }
                } else {
                    __m256i ux[4];
                    for (int f = 0; f < 4; ++f) ux[f] = _mm256_sign_epi8(qx[f], qx[f]);
                    for (int t = 0; t < NY; ++t) {
                        const __m256i yv = load32(y[t][ibl].qs + 32 * ib);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                        __m256i dp = _mm256_setzero_si256();
                        for (int f = 0; f < 4; ++f) dp = _mm256_dpbusd_epi32(dp, ux[f], _mm256_sign_epi8(_mm256_shuffle_epi32(yv, 0x55 * f), qx[f]));
                        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dp, scale32));
                        continue;
#endif
                        for (int f = 0; f < 4; ++f)
                            isum[t] = _mm256_add_epi32(
                                isum[t], _mm256_madd_epi16(iscales[ib],
                                                           _mm256_maddubs_epi16(ux[f], _mm256_sign_epi8(_mm256_shuffle_epi32(yv, 0x55 * f), qx[f]))));
                    }
                }
            }
            if constexpr (Block::kUnsigned) {
                // The offset's share: lane j of sub-blocks (2i, 2i + 1) as one int16 pair against the sums of 16 they
                // meet (bs(4i + h), bs(4i + 2 + h), h = j >= 4); lane k then takes its lanes k and 4 + k over
                // sub-blocks 0..3, lane 4 + k those over 4..7.
                for (int t = 0; t < NY; ++t) isum[t] = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(offset_sums(iscales, y[t][ibl].bsums), kShift));
            }
            for (int t = 0; t < NY; ++t) {
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_set1_ps(y[t][ibl].d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
            }
        }
        for (int t = 0; t < NY; ++t) store_row_sums(acc[t], out + t * out_stride + 4 * g);
    }
}

// Q4_K_R4 (and Q5_K_R4: Five, its fifth bits OR-ed into the nibbles) against Q8_K32, NY tokens per pass
// (ik_ref_r4.cpp's order; Lone: a lone column's mins).
template <bool Lone, int NY, bool Five = false>
void q4_k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    constexpr size_t kBlock = Five ? sizeof(ik::BlockQ5_K_R4) : sizeof(ik::BlockQ4_K_R4);
    const ik::BlockQ8K32* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K32*>(act + t * act_bytes);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
            const ik::BlockQ4_K_R4& b = *reinterpret_cast<const ik::BlockQ4_K_R4*>(group + ibl * kBlock);  // (the shared header)
            const uint8_t* qs = Five ? reinterpret_cast<const ik::BlockQ5_K_R4*>(&b)->qs : b.qs;
            const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));  // d0..3, dmin0..3
            const __m128 d4 = _mm256_castps256_ps128(d8), dmin4 = _mm256_extractf128_ps(d8, 1);
            const __m256 dd = _mm256_set_m128(d4, d4);
            const __m256 md = _mm256_mul_ps(_mm256_set1_ps(-1.f), _mm256_set_m128(dmin4, dmin4));
            // codes 4 ib + k: the scale's and the min's 6 bits, byte 4 ib + k of each
            const __m256i l = load32(b.scales_l);
            const __m128i h16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales_h));
            const __m256i h = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(h16, 4), h16), m4);
            alignas(32) uint8_t sc[32], mn[32];
            _mm256_store_si256(reinterpret_cast<__m256i*>(sc),
                               _mm256_or_si256(_mm256_and_si256(l, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4)));
            _mm256_store_si256(reinterpret_cast<__m256i*>(mn), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), m4),
                                                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4)));
            __m256 mins[4];  // lanes k: sub-block j's min of row k; lanes 4 + k: sub-block j + 4's
            for (int j = 0; j < 4; ++j) {
                int lo4, hi4;
                std::memcpy(&lo4, mn + 4 * j, 4), std::memcpy(&hi4, mn + 4 * j + 16, 4);
                mins[j] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32(lo4, hi4, 0, 0)));
            }
            for (int t = 0; t < NY; ++t) {
                const __m256 bs8 = _mm256_loadu_ps(y[t][ibl].bsums);
                auto bsv = [&](int j) { return _mm256_permutevar8x32_ps(bs8, _mm256_setr_epi32(j, j, j, j, j + 4, j + 4, j + 4, j + 4)); };
                if constexpr (Lone) {
                    __m256 sum = _mm256_mul_ps(mins[0], bsv(0));
                    for (int j = 1; j < 4; ++j) sum = _mm256_fmadd_ps(mins[j], bsv(j), sum);
                    acc[t] = _mm256_fmadd_ps(md, sum, acc[t]);
                } else {
                    for (int j = 0; j < 4; ++j) acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(md, mins[j]), bsv(j), acc[t]);
                }
            }
            __m256i isum[NY];
            for (auto& v : isum) v = _mm256_setzero_si256();
            for (int ib = 0; ib < 8; ++ib) {
                __m256i q4[4];
                nibble_fields(qs, ib, q4);
                if constexpr (Five) {  // bits {0, 4}, {2, 6}, {1, 5}, {3, 7} for the four fields' two halves
                    const __m256i hb = _mm256_broadcastsi128_si256(
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const ik::BlockQ5_K_R4*>(&b)->qh + 16 * ib)));
                    constexpr int kLo[4] = {0, 2, 1, 3};
                    for (int f = 0; f < 4; ++f) q4[f] = _mm256_or_si256(q4[f], _mm256_slli_epi16(bit_of_bytes(hb, kLo[f], kLo[f] + 4), 4));
                }
                int s4;
                std::memcpy(&s4, sc + 4 * ib, 4);
                const __m128i sv = _mm_cvtsi32_si128(s4);
                const __m256i iscales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_unpacklo_epi8(sv, sv)));  // both halves: row k's
                for (int t = 0; t < NY; ++t) {
                    const __m256i yv = load32(y[t][ibl].qs + 32 * ib);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                    __m256i dp = _mm256_setzero_si256();  // the same exact lane sums, then the lane's scale
                    for (int f = 0; f < 4; ++f) dp = _mm256_dpbusd_epi32(dp, q4[f], _mm256_shuffle_epi32(yv, 0x55 * f));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dp, _mm256_srai_epi32(_mm256_slli_epi32(iscales, 16), 16)));
#else
                    __m256i p = _mm256_setzero_si256();  // values <= 31: the four fields' pair sums fit int16 (<= 31,496)
                    for (int f = 0; f < 4; ++f) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q4[f], _mm256_shuffle_epi32(yv, 0x55 * f)));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(iscales, p));
#endif
                }
            }
            for (int t = 0; t < NY; ++t)
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_set1_ps(y[t][ibl].d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
        for (int t = 0; t < NY; ++t) store_row_sums(acc[t], out + t * out_stride + 4 * g);
    }
}

// Q6_K_R4 against Q8_K, NY tokens per pass (ik_ref_r4.cpp's order; Lone: y.d folded into d first).
template <bool Lone, int NY>
void q6_k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    const ik::BlockQ8K* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes);
    const __m256i m3 = _mm256_set1_epi8(3);
    constexpr int kShift[4] = {0, 4, 2, 6};  // the high bits of field f's weights
    for (int64_t g = 0; g < rows / 4; ++g) {
        const auto* blocks = reinterpret_cast<const ik::BlockQ6_K_R4*>(w + 4 * g * row_bytes);
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
            const ik::BlockQ6_K_R4& b = blocks[ibl];
            const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.d)));
            const __m256 dd = _mm256_set_m128(d4, d4);
            __m256i iscales[8];
            __m256 fscales[8];
            for (int ib = 0; ib < 8; ++ib) {
                const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales + 8 * ib));
                iscales[ib] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(v, v));
                fscales[ib] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
            }
            __m256 D[NY];
            for (int t = 0; t < NY; ++t) {
                const __m256 yd = _mm256_set1_ps(y[t][ibl].d);
                D[t] = Lone ? _mm256_mul_ps(dd, yd) : dd;
                const __m256 mn = _mm256_mul_ps(D[t], _mm256_set1_ps(-32.f));
                const __m256 cm = Lone ? mn : _mm256_mul_ps(mn, yd);
                acc[t] = _mm256_fmadd_ps(cm, _mm256_cvtepi32_ps(offset_sums(iscales, y[t][ibl].bsums)), acc[t]);
            }
            for (int ib = 0; ib < 8; ++ib) {
                __m256i u[4];
                nibble_fields(b.ql, ib, u);
                const __m256i hb = load32(b.qh + 32 * ib);
                for (int f = 0; f < 4; ++f)
                    u[f] = _mm256_or_si256(u[f], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, kShift[f]), m3), 4));
                for (int t = 0; t < NY; ++t) {
                    const __m256i yv = load32(y[t][ibl].qs + 32 * ib);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                    __m256i S = _mm256_setzero_si256();  // the same exact lane sums
                    for (int f = 0; f < 4; ++f) S = _mm256_dpbusd_epi32(S, u[f], _mm256_shuffle_epi32(yv, 0x55 * f));
#else
                    // values <= 63: two fields' pair sums fit int16
                    const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(u[0], _mm256_shuffle_epi32(yv, 0x00)),
                                                         _mm256_maddubs_epi16(u[1], _mm256_shuffle_epi32(yv, 0x55)));
                    const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(u[2], _mm256_shuffle_epi32(yv, 0xaa)),
                                                         _mm256_maddubs_epi16(u[3], _mm256_shuffle_epi32(yv, 0xff)));
                    const __m256i S = _mm256_add_epi32(_mm256_madd_epi16(p01, _mm256_set1_epi16(1)), _mm256_madd_epi16(p23, _mm256_set1_epi16(1)));
#endif
                    __m256 c = _mm256_mul_ps(D[t], fscales[ib]);
                    if constexpr (!Lone) c = _mm256_mul_ps(c, _mm256_set1_ps(y[t][ibl].d));
                    acc[t] = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(S), acc[t]);
                }
            }
        }
        for (int t = 0; t < NY; ++t) store_row_sums(acc[t], out + t * out_stride + 4 * g);
    }
}

// Block b of a Q8_2_X4 row: its scale, its values and their sum (groups of four blocks, then single ones).
inline const int8_t* x4_block(const uint8_t* row, int64_t b, int64_t grouped, float& dy, int& sum) {
    if (b < grouped) {
        const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(row)[b / 4];
        dy = bf16_to_fp32(yg.d[b % 4]), sum = yg.s[b % 4];
        return yg.qs + 32 * (b % 4);
    }
    uint16_t h;
    int16_t s;
    std::memcpy(&h, row + 36 * b, 2);
    std::memcpy(&s, row + 36 * b + 2, 2);
    dy = bf16_to_fp32(h), sum = s;
    return reinterpret_cast<const int8_t*>(row + 36 * b + 4);
}

// Q8_0_R8 against Q8_2_X4: eight rows (group g) in the lanes, per 32 weights the exact integer sum and
// fma(d * y.d, sum, acc).
template <int NY>
void q8_0_r8_group8(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    const auto* blocks = reinterpret_cast<const ik::BlockQ8_0_R8*>(w + 8 * g * row_bytes);
    __m256 acc[NY];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].d)));
        __m256i q[8], u[8];
        for (int l = 0; l < 8; ++l) q[l] = load32(blocks[b].qs + 32 * l), u[l] = _mm256_sign_epi8(q[l], q[l]);
        for (int t = 0; t < NY; ++t) {
            float dy;
            int ysum;
            const int8_t* qy = x4_block(act + t * act_bytes, b, grouped, dy, ysum);
            __m256i s = _mm256_setzero_si256();
            for (int l = 0; l < 8; ++l) {
                int v;
                std::memcpy(&v, qy + 4 * l, 4);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                s = _mm256_dpbusd_epi32(s, u[l], _mm256_sign_epi8(_mm256_set1_epi32(v), q[l]));
#else
                s = _mm256_add_epi32(
                    s, _mm256_madd_epi16(_mm256_maddubs_epi16(u[l], _mm256_sign_epi8(_mm256_set1_epi32(v), q[l])), _mm256_set1_epi16(1)));
#endif
            }
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(dy)), _mm256_cvtepi32_ps(s), acc[t]);
        }
    }
    for (int t = 0; t < NY; ++t) _mm256_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Two groups (sixteen rows) in a 512-bit register: the values made unsigned (q + 128) for VPDPBUSD, 128 times the
// block's activation sum taken back; the same exact integers and float steps per row as eight at a time. That
// needs the stored sum to be the sum of the stored values: quantize_q8_2_x4's values never reach its clamp (|x / d|
// <= 127.5 with d = bf16(amax / 127)), so they are.
template <int NY>
void q8_0_r8_group16(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    const auto* b0 = reinterpret_cast<const ik::BlockQ8_0_R8*>(w + 8 * g * row_bytes);
    const auto* b1 = reinterpret_cast<const ik::BlockQ8_0_R8*>(w + 8 * (g + 1) * row_bytes);
    __m512 acc[NY];
    for (auto& a : acc) a = _mm512_setzero_ps();
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t b = 0; b < nb; ++b) {
        const __m512 d16 = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0[b].d))),
                                                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1[b].d)), 1));
        __m512i u[8];
        for (int l = 0; l < 8; ++l)
            u[l] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(load32(b0[b].qs + 32 * l)), load32(b1[b].qs + 32 * l), 1), flip);
        for (int t = 0; t < NY; ++t) {
            float dy;
            int ysum;
            const int8_t* qy = x4_block(act + t * act_bytes, b, grouped, dy, ysum);
            __m512i s = _mm512_set1_epi32(-128 * ysum);
            for (int l = 0; l < 8; ++l) {
                int v;
                std::memcpy(&v, qy + 4 * l, 4);
                s = _mm512_dpbusd_epi32(s, u[l], _mm512_set1_epi32(v));
            }
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d16, _mm512_set1_ps(dy)), _mm512_cvtepi32_ps(s), acc[t]);
        }
    }
    for (int t = 0; t < NY; ++t) _mm512_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
}
#endif

template <int NY>
void q8_0_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    int64_t g = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (; g + 2 <= rows / 8; g += 2) q8_0_r8_group16<NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
#endif
    for (; g < rows / 8; ++g) q8_0_r8_group8<NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

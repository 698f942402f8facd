// AVX2 kernels for ik_llama.cpp's row-interleaved i-quants (IQ2_XXS_R4, IQ2_XS_R4, IQ3_XXS_R4, IQ2_S_R4, IQ3_S_R4,
// IQ1_M_R4) with the bits of ik_ref_r4_iquants.cpp: per 32 weights the group's four rows decoded once (grid
// magnitudes, signs as +-1 for PSIGNB on the activations, integer scales), then each token's products summed per
// row into ik's lanes (lane k: row k's first 16 of every 32, lane 4 + k: its second 16), times the scales, and
// FMA'd once per block. Integer sums are exact, so only that partition and the float steps carry the bits.
// Included by ik_r4_simd.h (the AVX2 and AVX-512 translation units).
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

// Byte masks (0xFF = negative) of 32 weights from a 32-bit word: weight e's sign is bit e % 8 of byte e / 8.
inline __m256i sign_masks(uint32_t word) {
    const __m256i byte_of = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(word)), byte_of), bit), bit);
}
// The prefix-XOR sign index of the R4 forms (seven bits a byte, bit 0 of each byte set aside) back to sign bits.
inline uint32_t unscrambled4(uint32_t sas) {
    const uint32_t t = (sas >> 1) & 0x7F7F7F7Fu;
    return t ^ (t << 1);
}
inline uint32_t u32_of(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Row k's 32 weights ib of a block: grid magnitudes, +-1 signs (for PSIGNB on the activations) and the integer
// scales of the first and second 16.
struct IqR4Part {
    __m256i mag, sgn;
    int s[2];
};
inline __m256i plus_minus_one(__m256i negative) { return _mm256_or_si256(negative, _mm256_set1_epi8(1)); }
inline IqR4Part part_of(__m256i mag, __m256i negative, int s0, int s1) { return {mag, plus_minus_one(negative), {s0, s1}}; }
inline long long grid64(uint64_t v) { return static_cast<long long>(v); }

// The decoders: block `b` (IQ1_M_R4: the four 32-weight blocks from `b`, after the group's row scales).
template <GgmlType T>
inline IqR4Part decode_iq_r4(const uint8_t* b, int k, int ib) {
    using namespace iq;
    if constexpr (T == GgmlType::IQ2_XXS_R4 || T == GgmlType::IQ3_XXS_R4) {
        const uint32_t sas = u32_of(b + 8 + 16 * ib + 4 * k);
        const int s = 2 * static_cast<int>(_pext_u32(sas, 0x01010101u)) + 1;
        __m256i mag;
        if constexpr (T == GgmlType::IQ2_XXS_R4) {
            const uint8_t* q = b + 136 + 16 * ib + 4 * k;
            mag = _mm256_setr_epi64x(grid64(kIq2xxsGrid[q[0]]), grid64(kIq2xxsGrid[q[1]]), grid64(kIq2xxsGrid[q[2]]), grid64(kIq2xxsGrid[q[3]]));
        } else {
            const uint8_t* q = b + 136 + 32 * ib + 8 * k;
            mag = _mm256_setr_epi32(static_cast<int>(kIq3xxsGrid[q[0]]), static_cast<int>(kIq3xxsGrid[q[1]]), static_cast<int>(kIq3xxsGrid[q[2]]),
                                    static_cast<int>(kIq3xxsGrid[q[3]]), static_cast<int>(kIq3xxsGrid[q[4]]), static_cast<int>(kIq3xxsGrid[q[5]]),
                                    static_cast<int>(kIq3xxsGrid[q[6]]), static_cast<int>(kIq3xxsGrid[q[7]]));
        }
        return part_of(mag, sign_masks(unscrambled4(sas)), s, s);
    } else if constexpr (T == GgmlType::IQ2_XS_R4) {
        uint64_t u;  // four uint16: a 9-bit grid index, then the scrambled 7-bit sign index
        std::memcpy(&u, b + 8 + 2 * (16 * ib + 4 * k), 8);
        const uint64_t t = (u >> 9) & 0x007F007F007F007Full;
        const auto signs = static_cast<uint32_t>(_pext_u64(t ^ (t << 1), 0x00FF00FF00FF00FFull));
        const __m256i mag = _mm256_setr_epi64x(grid64(kIq2xsGrid[u & 511]), grid64(kIq2xsGrid[(u >> 16) & 511]), grid64(kIq2xsGrid[(u >> 32) & 511]),
                                               grid64(kIq2xsGrid[(u >> 48) & 511]));
        const int sc = b[264 + 4 * ib + k];
        return part_of(mag, sign_masks(signs), 2 * (sc & 15) + 1, 2 * (sc >> 4) + 1);
    } else if constexpr (T == GgmlType::IQ2_S_R4) {
        const uint8_t* q = b + 8 + 16 * ib + 4 * k;
        const int qh = b[136 + 4 * ib + k], sc = b[296 + 4 * ib + k];
        const __m256i mag = _mm256_setr_epi64x(grid64(kIq2sGrid[q[0] | (qh & 3) << 8]), grid64(kIq2sGrid[q[1] | (qh >> 2 & 3) << 8]),
                                               grid64(kIq2sGrid[q[2] | (qh >> 4 & 3) << 8]), grid64(kIq2sGrid[q[3] | (qh >> 6 & 3) << 8]));
        return part_of(mag, sign_masks(u32_of(b + 168 + 16 * ib + 4 * k)), 2 * (sc & 15) + 1, 2 * (sc >> 4) + 1);
    } else {
        static_assert(T == GgmlType::IQ1_M_R4);
        const uint8_t* blk = b + 28 * ib;
        long long e[4], delta[4];
        for (int g = 0; g < 4; ++g) {
            const int nib = (blk[16 + 4 * (g / 2) + k] >> (4 * (g % 2))) & 15;
            e[g] = grid64(kIq1sGrid[blk[4 * g + k] | (nib & 7) << 8]);
            delta[g] = nib & 8 ? -1 : 0x0101010101010101ll;  // the delta's sign: -1 or +1 in every byte
        }
        __m256i v = _mm256_setr_epi64x(e[0], e[1], e[2], e[3]);  // -1 / 0 / 1
        v = _mm256_add_epi8(v, v), v = _mm256_add_epi8(v, v), v = _mm256_add_epi8(v, v);
        v = _mm256_add_epi8(v, _mm256_setr_epi64x(delta[0], delta[1], delta[2], delta[3]));
        return {_mm256_sign_epi8(v, v), plus_minus_one(_mm256_cmpgt_epi8(_mm256_setzero_si256(), v)), {blk[24 + k] & 15, blk[24 + k] >> 4}};
    }
}

// Four rows' int32 sums of four bytes (the weights 4j..4j+3 in lane j) to lane k = row k's first 16, lane 4 + k =
// its second 16.
inline __m256i rows_by_half(__m256i r0, __m256i r1, __m256i r2, __m256i r3) {
    const __m256i s01 = _mm256_add_epi32(_mm256_unpacklo_epi32(r0, r1), _mm256_unpackhi_epi32(r0, r1));
    const __m256i s23 = _mm256_add_epi32(_mm256_unpacklo_epi32(r2, r3), _mm256_unpackhi_epi32(r2, r3));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
}

// The five forms' block and activation shapes (IQ1_M_R4: 128 weights a block against Q8_K128, after the group's
// row scales; the others 256 against Q8_K).
template <GgmlType T>
struct IqR4Shape {
    static constexpr bool kOneM = T == GgmlType::IQ1_M_R4;
    static constexpr bool kIq2 = T == GgmlType::IQ2_XXS_R4 || T == GgmlType::IQ2_XS_R4 || T == GgmlType::IQ2_S_R4;
    static constexpr int kSub = kOneM ? 4 : 8;
    static constexpr int64_t kSpan = 32 * kSub;
    static constexpr size_t kBlock = kOneM                       ? 4 * 28
                                     : T == GgmlType::IQ2_XXS_R4 ? 264
                                     : T == GgmlType::IQ2_XS_R4  ? 296
                                     : T == GgmlType::IQ3_XXS_R4 ? 392
                                                                 : 328;
    static constexpr size_t kActBlock = kOneM ? sizeof(ik::BlockQ8K128) : sizeof(ik::BlockQ8K), kActQs = kOneM ? 12 : 8;
    // the four rows' f16 d of block b, twice (IQ3_XXS_R4's with its 1/4; IQ1_M_R4 has none per block: zeros)
    static __m256 block_d(const uint8_t* b) {
        if constexpr (kOneM) return _mm256_setzero_ps();
        const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
        const __m256 dd = _mm256_set_m128(d4, d4);
        return T == GgmlType::IQ3_XXS_R4 ? _mm256_mul_ps(dd, _mm256_set1_ps(0.25f)) : dd;
    }
};

// NY tokens against the rows' groups: per 32 weights the four rows decoded once, then each token's products summed
// per row and half and times the scales. Chunk16: ik's 16-column kernel of IQ2_XS_R4 / IQ2_S_R4 (values + 64,
// unsigned, the offset back through the sums of 16 first, sub-blocks 0..3 in a row's first lane and 4..7 in its
// second).
template <GgmlType T, bool Chunk16, int NY>
void iquant_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    using S = IqR4Shape<T>;
    constexpr bool kOneM = S::kOneM, kIq2 = S::kIq2;
    constexpr int kSub = S::kSub;
    constexpr int64_t kSpan = S::kSpan;
    constexpr size_t kBlock = S::kBlock, kActBlock = S::kActBlock, kActQs = S::kActQs;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t jb = 0; jb < n / kSpan; ++jb) {
            const uint8_t* b = kOneM ? group + 8 + jb * kBlock : group + jb * kBlock;
            const uint8_t* y[NY];
            for (int t = 0; t < NY; ++t) y[t] = act + t * act_bytes + jb * kActBlock;
            __m256i isum[NY];
            for (auto& v : isum) v = _mm256_setzero_si256();
            alignas(32) int16_t min_scales[4][16];  // Chunk16: per row [first scale, second scale] of each sub-block
            for (int ib = 0; ib < kSub; ++ib) {
                IqR4Part p[4];
                __m256i v[4];  // the unsigned operands: magnitudes, or (Chunk16) values + 64
                for (int k = 0; k < 4; ++k) {
                    p[k] = decode_iq_r4<T>(b, k, ib);
                    v[k] = Chunk16 ? _mm256_add_epi8(_mm256_sign_epi8(p[k].mag, p[k].sgn), _mm256_set1_epi8(64)) : p[k].mag;
                    if constexpr (Chunk16)
                        min_scales[k][2 * ib] = static_cast<int16_t>(p[k].s[0]), min_scales[k][2 * ib + 1] = static_cast<int16_t>(p[k].s[1]);
                }
                const __m256i scales = _mm256_setr_epi32(p[0].s[0], p[1].s[0], p[2].s[0], p[3].s[0], p[0].s[1], p[1].s[1], p[2].s[1], p[3].s[1]);
                for (int t = 0; t < NY; ++t) {
                    const __m256i q = load32(y[t] + kActQs + 32 * ib);
                    __m256i r[4];
                    for (int k = 0; k < 4; ++k)
                        r[k] = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(v[k], Chunk16 ? q : _mm256_sign_epi8(q, p[k].sgn)));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(scales, rows_by_half(r[0], r[1], r[2], r[3])));
                }
            }
            const __m256 dd = IqR4Shape<T>::block_d(b);
            for (int t = 0; t < NY; ++t) {
                float yd;
                std::memcpy(&yd, y[t], 4);
                if constexpr (Chunk16) {
                    const __m256i bsums = load32(y[t] + offsetof(ik::BlockQ8K, bsums));
                    __m256i m[4];
                    for (int k = 0; k < 4; ++k) m[k] = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(min_scales[k])), bsums);
                    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_set1_ps(-64.f * yd)), _mm256_cvtepi32_ps(halves4(m[0], m[1], m[2], m[3])),
                                             acc[t]);
                }
                const __m256 c = kOneM ? _mm256_set1_ps(yd) : _mm256_mul_ps(dd, _mm256_set1_ps(yd));
                acc[t] = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(isum[t]), acc[t]);
            }
        }
        __m128 scale = _mm_set1_ps(kIq2 ? 0.125f : 1.f);
        if constexpr (kOneM) scale = _mm_mul_ps(_mm_set1_ps(0.125f), _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group))));
        for (int t = 0; t < NY; ++t)
            _mm_storeu_ps(out + t * out_stride + 4 * g,
                          _mm_mul_ps(scale, _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1))));
    }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
// The same integers on AVX-512 (VNNI): the signs as a byte mask straight from the weights' sign bits, the
// activations negated under it (VPSUBB; Q8_K's values are within +-127), PMADDUBSW's pair sums (<= 2 * 62 * 127)
// times each row and half's scale by VPDPWSSD into accumulators holding a row's first 16 in one 128-bit lane and its
// second 16 in the next. A block's four int32 lanes of each half are summed into ik's lanes (k: row k's first 16,
// 4 + k: its second) once at its end, where the AVX2 form does it per 32 weights with a 32-bit multiply: the integers
// are exact, so the bits are the same. One token keeps a 256-bit register per row (decoding is most of its work, and
// 512-bit instructions would close port 1 to it); several put two rows in a 512-bit register.
struct IqR4Rows {
    __m256i m[4];                    // row k's 32 magnitudes
    __mmask32 neg[4];                // row k's negative weights
    __m128i words;                   // int16 scales: row 0 first, row 0 second, row 1 first, ... row 3 second
    void signs_from(__m128i bits) {  // row k's 32 sign bits in dword k
        uint32_t v[4];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(v), bits);
        for (int k = 0; k < 4; ++k) neg[k] = static_cast<__mmask32>(v[k]);
    }
};
// the XXS forms' scales: 2 (bit 0 of each of the row's four sign/scale bytes, in order) + 1; their signs: the
// prefix-XOR index of bits 1..7, as unscrambled4, four rows at once
inline void sas_signs_scales(const uint8_t* sas, IqR4Rows& r) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sas));
    __m128i signs = _mm_and_si128(v, _mm_set1_epi8(static_cast<char>(0xFE)));
    signs = _mm_xor_si128(signs, _mm_srli_epi16(signs, 1));
    r.signs_from(signs);
    const __m128i s = _mm_dpbusd_epi32(_mm_set1_epi32(1), _mm_and_si128(v, _mm_set1_epi8(1)), _mm_set1_epi32(0x10080402));
    r.words = _mm_or_si128(s, _mm_slli_epi32(s, 16));
}
// IQ2_XS_R4 / IQ2_S_R4 / IQ1_M_R4: scale byte k of four, low nibble the first 16, high nibble the second (2 s + 1)
inline __m128i nibble_scale_words(const uint8_t* sc, bool odd) {
    const __m128i b = _mm_cvtsi32_si128(static_cast<int>(u32_of(sc)));
    const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
    const __m128i w = _mm_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi));
    return odd ? _mm_add_epi16(_mm_add_epi16(w, w), _mm_set1_epi16(1)) : w;
}
template <class G>
inline __m256i row_of_grid64(G g, int from) {
    return _mm256_setr_epi64x(g(from), g(from + 1), g(from + 2), g(from + 3));
}
// IQ1_M_R4's 32-weight block of four rows: byte 4 g + k of qs and of the nibbles is row k's group g of 8 (nibble:
// the 3 high index bits, then the delta's sign). Writes the 16 grid indices (4 g + k) and returns the nibbles.
inline __m128i iq1_m_r4_indices(const uint8_t* blk, uint16_t* idx) {
    const uint32_t qh0 = u32_of(blk + 16), qh1 = u32_of(blk + 20);
    const __m128i nib = _mm_setr_epi32(static_cast<int>(qh0), static_cast<int>(qh0 >> 4), static_cast<int>(qh1), static_cast<int>(qh1 >> 4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(idx),
                       _mm256_or_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk))),
                                       _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(nib, _mm_set1_epi8(7))), 8)));
    return nib;
}
template <GgmlType T>
inline IqR4Rows decode_iq_r4_vnni(const uint8_t* b, int ib) {
    using namespace iq;
    IqR4Rows r;
    if constexpr (T == GgmlType::IQ2_XXS_R4) {
        const uint8_t* q = b + 136 + 16 * ib;
        for (int k = 0; k < 4; ++k) r.m[k] = row_of_grid64([&](int i) { return grid64(kIq2xxsGrid[q[i]]); }, 4 * k);
        sas_signs_scales(b + 8 + 16 * ib, r);
    } else if constexpr (T == GgmlType::IQ3_XXS_R4) {
        const uint8_t* q = b + 136 + 32 * ib;
        auto g = [&](int i) { return static_cast<int>(kIq3xxsGrid[q[i]]); };
        for (int k = 0; k < 4; ++k)
            r.m[k] = _mm256_setr_epi32(g(8 * k), g(8 * k + 1), g(8 * k + 2), g(8 * k + 3), g(8 * k + 4), g(8 * k + 5), g(8 * k + 6), g(8 * k + 7));
        sas_signs_scales(b + 8 + 16 * ib, r);
    } else if constexpr (T == GgmlType::IQ2_XS_R4) {
        // sixteen uint16, row k's four from 4k: a 9-bit grid index, then the scrambled 7-bit sign index
        const uint8_t* qs = b + 8 + 32 * ib;
        const __m256i u = load32(qs);
        const __m256i t = _mm256_and_si256(_mm256_srli_epi16(u, 9), _mm256_set1_epi16(0x7F));
        r.signs_from(_mm256_cvtepi16_epi8(_mm256_xor_si256(t, _mm256_slli_epi16(t, 1))));
        alignas(32) uint16_t w[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(w), _mm256_and_si256(u, _mm256_set1_epi16(511)));
        __asm__("" : "+m"(w));  // (read back by loads, not by sixteen two-uop VPEXTRW)
        for (int k = 0; k < 4; ++k) r.m[k] = row_of_grid64([&](int i) { return grid64(kIq2xsGrid[w[i]]); }, 4 * k);
        r.words = nibble_scale_words(b + 264 + 4 * ib, true);
    } else if constexpr (T == GgmlType::IQ2_S_R4) {
        const uint8_t* q = b + 8 + 16 * ib;
        const uint8_t* qh = b + 136 + 4 * ib;
        for (int k = 0; k < 4; ++k) r.m[k] = row_of_grid64([&](int i) { return grid64(kIq2sGrid[q[i] | (qh[k] >> (2 * (i % 4)) & 3) << 8]); }, 4 * k);
        r.signs_from(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 168 + 16 * ib)));
        r.words = nibble_scale_words(b + 296 + 4 * ib, true);
    } else {
        static_assert(T == GgmlType::IQ1_M_R4);
        const uint8_t* blk = b + 28 * ib;
        alignas(32) uint16_t idx[16];
        const __m128i nib = iq1_m_r4_indices(blk, idx);
        __asm__("" : "+m"(idx));  // read the indices back from memory (loads), not by sixteen two-uop VPEXTRW
        const __m128i eight = _mm_set1_epi8(8);
        const __m256i delta = _mm256_broadcastsi128_si256(_mm_or_si128(_mm_cmpeq_epi8(_mm_and_si128(nib, eight), eight), _mm_set1_epi8(1)));
        for (int k = 0; k < 4; ++k) {
            // 8 e + the delta's sign (+-1), e the grid's -1 / 0 / 1
            __m256i v = _mm256_setr_epi64x(grid64(kIq1sGrid[idx[k]]), grid64(kIq1sGrid[idx[4 + k]]), grid64(kIq1sGrid[idx[8 + k]]),
                                           grid64(kIq1sGrid[idx[12 + k]]));
            v = _mm256_add_epi8(v, v), v = _mm256_add_epi8(v, v), v = _mm256_add_epi8(v, v);
            const __m256i pick = _mm256_setr_epi64x(0x0000000000000000ll + 0x0101010101010101ll * k, 0x0404040404040404ll + 0x0101010101010101ll * k,
                                                    0x0808080808080808ll + 0x0101010101010101ll * k, 0x0C0C0C0C0C0C0C0Cll + 0x0101010101010101ll * k);
            v = _mm256_add_epi8(v, _mm256_shuffle_epi8(delta, pick));
            r.m[k] = _mm256_abs_epi8(v);
            r.neg[k] = _mm256_movepi8_mask(v);
        }
        r.words = nibble_scale_words(blk + 24, false);
    }
    return r;
}

template <GgmlType T, bool Chunk16, int NY>
void iquant_r4_tokens_vnni(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                           int64_t out_stride) {
    using S = IqR4Shape<T>;
    constexpr bool kOneM = S::kOneM, kIq2 = S::kIq2;
    constexpr bool kWide = NY > 1;  // two rows per 512-bit register
    constexpr int kSub = S::kSub;
    constexpr int64_t kSpan = S::kSpan;
    constexpr size_t kBlock = S::kBlock, kActBlock = S::kActBlock, kActQs = S::kActQs;
    // per 128-bit lane L, scale word L + 4 j (register j of two rows) in all eight words; 256 bits: lane L of row k
    // is word 2 k + L
    const __m512i pick = _mm512_setr_epi32(0x01000100, 0x01000100, 0x01000100, 0x01000100, 0x03020302, 0x03020302, 0x03020302, 0x03020302, 0x05040504,
                                           0x05040504, 0x05040504, 0x05040504, 0x07060706, 0x07060706, 0x07060706, 0x07060706);
    const __m256i pick256 = _mm512_castsi512_si256(pick);  // (one token: row 0's two words; + 4 k bytes, row k's)
    const __m512i to_lanes = _mm512_setr_epi32(0, 8, 1, 9, 4, 12, 5, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        // the float sums live in memory: with eight tokens the integer accumulators take the registers
        alignas(32) float acc[NY][8] = {};
        for (int64_t jb = 0; jb < n / kSpan; ++jb) {
            const uint8_t* b = kOneM ? group + 8 + jb * kBlock : group + jb * kBlock;
            const uint8_t* y[NY];
            for (int t = 0; t < NY; ++t) y[t] = act + t * act_bytes + jb * kActBlock;
            __m512i s[NY][2];  // (kWide) rows 0 and 1, rows 2 and 3
            __m256i s1[4];     // (one token) row k
            for (auto& st : s) st[0] = st[1] = _mm512_setzero_si512();
            for (auto& v : s1) v = _mm256_setzero_si256();
            alignas(32) uint32_t min_scales[4][8];  // Chunk16: row k's (first, second) scale pair of each sub-block
            for (int ib = 0; ib < kSub; ++ib) {
                IqR4Rows r = decode_iq_r4_vnni<T>(b, ib);
                if constexpr (Chunk16) {  // the values + 64 (unsigned) against the activations as they are
                    alignas(16) uint32_t pairs[4];
                    _mm_store_si128(reinterpret_cast<__m128i*>(pairs), r.words);
                    for (int k = 0; k < 4; ++k) {
                        r.m[k] = _mm256_add_epi8(_mm256_mask_sub_epi8(r.m[k], r.neg[k], _mm256_setzero_si256(), r.m[k]), _mm256_set1_epi8(64));
                        r.neg[k] = 0;
                        min_scales[k][ib] = pairs[k];
                    }
                }
                if constexpr (kWide) {
                    const __m512i words = _mm512_broadcast_i32x4(r.words);
                    const __m512i m[2] = {_mm512_inserti64x4(_mm512_castsi256_si512(r.m[0]), r.m[1], 1),
                                          _mm512_inserti64x4(_mm512_castsi256_si512(r.m[2]), r.m[3], 1)};
                    const __m512i sc[2] = {_mm512_shuffle_epi8(words, pick), _mm512_shuffle_epi8(words, _mm512_add_epi8(pick, _mm512_set1_epi8(8)))};
                    for (int t = 0; t < NY; ++t) {
                        const __m512i q = _mm512_broadcast_i64x4(load32(y[t] + kActQs + 32 * ib));
                        for (int j = 0; j < 2; ++j) {
                            const __m512i signed_q = Chunk16 ? q
                                                             : _mm512_mask_sub_epi8(q, _mm512_kunpackd(r.neg[2 * j + 1], r.neg[2 * j]),
                                                                                    _mm512_setzero_si512(), q);
                            s[t][j] = _mm512_dpwssd_epi32(s[t][j], _mm512_maddubs_epi16(m[j], signed_q), sc[j]);
                        }
                    }
                } else {
                    const __m256i words = _mm256_broadcastsi128_si256(r.words);
                    __m256i sc[4];
                    for (int k = 0; k < 4; ++k)
                        sc[k] = _mm256_shuffle_epi8(words, _mm256_add_epi8(pick256, _mm256_set1_epi8(static_cast<char>(4 * k))));
                    const __m256i q = load32(y[0] + kActQs + 32 * ib);
                    for (int k = 0; k < 4; ++k)
                        s1[k] = _mm256_dpwssd_epi32(
                            s1[k], _mm256_maddubs_epi16(r.m[k], Chunk16 ? q : _mm256_mask_sub_epi8(q, r.neg[k], _mm256_setzero_si256(), q)), sc[k]);
                }
            }
            const __m256 dd = IqR4Shape<T>::block_d(b);
            for (int t = 0; t < NY; ++t) {
                __m256i isum;
                if constexpr (kWide) {
                    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(s[t][0], s[t][1]), _mm512_unpackhi_epi32(s[t][0], s[t][1]));
                    const __m512i v = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));
                    isum = _mm512_castsi512_si256(_mm512_permutexvar_epi32(to_lanes, v));
                } else {
                    isum = rows_by_half(s1[0], s1[1], s1[2], s1[3]);
                }
                float yd;
                std::memcpy(&yd, y[t], 4);
                __m256 a = _mm256_load_ps(acc[t]);
                if constexpr (Chunk16) {  // the + 64 back through the token's sums of 16, as the AVX2 form does
                    const __m256i bsums = load32(y[t] + offsetof(ik::BlockQ8K, bsums));
                    __m256i m[4];
                    for (int k = 0; k < 4; ++k) m[k] = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(min_scales[k])), bsums);
                    a = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_set1_ps(-64.f * yd)), _mm256_cvtepi32_ps(halves4(m[0], m[1], m[2], m[3])), a);
                }
                const __m256 c = kOneM ? _mm256_set1_ps(yd) : _mm256_mul_ps(dd, _mm256_set1_ps(yd));
                _mm256_store_ps(acc[t], _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(isum), a));
            }
        }
        __m128 scale = _mm_set1_ps(kIq2 ? 0.125f : 1.f);
        if constexpr (kOneM) scale = _mm_mul_ps(_mm_set1_ps(0.125f), _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group))));
        for (int t = 0; t < NY; ++t)
            _mm_storeu_ps(out + t * out_stride + 4 * g, _mm_mul_ps(scale, _mm_add_ps(_mm_load_ps(acc[t]), _mm_load_ps(acc[t] + 4))));
    }
}
#endif

// IQ3_S_R4 per group of four rows and block of 256: Sub::run adds the block's integers for every token into ik's
// lanes (k: row k's first 16 of each 32, 4 + k: its second), then d y.d times them is FMA'd per token.
template <int NY, class Sub>
void iq3_s_r4_frame(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    constexpr size_t kBlock = 440;
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
            const uint8_t* b = group + ibl * kBlock;
            const auto* y0 = reinterpret_cast<const ik::BlockQ8K*>(act) + ibl;
            __m256i isum[NY];
            for (auto& v : isum) v = _mm256_setzero_si256();
            Sub::template run<NY>(b, y0, act_bytes, isum);
            const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
            const __m256 dd = _mm256_set_m128(d4, d4);
            for (int t = 0; t < NY; ++t) {
                const float yd = reinterpret_cast<const ik::BlockQ8K*>(reinterpret_cast<const uint8_t*>(y0) + t * act_bytes)->d;
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_set1_ps(yd)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
            }
        }
        for (int t = 0; t < NY; ++t)
            _mm_storeu_ps(out + t * out_stride + 4 * g, _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1)));
    }
}
// IQ3_S_R4 in its own layout: per sub-block and 4-group i a register holding, in 32-bit lane k, row k's grid entry
// for weights 4i..4i+3 and, in lane 4 + k, for 16 + 4i..16 + 4i + 3 (the bytes ik's repack puts side by side),
// against the activations' dword i of each half broadcast: the products land in ik's lanes directly.
struct Iq3SBlockAvx2 {
    template <int NY>
    static void run(const uint8_t* b, const ik::BlockQ8K* y0, size_t act_bytes, __m256i* isum) {
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t* qs = b + 8 + 32 * ib;
            const uint32_t qh = u32_of(b + 264 + 4 * ib);  // row k's high bits in byte k
            const __m256i signs = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 296 + 16 * ib)));
            __m256i qx[4], sg[4];
            for (int i = 0; i < 4; ++i) {
                int e[8];
                for (int l = 0; l < 8; ++l)
                    e[l] = static_cast<int>(iq::kIq3sGrid[qs[8 * i + l] | ((qh >> (8 * (l % 4) + i + 4 * (l / 4))) & 1) << 8]);
                qx[i] = _mm256_setr_epi32(e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
                const __m256i bit = _mm256_set_m128i(_mm_set1_epi8(static_cast<char>(1 << (i + 4))), _mm_set1_epi8(static_cast<char>(1 << i)));
                sg[i] = plus_minus_one(_mm256_cmpeq_epi8(_mm256_and_si256(signs, bit), bit));
            }
            int sc[4];
            for (int k = 0; k < 4; ++k) sc[k] = 2 * ((b[424 + (4 * ib + k) % 16] >> (4 * ((4 * ib + k) / 16))) & 15) + 1;
            const __m256i scales = _mm256_setr_epi16(
                static_cast<short>(sc[0]), static_cast<short>(sc[0]), static_cast<short>(sc[1]), static_cast<short>(sc[1]), static_cast<short>(sc[2]),
                static_cast<short>(sc[2]), static_cast<short>(sc[3]), static_cast<short>(sc[3]), static_cast<short>(sc[0]), static_cast<short>(sc[0]),
                static_cast<short>(sc[1]), static_cast<short>(sc[1]), static_cast<short>(sc[2]), static_cast<short>(sc[2]), static_cast<short>(sc[3]),
                static_cast<short>(sc[3]));
            for (int t = 0; t < NY; ++t) {
                const __m256i q = load32(reinterpret_cast<const ik::BlockQ8K*>(reinterpret_cast<const uint8_t*>(y0) + t * act_bytes)->qs + 32 * ib);
                const __m256i p0 = _mm256_maddubs_epi16(qx[0], _mm256_sign_epi8(_mm256_shuffle_epi32(q, 0x00), sg[0]));
                const __m256i p1 = _mm256_maddubs_epi16(qx[1], _mm256_sign_epi8(_mm256_shuffle_epi32(q, 0x55), sg[1]));
                const __m256i p2 = _mm256_maddubs_epi16(qx[2], _mm256_sign_epi8(_mm256_shuffle_epi32(q, 0xAA), sg[2]));
                const __m256i p3 = _mm256_maddubs_epi16(qx[3], _mm256_sign_epi8(_mm256_shuffle_epi32(q, 0xFF), sg[3]));
                const __m256i p = _mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3));  // <= 8 * 15 * 127
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, scales));
            }
        }
    }
};
template <int NY>
void iq3_s_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    iq3_s_r4_frame<NY, Iq3SBlockAvx2>(n, w, row_bytes, rows, act, act_bytes, out, out_stride);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
// The same integers on VNNI CPUs, as ik's AVX-512 kernel takes them: the grid indices' ninth bits for the four rows
// at once (word l of the 8: row l % 4's qh byte, shifted so that bit i (+ 4 for l >= 4) lands on bit 8), the sign
// bits as byte masks, the broadcast activation dwords negated under them and VPDPBUSD per 4-group, times the
// scales with one 32-bit multiply per sub-block.
struct Iq3SBlockVnni {
    template <int NY>
    static void run(const uint8_t* b, const ik::BlockQ8K* y0, size_t act_bytes, __m256i* isum) {
        const __m256i one = _mm256_set1_epi8(1);
        // byte m: 2 (low nibble of scale byte m) + 1, byte 16 + m: the same of its high nibble
        alignas(32) uint32_t scale_words[8];
        const __m128i scale_bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 424));
        const __m256i nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(scale_bits, 4), scale_bits), _mm256_set1_epi8(0x0F));
        _mm256_store_si256(reinterpret_cast<__m256i*>(scale_words), _mm256_or_si256(_mm256_add_epi8(nibbles, nibbles), one));
        for (int ib = 0; ib < 8; ++ib) {
            const uint8_t* qs = b + 8 + 32 * ib;
            __m128i high = _mm_sllv_epi64(_mm_cvtepu8_epi16(_mm_set1_epi32(static_cast<int>(u32_of(b + 264 + 4 * ib)))), _mm_set_epi64x(4, 8));
            __m256i qx[4];
            for (int i = 0; i < 4; ++i) {
                alignas(16) uint16_t idx[8];
                _mm_store_si128(reinterpret_cast<__m128i*>(idx),
                                _mm_or_si128(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * i))),
                                             _mm_and_si128(high, _mm_set1_epi16(0x100))));
                __asm__("" : "+m"(idx));  // (read back by loads, not by two-uop VPEXTRW)
                high = _mm_srli_epi16(high, 1);
                auto e = [&](int l) { return static_cast<int>(iq::kIq3sGrid[idx[l]]); };
                qx[i] = _mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7));
            }
            const __m128i signs128 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 296 + 16 * ib));
            __m256i signs = _mm256_set_m128i(_mm_srli_epi16(signs128, 4), signs128);
            __mmask32 negative[4];
            for (int i = 0; i < 4; ++i, signs = _mm256_srli_epi16(signs, 1)) negative[i] = _mm256_test_epi8_mask(signs, one);
            const __m256i scales = _mm256_cvtepi8_epi32(_mm_set1_epi32(static_cast<int>(scale_words[ib])));  // rows 0..3, twice
            for (int t = 0; t < NY; ++t) {
                const __m256i q = load32(reinterpret_cast<const ik::BlockQ8K*>(reinterpret_cast<const uint8_t*>(y0) + t * act_bytes)->qs + 32 * ib);
                const __m256i q0 = _mm256_shuffle_epi32(q, 0x00), q1 = _mm256_shuffle_epi32(q, 0x55), q2 = _mm256_shuffle_epi32(q, 0xAA),
                              q3 = _mm256_shuffle_epi32(q, 0xFF);
                const __m256i zero = _mm256_setzero_si256();
                __m256i sumi = _mm256_dpbusd_epi32(zero, qx[0], _mm256_mask_sub_epi8(q0, negative[0], zero, q0));
                sumi = _mm256_dpbusd_epi32(sumi, qx[1], _mm256_mask_sub_epi8(q1, negative[1], zero, q1));
                sumi = _mm256_dpbusd_epi32(sumi, qx[2], _mm256_mask_sub_epi8(q2, negative[2], zero, q2));
                sumi = _mm256_dpbusd_epi32(sumi, qx[3], _mm256_mask_sub_epi8(q3, negative[3], zero, q3));
                isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(sumi, scales));
            }
        }
    }
};
template <int NY>
void iq3_s_r4_tokens_vnni(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                          int64_t out_stride) {
    iq3_s_r4_frame<NY, Iq3SBlockVnni>(n, w, row_bytes, rows, act, act_bytes, out, out_stride);
}
#endif
template <int NY>
struct Iq3SR4 {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
    static constexpr auto run = iq3_s_r4_tokens_vnni<NY>;
#else
    static constexpr auto run = iq3_s_r4_tokens<NY>;
#endif
};

template <GgmlType T, bool Chunk16>
struct IquantR4 {
    template <int NY>
    struct Of {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
        static constexpr auto run = iquant_r4_tokens_vnni<T, Chunk16, NY>;
#else
        static constexpr auto run = iquant_r4_tokens<T, Chunk16, NY>;
#endif
    };
};

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

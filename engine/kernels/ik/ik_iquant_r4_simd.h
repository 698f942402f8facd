// AVX2 kernels for ik_llama.cpp's row-interleaved i-quants (IQ2_XXS_R4, IQ2_XS_R4, IQ3_XXS_R4, IQ2_S_R4, IQ3_S_R4,
// IQ1_M_R4) with the bits of ik_ref_r4_iquants.cpp: per 32 weights the group's four rows decoded once (grid
// magnitudes, signs as +-1 for PSIGNB on the activations, integer scales as int16 words), then each token's pair
// sums times the rows' scales (PMADDWD) summed into ik's lanes (lane k: row k's first 16 of every 32, lane 4 + k:
// its second 16) and FMA'd once per block. Integer sums are exact, so only that partition and the float steps carry
// the bits. Here the grid indices reach the table lookups by scalar loads or 64-bit moves, not through a vector
// store read back by 16-bit loads: Zen 3 stalls on that forwarding (IQ2_XS_R4, one token: 0.78x ik that way, 1.20x
// by loads).
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

inline uint32_t u32_of(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline long long grid64(uint64_t v) { return static_cast<long long>(v); }
inline __m256i plus_minus_one(__m256i negative) { return _mm256_or_si256(negative, _mm256_set1_epi8(1)); }
template <class G>
inline __m256i row_of_grid64(G g, int from) {
    return _mm256_setr_epi64x(g(from), g(from + 1), g(from + 2), g(from + 3));
}
// IQ2_XS_R4 / IQ2_S_R4 / IQ1_M_R4: scale byte k of four, low nibble the first 16, high nibble the second (2 s + 1)
inline __m128i nibble_scale_words(const uint8_t* sc, bool odd) {
    const __m128i b = _mm_cvtsi32_si128(static_cast<int>(u32_of(sc)));
    const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
    const __m128i w = _mm_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi));
    return odd ? _mm_add_epi16(_mm_add_epi16(w, w), _mm_set1_epi16(1)) : w;
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
// IQ1_M_R4's 32-weight block ib of four rows: row k's weights as 8 e + the delta's sign (+-1), e the grid's -1 / 0 /
// 1 (never 0, so each is its own sign), and the scale words.
inline void iq1_m_r4_values(const uint8_t* b, int ib, __m256i* v, __m128i& words) {
    using iq::kIq1sGrid;
    const uint8_t* blk = b + 28 * ib;
    const uint32_t qh0 = u32_of(blk + 16), qh1 = u32_of(blk + 20);
    const __m128i nib = _mm_setr_epi32(static_cast<int>(qh0), static_cast<int>(qh0 >> 4), static_cast<int>(qh1), static_cast<int>(qh1 >> 4));
    const __m128i eight = _mm_set1_epi8(8);
    const __m256i delta = _mm256_broadcastsi128_si256(_mm_or_si128(_mm_cmpeq_epi8(_mm_and_si128(nib, eight), eight), _mm_set1_epi8(1)));
    // the grid indices by scalar loads from the block (a vector store read back by 16-bit loads stalls Zen 3)
    auto e = [&](int g, int k) { return grid64(kIq1sGrid[blk[4 * g + k] | ((blk[16 + 4 * (g / 2) + k] >> (4 * (g % 2))) & 7) << 8]); };
    for (int k = 0; k < 4; ++k) {
        __m256i x = _mm256_setr_epi64x(e(0, k), e(1, k), e(2, k), e(3, k));
        x = _mm256_add_epi8(x, x), x = _mm256_add_epi8(x, x), x = _mm256_add_epi8(x, x);
        const __m256i pick = _mm256_setr_epi64x(0x0000000000000000ll + 0x0101010101010101ll * k, 0x0404040404040404ll + 0x0101010101010101ll * k,
                                                0x0808080808080808ll + 0x0101010101010101ll * k, 0x0C0C0C0C0C0C0C0Cll + 0x0101010101010101ll * k);
        v[k] = _mm256_add_epi8(x, _mm256_shuffle_epi8(delta, pick));
    }
    words = nibble_scale_words(blk + 24, false);
}
// The other forms' block ib of four rows: row k's grid magnitudes and the scale words; returns the sign bits (row
// k's 32 in dword k).
template <GgmlType T>
inline __m128i iq_r4_magnitudes(const uint8_t* b, int ib, __m256i* mag, __m128i& words) {
    using namespace iq;
    if constexpr (T == GgmlType::IQ2_XXS_R4 || T == GgmlType::IQ3_XXS_R4) {
        if constexpr (T == GgmlType::IQ2_XXS_R4) {
            const uint8_t* q = b + 136 + 16 * ib;
            for (int k = 0; k < 4; ++k) mag[k] = row_of_grid64([&](int i) { return grid64(kIq2xxsGrid[q[i]]); }, 4 * k);
        } else {
            const uint8_t* q = b + 136 + 32 * ib;
            auto g = [&](int i) { return static_cast<int>(kIq3xxsGrid[q[i]]); };
            for (int k = 0; k < 4; ++k)
                mag[k] = _mm256_setr_epi32(g(8 * k), g(8 * k + 1), g(8 * k + 2), g(8 * k + 3), g(8 * k + 4), g(8 * k + 5), g(8 * k + 6),
                                           g(8 * k + 7));
        }
        // sign/scale words, row k's in dword k: the scale 2 (bit 0 of each of its four bytes, in order) + 1 in both
        // halves; the signs the prefix-XOR index of bits 1..7
        const __m128i sas = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 8 + 16 * ib));
        const __m128i s = _mm_add_epi32(
            _mm_madd_epi16(_mm_maddubs_epi16(_mm_and_si128(sas, _mm_set1_epi8(1)), _mm_set1_epi32(0x10080402)), _mm_set1_epi16(1)),
            _mm_set1_epi32(1));
        words = _mm_or_si128(s, _mm_slli_epi32(s, 16));
        const __m128i signs = _mm_and_si128(sas, _mm_set1_epi8(static_cast<char>(0xFE)));
        return _mm_xor_si128(signs, _mm_srli_epi16(signs, 1));
    } else if constexpr (T == GgmlType::IQ2_XS_R4) {
        // sixteen uint16, row k's four from 4k: a 9-bit grid index, then the scrambled 7-bit sign index
        const uint8_t* qs = b + 8 + 32 * ib;
        const __m256i u = load32(qs);
        // the indices by loads from the block itself (a vector store read back by 16-bit loads stalls Zen 3)
        auto index = [&](int i) {
            uint16_t v;
            std::memcpy(&v, qs + 2 * i, 2);
            return v & 511;
        };
        for (int k = 0; k < 4; ++k) mag[k] = row_of_grid64([&](int i) { return grid64(kIq2xsGrid[index(i)]); }, 4 * k);
        words = nibble_scale_words(b + 264 + 4 * ib, true);
        __m256i t = _mm256_and_si256(_mm256_srli_epi16(u, 9), _mm256_set1_epi16(0x7F));
        t = _mm256_xor_si256(t, _mm256_slli_epi16(t, 1));  // < 256
        return _mm_packus_epi16(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    } else {
        static_assert(T == GgmlType::IQ2_S_R4);
        const uint8_t* q = b + 8 + 16 * ib;
        const uint8_t* qh = b + 136 + 4 * ib;
        for (int k = 0; k < 4; ++k) mag[k] = row_of_grid64([&](int i) { return grid64(kIq2sGrid[q[i] | (qh[k] >> (2 * (i % 4)) & 3) << 8]); }, 4 * k);
        words = nibble_scale_words(b + 296 + 4 * ib, true);
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 168 + 16 * ib));
    }
}

// The four rows of one 32-weight block: row k's grid magnitudes, its signs as nonzero bytes for PSIGNB (negative:
// the weight is), and the integer scales as int16 words (row 0 first 16, row 0 second 16, row 1 first, ... row 3
// second).
struct IqR4Block {
    __m256i mag[4], sgn[4];
    __m128i words;
};
// Signs from 16 bytes holding row k's 32 sign bits in dword k: -1 / +1 bytes.
inline void signs_of_rows(__m128i bits, __m256i* sgn) {
    const __m256i b = _mm256_broadcastsi128_si256(bits);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    __m256i byte_of = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll);
    for (int k = 0; k < 4; ++k, byte_of = _mm256_add_epi8(byte_of, _mm256_set1_epi8(4))) {
        const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(b, byte_of), bit), bit);
        sgn[k] = plus_minus_one(negative);
    }
}

// The decoders: block `b` (IQ1_M_R4: the four 32-weight blocks from `b`, after the group's row scales).
template <GgmlType T>
inline IqR4Block decode_iq_r4(const uint8_t* b, int ib) {
    IqR4Block r;
    if constexpr (T == GgmlType::IQ1_M_R4) {
        iq1_m_r4_values(b, ib, r.sgn, r.words);
        for (int k = 0; k < 4; ++k) r.mag[k] = _mm256_abs_epi8(r.sgn[k]);
    } else {
        signs_of_rows(iq_r4_magnitudes<T>(b, ib, r.mag, r.words), r.sgn);
    }
    return r;
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
    static constexpr size_t kScales = T == GgmlType::IQ2_XS_R4 ? 264 : 296;  // IQ2_XS_R4 / IQ2_S_R4: the scale bytes
    static constexpr size_t kActBlock = kOneM ? sizeof(ik::BlockQ8K128) : sizeof(ik::BlockQ8K), kActQs = kOneM ? 12 : 8;
    // the four rows' f16 d of block b, twice (IQ3_XXS_R4's with its 1/4; IQ1_M_R4 has none per block: zeros)
    static __m256 block_d(const uint8_t* b) {
        if constexpr (kOneM) return _mm256_setzero_ps();
        const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
        const __m256 dd = _mm256_set_m128(d4, d4);
        return T == GgmlType::IQ3_XXS_R4 ? _mm256_mul_ps(dd, _mm256_set1_ps(0.25f)) : dd;
    }
};

// Row k's two scale words from a block's eight broadcast to both lanes: word 2 k in the low lane, 2 k + 1 in the high.
inline void row_scales(__m128i words, __m256i* sc) {
    const __m256i wb = _mm256_broadcastsi128_si256(words);
    __m256i pick = _mm256_setr_epi32(0x01000100, 0x01000100, 0x01000100, 0x01000100, 0x03020302, 0x03020302, 0x03020302, 0x03020302);
    for (int k = 0; k < 4; ++k, pick = _mm256_add_epi8(pick, _mm256_set1_epi8(4))) sc[k] = _mm256_shuffle_epi8(wb, pick);
}

// IQ2_XS_R4 / IQ2_S_R4: the block's 32 scale bytes (4 ib + k: row k's sub-block ib, low nibble its first 16, high
// its second) as the scale words of sub-blocks j and 4 + j in register j, for the + 64 offset against the
// token's sums of 16 (dword j of each lane: that sub-block's two).
inline void chunk16_scales(const uint8_t* sc, __m256i* t) {
    const __m256i bits = load32(sc);
    const __m256i one = _mm256_set1_epi8(1), low = _mm256_set1_epi8(0x0F);
    __m256i lo = _mm256_and_si256(bits, low), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low);
    lo = _mm256_or_si256(_mm256_add_epi8(lo, lo), one), hi = _mm256_or_si256(_mm256_add_epi8(hi, hi), one);
    const __m256i p01 = _mm256_unpacklo_epi8(lo, hi);  // sub-blocks 0, 1 (low lane), 4, 5 (high lane)
    const __m256i p23 = _mm256_unpackhi_epi8(lo, hi);  // 2, 3 and 6, 7
    const __m256i w0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(p01)), w4 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(p01, 1));
    const __m256i w2 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(p23)), w6 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(p23, 1));
    t[0] = _mm256_permute2x128_si256(w0, w4, 0x20), t[1] = _mm256_permute2x128_si256(w0, w4, 0x31);
    t[2] = _mm256_permute2x128_si256(w2, w6, 0x20), t[3] = _mm256_permute2x128_si256(w2, w6, 0x31);
}

// The + 64 offset's integers for one token (its Q8_K block at y): per lane the products of chunk16_scales' words
// and the token's sums of 16.
inline __m256i chunk16_offset(const __m256i* sc, const uint8_t* y) {
    const __m256i bsums = load32(y + offsetof(ik::BlockQ8K, bsums));
    return _mm256_add_epi32(
        _mm256_add_epi32(_mm256_madd_epi16(sc[0], _mm256_shuffle_epi32(bsums, 0x00)), _mm256_madd_epi16(sc[1], _mm256_shuffle_epi32(bsums, 0x55))),
        _mm256_add_epi32(_mm256_madd_epi16(sc[2], _mm256_shuffle_epi32(bsums, 0xAA)), _mm256_madd_epi16(sc[3], _mm256_shuffle_epi32(bsums, 0xFF))));
}

// NY tokens against the rows' groups: per 32 weights the four rows decoded once, then each token's PMADDUBSW pair
// sums times the row's scale (PMADDWD; the pair sums are the ones ik's PMADDUBSW gives, the products exact) and
// summed into ik's lanes. One token keeps a register per row and sums the lanes once a block. Chunk16: ik's
// 16-column kernel of IQ2_XS_R4 / IQ2_S_R4 (values + 64, unsigned, the offset back through the sums of 16 first).
template <GgmlType T, bool Chunk16, int NY>
void iquant_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    using S = IqR4Shape<T>;
    constexpr bool kOneM = S::kOneM, kIq2 = S::kIq2;
    constexpr int kSub = S::kSub;
    constexpr int64_t kSpan = S::kSpan;
    constexpr size_t kBlock = S::kBlock, kActBlock = S::kActBlock, kActQs = S::kActQs;
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
            __m256i row_sum[4] = {};  // (one token) row k's, ik's lanes summed at the block's end
            __m256i min_scales[4];    // Chunk16: sub-blocks j (low lane) and 4 + j (high lane), every row's scale words
            if constexpr (Chunk16) chunk16_scales(b + S::kScales, min_scales);
            for (int ib = 0; ib < kSub; ++ib) {
                IqR4Block r = decode_iq_r4<T>(b, ib);
                __m256i sc[4];
                row_scales(r.words, sc);
                if constexpr (Chunk16)
                    for (int k = 0; k < 4; ++k) r.mag[k] = _mm256_add_epi8(_mm256_sign_epi8(r.mag[k], r.sgn[k]), _mm256_set1_epi8(64));
                for (int t = 0; t < NY; ++t) {
                    const __m256i q = load32(y[t] + kActQs + 32 * ib);
                    __m256i d[4];
                    for (int k = 0; k < 4; ++k)
                        d[k] = _mm256_madd_epi16(sc[k], _mm256_maddubs_epi16(r.mag[k], Chunk16 ? q : _mm256_sign_epi8(q, r.sgn[k])));
                    if constexpr (NY == 1)
                        for (int k = 0; k < 4; ++k) row_sum[k] = _mm256_add_epi32(row_sum[k], d[k]);
                    else isum[t] = _mm256_add_epi32(isum[t], rows_by_half(d[0], d[1], d[2], d[3]));
                }
            }
            if constexpr (NY == 1) isum[0] = rows_by_half(row_sum[0], row_sum[1], row_sum[2], row_sum[3]);
            const __m256 dd = IqR4Shape<T>::block_d(b);
            for (int t = 0; t < NY; ++t) {
                float yd;
                std::memcpy(&yd, y[t], 4);
                if constexpr (Chunk16)
                    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_set1_ps(-64.f * yd)), _mm256_cvtepi32_ps(chunk16_offset(min_scales, y[t])),
                                             acc[t]);
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
template <GgmlType T>
inline IqR4Rows decode_iq_r4_vnni(const uint8_t* b, int ib) {
    IqR4Rows r;
    if constexpr (T == GgmlType::IQ1_M_R4) {
        __m256i v[4];
        iq1_m_r4_values(b, ib, v, r.words);
        for (int k = 0; k < 4; ++k) r.m[k] = _mm256_abs_epi8(v[k]), r.neg[k] = _mm256_movepi8_mask(v[k]);
    } else {
        r.signs_from(iq_r4_magnitudes<T>(b, ib, r.m, r.words));
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
            __m256i min_scales[4];  // Chunk16: as the AVX2 form's
            if constexpr (Chunk16) chunk16_scales(b + S::kScales, min_scales);
            for (int ib = 0; ib < kSub; ++ib) {
                IqR4Rows r = decode_iq_r4_vnni<T>(b, ib);
                if constexpr (Chunk16) {  // the values + 64 (unsigned) against the activations as they are
                    for (int k = 0; k < 4; ++k) {
                        r.m[k] = _mm256_add_epi8(_mm256_mask_sub_epi8(r.m[k], r.neg[k], _mm256_setzero_si256(), r.m[k]), _mm256_set1_epi8(64));
                        r.neg[k] = 0;
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
                if constexpr (Chunk16)  // the + 64 back through the token's sums of 16, as the AVX2 form does
                    a = _mm256_fmadd_ps(_mm256_mul_ps(dd, _mm256_set1_ps(-64.f * yd)), _mm256_cvtepi32_ps(chunk16_offset(min_scales, y[t])), a);
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
// IQ3_S_R4 sub-block ib's grid entries, register i (in order) holding in 32-bit lane k row k's entry for weights
// 4i..4i+3 and in lane 4 + k for 16 + 4i..16 + 4i + 3 (the bytes ik's repack puts side by side). The ninth index
// bits of the four rows come at once (word l of the 8: row l % 4's qh byte, shifted so that bit i (+ 4 for l >= 4)
// lands on bit 8). kViaStore (the VNNI kernels') reads the indices back from a store by 16-bit loads, which Intel and
// Zen 4/5 take well; Zen 3 stalls on that store's forwarding, and the AVX2 kernels take the vector out by two 64-bit
// moves instead (Zen 3: 1.02-1.11x ik against 0.64-0.86x by the store, 0.89x by scalar code from the bytes).
template <bool kViaStore>
struct Iq3sGrid {
    const uint8_t* qs;
    __m128i high;
    Iq3sGrid(const uint8_t* b, int ib) : qs(b + 8 + 32 * ib) {
        high = _mm_sllv_epi64(_mm_cvtepu8_epi16(_mm_set1_epi32(static_cast<int>(u32_of(b + 264 + 4 * ib)))), _mm_set_epi64x(4, 8));
    }
    __m256i next(int i) {
        const __m128i v = _mm_or_si128(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * i))),
                                       _mm_and_si128(high, _mm_set1_epi16(0x100)));
        high = _mm_srli_epi16(high, 1);
        if constexpr (kViaStore) {
            alignas(16) uint16_t idx[8];
            _mm_store_si128(reinterpret_cast<__m128i*>(idx), v);
            __asm__("" : "+m"(idx));  // (read back by loads, not by two-uop VPEXTRW)
            auto e = [&](int l) { return static_cast<int>(iq::kIq3sGrid[idx[l]]); };
            return _mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7));
        } else {
            const auto lo = static_cast<uint64_t>(_mm_cvtsi128_si64(v)), hi = static_cast<uint64_t>(_mm_extract_epi64(v, 1));
            auto e = [&](uint64_t q, int l) { return static_cast<int>(iq::kIq3sGrid[(q >> (16 * l)) & 0xFFFF]); };
            return _mm256_setr_epi32(e(lo, 0), e(lo, 1), e(lo, 2), e(lo, 3), e(hi, 0), e(hi, 1), e(hi, 2), e(hi, 3));
        }
    }
};
// IQ3_S_R4 in its own layout: per sub-block and 4-group i a register holding, in 32-bit lane k, row k's grid entry
// for weights 4i..4i+3 and, in lane 4 + k, for 16 + 4i..16 + 4i + 3 (the bytes ik's repack puts side by side),
// against the activations' dword i of each half broadcast: the products land in ik's lanes directly.
struct Iq3SBlockAvx2 {
    template <int NY>
    static void run(const uint8_t* b, const ik::BlockQ8K* y0, size_t act_bytes, __m256i* isum) {
        for (int ib = 0; ib < 8; ++ib) {
            Iq3sGrid<false> grid(b, ib);
            const __m256i signs = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 296 + 16 * ib)));
            __m256i qx[4], sg[4];
            for (int i = 0; i < 4; ++i) {
                qx[i] = grid.next(i);
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
            __m256i qx[4];
            Iq3sGrid<true> grid(b, ib);
            for (int i = 0; i < 4; ++i) qx[i] = grid.next(i);
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

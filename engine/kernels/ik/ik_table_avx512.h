// AVX-512 forms of ik_table_simd.h's one-token dot and small-batch tile: two 32-weight groups per 512-bit register
// (group 2p in bytes 0..31, 2p + 1 in 32..63), decoded there directly, PMADDUBSW then VPDPWSSD with the pairs'
// scales, and the two halves' int32 lanes added before the float steps. Every int32 lane then holds the integers
// the 256-bit kernel's lane holds (elements 4j..4j+3 of each group times their scale; integer sums are exact), so
// the float steps, and the bits, are the AVX2 kernel's. Included by the AVX-512 translation unit only.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <vector>

#include "engine/kernels/ik/ik_table_quads_avx512.h"
#include "engine/kernels/ik/ik_table_simd.h"

namespace moe::kernels {
namespace {
namespace ikt {

inline __m512i broadcast32(const uint8_t* p) { return _mm512_broadcast_i64x4(load32(p)); }
// A 16-byte table in every 128-bit lane.
inline __m512i table512(__m256i t) { return _mm512_inserti64x4(_mm512_castsi256_si512(t), t, 1); }
// Per-16-bit-lane shift counts: `a` for the first 256 bits, `b` for the second (both < 16).
template <int A, int B>
inline __m512i half_shifts() {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(A)), _mm256_set1_epi16(B), 1);
}
// 32 bytes as nibbles: lane 0 = bytes 0..15 & 15, lane 1 = their high nibbles, lanes 2 and 3 the same of bytes
// 16..31 (two groups laid out as nibbles32 lays out one).
inline __m512i nibble_pair(__m256i b32) {
    const __m512i b = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(b32));
    const __m512i shift = _mm512_setr_epi64(0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll);
    return _mm512_and_si512(_mm512_srlv_epi16(b, shift), _mm512_set1_epi8(0x0F));
}
// Bit `first` of each byte in the first 256 bits, bit `second` in the second, as a byte mask.
inline __mmask64 bits_mask(__m512i bytes, int first, int second) {
    return _mm512_test_epi8_mask(bytes, _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << first))),
                                                           _mm256_set1_epi8(static_cast<char>(1 << second)), 1));
}
// Bit g of each byte for group 2p's half (g = 2p) and g + 1 for group 2p + 1's.
inline __mmask64 bit_pair_mask(__m512i bytes, int g) { return bits_mask(bytes, g, g + 1); }
// Per group of the block a 0/1 bit, spread so that pair p's 512-bit blend mask of 64-bit lanes is byte p.
inline uint32_t group_lane_masks(uint32_t bits8) { return _pdep_u32(bits8, 0x11111111u) * 0xFu; }

// The four scale-pair registers of a block: pair p's int16 lanes 8i..8i+7 hold scale 4p + i.
inline void pair_scales(__m256i s16, __m512i sc[4]) {
    alignas(64) static constexpr auto kIdx = [] {
        std::array<std::array<int16_t, 32>, 4> idx{};
        for (int p = 0; p < 4; ++p)
            for (int i = 0; i < 32; ++i) idx[p][i] = static_cast<int16_t>(4 * p + i / 8);
        return idx;
    }();
    const __m512i s = _mm512_castsi256_si512(s16);
    for (int p = 0; p < 4; ++p) sc[p] = _mm512_permutexvar_epi16(_mm512_load_si512(kIdx[p].data()), s);
}

template <GgmlType T>
struct Dec512;

// The signed tables' negative values sit at the indices with one bit clear, so a pair's sign mask is a test of
// its indices (magnitudes2) rather than of the looked-up values.
constexpr bool negative_where_bit_clear(const int8_t* values, int n, int bit) {
    for (int i = 0; i < n; ++i)
        if ((values[i] < 0) != ((i & bit) == 0)) return false;
    return true;
}
static_assert(negative_where_bit_clear(ik::kIq4kValues, 32, 8) && negative_where_bit_clear(ik::kIq3nlValues, 16, 4));

template <>
struct Dec512<GgmlType::IQ4_KS> : Dec<GgmlType::IQ4_KS> {
    using Dec::Dec;
    __m512i t0 = table512(tab[0]), t1 = table512(tab[1]);
    __m512i a0 = table512(_mm256_abs_epi8(tab[0])), a1 = table512(_mm256_abs_epi8(tab[1]));
    uint32_t lanes = 0;
    __m512i idx[4];
    void block(const uint8_t* blk) {
        Dec::block(blk);
        const uint32_t odd = static_cast<uint32_t>(
                                 _mm_movemask_epi8(_mm_slli_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x->scales)), 7))) &
                             0xFF;
        lanes = group_lane_masks(odd);
        block_nibble_pairs(x->qs, idx);
    }
    __m512i values2(int p) const { return _mm512_shuffle_epi8(_mm512_mask_blend_epi64(static_cast<__mmask8>(lanes >> 8 * p), t0, t1), idx[p]); }
    // both tables' values are negative exactly at indices 0..7
    __m512i magnitudes2(int p, __mmask64& negative) const {
        negative = _mm512_testn_epi8_mask(idx[p], _mm512_set1_epi8(8));
        return _mm512_shuffle_epi8(_mm512_mask_blend_epi64(static_cast<__mmask8>(lanes >> 8 * p), a0, a1), idx[p]);
    }
};

// A block's 3-bit indices as four group pairs, the whole block at once (ik's AVX-512 layout of Q2Bits): the low
// two bits of group g are bits 2 (g % 4) of qs[32 (g / 4) + j], the third bit g of qh[j]. Pair p holds groups
// 2p and 2p + 1; qh is laid next to itself shifted right by one, so one shift per pair brings both groups' bits
// to bit 2 (16-bit shifts: the bits read never cross a byte).
inline void block_three_bit_pairs(const uint8_t* qs, const uint8_t* qh, __m512i out[4]) {
    const __m512i q = load64(qs), q2 = _mm512_srli_epi16(q, 2), m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
    const __m512i lo = _mm512_permutex2var_epi64(q, _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11), q2);    // groups 0, 1
    const __m512i hi = _mm512_permutex2var_epi64(q, _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15), q2);  // groups 4, 5
    const __m256i h = load32(qh);
    const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 1), 1);
    constexpr int kOrAnd = 0xF8;  // A | (B & C)
    out[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(lo, m3), _mm512_slli_epi16(hb, 2), m4, kOrAnd);
    out[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(lo, 4), m3), hb, m4, kOrAnd);
    out[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(hi, m3), _mm512_srli_epi16(hb, 2), m4, kOrAnd);
    out[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(hi, 4), m3), _mm512_srli_epi16(hb, 4), m4, kOrAnd);
}

template <>
struct Dec512<GgmlType::IQ3_KS> : Dec<GgmlType::IQ3_KS> {
    using Dec::Dec;
    __m512i t0 = table512(tab[0]), t1 = table512(tab[1]);
    __m512i a0 = table512(_mm256_abs_epi8(tab[0])), a1 = table512(_mm256_abs_epi8(tab[1]));
    uint32_t lanes = 0;
    __m512i idx[4];
    void block(const uint8_t* blk) {
        Dec::block(blk);
        lanes = group_lane_masks((x->extra >> 8) & 0xFF);
        block_three_bit_pairs(x->qs, x->qh, idx);
    }
    __m512i values2(int p) const { return _mm512_shuffle_epi8(_mm512_mask_blend_epi64(static_cast<__mmask8>(lanes >> 8 * p), t0, t1), idx[p]); }
    // both tables' values are negative exactly at indices 0..3
    __m512i magnitudes2(int p, __mmask64& negative) const {
        negative = _mm512_testn_epi8_mask(idx[p], _mm512_set1_epi8(4));
        return _mm512_shuffle_epi8(_mm512_mask_blend_epi64(static_cast<__mmask8>(lanes >> 8 * p), a0, a1), idx[p]);
    }
};

// Two bits per weight: bits 2 (g % 4) of qs[32 (g / 4) + j], for groups 2p (first half) and 2p + 1.
inline __m512i crumb_pair(const uint8_t* qs, int p) {
    const __m512i b = broadcast32(qs + 32 * (p / 2));
    return _mm512_and_si512(_mm512_srlv_epi16(b, p % 2 ? half_shifts<4, 6>() : half_shifts<0, 2>()), _mm512_set1_epi8(3));
}
// Four bits per weight: (qs[32 p + j] >> 4 h) & 15, h = 0 for group 2p, 1 for 2p + 1.
inline __m512i nibble_half_pair(const uint8_t* qs, int p) {
    return _mm512_and_si512(_mm512_srlv_epi16(broadcast32(qs + 32 * p), half_shifts<0, 4>()), _mm512_set1_epi8(0x0F));
}
// A 32-entry table's lookup: the low 16 entries in t0, the high in t1, the fifth index bit in `high`.
inline __m512i lookup32(__mmask64 high, __m512i t0, __m512i t1, __m512i nib) {
    return _mm512_mask_blend_epi8(high, _mm512_shuffle_epi8(t0, nib), _mm512_shuffle_epi8(t1, nib));
}

template <>
struct Dec512<GgmlType::IQ4_K> : Dec<GgmlType::IQ4_K> {
    using Dec::Dec;
    const __m512i t0 = table512(tab[0]), t1 = table512(tab[3]);  // every 128-bit lane of the first / second table
    const __m512i a0 = table512(_mm256_abs_epi8(tab[0])), a1 = table512(_mm256_abs_epi8(tab[3]));
    uint32_t lanes = 0;
    __m512i idx[4];
    void block(const uint8_t* blk) {
        Dec::block(blk);
        lanes = _pdep_u32(x->extra, 0x55555555u) * 3u;  // one bit per 16 weights, two 64-bit lanes each
        block_nibble_pairs(x->qs, idx);
    }
    __m512i values2(int p) const { return _mm512_shuffle_epi8(_mm512_mask_blend_epi64(static_cast<__mmask8>(lanes >> 8 * p), t0, t1), idx[p]); }
    // both tables' values are negative exactly at indices 0..7
    __m512i magnitudes2(int p, __mmask64& negative) const {
        negative = _mm512_testn_epi8_mask(idx[p], _mm512_set1_epi8(8));
        return _mm512_shuffle_epi8(_mm512_mask_blend_epi64(static_cast<__mmask8>(lanes >> 8 * p), a0, a1), idx[p]);
    }
};

template <GgmlType T>
struct FiveBit512 : Dec<T> {
    using Dec<T>::Dec;
    const __m512i t0 = table512(this->tab[0]), t1 = table512(this->tab[1]);
    __m512i qh;
    void block(const uint8_t* blk) {
        Dec<T>::block(blk);
        qh = broadcast32(this->x->qh);
    }
    __m512i values2(int p) const { return lookup32(bit_pair_mask(qh, 2 * p), t0, t1, nibble_half_pair(this->x->qs, p)); }
};
template <>
struct Dec512<GgmlType::IQ5_KS> : FiveBit512<GgmlType::IQ5_KS> {
    using FiveBit512::FiveBit512;
};
template <>
struct Dec512<GgmlType::IQ5_K> : FiveBit512<GgmlType::IQ5_K> {
    using FiveBit512::FiveBit512;
};

// Six bits: a nibble as IQ5's, the two high bits (bits 4 (p % 2) + 2 h, + 1 of qh[32 (p / 2) + j]) picking one of
// the table's four 16s.
template <>
struct Dec512<GgmlType::IQ6_K> : Dec<GgmlType::IQ6_K> {
    using Dec::Dec;
    const __m512i t[4] = {table512(tab[0]), table512(tab[1]), table512(tab[2]), table512(tab[3])};
    __m512i values2(int p) const {
        const __m512i nib = nibble_half_pair(x->qs, p), qh = broadcast32(x->qh + 32 * (p / 2));
        const int b = 4 * (p % 2);
        const __mmask64 lo_bit = bits_mask(qh, b, b + 2), hi_bit = bits_mask(qh, b + 1, b + 3);
        return _mm512_mask_blend_epi8(hi_bit, lookup32(lo_bit, t[0], t[1], nib), lookup32(lo_bit, t[2], t[3], nib));
    }
};

template <GgmlType T>
struct Crumb512 : Dec<T> {
    using Dec<T>::Dec;
    const __m512i t = table512(this->tab);
    __m512i values2(int p) const { return _mm512_shuffle_epi8(t, crumb_pair(this->x->qs, p)); }
};
template <>
struct Dec512<GgmlType::IQ2_K> : Crumb512<GgmlType::IQ2_K> {
    using Crumb512::Crumb512;
};
template <>
struct Dec512<GgmlType::IQ2_KS> : Crumb512<GgmlType::IQ2_KS> {
    using Crumb512::Crumb512;
};

template <>
struct Dec512<GgmlType::IQ3_K> : Dec<GgmlType::IQ3_K> {
    using Dec::Dec;
    const __m512i t = table512(tab);
    __m512i idx[4];
    void block(const uint8_t* blk) {
        Dec::block(blk);
        block_three_bit_pairs(x->qs, x->qh, idx);
    }
    __m512i values2(int p) const { return _mm512_shuffle_epi8(t, idx[p]); }
};

// IQ4_KSS: each uint16's low bit is a scale bit; the value nibbles are (w & ~1) ^ ((w & ~1) >> 1).
template <>
struct Dec512<GgmlType::IQ4_KSS> : Dec<GgmlType::IQ4_KSS> {
    using Dec::Dec;
    const __m512i t = table512(tab);
    // the scale bytes: bit 0 of each uint16, group g's eight in mask bits 8g..8g+7
    void block(const uint8_t* blk) {
        q = blk;
        const __m512i one = _mm512_set1_epi16(1);
        const uint64_t bits = static_cast<uint64_t>(_mm512_test_epi16_mask(load64(q), one)) |
                              static_cast<uint64_t>(_mm512_test_epi16_mask(load64(q + 64), one)) << 32;
        scale_bytes(_mm_cvtsi64_si128(static_cast<long long>(bits)), 4, s16, m16);
    }
    __m512i values2(int p) const {
        __m256i w = _mm256_and_si256(load32(q + 32 * p), _mm256_set1_epi16(static_cast<short>(0xfffe)));
        w = _mm256_xor_si256(w, _mm256_srli_epi16(w, 1));
        return _mm512_shuffle_epi8(t, nibble_pair(w));
    }
};

// IQ2_KL: a 5-bit index per two weights (low nibbles of qs[16 p + j] for group 2p, high for 2p + 1; the fifth
// bit from qh[j] bit g) into the two-value table; the pairs' values interleaved.
template <>
struct Dec512<GgmlType::IQ2_KL> : Dec<GgmlType::IQ2_KL> {
    using Dec::Dec;
    const __m512i f0 = _mm512_broadcast_i32x4(first[0]), f1 = _mm512_broadcast_i32x4(first[1]);
    const __m512i s0 = _mm512_broadcast_i32x4(second[0]), s1 = _mm512_broadcast_i32x4(second[1]);
    __m512i values2(int p) const {
        const __m512i q = _mm512_broadcast_i32x4(load16(x->qs + 16 * p)), h = _mm512_broadcast_i32x4(load16(x->qh));
        const __m512i nib = _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)), _mm512_set1_epi8(0x0F));
        const __mmask64 high = bit_pair_mask(h, 2 * p);
        const __m512i a = lookup32(high, f0, f1, nib), b = lookup32(high, s0, s1, nib);
        return _mm512_mask_blend_epi64(0xCC, _mm512_unpacklo_epi8(a, b), _mm512_unpackhi_epi8(a, b));
    }
};

// A block's eight int32 lanes against one token's values from its four group pairs (Groups256's interface):
// PMADDUBSW (signed values: magnitudes against the activations negated under the values' sign masks), VPDPWSSD
// against the pairs' scales, the two halves added.
template <class D>
struct Pairs512 {
    __m512i v[4], sc[4];
    __mmask64 neg[4] = {};
    static __m256i halves(__m512i sum) { return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1)); }
    static __m512i product(__m512i magnitudes, __mmask64 negative, __m512i q) {
        if constexpr (!D::kUnsigned) q = _mm512_mask_sub_epi8(q, negative, _mm512_setzero_si512(), q);
        return _mm512_maddubs_epi16(magnitudes, q);
    }
    // A signed pair's magnitudes and sign mask: from the decoder where its tables put the negative values at known
    // indices (one lookup in a table of magnitudes, a test of the index), else from the values.
    static __m512i magnitudes(const D& dec, int p, __mmask64& negative) {
        if constexpr (requires { dec.magnitudes2(p, negative); }) {
            return dec.magnitudes2(p, negative);
        } else {
            const __m512i v = dec.values2(p);
            negative = _mm512_movepi8_mask(v);
            return _mm512_abs_epi8(v);
        }
    }
    static __m256i one(const D& dec, const int8_t* qs) { return halves(sums_one(dec, qs)); }
    // one()'s sixteen int32 lanes before the halves are added
    static __m512i sums_one(const D& dec, const int8_t* qs) {
        __m512i sc[4], sum[2];  // two chains, each started by VPMADDWD (the same int32 lanes as VPDPWSSD onto 0)
        pair_scales(dec.s16, sc);
        for (int p = 0; p < 4; ++p) {
            __m512i prod;
            if constexpr (D::kUnsigned) {
                prod = product(dec.values2(p), 0, load64(qs + 64 * p));
            } else {
                __mmask64 negative;
                const __m512i m = magnitudes(dec, p, negative);
                prod = product(m, negative, load64(qs + 64 * p));
            }
            sum[p % 2] = p < 2 ? _mm512_madd_epi16(prod, sc[p]) : _mm512_dpwssd_epi32(sum[p % 2], prod, sc[p]);
        }
        return _mm512_add_epi32(sum[0], sum[1]);
    }
    explicit Pairs512(const D& dec) {
        pair_scales(dec.s16, sc);
        for (int p = 0; p < 4; ++p) {
            if constexpr (D::kUnsigned) v[p] = dec.values2(p);
            else v[p] = magnitudes(dec, p, neg[p]);
        }
    }
    // A token's sixteen int32 lanes before the halves are added.
    __m512i sums(const int8_t* qs) const {
        __m512i sum = _mm512_madd_epi16(product(v[0], neg[0], load64(qs)), sc[0]);
        for (int p = 1; p < 4; ++p) sum = _mm512_dpwssd_epi32(sum, product(v[p], neg[p], load64(qs + 64 * p)), sc[p]);
        return sum;
    }
    __m256i lanes(const D&, const int8_t* qs) const { return halves(sums(qs)); }
};

// dot_one over two rows at a time, row a's eight lanes in the first half of one float register and b's in the
// second (each half's steps are dot_one's, the same bits): the conversions and FMAs take one instruction for
// both, and the two rows' chains overlap.
template <class D>
void dot_rows_paired(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const ik::BlockQ8K*>(a);
    int64_t r = 0;
    for (; r + 1 < rows; r += 2) {
        const uint8_t* ra = w + static_cast<size_t>(r) * row_bytes;
        const uint8_t* rb = ra + row_bytes;
        D da(ra), db(rb);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < n / QK_K; ++i) {
            da.block(ra + D::kMeta + i * D::kBlock);
            db.block(rb + D::kMeta + i * D::kBlock);
            const __m512 f = _mm512_mul_ps(_mm512_mask_broadcastss_ps(_mm512_set1_ps(da.d()), 0xFF00, _mm_set_ss(db.d())), _mm512_set1_ps(y[i].d));
            if constexpr (D::kMins) {
                const __m256i bsums = load32(y[i].bsums);
                const __m256i ma = _mm256_madd_epi16(da.m16, bsums), mb = _mm256_madd_epi16(db.m16, bsums);
                acc = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_castsi256_si512(ma), mb, 1)), acc);
            }
            const __m512i sa = Pairs512<D>::sums_one(da, y[i].qs), sb = Pairs512<D>::sums_one(db, y[i].qs);
            const __m512i both = halves_of_two(sa, sb);
            acc = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(both), acc);
        }
        out[r] = hsum_half(acc, 0);
        out[r + 1] = hsum_half(acc, 1);
    }
    if (r < rows) out[r] = dot_one<D, Pairs512>(n, w + static_cast<size_t>(r) * row_bytes, a);
}

// tile_of with two tokens per 512-bit float register: token a's eight lanes in the first half, b's in the second,
// so the halves' integer sum, the conversion and the FMAs take one instruction for both; each half's steps are
// tile_of's for its token (the same bits). kPairs pairs per pass, unrolled so the accumulators stay in registers
// (an odd count's last pair repeats its token).
template <class D, int kPairs>
void paired_pass(int64_t n, const uint8_t* row, const ik::BlockQ8K* const* y, float* out, int64_t out_stride, int nt) {
    D dec(row);
    __m512 acc[kPairs];
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        dec.block(row + D::kMeta + i * D::kBlock);
        const Pairs512<D> blk(dec);
        const __m512 d = _mm512_set1_ps(dec.d());
        for (int k = 0; k < kPairs; ++k) {
            const ik::BlockQ8K &ya = y[2 * k][i], &yb = y[2 * k + 1][i];
            const __m512 f = _mm512_mul_ps(d, _mm512_mask_broadcastss_ps(_mm512_set1_ps(ya.d), 0xFF00, _mm_load_ss(&yb.d)));
            if constexpr (D::kMins) {
                const __m256i ma = _mm256_madd_epi16(dec.m16, load32(ya.bsums)), mb = _mm256_madd_epi16(dec.m16, load32(yb.bsums));
                acc[k] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_castsi256_si512(ma), mb, 1)), acc[k]);
            }
            const __m512i sa = blk.sums(ya.qs), sb = blk.sums(yb.qs);
            const __m512i both = halves_of_two(sa, sb);
            acc[k] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(both), acc[k]);
        }
    }
    for (int k = 0; k < nt; ++k) out[k * out_stride] = hsum_half(acc[k / 2], k % 2);
}

template <class D, template <class> class>
void tile_of_paired(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                    int64_t out_stride) {
    constexpr int kTok = 8;
    for (int t0 = 0; t0 < n_tok; t0 += kTok) {
        const int nt = std::min(kTok, n_tok - t0);
        const ik::BlockQ8K* y[kTok];
        for (int k = 0; k < kTok; ++k) y[k] = reinterpret_cast<const ik::BlockQ8K*>(act + (t0 + std::min(k, nt - 1)) * act_bytes);
        for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* row = w + r * row_bytes;
            float* o = out + t0 * out_stride + r;
            switch ((nt + 1) / 2) {
                case 4: paired_pass<D, 4>(n, row, y, o, out_stride, nt); break;
                case 3: paired_pass<D, 3>(n, row, y, o, out_stride, nt); break;
                case 2: paired_pass<D, 2>(n, row, y, o, out_stride, nt); break;
                default: paired_pass<D, 1>(n, row, y, o, out_stride, nt); break;
            }
        }
    }
}

template <GgmlType T>
void install512(KernelTable& t) {
    set_dot<dot_of<Dec512<T>, Pairs512>>(t, T);
    if constexpr (T == GgmlType::IQ3_KS) t.dot_rows[type_slot(T)] = dot_rows_quad_corrected<QuadIQ3KS>;
    else if constexpr (T == GgmlType::IQ4_KS) t.dot_rows[type_slot(T)] = dot_rows_iq4_ks;
    else t.dot_rows[type_slot(T)] = dot_rows_paired<Dec512<T>>;
    if constexpr (T == GgmlType::IQ3_KS) t.tile[type_slot(T)] = tile_quad_corrected<QuadIQ3KS>;
    else t.tile[type_slot(T)] = tile_of_paired<Dec512<T>, Pairs512>;
}

}  // namespace ikt

// Replaces the 256-bit kernels add_ik_table_kernels installed, type by type.
inline void add_ik_table_kernels_avx512(KernelTable& t) {
    ikt::install512<GgmlType::IQ2_K>(t);
    ikt::install512<GgmlType::IQ3_K>(t);
    ikt::install512<GgmlType::IQ4_K>(t);
    ikt::install512<GgmlType::IQ5_K>(t);
    ikt::install512<GgmlType::IQ6_K>(t);
    ikt::install512<GgmlType::IQ2_KS>(t);
    ikt::install512<GgmlType::IQ3_KS>(t);
    ikt::install512<GgmlType::IQ4_KS>(t);
    ikt::install512<GgmlType::IQ5_KS>(t);
    ikt::install512<GgmlType::IQ4_KSS>(t);
    ikt::install512<GgmlType::IQ2_KL>(t);
}

}  // namespace
}  // namespace moe::kernels

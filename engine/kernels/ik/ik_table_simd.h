// AVX2 kernels for ik_llama.cpp's eleven table types (IQ2_K ... IQ6_K, IQ2_KS ... IQ5_KS, IQ4_KSS, IQ2_KL) against
// ik's Q8_K activations, with the bits of ik_ref.cpp's reference: per 32-weight group the kernel values as bytes
// (byte b = element b), pair sums by PMADDUBSW (unsigned kernels: the values are the unsigned operand and pairs
// saturate, as ik's do; signed kernels: the sign moved onto the activations), times the 16's int16 scale by
// PMADDWD into eight int32 lanes; per block the offset lanes (activation sums times min coefficients) and then
// the value lanes FMA'd with d * y.d. Included by the AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_decode.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/simd_common.h"
#include "engine/kernels/token_passes.h"

namespace moe::kernels {
namespace {
namespace ikt {

using ik::QK_K;

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
// Entries Offset..Offset+Count-1 of a value table (plus a constant) in both lanes, the rest zero: built at
// compile time, so a row's decoder starts with one broadcast load per table.
template <const int8_t* T, int Offset, int Add, int Count = 16>
inline __m256i table256() {
    alignas(16) static constexpr auto kEntries = [] {
        std::array<int8_t, 16> e{};
        for (int i = 0; i < Count; ++i) e[i] = static_cast<int8_t>(T[Offset + i] + Add);
        return e;
    }();
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kEntries.data())));
}
// A block's 16 int16 scales (one per 16 weights, natural order; the per-32 types repeat theirs), as two registers
// holding each half in both lanes; pair(g) = elements 0..15 of group g times s[2g], 16..31 times s[2g + 1].
struct Scales {
    __m256i lo, hi;
    explicit Scales(__m256i s16) : lo(_mm256_permute4x64_epi64(s16, 0x44)), hi(_mm256_permute4x64_epi64(s16, 0xEE)) {}
    __m256i pair(int g) const {
        const int k = g % 4;
        const __m256i shuf = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>((4 * k + 2) | ((4 * k + 3) << 8))),
                                              _mm_set1_epi16(static_cast<short>((4 * k) | ((4 * k + 1) << 8))));
        return _mm256_shuffle_epi8(g < 4 ? lo : hi, shuf);
    }
};
// int8 x 16 to int16 x 16.
inline __m256i widen(__m128i b) { return _mm256_cvtepi8_epi16(b); }
// Eight per-32 values (int8, bytes 0..7) repeated for both 16s: 16 int16.
inline __m256i widen_dup(__m128i b8) { return widen(_mm_unpacklo_epi8(b8, b8)); }
// Bit k of `bits` as 0/1 in int16 lane k (k = 0..15).
inline __m256i bit_lanes(uint32_t bits) {
    const __m256i k = _mm256_set_epi16(static_cast<short>(0x8000), 0x4000, 0x2000, 0x1000, 0x800, 0x400, 0x200, 0x100, 0x80, 0x40, 0x20, 0x10, 8, 4,
                                       2, 1);
    return _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(static_cast<short>(bits)), k), k), _mm256_set1_epi16(1));
}
// Bit k of the low 8 bits of `bits` as 0xFF / 0 in byte k (k = 0..7).
inline __m128i bit_bytes8(uint32_t bits) {
    const __m128i k = _mm_set_epi8(0, 0, 0, 0, 0, 0, 0, 0, static_cast<char>(0x80), 0x40, 0x20, 0x10, 8, 4, 2, 1);
    return _mm_cmpeq_epi8(_mm_and_si128(_mm_set1_epi8(static_cast<char>(bits)), k), k);
}
// The low and high nibbles of n bytes interleaved: byte 2i = b[i] & 15, byte 2i + 1 = b[i] >> 4.
inline __m128i nibbles_interleaved(__m128i b) {
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}
// Four bytes' low nibbles then their high nibbles (bytes 0..7).
inline __m128i nibbles_split4(uint32_t w) {
    const __m128i b = _mm_cvtsi32_si128(static_cast<int>(w)), m = _mm_set1_epi8(0x0F);
    return _mm_unpacklo_epi32(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}
// The 2-bit fields of a 32-bit word, one per byte (16 bytes).
inline __m128i crumbs16(uint32_t w) {
    return _mm_set_epi64x(static_cast<long long>(_pdep_u64(w >> 16, 0x0303030303030303ull)),
                          static_cast<long long>(_pdep_u64(w & 0xFFFF, 0x0303030303030303ull)));
}
inline uint32_t load_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
// 2-bit field k of 64 bits of `bits` for each of 32 bytes: byte j of group = (qs[j] >> shift) & 3.
inline __m256i crumbs(const uint8_t* qs32, int shift) { return _mm256_and_si256(_mm256_srli_epi16(load32(qs32), shift), _mm256_set1_epi8(3)); }
inline float read_f32(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
}
inline float read_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h2f(h);
}

// A decoder per type: the row scale (ctor), then per block: d(), the 16 int16 scales s16 (and the min
// coefficients m16 = -add * scale where kMins), and each group's 32 kernel values.
template <GgmlType T>
struct Dec;

template <>
struct Dec<GgmlType::IQ4_KS> {
    static constexpr bool kUnsigned = false, kMins = false;
    static constexpr int kMeta = 4, kBlock = sizeof(ik::BlockIQ4_KS);
    float drow;
    const ik::BlockIQ4_KS* x = nullptr;
    __m256i tab[2] = {table256<ik::kIq4kValues, 0, 0>(), table256<ik::kIq4kValues, 16, 0>()};
    __m256i s16, m16;
    explicit Dec(const uint8_t* row) : drow(read_f32(row)) {}
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ4_KS*>(blk);
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x->scales));
        s16 = widen_dup(_mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(static_cast<char>(0xFE))), _mm_set1_epi8(127)));
    }
    float d() const { return drow; }
    __m256i values(int g) const { return _mm256_shuffle_epi8(tab[x->scales[g] & 1], nibbles32(x->qs + 16 * g)); }
};

// (sc & 254) - 127 scales and offset coefficients scale * (-128 + step * (sc & 1)) of eight scale bytes.
inline void scale_bytes(__m128i b, int step, __m256i& s16, __m256i& m16) {
    s16 = widen_dup(_mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(static_cast<char>(0xFE))), _mm_set1_epi8(127)));
    const __m256i odd = widen_dup(_mm_and_si128(b, _mm_set1_epi8(1)));
    m16 = _mm256_mullo_epi16(s16, _mm256_add_epi16(_mm256_set1_epi16(-128), _mm256_mullo_epi16(odd, _mm256_set1_epi16(static_cast<short>(step)))));
}

template <>
struct Dec<GgmlType::IQ4_KSS> {
    static constexpr bool kUnsigned = true, kMins = true;
    static constexpr int kMeta = 4, kBlock = sizeof(ik::BlockIQ4_KSS);
    float drow;
    const uint8_t* q = nullptr;
    __m256i tab = table256<ik::kIq4kValues, 0, 128>();
    __m256i s16, m16;
    explicit Dec(const uint8_t* row) : drow(read_f32(row)) {}
    void block(const uint8_t* blk) {
        q = blk;
        // the scale byte of a group: bit 0 of its eight uint16 (PMOVMSKB of the low bytes' bit 0), two groups a load
        uint64_t bits = 0;
        for (int p = 0; p < 4; ++p)
            bits |=
                static_cast<uint64_t>(_pext_u32(static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(load32(q + 32 * p), 7))), 0x55555555u))
                << (16 * p);
        scale_bytes(_mm_cvtsi64_si128(static_cast<long long>(bits)), 4, s16, m16);
    }
    float d() const { return drow; }
    __m256i values(int g) const {
        __m128i w = _mm_and_si128(load16(q + 16 * g), _mm_set1_epi16(static_cast<short>(0xfffe)));
        w = _mm_xor_si128(w, _mm_srli_epi16(w, 1));
        const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(w, 4), w), _mm256_set1_epi8(0x0F));
        return _mm256_shuffle_epi8(tab, nib);
    }
};

// 5-bit codes (low nibble of byte j of 32 for even groups of a 64, high for odd; the fifth bit from qh[j] bit
// `bit`) into a 32-entry table: PSHUFB zeroes where an index has bit 7 set, so each half's lookup keeps only its
// own codes and the two are ORed.
inline __m256i five_bit(const uint8_t* qs32, int odd, const uint8_t* qh32, int bit, __m256i lo_tab, __m256i hi_tab) {
    const __m256i nib = _mm256_and_si256(_mm256_srli_epi16(load32(qs32), 4 * odd), _mm256_set1_epi8(0x0F));
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(load32(qh32), 7 - bit), _mm256_set1_epi8(static_cast<char>(0x80)));
    return _mm256_or_si256(_mm256_shuffle_epi8(lo_tab, _mm256_or_si256(nib, h)),
                           _mm256_shuffle_epi8(hi_tab, _mm256_or_si256(nib, _mm256_xor_si256(h, _mm256_set1_epi8(static_cast<char>(0x80))))));
}

template <>
struct Dec<GgmlType::IQ5_KS> {
    static constexpr bool kUnsigned = true, kMins = true;
    static constexpr int kMeta = 4, kBlock = sizeof(ik::BlockIQ5_KS);
    float drow;
    const ik::BlockIQ5_KS* x = nullptr;
    __m256i tab[2] = {table256<ik::kIq5nlValues, 0, 128>(), table256<ik::kIq5nlValues, 16, 128>()};
    __m256i s16, m16;
    explicit Dec(const uint8_t* row) : drow(read_f32(row)) {}
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ5_KS*>(blk);
        scale_bytes(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x->scales)), 2, s16, m16);
    }
    float d() const { return drow; }
    __m256i values(int g) const { return five_bit(x->qs + 32 * (g / 2), g % 2, x->qh, g, tab[0], tab[1]); }
};

// IQ4_K / IQ5_K's 6-bit scales minus 32: low nibbles from scales_l, two high bits per 16 from scales_h.
inline __m256i six_bit_scales(const uint8_t* scales_l, const uint8_t* scales_h) {
    const __m128i lo = nibbles_interleaved(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales_l)));
    const __m128i hi = _mm_slli_epi16(crumbs16(load_u32(scales_h)), 4);
    return widen(_mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32)));
}

template <>
struct Dec<GgmlType::IQ5_K> {
    static constexpr bool kUnsigned = false, kMins = true;
    static constexpr int kMeta = 0, kBlock = sizeof(ik::BlockIQ5_K);
    const ik::BlockIQ5_K* x = nullptr;
    __m256i tab[2] = {table256<ik::kIq5nlValues, 0, 0>(), table256<ik::kIq5nlValues, 16, 0>()};
    __m256i s16, m16;
    explicit Dec(const uint8_t*) {}
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ5_K*>(blk);
        s16 = six_bit_scales(x->scales_l, x->scales_h);
        m16 = _mm256_mullo_epi16(s16, _mm256_slli_epi16(bit_lanes(x->extra), 1));
    }
    float d() const { return h2f(x->d); }
    __m256i values(int g) const { return five_bit(x->qs + 32 * (g / 2), g % 2, x->qh, g, tab[0], tab[1]); }
};

template <>
struct Dec<GgmlType::IQ4_K> {
    static constexpr bool kUnsigned = false, kMins = false;
    static constexpr int kMeta = 0, kBlock = sizeof(ik::BlockIQ4_K);
    const ik::BlockIQ4_K* x = nullptr;
    __m256i tab[4];  // [bits of the group's two 16s]: low lane for the first 16, high for the second
    __m256i s16, m16;
    explicit Dec(const uint8_t*) {
        const __m128i t0 = load16(ik::kIq4kValues), t1 = load16(ik::kIq4kValues + 16);
        tab[0] = _mm256_set_m128i(t0, t0), tab[1] = _mm256_set_m128i(t0, t1), tab[2] = _mm256_set_m128i(t1, t0), tab[3] = _mm256_set_m128i(t1, t1);
    }
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ4_K*>(blk);
        s16 = six_bit_scales(x->scales_l, x->scales_h);
    }
    float d() const { return h2f(x->d); }
    __m256i values(int g) const { return _mm256_shuffle_epi8(tab[(x->extra >> 2 * g) & 3], nibbles32(x->qs + 16 * g)); }
};

template <>
struct Dec<GgmlType::IQ6_K> {
    static constexpr bool kUnsigned = false, kMins = true;
    static constexpr int kMeta = 0, kBlock = sizeof(ik::BlockIQ6_K);
    const ik::BlockIQ6_K* x = nullptr;
    __m256i tab[4];  // the 64-entry table's four 16s
    __m256i s16, m16;
    explicit Dec(const uint8_t*) {
        tab[0] = table256<ik::kIq6nlValues, 0, 0>(), tab[1] = table256<ik::kIq6nlValues, 16, 0>();
        tab[2] = table256<ik::kIq6nlValues, 32, 0>(), tab[3] = table256<ik::kIq6nlValues, 48, 0>();
    }
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ6_K*>(blk);
        s16 = widen(load16(x->scales));
        m16 = _mm256_mullo_epi16(s16, bit_lanes(x->extra));
    }
    float d() const { return h2f(x->d); }
    __m256i values(int g) const {
        const int ib64 = g / 2, odd = g % 2;
        const __m256i nib = _mm256_and_si256(_mm256_srli_epi16(load32(x->qs + 32 * ib64), 4 * odd), _mm256_set1_epi8(0x0F));
        // the two high bits (bits p, p + 1 of qh) pick one of four 16s: shifted to bit 7 of each byte (a 16-bit
        // shift: only bit 7 of each byte matters to blendv) they choose between the four lookups
        const __m256i qh = load32(x->qh + 32 * (ib64 / 2));
        const int p = 4 * (ib64 % 2) + 2 * odd;
        const __m128i s0 = _mm_cvtsi32_si128(7 - p), s1 = _mm_cvtsi32_si128(6 - p);
        const __m256i b0 = _mm256_sll_epi16(qh, s0), b1 = _mm256_sll_epi16(qh, s1);
        const __m256i v01 = _mm256_blendv_epi8(_mm256_shuffle_epi8(tab[0], nib), _mm256_shuffle_epi8(tab[1], nib), b0);
        const __m256i v23 = _mm256_blendv_epi8(_mm256_shuffle_epi8(tab[2], nib), _mm256_shuffle_epi8(tab[3], nib), b0);
        return _mm256_blendv_epi8(v01, v23, b1);
    }
};

// 2-bit codes of groups of four (byte j of 32, bits 2 * (g % 4)) into the first half of iq2nl plus 32.
template <>
struct Dec<GgmlType::IQ2_K> {
    static constexpr bool kUnsigned = true, kMins = true;
    static constexpr int kMeta = 0, kBlock = sizeof(ik::BlockIQ2_K);
    const ik::BlockIQ2_K* x = nullptr;
    __m256i tab = table256<ik::kIq2nlValues, 0, 32, 4>();
    __m256i s16, m16;
    explicit Dec(const uint8_t*) {}
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ2_K*>(blk);
        s16 = widen(_mm_sub_epi8(nibbles_interleaved(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x->scales))), _mm_set1_epi8(8)));
        m16 = _mm256_mullo_epi16(s16, _mm256_add_epi16(_mm256_set1_epi16(-32), _mm256_mullo_epi16(bit_lanes(x->extra), _mm256_set1_epi16(5))));
    }
    float d() const { return h2f(x->d); }
    __m256i values(int g) const { return _mm256_shuffle_epi8(tab, crumbs(x->qs + 32 * (g / 4), 2 * (g % 4))); }
};

template <>
struct Dec<GgmlType::IQ2_KS> {
    static constexpr bool kUnsigned = true, kMins = true;
    static constexpr int kMeta = 2, kBlock = sizeof(ik::BlockIQ2_KS);
    float drow;
    const ik::BlockIQ2_KS* x = nullptr;
    __m256i tab = table256<ik::kIq2nlValues, 0, 32, 4>();
    __m256i s16, m16;
    explicit Dec(const uint8_t* row) : drow(read_f16(row)) {}
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ2_KS*>(blk);
        const __m128i nib = nibbles_interleaved(_mm_cvtsi32_si128(static_cast<int>(load_u32(x->scales))));
        const __m128i fifth = _mm_and_si128(bit_bytes8(x->extra >> 8), _mm_set1_epi8(16));
        s16 = widen_dup(_mm_sub_epi8(_mm_or_si128(nib, fifth), _mm_set1_epi8(16)));
        const __m128i half = _mm_and_si128(bit_bytes8(x->extra), _mm_set1_epi8(5));
        m16 = _mm256_mullo_epi16(s16, _mm256_add_epi16(_mm256_set1_epi16(-32), widen_dup(half)));
    }
    float d() const { return drow; }
    __m256i values(int g) const { return _mm256_shuffle_epi8(tab, crumbs(x->qs + 32 * (g / 4), 2 * (g % 4))); }
};

// 3-bit codes: two bits as IQ2_K's, the third from qh[j] bit g.
inline __m256i three_bit(const uint8_t* qs32, int shift, const uint8_t* qh32, int g) {
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(_mm256_slli_epi16(load32(qh32), 7 - g), 5), _mm256_set1_epi8(4));
    return _mm256_or_si256(crumbs(qs32, shift), hi);
}

template <>
struct Dec<GgmlType::IQ3_K> {
    static constexpr bool kUnsigned = true, kMins = true;
    static constexpr int kMeta = 0, kBlock = sizeof(ik::BlockIQ3_K);
    const ik::BlockIQ3_K* x = nullptr;
    __m256i tab = table256<ik::kIq3nlValues, 0, 64, 8>();
    __m256i s16, m16;
    explicit Dec(const uint8_t*) {}
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ3_K*>(blk);
        const __m128i nib = nibbles_interleaved(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x->scales_l)));
        const __m256i odd = widen(_mm_add_epi8(_mm_add_epi8(nib, nib), _mm_set1_epi8(1)));
        const __m256i neg = _mm256_sub_epi16(_mm256_setzero_si256(), bit_lanes(x->scales_h));  // -1 where negative
        s16 = _mm256_sub_epi16(_mm256_xor_si256(odd, neg), neg);
        m16 = _mm256_mullo_epi16(s16, _mm256_add_epi16(_mm256_set1_epi16(-64), _mm256_slli_epi16(bit_lanes(x->extra), 2)));
    }
    float d() const { return h2f(x->d); }
    __m256i values(int g) const { return _mm256_shuffle_epi8(tab, three_bit(x->qs + 32 * (g / 4), 2 * (g % 4), x->qh, g)); }
};

template <>
struct Dec<GgmlType::IQ3_KS> {
    static constexpr bool kUnsigned = false, kMins = false;
    static constexpr int kMeta = 2, kBlock = sizeof(ik::BlockIQ3_KS);
    float drow;
    const ik::BlockIQ3_KS* x = nullptr;
    __m256i tab[2] = {table256<ik::kIq3nlValues, 0, 0, 8>(), table256<ik::kIq3nlValues, 8, 0, 8>()};
    __m256i s16, m16;
    explicit Dec(const uint8_t* row) : drow(read_f16(row)) {}
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ3_KS*>(blk);
        const __m128i fifth = _mm_and_si128(bit_bytes8(x->extra), _mm_set1_epi8(16));
        s16 = widen_dup(_mm_sub_epi8(_mm_or_si128(nibbles_split4(load_u32(x->scales)), fifth), _mm_set1_epi8(16)));
    }
    float d() const { return drow; }
    __m256i values(int g) const {
        return _mm256_shuffle_epi8(tab[(x->extra >> (8 + g)) & 1], three_bit(x->qs + 32 * (g / 4), 2 * (g % 4), x->qh, g));
    }
};

// Pairs: a 5-bit index per two weights (low nibble for even groups of a 64, high for odd; the fifth bit from
// qh[j] bit 2 * (g / 2) + g % 2 = g) into the two-value table, plus 64.
template <>
struct Dec<GgmlType::IQ2_KL> {
    static constexpr bool kUnsigned = true, kMins = true;
    static constexpr int kMeta = 2, kBlock = sizeof(ik::BlockIQ2_KL);
    float drow;
    const ik::BlockIQ2_KL* x = nullptr;
    __m128i first[2], second[2];  // the pairs' first and second values (+64), indices 0..15 and 16..31
    __m256i s16, m16;
    // built at compile time: a row's decoder starts with four loads (expert rows are a few blocks long)
    alignas(16) static constexpr auto kHalves = [] {
        std::array<uint8_t, 64> e{};
        for (int i = 0; i < 32; ++i) {
            e[i] = static_cast<uint8_t>(static_cast<int8_t>(ik::kIq2klValues[i] & 0xFF) + 64);
            e[32 + i] = static_cast<uint8_t>(static_cast<int8_t>(ik::kIq2klValues[i] >> 8) + 64);
        }
        return e;
    }();
    explicit Dec(const uint8_t* row) : drow(read_f16(row)) {
        first[0] = load16(kHalves.data()), first[1] = load16(kHalves.data() + 16);
        second[0] = load16(kHalves.data() + 32), second[1] = load16(kHalves.data() + 48);
    }
    void block(const uint8_t* blk) {
        x = reinterpret_cast<const ik::BlockIQ2_KL*>(blk);
        const __m128i lo = nibbles_split4(load_u32(x->scales_l));
        const __m128i hi = _mm_slli_epi16(_mm_cvtsi64_si128(static_cast<long long>(_pdep_u64(x->scales_h, 0x0303030303030303ull))), 4);
        s16 = widen_dup(_mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32)));
        m16 = _mm256_mullo_epi16(s16, _mm256_set1_epi16(-64));
    }
    float d() const { return drow; }
    __m256i values(int g) const {
        const int ib64 = g / 2, h = g % 2;
        const __m128i nib = _mm_and_si128(_mm_srli_epi16(load16(x->qs + 16 * ib64), 4 * h), _mm_set1_epi8(0x0F));
        const __m128i hm = _mm_set1_epi8(static_cast<char>(1 << g));
        const __m128i high = _mm_cmpeq_epi8(_mm_and_si128(load16(x->qh), hm), hm);
        const __m128i a = _mm_blendv_epi8(_mm_shuffle_epi8(first[0], nib), _mm_shuffle_epi8(first[1], nib), high);
        const __m128i b = _mm_blendv_epi8(_mm_shuffle_epi8(second[0], nib), _mm_shuffle_epi8(second[1], nib), high);
        return _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
    }
};

// A block's eight int32 lanes against one token's values, one 32-weight group per register, decoded as it goes.
// (Two groups per 512-bit register: ik_table_avx512.h.)
template <class D>
struct Groups256 {
    static __m256i product(const D&, __m256i v, __m256i q) {
        return D::kUnsigned ? _mm256_maddubs_epi16(v, q) : _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q, v));
    }
    static __m256i one(const D& dec, const int8_t* qs) {
        const Scales sc(dec.s16);
        __m256i sum = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) sum = _mm256_add_epi32(sum, _mm256_madd_epi16(sc.pair(g), product(dec, dec.values(g), load32(qs + 32 * g))));
        return sum;
    }
};

// One row against one token: per block the offset lanes (where the type has them) then the value lanes, each
// FMA'd with d * y.d: the reference's lanes and float steps. B: the block kernel (Groups256, or Pairs512).
template <class D, template <class> class B>
[[gnu::always_inline]] inline float dot_one(int64_t n, const void* w, const void* a) {
    const auto* row = static_cast<const uint8_t*>(w);
    D dec(row);
    row += D::kMeta;
    const auto* y = static_cast<const ik::BlockQ8K*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; ++i) {
        dec.block(row + i * D::kBlock);
        const __m256 f = _mm256_set1_ps(dec.d() * y[i].d);
        if constexpr (D::kMins) acc = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(_mm256_madd_epi16(dec.m16, load32(y[i].bsums))), acc);
        acc = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(B<D>::one(dec, y[i].qs)), acc);
    }
    return hsum_float_8(acc);
}
template <class D, template <class> class B>
float dot_of(int64_t n, const void* w, const void* a) {
    return dot_one<D, B>(n, w, a);
}
// The row loop with the dot inlined, so the decoder's tables and constants are built once per call rather than
// once per row (expert rows are a few blocks long).
template <class D, template <class> class B>
void dot_rows_of_table(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    for (int64_t r = 0; r < rows; ++r) out[r] = dot_one<D, B>(n, w + static_cast<size_t>(r) * row_bytes, a);
}

// Rows x NT tokens in ik's AVX2 shape: each half block's four groups decoded once for the pass, then each token's
// four products added into its int32 lanes. A whole decoded block (eight values, eight scale registers) leaves no
// room in sixteen registers for the tokens' sums; a half does. The integers and float steps are dot_one's.
template <class D, int NT>
void tile_pass(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    const ik::BlockQ8K* ys[NT];
    for (int t = 0; t < NT; ++t) ys[t] = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + r * row_bytes;
        D dec(row);
        __m256 acc[NT];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t i = 0; i < n / QK_K; ++i) {
            dec.block(row + D::kMeta + i * D::kBlock);
            const Scales sc(dec.s16);
            __m256i sum[NT];
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                __m256i v[4], s[4];
#pragma GCC unroll 4
                for (int k = 0; k < 4; ++k) v[k] = dec.values(4 * h + k), s[k] = sc.pair(4 * h + k);
#pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) {
                    const int8_t* qs = ys[t][i].qs + 128 * h;
                    __m256i p[4];
                    for (int k = 0; k < 4; ++k) p[k] = _mm256_madd_epi16(s[k], Groups256<D>::product(dec, v[k], load32(qs + 32 * k)));
                    const __m256i half = _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
                    sum[t] = h == 0 ? half : _mm256_add_epi32(sum[t], half);
                }
            }
            for (int t = 0; t < NT; ++t) {
                const __m256 f = _mm256_set1_ps(dec.d() * ys[t][i].d);
                if constexpr (D::kMins) acc[t] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(_mm256_madd_epi16(dec.m16, load32(ys[t][i].bsums))), acc[t]);
                acc[t] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(sum[t]), acc[t]);
            }
        }
        for (int t = 0; t < NT; ++t) out[t * out_stride + r] = hsum_float_8(acc[t]);
    }
}
template <class D>
void tile_of(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
             int64_t out_stride) {
    token_passes(n_tok, [&](auto nt, int t) {
        tile_pass<D, decltype(nt)::value>(n, w, row_bytes, rows, act + t * act_bytes, act_bytes, out + t * out_stride, out_stride);
    });
}

template <class D>
void rows_one_pass(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    tile_pass<D, 1>(n, w, row_bytes, rows, static_cast<const uint8_t*>(a), 0, out, 0);
}

// ik's conversion of a row to Q8_K_R8 (ik_ref.cpp: convert_table_row) from the decoders: each weight's value *
// scale as kernel value * scale + the 16's min coefficient (kernel value = value + add, min = -add * scale), the
// block's largest magnitude, then the requantization by 1 / dnew with rounding half to even, or the products as
// they are where they fit.
template <GgmlType T>
void convert_row(int64_t n, const uint8_t* w, int8_t* q, float* scales) {
    using D = Dec<T>;
    D dec(w);
    const float d0 = T == GgmlType::IQ2_KS || T == GgmlType::IQ2_KL ? 1.f / 125 : T == GgmlType::IQ2_K ? 1.f / 120 : 1.f / 127;
    for (int64_t i = 0; i < n / QK_K; ++i, q += QK_K) {
        dec.block(w + D::kMeta + i * D::kBlock);
        alignas(32) int16_t s[16], m[16] = {};
        _mm256_store_si256(reinterpret_cast<__m256i*>(s), dec.s16);
        if constexpr (D::kMins) _mm256_store_si256(reinterpret_cast<__m256i*>(m), dec.m16);
        __m256i p[16], mx = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
            const __m256i v = dec.values(g);
            for (int h = 0; h < 2; ++h) {
                const __m128i b = h ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
                const __m256i k = D::kUnsigned ? _mm256_cvtepu8_epi16(b) : _mm256_cvtepi8_epi16(b);
                p[2 * g + h] = _mm256_add_epi16(_mm256_mullo_epi16(k, _mm256_set1_epi16(s[2 * g + h])), _mm256_set1_epi16(m[2 * g + h]));
                mx = _mm256_max_epi16(mx, _mm256_abs_epi16(p[2 * g + h]));
            }
        }
        __m128i m8 = _mm_max_epi16(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
        m8 = _mm_max_epi16(m8, _mm_shuffle_epi32(m8, 0x4e));
        m8 = _mm_max_epi16(m8, _mm_shuffle_epi32(m8, 0xb1));
        m8 = _mm_max_epi16(m8, _mm_shufflelo_epi16(m8, 0xb1));
        float dnew = static_cast<float>(_mm_extract_epi16(m8, 0)) * d0;
        const bool rescale = dnew >= 1.f;
        if (!rescale) dnew = 1.f;
        const __m256 inv = _mm256_set1_ps(1.f / dnew);
        for (int k = 0; k < 16; k += 2) {
            __m256i packed;
            if (rescale) {
                __m256i r[4];
                for (int j = 0; j < 4; ++j) {
                    const __m256i src = p[k + j / 2];
                    const __m128i half = j % 2 ? _mm256_extracti128_si256(src, 1) : _mm256_castsi256_si128(src);
                    const __m256 f = _mm256_mul_ps(inv, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(half)));
                    r[j] = _mm256_cvtps_epi32(_mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                }
                packed = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
                packed = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            } else {
                packed = _mm256_permute4x64_epi64(_mm256_packs_epi16(p[k], p[k + 1]), 0xD8);
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16 * k), packed);
        }
        scales[i] = fp16_to_fp32(fp32_to_fp16(dec.d() * dnew));
    }
}

// One token: ik's half-block pass, except for the four types whose decode-as-you-go dot measured faster (Zen 3,
// 128 x 4,096: IQ2_K 0.99 against 0.96 of ik, IQ5_K 1.18 / 1.12, IQ2_KS 0.92 / 0.86, IQ5_KS 1.09 / 1.01; the pass
// gives IQ6_K 1.45 against 0.81, its decode spilling the dot's registers).
constexpr bool kDotAsYouGo(GgmlType t) { return t == GgmlType::IQ2_K || t == GgmlType::IQ5_K || t == GgmlType::IQ2_KS || t == GgmlType::IQ5_KS; }

template <GgmlType T>
void install(KernelTable& t) {
    set_dot<dot_of<Dec<T>, Groups256>>(t, T);
    if constexpr (kDotAsYouGo(T)) t.dot_rows[type_slot(T)] = dot_rows_of_table<Dec<T>, Groups256>;
    else t.dot_rows[type_slot(T)] = rows_one_pass<Dec<T>>;
    t.tile[type_slot(T)] = tile_of<Dec<T>>;
}

}  // namespace ikt

inline void add_ik_table_kernels(KernelTable& t) {
    ikt::install<GgmlType::IQ2_K>(t);
    ikt::install<GgmlType::IQ3_K>(t);
    ikt::install<GgmlType::IQ4_K>(t);
    ikt::install<GgmlType::IQ5_K>(t);
    ikt::install<GgmlType::IQ6_K>(t);
    ikt::install<GgmlType::IQ2_KS>(t);
    ikt::install<GgmlType::IQ3_KS>(t);
    ikt::install<GgmlType::IQ4_KS>(t);
    ikt::install<GgmlType::IQ5_KS>(t);
    ikt::install<GgmlType::IQ4_KSS>(t);
    ikt::install<GgmlType::IQ2_KL>(t);
}

}  // namespace
}  // namespace moe::kernels

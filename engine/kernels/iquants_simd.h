// SIMD dot products of the i-quants (IQ1_S ... IQ4_XS) for the AVX2 and AVX-512 tables. A 32-weight group's
// grid magnitudes are looked up per 8 (or 4) weights and its signs moved onto the activations, so that byte
// products land where kernels_ref_quants.cpp puts them; per block the lanes are FMA'd with the scale as the
// reference does. Signs are built in registers from their bit masks (shuffle, test, negate) and sub-block
// scales reach the lanes by byte shuffles, keeping the shuffle port free for the grid inserts, which bound
// these loops. Both ISA translation units include this file (internal linkage, their own flags; -mbmi2).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/kernels/blocks.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kquant_simd.h"
#include "engine/kernels/quant_decode.h"
#include "engine/kernels/simd_common.h"
#include "engine/kernels/tile_simd.h"

namespace moe::kernels {
namespace {

// For a 7-bit sign index, its eight sign bytes (+1, or -1 where the mask bit is set) for PSIGNB: one load per 8
// weights where building masks in registers would cost more (the indices come one per 8 weights anyway).
struct SignBytes7 {
    uint64_t v[128];
    constexpr SignBytes7() : v() {
        for (int i = 0; i < 128; ++i)
            for (int j = 0; j < 8; ++j) v[i] |= static_cast<uint64_t>((iq::kSignsIq2xs[i] >> j) & 1 ? 0xFF : 0x01) << (8 * j);
    }
};
inline constexpr SignBytes7 kSignBytes7{};

inline __m256i grid64(const uint64_t* grid, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
    return _mm256_set_epi64x(static_cast<int64_t>(grid[i3]), static_cast<int64_t>(grid[i2]), static_cast<int64_t>(grid[i1]),
                             static_cast<int64_t>(grid[i0]));
}
inline __m256i grid32(const uint32_t* grid, const uint32_t* idx) {
    return _mm256_set_epi32(static_cast<int>(grid[idx[7]]), static_cast<int>(grid[idx[6]]), static_cast<int>(grid[idx[5]]),
                            static_cast<int>(grid[idx[4]]), static_cast<int>(grid[idx[3]]), static_cast<int>(grid[idx[2]]),
                            static_cast<int>(grid[idx[1]]), static_cast<int>(grid[idx[0]]));
}
inline __m256i set16(uint32_t v) { return _mm256_set1_epi16(static_cast<int16_t>(v)); }

// A 32-weight group unpacked: PSIGNB(y, sgn) moves the weights' signs onto the activations (0 where a weight is
// 0, which its magnitude 0 makes irrelevant), PMADDUBSW(mag, ...) and PMADDWD(..., scale) give the lanes.
struct GroupBytes {
    __m256i mag, sgn, scale;
};
[[gnu::always_inline]] inline __m256i group_lanes(const GroupBytes& g, __m256i y) {
    return dot_us8_scaled(g.mag, _mm256_sign_epi8(y, g.sgn), g.scale);
}
// Signed grid values as magnitude and sign (dot_ss8_scaled's PSIGNB pair).
inline GroupBytes signed_values(__m256i values, __m256i scale) { return {_mm256_sign_epi8(values, values), values, scale}; }
// The 0xFF/0x01 bytes PSIGNB needs for a group's 32 sign bits (bit set: negative).
inline __m256i sign_bytes(uint32_t masks) { return _mm256_or_si256(bits_to_bytes(masks), _mm256_set1_epi8(1)); }

// Per block: sum over its eight groups of their lanes (two accumulators for ILP), FMA'd with x.d * y.d; the
// final sum times `Factor` (the i-quants' 1/8 and 1/4). Groups(x) unpacks group g of block x as groups(g); the
// decoded panels of iquant_panels.h unpack through the same Groups. A step kernel (tile_simd.h).
template <class Groups, float Factor>
struct IquantStep {
    using Block = typename Groups::Block;
    using Act = BlockQ8_K;
    static constexpr int64_t kBlockElems = QK_K;
    using State = Acc8State;
    static State init() { return {_mm256_setzero_ps()}; }
    [[gnu::always_inline]] static void step(State& s, const Block& x, const BlockQ8_K& y) {
        const Groups groups(x);
        __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
        for (int g = 0; g < QK_K / 32; ++g) sum[g & 1] = _mm256_add_epi32(sum[g & 1], group_lanes(groups(g), load32(y.qs + 32 * g)));
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x.d) * y.d), _mm256_cvtepi32_ps(_mm256_add_epi32(sum[0], sum[1])), s.acc);
    }
    static float finish(const State& s) { return Factor * hsum_float_8(s.acc); }
};

// The sixteen 4-bit scales of IQ2_XS / IQ2_S (one per 16 weights) as 2s + 1, eight int16 per half block in both
// lanes: scales[h] serves groups 4h..4h+3 through scale_pair.
struct HalfScales {
    __m256i half[2];
};
inline HalfScales iq2_scales(const uint8_t* s8) {
    uint64_t v;
    std::memcpy(&v, s8, 8);
    const __m128i raw = _mm_set1_epi64x(static_cast<int64_t>(v)), low4 = _mm_set1_epi8(0x0F);
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(raw, low4), _mm_and_si128(_mm_srli_epi16(raw, 4), low4));
    const __m128i odd = _mm_add_epi8(_mm_add_epi8(nib, nib), _mm_set1_epi8(1));
    return {{both_lanes(_mm_cvtepu8_epi16(odd)), both_lanes(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(odd, odd)))}};
}

// IQ2_XXS: per group two words, four 8-bit grid indices, four 7-bit sign indices and a 4-bit scale.
struct Iq2xxsGroups {
    using Block = BlockIQ2_XXS;
    const Block& x;
    explicit Iq2xxsGroups(const Block& b) : x(b) {}
    [[gnu::always_inline]] GroupBytes operator()(int g) const {
        uint32_t aux[2];
        quant::iq2xxs_words(x, g, aux);
        return {grid64(iq::kIq2xxsGrid, aux[0] & 0xFF, (aux[0] >> 8) & 0xFF, (aux[0] >> 16) & 0xFF, aux[0] >> 24),
                grid64(kSignBytes7.v, aux[1] & 127, (aux[1] >> 7) & 127, (aux[1] >> 14) & 127, (aux[1] >> 21) & 127), set16(2 * (aux[1] >> 28) + 1)};
    }
};

// IQ2_XS: 16-bit words of a 9-bit grid index and a 7-bit sign index per 8 weights; 4-bit scales per 16.
struct Iq2xsGroups {
    using Block = BlockIQ2_XS;
    const Block& x;
    const HalfScales sc;
    explicit Iq2xsGroups(const Block& b) : x(b), sc(iq2_scales(b.scales)) {}
    [[gnu::always_inline]] GroupBytes operator()(int g) const {
        const uint16_t* q = x.qs + 4 * g;
        return {grid64(iq::kIq2xsGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511),
                grid64(kSignBytes7.v, q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9), scale_pair(sc.half[g / 4], g % 4)};
    }
};

// IQ2_S: 10-bit grid indices (8 low bits in qs, 2 high in qh), a sign bit per weight, 4-bit scales per 16.
struct Iq2sGroups {
    using Block = BlockIQ2_S;
    const Block& x;
    const HalfScales sc;
    explicit Iq2sGroups(const Block& b) : x(b), sc(iq2_scales(b.scales)) {}
    [[gnu::always_inline]] GroupBytes operator()(int g) const {
        const uint8_t* q = x.qs + 4 * g;
        const uint32_t h = x.qh[g];
        uint32_t masks;
        std::memcpy(&masks, x.qs + QK_K / 8 + 4 * g, 4);
        return {grid64(iq::kIq2sGrid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300), q[2] | ((h << 4) & 0x300), q[3] | ((h << 2) & 0x300)),
                sign_bytes(masks), scale_pair(sc.half[g / 4], g % 4)};
    }
};

// IQ3_XXS: eight 8-bit grid indices (4 weights each) per group, a word of four 7-bit sign indices and a scale.
struct Iq3xxsGroups {
    using Block = BlockIQ3_XXS;
    const Block& x;
    explicit Iq3xxsGroups(const Block& b) : x(b) {}
    [[gnu::always_inline]] GroupBytes operator()(int g) const {
        const uint8_t* q = x.qs + 8 * g;
        const uint32_t idx[8] = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]};
        const uint32_t word = quant::iq3xxs_word(x, g);
        return {grid32(iq::kIq3xxsGrid, idx), grid64(kSignBytes7.v, word & 127, (word >> 7) & 127, (word >> 14) & 127, (word >> 21) & 127),
                set16(2 * (word >> 28) + 1)};
    }
};

// IQ3_S: 9-bit grid indices (qs byte k, bit k of qh[g] as bit 8), gathered in one VPGATHERDD; sign bits per weight.
struct Iq3sGroups {
    using Block = BlockIQ3_S;
    const Block& x;
    explicit Iq3sGroups(const Block& b) : x(b) {}
    [[gnu::always_inline]] GroupBytes operator()(int g) const {
        uint64_t q8;
        std::memcpy(&q8, x.qs + 8 * g, 8);
        const __m256i high = _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(x.qh[g]), _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1)),
                                              _mm256_set1_epi32(256));
        const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(q8))), high);
        uint32_t masks;
        std::memcpy(&masks, x.signs + 4 * g, 4);
        return {_mm256_i32gather_epi32(reinterpret_cast<const int*>(iq::kIq3sGrid), idx, 4), sign_bytes(masks),
                set16(2 * quant::iq3s_scale(x, g) + 1)};
    }
};

// IQ4_XS: 4-bit indices into the signed IQ4_NL table, a 6-bit scale (minus 32) per group.
struct Iq4xsGroups {
    using Block = BlockIQ4_XS;
    const Block& x;
    explicit Iq4xsGroups(const Block& b) : x(b) {}
    [[gnu::always_inline]] GroupBytes operator()(int g) const {
        const __m256i v = table_nibbles32(x.qs + 16 * g, _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq::kValuesIq4nl)));
        return signed_values(v, set16(static_cast<uint32_t>(quant::iq4xs_scale(x, g))));
    }
};

using simd_iq2_xxs_step = IquantStep<Iq2xxsGroups, 0.125f>;
using Iq2xsStep = IquantStep<Iq2xsGroups, 0.125f>;
using Iq2sStep = IquantStep<Iq2sGroups, 0.125f>;
using simd_iq3_xxs_step = IquantStep<Iq3xxsGroups, 0.25f>;
using simd_iq3_s_step = IquantStep<Iq3sGroups, 1.0f>;
using simd_iq4_xs_step = IquantStep<Iq4xsGroups, 1.0f>;
constexpr auto simd_iq2_xxs = step_dot<simd_iq2_xxs_step>;
constexpr auto simd_iq2_xs = step_dot<Iq2xsStep>;
constexpr auto simd_iq2_s = step_dot<Iq2sStep>;
constexpr auto simd_iq3_xxs = step_dot<simd_iq3_xxs_step>;
constexpr auto simd_iq3_s = step_dot<simd_iq3_s_step>;
constexpr auto simd_iq4_xs = step_dot<simd_iq4_xs_step>;

// IQ1_S / IQ1_M grid indices of one group: qs bytes with three high bits each, spread by PDEP into bits 8..10
// of each 16-bit index: `high_mask` says where the bits sit in `high` (IQ1_S: 3k..3k+2 of a 12-bit field;
// IQ1_M: the low three bits of each nibble, so its mask keeps the nibble's top bit out).
template <uint64_t HighMask>
inline __m256i iq1_grid(const uint8_t* qs, uint32_t high) {
    uint32_t q;
    std::memcpy(&q, qs, 4);
    const uint64_t idx = _pdep_u64(q, 0x00ff00ff00ff00ffull) | _pdep_u64(high, HighMask);
    return grid64(iq::kIq1sGrid, idx & 0xFFFF, (idx >> 16) & 0xFFFF, (idx >> 32) & 0xFFFF, idx >> 48);
}

struct Iq1sStep {
    using Block = BlockIQ1_S;
    using Act = BlockQ8_K;
    static constexpr int64_t kBlockElems = QK_K;
    struct State {
        __m256 acc;
        float accum1;  // the delta term's sum, FMA'd per block as the reference does
    };
    static State init() { return {_mm256_setzero_ps(), 0.f}; }
    [[gnu::always_inline]] static void step(State& s, const BlockIQ1_S& x, const BlockQ8_K& y) {
        // The 3-bit scales (qh bits 12-14) as 2s + 1, one int16 word per group in both lanes.
        const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qh));
        const __m128i odd = _mm_add_epi16(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1), _mm_set1_epi16(1));
        const __m256i scales = both_lanes(odd);
        __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        int sumi1 = 0;
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            const uint32_t h = x.qh[g];
            const __m256i grid = iq1_grid<0x0700070007000700ull>(x.qs + 4 * g, h & 0x0FFF);
            sum[g & 1] = _mm256_add_epi32(sum[g & 1], dot_ss8_scaled(grid, load32(y.qs + 32 * g), scale_word(scales, g)));
            const int scale = 2 * static_cast<int>((h >> 12) & 7) + 1;
            sumi1 += (y.bsums[2 * g] + y.bsums[2 * g + 1]) * ((h & 0x8000) ? -scale : scale);
        }
        const float d = y.d * h2f(x.d);
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(sum[0], sum[1])), s.acc);
        s.accum1 = std::fma(d, static_cast<float>(sumi1), s.accum1);
    }
    static float finish(const State& s) { return hsum_float_8(s.acc) + iq::kIq1sDelta * s.accum1; }
};
constexpr auto simd_iq1_s = step_dot<Iq1sStep>;

// IQ1_M's sixteen 3-bit scales as 2s + 1: the low lane's word g is group g's first 16 weights, the high lane's
// its second 16 (scale_word(g) then serves group g). Word g of the four 16-bit scale words sits at bits
// 6 * (g % 2) (+3 for the second half); the fields are isolated with a per-word multiply and a shift.
inline __m256i iq1m_scales(const BlockIQ1_M& x) {
    uint64_t v;
    std::memcpy(&v, x.scales, 8);
    const __m256i words = _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<int64_t>(v)),
                                              _mm256_set_epi8(7, 6, 7, 6, 5, 4, 5, 4, 3, 2, 3, 2, 1, 0, 1, 0,  //
                                                              7, 6, 7, 6, 5, 4, 5, 4, 3, 2, 3, 2, 1, 0, 1, 0));
    // field at bit f moved to bits 13..15: multiply by 2^(13 - f)
    const __m256i shift_up = _mm256_set_epi16(16, 1024, 16, 1024, 16, 1024, 16, 1024, 128, 8192, 128, 8192, 128, 8192, 128, 8192);
    const __m256i field = _mm256_srli_epi16(_mm256_mullo_epi16(words, shift_up), 13);
    return _mm256_add_epi16(_mm256_add_epi16(field, field), _mm256_set1_epi16(1));
}

struct Iq1mStep {
    using Block = BlockIQ1_M;
    using Act = BlockQ8_K;
    static constexpr int64_t kBlockElems = QK_K;
    struct State {
        __m256 acc1, acc2;  // grid products; the shifts' products (times the delta at the end)
    };
    static State init() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    [[gnu::always_inline]] static void step(State& s, const BlockIQ1_M& x, const BlockQ8_K& y) {
        const __m256i ones = _mm256_set1_epi8(1);
        const __m256i scales = iq1m_scales(x);
        __m256i sum1 = _mm256_setzero_si256(), sum2 = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            uint16_t qh;
            std::memcpy(&qh, x.qh + 2 * g, 2);
            const __m256i grid = iq1_grid<0x0f000f000f000f00ull>(x.qs + 4 * g, qh & 0x7777u);
            // The shift's sign per 8 weights (bit 3 of each qh nibble) to bit 7 of a byte, sign-extended to 8 bytes.
            const uint32_t delta_bits = static_cast<uint32_t>(_pdep_u64(qh & 0x8888u, 0xf0f0f0f0ull));
            const __m256i delta = _mm256_or_si256(ones, _mm256_cvtepi8_epi64(_mm_set1_epi32(static_cast<int>(delta_bits))));
            const __m256i yg = load32(y.qs + 32 * g), scale = scale_word(scales, g);
            sum1 = _mm256_add_epi32(sum1, dot_ss8_scaled(grid, yg, scale));
            sum2 = _mm256_add_epi32(sum2, dot_us8_scaled(ones, _mm256_sign_epi8(yg, delta), scale));
        }
        const __m256 d = _mm256_set1_ps(y.d * h2f(quant::iq1m_d(x)));
        s.acc1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum1), s.acc1);
        s.acc2 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum2), s.acc2);
    }
    static float finish(const State& s) { return hsum_float_8(s.acc1) + iq::kIq1sDelta * hsum_float_8(s.acc2); }
};
constexpr auto simd_iq1_m = step_dot<Iq1mStep>;

inline void add_simd_iquant_kernels(KernelTable& t) {
    set_dot<simd_iq2_xxs>(t, GgmlType::IQ2_XXS);
    set_dot<simd_iq2_xs>(t, GgmlType::IQ2_XS);
    set_dot<simd_iq2_s>(t, GgmlType::IQ2_S);
    set_dot<simd_iq3_xxs>(t, GgmlType::IQ3_XXS);
    set_dot<simd_iq3_s>(t, GgmlType::IQ3_S);
    set_dot<simd_iq4_xs>(t, GgmlType::IQ4_XS);
    set_dot<simd_iq1_s>(t, GgmlType::IQ1_S);
    set_dot<simd_iq1_m>(t, GgmlType::IQ1_M);
    t.tile[static_cast<int>(GgmlType::IQ2_XXS)] = step_tile<simd_iq2_xxs_step>;
    t.tile[static_cast<int>(GgmlType::IQ3_XXS)] = step_tile<simd_iq3_xxs_step>;
    t.tile[static_cast<int>(GgmlType::IQ3_S)] = step_tile<simd_iq3_s_step>;
    t.tile[static_cast<int>(GgmlType::IQ4_XS)] = step_tile<simd_iq4_xs_step>;
    t.tile[static_cast<int>(GgmlType::IQ2_XS)] = step_tile<Iq2xsStep>;
    t.tile[static_cast<int>(GgmlType::IQ2_S)] = step_tile<Iq2sStep>;
    t.tile[static_cast<int>(GgmlType::IQ1_S)] = step_tile<Iq1sStep>;
    t.tile[static_cast<int>(GgmlType::IQ1_M)] = step_tile<Iq1mStep>;
}

}  // namespace
}  // namespace moe::kernels

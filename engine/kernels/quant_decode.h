// Where each weight of the low-bit formats lives, as integers: element e of a block decoded to its integer value
// and its integer sub-block multiplier, following the element order of ggml's dequantize_row_<type>. The
// reference dot products (kernels_ref_quants.cpp) and the dequantizer (dequantize.cpp) are written on these;
// the SIMD kernels compute the same integers with shuffles and are tested equal to the reference.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

#include "engine/kernels/blocks.h"
#include "engine/kernels/iq_tables.h"

namespace moe::quant {

// Bit j of an i-quant sign byte set: element j of its group of 8 is negative.
inline int iq_sign(uint8_t signs, int j) { return (signs & iq::kMaskIq2xs[j]) ? -1 : 1; }
inline uint8_t grid_byte(uint64_t g, int j) { return static_cast<uint8_t>(g >> (8 * j)); }
inline uint8_t grid_byte32(uint32_t g, int j) { return static_cast<uint8_t>(g >> (8 * j)); }
inline int8_t grid_sbyte(uint64_t g, int j) { return static_cast<int8_t>(g >> (8 * j)); }

// 4-bit element j of a 32-weight block: low nibbles are elements 0..15, high 16..31.
inline int nibble(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }
// The fifth bit of element j of a Q5_0/Q5_1 block.
inline int q5_high(const uint8_t* qh, int j) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return (h >> j) & 1;
}

// Q6_K element e: its 6-bit value 0..63, following the ql/qh interleave.
inline int q6_value(const BlockQ6_K& blk, int e) {
    const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t* ql = blk.ql + half * 64;
    const uint8_t* qh = blk.qh + half * 32;
    int low = (quarter & 1) ? ql[l + 32] : ql[l];
    low = (quarter >= 2) ? (low >> 4) : (low & 0xF);
    return low | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

// Q2_K element e: 2-bit value and its 4-bit scale (sub-block e/16); the min of sub-block s.
inline int q2k_value(const BlockQ2_K& b, int e) { return (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }
inline int q2k_scale(const BlockQ2_K& b, int s) { return b.scales[s] & 0xF; }
inline int q2k_min(const BlockQ2_K& b, int s) { return b.scales[s] >> 4; }

// Q3_K: the 16 6-bit scales (minus 32), and element e's value q2 - (high bit ? 0 : 4).
inline void q3k_scales(const BlockQ3_K& b, int8_t out[16]) {
    uint32_t aux[4];
    std::memcpy(aux, b.scales, 12);
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    std::memcpy(out, aux, 16);
    for (int i = 0; i < 16; ++i) out[i] = static_cast<int8_t>(out[i] - 32);
}
inline int q3k_value(const BlockQ3_K& b, int e) {
    const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int bit = 4 * (e / 128) + (e % 128) / 32;
    return low - ((b.hmask[e % 32] >> bit & 1) ? 0 : 4);
}

// IQ2_XXS: per 32 weights two 32-bit words: four 8-bit grid indices, then four 7-bit sign indices and a 4-bit
// scale. Element e's grid magnitude with its sign, and the block's 4-bit scale.
inline void iq2xxs_words(const BlockIQ2_XXS& b, int ib32, uint32_t aux[2]) { std::memcpy(aux, b.qs + 4 * ib32, 8); }
inline int iq2xxs_value(const BlockIQ2_XXS& b, int e) {
    uint32_t aux[2];
    iq2xxs_words(b, e / 32, aux);
    const int l = (e % 32) / 8, j = e % 8;
    const uint8_t idx = static_cast<uint8_t>(aux[0] >> (8 * l));
    return grid_byte(iq::kIq2xxsGrid[idx], j) * iq_sign(iq::kSignsIq2xs[(aux[1] >> (7 * l)) & 127], j);
}
inline int iq2xxs_scale(const BlockIQ2_XXS& b, int ib32) {
    uint32_t aux[2];
    iq2xxs_words(b, ib32, aux);
    return static_cast<int>(aux[1] >> 28);
}

// IQ2_XS: 16-bit words of a 9-bit grid index and a 7-bit sign index per 8 weights; 4-bit scales per 16.
inline int iq2xs_value(const BlockIQ2_XS& b, int e) {
    const uint16_t w = b.qs[e / 8];
    return grid_byte(iq::kIq2xsGrid[w & 511], e % 8) * iq_sign(iq::kSignsIq2xs[w >> 9], e % 8);
}
inline int iq2xs_scale(const BlockIQ2_XS& b, int e) { return (b.scales[e / 32] >> (4 * ((e % 32) / 16))) & 0xF; }

// IQ2_S: 10-bit grid indices (8 low bits in qs, 2 high in qh), one sign bit per weight, 4-bit scales per 16.
inline int iq2s_value(const BlockIQ2_S& b, int e) {
    const int ib32 = e / 32, l = (e % 32) / 8, j = e % 8;
    const int idx = b.qs[4 * ib32 + l] | ((b.qh[ib32] << (8 - 2 * l)) & 0x300);
    const uint8_t signs = b.qs[32 + 4 * ib32 + l];
    return grid_byte(iq::kIq2sGrid[idx], j) * iq_sign(signs, j);
}
inline int iq2s_scale(const BlockIQ2_S& b, int e) { return (b.scales[e / 32] >> (4 * ((e % 32) / 16))) & 0xF; }

// IQ3_XXS: 8-bit indices into a grid of 4 magnitudes, then per 32 weights four 7-bit sign indices and a 4-bit scale.
inline uint32_t iq3xxs_word(const BlockIQ3_XXS& b, int ib32) {
    uint32_t w;
    std::memcpy(&w, b.qs + 64 + 4 * ib32, 4);
    return w;
}
inline int iq3xxs_value(const BlockIQ3_XXS& b, int e) {
    const int ib32 = e / 32, l = (e % 32) / 8, j = e % 8;
    const uint8_t idx = b.qs[8 * ib32 + 2 * l + j / 4];
    return grid_byte32(iq::kIq3xxsGrid[idx], j % 4) * iq_sign(iq::kSignsIq2xs[(iq3xxs_word(b, ib32) >> (7 * l)) & 127], j);
}
inline int iq3xxs_scale(const BlockIQ3_XXS& b, int ib32) { return static_cast<int>(iq3xxs_word(b, ib32) >> 28); }

// IQ3_S: 9-bit indices into a grid of 4 magnitudes, one sign bit per weight, 4-bit scales per 32.
inline int iq3s_value(const BlockIQ3_S& b, int e) {
    const int ib32 = e / 32, l = (e % 32) / 8, j = e % 8;
    const int k = 2 * l + j / 4;  // which 4-magnitude grid point of this 32
    const int idx = b.qs[8 * ib32 + k] | ((b.qh[ib32] << (8 - k)) & 256);
    return grid_byte32(iq::kIq3sGrid[idx], j % 4) * iq_sign(b.signs[4 * ib32 + l], j);
}
inline int iq3s_scale(const BlockIQ3_S& b, int ib32) { return (b.scales[ib32 / 2] >> (4 * (ib32 % 2))) & 0xF; }

// IQ1_S: 11-bit indices into a grid of -1/0/1 (8 low bits in qs, 3 high in qh per 8), per 32 weights a 3-bit
// scale and the sign of the +-1/8 shift.
inline int iq1s_value(const BlockIQ1_S& b, int e) {
    const int ib = e / 32, l = (e % 32) / 8;
    const int idx = b.qs[4 * ib + l] | (((b.qh[ib] >> (3 * l)) & 7) << 8);
    return grid_sbyte(iq::kIq1sGrid[idx], e % 8);
}
inline int iq1s_scale(const BlockIQ1_S& b, int ib) { return (b.qh[ib] >> 12) & 7; }
inline int iq1s_delta_sign(const BlockIQ1_S& b, int ib) { return (b.qh[ib] & 0x8000) ? -1 : 1; }

// IQ1_M: as IQ1_S with the shift's sign per 8 weights and 3-bit scales per 16; the fp16 super-block scale is
// spread over the top nibbles of the four 16-bit scale words.
inline void iq1m_words(const BlockIQ1_M& b, uint16_t sc[4]) { std::memcpy(sc, b.scales, 8); }
inline uint16_t iq1m_d(const BlockIQ1_M& b) {
    uint16_t sc[4];
    iq1m_words(b, sc);
    return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}
inline int iq1m_value(const BlockIQ1_M& b, int e) {
    const int ib = e / 32, l = (e % 32) / 8;
    const uint8_t qh = b.qh[2 * ib + l / 2];
    const int idx = b.qs[4 * ib + l] | ((l % 2 == 0 ? (qh << 8) : (qh << 4)) & 0x700);
    return grid_sbyte(iq::kIq1sGrid[idx], e % 8);
}
inline int iq1m_scale(const BlockIQ1_M& b, int e) {
    uint16_t sc[4];
    iq1m_words(b, sc);
    const int ib = e / 32, half = (e % 32) / 16;
    return (sc[ib / 2] >> (6 * (ib % 2) + 3 * half)) & 7;
}
inline int iq1m_delta_sign(const BlockIQ1_M& b, int e) {
    const int ib = e / 32, l = (e % 32) / 8;
    const uint8_t qh = b.qh[2 * ib + l / 2];
    return (qh & (l % 2 == 0 ? 0x08 : 0x80)) ? -1 : 1;
}

// IQ4_XS: 6-bit scales per 32 (minus 32), values from the iq4_nl table.
inline int iq4xs_scale(const BlockIQ4_XS& b, int ib) {
    return (((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4)) - 32;
}
inline int iq4xs_value(const BlockIQ4_XS& b, int e) { return iq::kValuesIq4nl[nibble(b.qs + 16 * (e / 32), e % 32)]; }

// Ternary types: the trit 0..2 of element e (the weight is trit - 1).
inline int tq_trit(uint8_t q, int pow3) {
    const uint8_t v = static_cast<uint8_t>(q * pow3);
    return (static_cast<uint16_t>(v) * 3) >> 8;
}
inline int tq1_value(const BlockTQ1_0& b, int e) {
    static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
    if (e < 160) return tq_trit(b.qs[e % 32], kPow3[e / 32]);
    if (e < 240) return tq_trit(b.qs[32 + (e - 160) % 16], kPow3[(e - 160) / 16]);
    return tq_trit(b.qh[(e - 240) % 4], kPow3[(e - 240) / 4]);
}
inline int tq2_value(const BlockTQ2_0& b, int e) { return (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

// E8M0 exponent to float, halved (MXFP4's table holds doubled values), as ggml_e8m0_to_fp32_half; a table of
// all 256, since the kernels read one per 32 weights.
constexpr float e8m0_half_of(uint8_t x) {
    const uint32_t bits = x < 2 ? (0x00200000u << x) : (static_cast<uint32_t>(x - 1) << 23);
    return std::bit_cast<float>(bits);
}
struct E8m0HalfTable {
    float v[256];
    constexpr E8m0HalfTable() : v() {
        for (int x = 0; x < 256; ++x) v[x] = e8m0_half_of(static_cast<uint8_t>(x));
    }
};
inline constexpr E8m0HalfTable kE8m0Half{};
inline float e8m0_half(uint8_t x) { return kE8m0Half.v[x]; }

}  // namespace moe::quant

// Where ik_llama.cpp's row-interleaved forms keep each row's bits (its repack_<type> functions in
// iqk_quantize.cpp): row k (0..3) of a group, sub-block ib (32 weights) of a 256-weight block, weight t (0..31).
// One definition for the decoders, the reference kernels and the converters the tests use.
#pragma once
#include <cstdint>

namespace moe::ik::r4 {

struct BitPos {
    int byte;   // within the block's quant array
    int shift;  // of the field's lowest bit in that byte
};

// 4-bit quants (IQ4_K_R4, IQ5_K_R4, IQ4_KS_R4, IQ5_KS_R4): 64 bytes per sub-block; byte 16c + 4k + i holds
// weights {0, 16, 4, 20}[c] + i (low nibble) and {8, 24, 12, 28}[c] + i (high nibble).
inline constexpr BitPos nibble(int ib, int k, int t) {
    const int g = t / 4;
    return {64 * ib + 16 * (2 * (g & 1) + (g >> 2)) + 4 * k + t % 4, 4 * ((g >> 1) & 1)};
}
// 2-bit quants (IQ2_K_R4, IQ3_K_R4's low bits): 32 bytes per sub-block; byte 16h + 4k + i holds weights
// 16h + i, + 4, + 8, + 12 at bits 0, 2, 4, 6.
inline constexpr BitPos two_bits(int ib, int k, int t) { return {32 * ib + 16 * (t / 16) + 4 * k + t % 4, 2 * ((t % 16) / 4)}; }
// IQ3_K_R4's third bit: byte 4k + i of the sub-block's 16, bit b for weight 4b + i.
inline constexpr BitPos third_bit(int ib, int k, int t) { return {16 * ib + 4 * k + t % 4, t / 4}; }
// The fifth bit of IQ5_K_R4 / IQ5_KS_R4: byte 4k + i, bit b for weight {0, 8, 16, 24, 4, 12, 20, 28}[b] + i.
inline constexpr BitPos fifth_bit(int ib, int k, int t) {
    const int g = t / 4;
    return {16 * ib + 4 * k + t % 4, (g >> 1) + 4 * (g & 1)};
}
// Scale code n = 8 ib + k + 4 h (h: the second 16 weights) of the IQk_K_R4 forms: its low nibble, its 2 high bits
// (IQ4_K_R4 / IQ5_K_R4) and its sign bit (IQ3_K_R4); the table-half bit is extra[k + 4h] bit ib.
inline constexpr int scale_code(int ib, int k, int h) { return 8 * ib + k + 4 * h; }
inline constexpr BitPos scale_nibble(int n) { return {n % 32, 4 * (n / 32)}; }
inline constexpr BitPos scale_high(int n) { return {n % 16, 2 * (n / 16)}; }
inline constexpr BitPos scale_sign(int n) { return {n % 8, n / 8}; }
// Q6_K_R4's two high bits: 32 bytes per sub-block; byte 16h + 4k + i holds weights 16h + i, + 8, + 4, + 12 at
// bits 0, 2, 4, 6.
inline constexpr BitPos six_high(int ib, int k, int t) {
    constexpr int kShift[4] = {0, 4, 2, 6};
    return {32 * ib + 16 * (t / 16) + 4 * k + t % 4, kShift[(t % 16) / 4]};
}
// Q4_K_R4's scale and min code of sub-block ib, row k: low nibbles in scales_l[n], 2 high bits each in
// scales_h[n % 16] from bit 4 (n / 16) (the scale's in bits 0-1, the min's in 2-3).
inline constexpr int q4_k_code(int ib, int k) { return 4 * ib + k; }
// Q5_K_R4's fifth bits (after Q4_K_R4's header, before its nibbles): byte 16 ib + 4 k + i, bit b for weight
// {0, 8, 4, 12, 16, 24, 20, 28}[b] + i.
inline constexpr BitPos q5_k_r4_fifth(int ib, int k, int t) {
    const int g = t / 4;
    return {16 * ib + 4 * k + t % 4, (g & 4) | (g & 1) << 1 | (g >> 1 & 1)};
}
// Q8_0_R8: weight t of row k (0..7) in a 32-weight block of eight rows.
inline constexpr int q8_0_r8_index(int k, int t) { return 128 * (t / 16) + 32 * ((t % 16) / 4) + 4 * k + t % 4; }
// Q4_0_R8 (eight rows of 32): Q4_0's bytes in groups of four per row; byte 32l + 4k + i holds weights 4l + i (low
// nibble) and 16 + 4l + i (high).
inline constexpr BitPos q4_0_r8_nibble(int k, int t) { return {32 * ((t % 16) / 4) + 4 * k + t % 4, 4 * (t / 16)}; }
// The 4-row 32-weight forms (IQ4_NL_R4, Q5_0_R4 / Q6_0_R4's low bits) keep nibble(0, k, t)'s order. Q5_0_R4's
// fifth bit: byte 4k + i, bit 2 (g % 4) + g / 4 for weights 4g + i.
inline constexpr BitPos q5_0_r4_high(int k, int t) { return {4 * k + t % 4, 2 * ((t / 4) % 4) + t / 16}; }
// Q6_0_R4's two high bits: byte 16h + 4k + i (h: the second 16), bits 2f for weight 16h + 4f + i.
inline constexpr BitPos q6_0_r4_high(int k, int t) { return {16 * (t / 16) + 4 * k + t % 4, 2 * ((t % 16) / 4)}; }
// IQ4_XS_R8 (eight rows of 256): sub-block ib's weights 8l + i (low nibble) and 8l + 4 + i (high) at byte
// 128 ib + 32 l + 4 k + i; the 6-bit scale n = 8 ib + k: low nibble in scales_l[n % 32] at 4 (n / 32), high 2
// bits in scales_h[n % 16] at 2 (n / 16).
inline constexpr BitPos iq4_xs_r8_nibble(int ib, int k, int t) { return {128 * ib + 32 * (t / 8) + 4 * k + t % 4, 4 * ((t % 8) / 4)}; }
inline constexpr int iq4_xs_r8_code(int ib, int k) { return 8 * ib + k; }

}  // namespace moe::ik::r4

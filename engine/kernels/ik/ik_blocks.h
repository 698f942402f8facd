// ik_llama.cpp's own quantization types: block layouts byte-identical to its ggml-common.h, the per-row scale in
// front of each row of the *_KS, IQ4_KSS, IQ2_KL, *_KT and *_R4 types, and the activation blocks its CPU kernels
// pair them with. The value tables are part of each format's definition.
#pragma once
#include <cstdint>

namespace moe::ik {

constexpr int QK_K = 256;

// ---- weight blocks (256 weights unless said otherwise) ----
struct BlockIQ2_K {
    uint16_t d;
    uint16_t extra;
    uint8_t scales[8];
    uint8_t qs[64];
};  // 76
struct BlockIQ3_K {
    uint16_t d;
    uint16_t extra;
    uint16_t scales_h;
    uint8_t scales_l[8];
    uint8_t qs[64];
    uint8_t qh[32];
};  // 110
struct BlockIQ4_K {
    uint16_t d;
    uint16_t extra;
    uint8_t scales_h[4];
    uint8_t scales_l[8];
    uint8_t qs[128];
};  // 144
struct BlockIQ5_K {
    uint16_t d;
    uint16_t extra;
    uint8_t scales_h[4];
    uint8_t scales_l[8];
    uint8_t qs[128];
    uint8_t qh[32];
};  // 176
struct BlockIQ6_K {
    uint16_t d;
    uint16_t extra;
    int8_t scales[16];
    uint8_t qs[128];
    uint8_t qh[64];
};  // 212
// Row scale f16 in front of the row:
struct BlockIQ2_KS {
    uint16_t extra;
    uint8_t scales[4];
    uint8_t qs[64];
};  // 70
struct BlockIQ3_KS {
    uint16_t extra;
    uint8_t scales[4];
    uint8_t qs[64];
    uint8_t qh[32];
};  // 102
struct BlockIQ2_KL {
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[64];
    uint8_t qh[16];
};  // 86
// Row scale f32 in front of the row:
struct BlockIQ4_KS {
    uint8_t scales[8];
    uint8_t qs[128];
};  // 136
struct BlockIQ4_KSS {
    uint32_t qs[32];
};  // 128
struct BlockIQ5_KS {
    uint8_t scales[8];
    uint8_t qs[128];
    uint8_t qh[32];
};  // 168
struct BlockIQ1_KT {
    uint8_t sh[8];
    uint8_t ql[32];
    uint8_t qh[16];
};  // 56
struct BlockIQ2_KT {
    uint8_t scales[4];
    uint8_t ql[64];
};  // 68
struct BlockIQ3_KT {
    uint8_t scales[4];
    uint8_t ql[64];
    uint8_t qh[32];
};  // 100
struct BlockIQ4_KT {
    uint32_t qs[32];
};  // 128
// 32 weights:
struct BlockQ6_0 {
    uint16_t d;
    uint8_t qh[8];
    uint8_t qs[16];
};  // 26
// Four rows interleaved (the four row scales come first in the group):
struct BlockIQ1_S_R4 {
    uint8_t qs[16];
    uint16_t qh[4];
};  // 4 rows x 32 weights, 24 bytes; f16 row scales
struct BlockIQ4_KS_R4 {
    uint8_t scales[32];
    uint8_t qs[512];
};  // 4 rows x 256 weights, 544 bytes; f32 row scales

// The IQk_K types' four rows interleaved: each row's f16 d, its table-half bits (extra[k]: the first 16 of each
// 32, extra[4 + k]: the second), the scale codes of 16 weights as nibbles (and 2-bit high parts) n = 8 * ib + k
// (+ 4 for the second 16), then the rows' quants in ik's permutation (ik_r4_layout.h).
struct BlockIQ2_K_R4 {
    uint16_t d[4];
    uint8_t extra[8];
    uint8_t scales[32];
    uint8_t qs[256];
};  // 304
struct BlockIQ3_K_R4 {
    uint16_t d[4];
    uint8_t extra[8];
    uint8_t scales_h[8];  // the scales' signs
    uint8_t scales_l[32];
    uint8_t qs[256];
    uint8_t qh[128];
};  // 440
struct BlockIQ4_K_R4 {
    uint16_t d[4];
    uint8_t extra[8];
    uint8_t scales_h[16];
    uint8_t scales_l[32];
    uint8_t qs[512];
};  // 576
struct BlockIQ5_K_R4 {
    uint16_t d[4];
    uint8_t extra[8];
    uint8_t scales_h[16];
    uint8_t scales_l[32];
    uint8_t qs[512];
    uint8_t qh[128];
};  // 704
struct BlockIQ5_KS_R4 {
    uint8_t scales[32];
    uint8_t qs[512];
    uint8_t qh[128];
};  // 4 rows x 256 weights, 672 bytes; f32 row scales
// Eight rows of 32 weights: the rows' f16 d, then their values in groups of four bytes.
struct BlockQ8_0_R8 {
    uint16_t d[8];
    int8_t qs[256];
};  // 272

// The K-quants' four rows: Q4_K_R4's d of each row then its dmin, the scale and min codes of 32 weights
// n = 4 ib + k (low nibbles in scales_l, high 2 bits each in scales_h); Q6_K_R4's int8 scales of 16 weights at
// 8 ib + k (+ 4 for the second 16), the quants' 2 high bits, then their low nibbles.
struct BlockQ4_K_R4 {
    uint16_t d[8];
    uint8_t scales_h[16];
    uint8_t scales_l[32];
    uint8_t qs[512];
};  // 576
struct BlockQ6_K_R4 {
    uint16_t d[4];
    int8_t scales[64];
    uint8_t qh[256];
    uint8_t ql[512];
};  // 840
// Q5_K_R4: Q4_K_R4's header, the fifth bits (ik_r4_layout.h), then Q4_K_R4's nibbles.
struct BlockQ5_K_R4 {
    uint16_t d[8];
    uint8_t scales_h[16];
    uint8_t scales_l[32];
    uint8_t qh[128];
    uint8_t qs[512];
};  // 704
// Q3_K_R4: the rows' d, the scale codes n = 8 ib + k + 4 h (Q3_K's 6 bits, 32 the zero: low nibble, high 2 bits
// as IQ4_K_R4's), the quants' third bits (IQ3_K_R4's order), then their low 2 bits (IQ2_K_R4's).
struct BlockQ3_K_R4 {
    uint16_t d[4];
    uint8_t scales_h[16];
    uint8_t scales_l[32];
    uint8_t qh[128];
    uint8_t qs[256];
};  // 440
// Q2_K_R4: the rows' d then their dmin, Q2_K's scale | min << 4 bytes of each 16 at 8 ib + 4 h + k, the quants.
struct BlockQ2_K_R4 {
    uint16_t d[8];
    uint8_t scales[64];
    uint8_t qs[256];
};  // 336
static_assert(sizeof(BlockQ4_K_R4) == 576 && sizeof(BlockQ6_K_R4) == 840 && sizeof(BlockQ5_K_R4) == 704);
static_assert(sizeof(BlockQ3_K_R4) == 440 && sizeof(BlockQ2_K_R4) == 336);

// The 32-weight legacy forms (repack_q4_0 / q5_0 / q6_0 / iq4_nl) and IQ4_XS_R8: the rows' f16 d first, then
// their bits in the positions of ik_r4_layout.h. No per-row metadata.
struct BlockQ4_0_R8 {
    uint16_t d[8];
    uint8_t qs[128];
};  // 8 rows x 32 weights
struct BlockQ5_0_R4 {
    uint16_t d[4];
    uint8_t qh[16];
    uint8_t qs[64];
};  // 4 rows x 32 weights
struct BlockQ6_0_R4 {
    uint16_t d[4];
    uint8_t qh[32];
    uint8_t qs[64];
};  // 4 rows x 32 weights
struct BlockIQ4_NL_R4 {
    uint16_t d[4];
    uint8_t qs[64];
};  // 4 rows x 32 weights
struct BlockIQ4_XS_R8 {
    uint16_t d[8];
    uint8_t scales_h[16];
    uint8_t scales_l[32];
    uint8_t qs[1024];
};  // 8 rows x 256 weights
static_assert(sizeof(BlockQ4_0_R8) == 144 && sizeof(BlockQ5_0_R4) == 88 && sizeof(BlockQ6_0_R4) == 104 && sizeof(BlockIQ4_NL_R4) == 72 &&
              sizeof(BlockIQ4_XS_R8) == 1088);
static_assert(sizeof(BlockIQ2_K_R4) == 304 && sizeof(BlockIQ3_K_R4) == 440 && sizeof(BlockIQ4_K_R4) == 576 && sizeof(BlockIQ5_K_R4) == 704);
static_assert(sizeof(BlockIQ5_KS_R4) == 672 && sizeof(BlockQ8_0_R8) == 272);
static_assert(sizeof(BlockIQ2_K) == 76 && sizeof(BlockIQ3_K) == 110 && sizeof(BlockIQ4_K) == 144 && sizeof(BlockIQ5_K) == 176);
static_assert(sizeof(BlockIQ6_K) == 212 && sizeof(BlockIQ2_KS) == 70 && sizeof(BlockIQ3_KS) == 102 && sizeof(BlockIQ2_KL) == 86);
static_assert(sizeof(BlockIQ4_KS) == 136 && sizeof(BlockIQ4_KSS) == 128 && sizeof(BlockIQ5_KS) == 168 && sizeof(BlockIQ1_KT) == 56);
static_assert(sizeof(BlockIQ2_KT) == 68 && sizeof(BlockIQ3_KT) == 100 && sizeof(BlockIQ4_KT) == 128 && sizeof(BlockQ6_0) == 26);
static_assert(sizeof(BlockIQ1_S_R4) == 24 && sizeof(BlockIQ4_KS_R4) == 544);

// ---- activation blocks ----
// ik's Q8_K (not mainline's 292-byte one): d = amax/127, sum = d * sum(qs), sums of 16.
struct BlockQ8K {
    float d;
    float sum;
    int8_t qs[256];
    int16_t bsums[16];
};  // 296
// Q8_K32 (IQ4_KS_R4): Q8_K's layout; the bsums area holds 8 floats d * (sum of 32), `sum` their total.
struct BlockQ8K32 {
    float d;
    float sum;
    int8_t qs[256];
    float bsums[8];
};  // 296
// Q8_K128 (IQ1_S_R4): 128 values, sums of 32.
struct BlockQ8K128 {
    float d;
    int16_t bsums[4];
    int8_t qs[128];
};  // 140
// Q8_2_X4: four 32-value blocks: their bf16 scales, their integer sums, then the 128 values.
struct BlockQ8_2x4 {
    uint16_t d[4];
    int16_t s[4];
    int8_t qs[128];
};  // 144

static_assert(sizeof(BlockQ8K) == 296 && sizeof(BlockQ8K32) == 296 && sizeof(BlockQ8K128) == 140 && sizeof(BlockQ8_2x4) == 144);

// ---- value tables (ggml-common.h) ----
inline constexpr int8_t kIq2nlValues[8] = {-31, -13, 1, 17, -26, -8, 6, 22};
inline constexpr int8_t kIq3nlValues[16] = {-63, -40, -23, -10, 1, 13, 28, 47, -59, -36, -19, -6, 5, 17, 32, 51};
inline constexpr int8_t kIq4kValues[32] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                                           -123, -100, -79, -61, -45, -31, -18, -6,  5, 17, 29, 42, 57, 73, 93, 117};
inline constexpr int8_t kIq5nlValues[64] = {-126, -114, -103, -92, -83, -74, -65, -57, -50, -43, -36, -30, -24, -18, -12, -6,
                                            -1,   5,    11,   17,  23,  29,  36,  43,  51,  59,  68,  77,  87,  97,  109, 121,
                                            -124, -112, -101, -90, -81, -72, -63, -55, -48, -41, -34, -28, -22, -16, -10, -4,
                                            1,    7,    13,   19,  25,  31,  38,  45,  53,  61,  70,  79,  89,  99,  111, 123};
inline constexpr int8_t kIq6nlValues[128] = {
    -127, -121, -115, -109, -104, -98, -93, -88, -84, -79, -74, -70, -66,  -62,  -58,  -54,  -51,  -47, -44, -40, -37, -34, -31, -28, -25, -22,
    -19,  -16,  -13,  -11,  -8,   -5,  -2,  0,   3,   6,   9,   12,  14,   17,   20,   23,   27,   30,  33,  36,  40,  44,  47,  51,  55,  59,
    63,   68,   72,   77,   82,   87,  92,  98,  103, 109, 115, 121, -126, -120, -114, -108, -103, -97, -92, -87, -83, -78, -73, -69, -65, -61,
    -57,  -53,  -50,  -46,  -43,  -39, -36, -33, -30, -27, -24, -21, -18,  -15,  -12,  -10,  -7,   -4,  -1,  1,   4,   7,   10,  13,  15,  18,
    21,   24,   28,   31,   34,   37,  41,  45,  48,  52,  56,  60,  64,   69,   73,   78,   83,   88,  93,  99,  104, 110, 116, 122};
// IQ2_KL: a 5-bit index per pair of weights; each entry holds the pair as two int8 (low byte first).
inline constexpr uint16_t kIq2klValues[32] = {0xe9c1, 0x0dc1, 0xc1d8, 0xf6d8, 0x0dd8, 0x2fd8, 0xd8e9, 0xe9e9, 0x01e9, 0x0de9, 0x1ce9,
                                              0xc1f6, 0x01f6, 0x0df6, 0x2ff6, 0xe901, 0xf601, 0x0101, 0x0d01, 0x1c01, 0xd80d, 0xe90d,
                                              0xf60d, 0x010d, 0x0d0d, 0xc11c, 0xe91c, 0x011c, 0x1c1c, 0x2f1c, 0xe92f, 0x0d2f};
// IQ6_K as dequantize_row_iq6_k computes it (get_rows): a cubic in the 6-bit code, plus 1 for the table's second half.
inline constexpr float kIq6kA = -127.f, kIq6kB = 6.2568f, kIq6kC = 0.11218f, kIq6kD = 0.0011972f;

}  // namespace moe::ik

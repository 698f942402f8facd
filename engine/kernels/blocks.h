// Quantized block layouts, byte-identical to llama.cpp's ggml-common.h.
#pragma once
#include <cstdint>

namespace moe {

constexpr int QK8_0 = 32;
constexpr int QK4_0 = 32;
constexpr int QK_K = 256;

struct BlockQ8_0 {  // 34 bytes: x[i] = d * qs[i]
    uint16_t d;     // fp16 scale
    int8_t qs[QK8_0];
};
struct BlockQ4_0 {  // 18 bytes: x[i] = d * (nibble - 8); low nibbles are x[0..15], high x[16..31]
    uint16_t d;
    uint8_t qs[QK4_0 / 2];
};
struct BlockQ4_K {  // 144 bytes: 8 sub-blocks of 32, 6-bit scale and min each, x = d*sc*q - dmin*m
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {  // 176 bytes: as Q4_K plus one high bit per weight in qh
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {  // 210 bytes: 16 sub-blocks of 16, int8 scale each, x = d*sc*(q-32)
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
struct BlockQ8_K {  // activations for K-quant dot products: float scale, sums of 16 for the min terms
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

// The rest of the types ggml defines (ggml-common.h), field for field.
struct BlockQ4_1 {  // 20 bytes: x = d*q + m, nibbles as Q4_0
    uint16_t d, m;
    uint8_t qs[16];
};
struct BlockQ5_0 {  // 22 bytes: x = d*(q - 16), q's fifth bit in qh (bit j of the little-endian word: element j)
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
};
struct BlockQ5_1 {  // 24 bytes: x = d*q + m
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
};
struct BlockQ8_1 {  // 36 bytes: activations for Q4_1/Q5_1: s = fp16(d * sum(qs))
    uint16_t d, s;
    int8_t qs[32];
};
struct BlockMXFP4 {  // 17 bytes: x = kvalues_fp4[q] * 2^(e-127) / 2
    uint8_t e;
    uint8_t qs[16];
};
struct BlockIQ4_NL {  // 18 bytes: x = d * kvalues_iq4nl[q]
    uint16_t d;
    uint8_t qs[16];
};
struct BlockQ2_K {  // 84 bytes: 16 sub-blocks of 16: x = d*sc*q - dmin*m (4-bit sc and m)
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
};
struct BlockQ3_K {  // 110 bytes: 16 sub-blocks of 16: x = d*(sc-32)*(q2 - (hbit ? 0 : 4)), 6-bit sc
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
};
struct BlockIQ2_XXS {
    uint16_t d;
    uint16_t qs[32];
};  // 66 bytes
struct BlockIQ2_XS {
    uint16_t d;
    uint16_t qs[32];
    uint8_t scales[8];
};  // 74 bytes
struct BlockIQ2_S {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t scales[8];
};  // 82 bytes
struct BlockIQ3_XXS {
    uint16_t d;
    uint8_t qs[96];
};  // 98 bytes
struct BlockIQ3_S {
    uint16_t d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t signs[32];
    uint8_t scales[4];
};  // 110 bytes
struct BlockIQ1_S {
    uint16_t d;
    uint8_t qs[32];
    uint16_t qh[8];
};  // 50 bytes
struct BlockIQ1_M {
    uint8_t qs[32];
    uint8_t qh[16];
    uint8_t scales[8];
};  // 56 bytes (fp16 d in the scales' top nibbles)
struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
};  // 136 bytes
struct BlockTQ1_0 {
    uint8_t qs[48];
    uint8_t qh[4];
    uint16_t d;
};  // 54 bytes: trits, 5 per qs byte
struct BlockTQ2_0 {
    uint8_t qs[64];
    uint16_t d;
};  // 66 bytes: x = d*(q - 1)

static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockMXFP4) == 17 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82 && sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50 && sizeof(BlockIQ1_M) == 56 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockTQ1_0) == 54 && sizeof(BlockTQ2_0) == 66);

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// Unpacks the j-th (0..7) 6-bit scale and min of a Q4_K/Q5_K block.
inline void k_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

}  // namespace moe

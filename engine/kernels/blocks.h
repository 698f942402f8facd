// Quantized block layouts, byte-identical to llama.cpp's ggml-common.h.
#pragma once
#include <cstdint>

namespace moe {

constexpr int QK8_0 = 32;
constexpr int QK4_0 = 32;
constexpr int QK_K = 256;

struct BlockQ8_0 {   // 34 bytes: x[i] = d * qs[i]
    uint16_t d;      // fp16 scale
    int8_t qs[QK8_0];
};
struct BlockQ4_0 {   // 18 bytes: x[i] = d * (nibble - 8); low nibbles are x[0..15], high x[16..31]
    uint16_t d;
    uint8_t qs[QK4_0 / 2];
};
struct BlockQ4_K {   // 144 bytes: 8 sub-blocks of 32, 6-bit scale and min each, x = d*sc*q - dmin*m
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
};
struct BlockQ5_K {   // 176 bytes: as Q4_K plus one high bit per weight in qh
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct BlockQ6_K {   // 210 bytes: 16 sub-blocks of 16, int8 scale each, x = d*sc*(q-32)
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
struct BlockQ8_K {   // activations for K-quant dot products: float scale, sums of 16 for the min terms
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

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

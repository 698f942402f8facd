// ik_llama.cpp's trellis types (IQ1_KT ... IQ4_KT) and the other 32-weight formats its kernels pair with Q8_2_X4
// activations (Q6_0, and llama.cpp's Q8_0 as ik computes it): one block as integers, in element order.
//
// A trellis block stores, per group of 8 weights (IQ4_KT: 4), one index; the weights are generated from it by an
// integer LCG (x = x * 0xCBAC1FED, then the four 6-bit bytes of x summed, minus 126), so each weight is an exact
// integer in [-126, 126], multiplied by a per-32 scale and the row scale.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/gguf/ggml_types.h"
#include "engine/kernels/ik/ik_blocks.h"

namespace moe::ik {

// The weights of one trellis group: `count` values from index `idx` (plus the type's offset).
inline void trellis_values(uint32_t idx, uint32_t offset, int count, int8_t* out) {
    uint32_t x = idx + offset;
    for (int k = 0; k < count; ++k) {
        x *= 0xCBAC1FEDu;
        const uint32_t s = x & 0x3f3f3f3fu;
        out[k] = static_cast<int8_t>(static_cast<int>((s & 0xff) + ((s >> 8) & 0xff) + ((s >> 16) & 0xff) + (s >> 24)) - 126);
    }
}

struct TrellisBlock {
    int8_t value[QK_K];  // signed weights (IQ3_KT: |trellis value| with the stored sign)
    int scale[8];        // per 32 weights
};

inline constexpr bool is_trellis_type(GgmlType t) {
    return t == GgmlType::IQ1_KT || t == GgmlType::IQ2_KT || t == GgmlType::IQ3_KT || t == GgmlType::IQ4_KT;
}

// The row scale the matmul kernels use: the stored one, times 1.05 (IQ2_KT) or 1.01 (IQ3_KT), which ik's matmuls
// apply and its dequantize_row_* (get_rows) do not.
inline float trellis_matmul_scale(GgmlType t, float stored) {
    if (t == GgmlType::IQ2_KT) return stored * 1.05f;
    if (t == GgmlType::IQ3_KT) return stored * 1.01f;
    return stored;
}

inline void decode_trellis_block(GgmlType t, const void* blk, TrellisBlock& b) {
    switch (t) {
        case GgmlType::IQ1_KT: {
            auto& x = *static_cast<const BlockIQ1_KT*>(blk);
            for (int ib = 0; ib < 8; ++ib) b.scale[ib] = kIq4kValues[x.sh[ib] & 0xF];
            for (int g = 0; g < 32; ++g) {
                const uint32_t hi = g < 16 ? x.qh[g] & 0xF : x.qh[g - 16] >> 4;
                const uint32_t idx = x.ql[g] | (hi << 8) | (((x.sh[g / 4] >> (4 + g % 4)) & 1u) << 12);
                trellis_values(idx, 4096, 8, b.value + 8 * g);
            }
            return;
        }
        case GgmlType::IQ2_KT:
        case GgmlType::IQ3_KT: {
            const bool iq3 = t == GgmlType::IQ3_KT;
            const uint8_t* scales = iq3 ? static_cast<const BlockIQ3_KT*>(blk)->scales : static_cast<const BlockIQ2_KT*>(blk)->scales;
            const uint8_t* ql = iq3 ? static_cast<const BlockIQ3_KT*>(blk)->ql : static_cast<const BlockIQ2_KT*>(blk)->ql;
            for (int ib = 0; ib < 8; ++ib) {
                const int nib = ib < 4 ? scales[ib] & 0xF : scales[ib - 4] >> 4;
                b.scale[ib] = iq3 ? nib : kIq4kValues[nib];
            }
            for (int g = 0; g < 32; ++g) {
                uint16_t idx;
                std::memcpy(&idx, ql + 2 * g, 2);
                trellis_values(idx, 4096, 8, b.value + 8 * g);
            }
            if (iq3) {
                const auto& x = *static_cast<const BlockIQ3_KT*>(blk);
                for (int e = 0; e < QK_K; ++e) {
                    const int v = std::abs(static_cast<int>(b.value[e]));
                    b.value[e] = static_cast<int8_t>((x.qh[e % 32] >> (e / 32)) & 1 ? -v : v);
                }
            }
            return;
        }
        case GgmlType::IQ4_KT: {
            auto& x = *static_cast<const BlockIQ4_KT*>(blk);
            const auto* ql = reinterpret_cast<const uint8_t*>(x.qs + 8);
            const uint8_t* qh = ql + 64;
            for (int ib = 0; ib < 8; ++ib) b.scale[ib] = static_cast<int>((x.qs[ib] & 0xff) >> 1) - 64;
            for (int g = 0; g < 64; ++g) {
                const int ib = g / 8, ig = g % 8;
                const uint32_t hi = g < 32 ? qh[g] & 0xF : qh[g - 32] >> 4;
                const uint32_t idx = ql[g] | (hi << 8) | (((x.qs[ib] >> (8 + 3 * ig)) & 7u) << 12);
                trellis_values(idx, x.qs[ib] & 1 ? 4096 + 32768 : 4096, 4, b.value + 4 * g);
            }
            return;
        }
        default: return;
    }
}

// Q6_0 element j of a block: its unsigned 6-bit value (the weight is d * (u - 32)).
inline int q6_0_unsigned(const BlockQ6_0& x, int j) {
    const int jj = j % 16;
    const uint8_t h = x.qh[jj % 8] >> 4 * (jj / 8);
    return j < 16 ? (x.qs[jj] & 0x0F) | ((h << 4) & 0x30) : (x.qs[jj] >> 4) | ((h << 2) & 0x30);
}

}  // namespace moe::ik

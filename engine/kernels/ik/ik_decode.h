// The eleven table types of ik_llama.cpp (IQ2_K ... IQ6_K, IQ2_KS ... IQ5_KS, IQ4_KSS, IQ2_KL), one 256-weight
// block as integers, in the element order of its dequantize_row_<type>: each weight's table value and each
// 16-weight group's integer scale (w = d * scale * value), and how ik's AVX2 kernel sees them.
//
// ik's AVX2 kernels (iqk_gemm_iqk_quants.cpp) multiply a "kernel value" per weight with the int8 activations,
// kernel value = value + add[group]: some types use one half of a table plus an offset that makes every value
// unsigned (maddubs with the weights as the unsigned operand: a pair's int16 sum saturates), the other half
// through the offset; the offset's share, -add * scale * (sum of the group's activations), comes from the
// activations' sums of 16 as a second set of lanes. Others use the signed values (sign trick: no saturation).
// The float result depends on that split, so the reference keeps it (kernels_ref_ik.cpp).
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/gguf/ggml_types.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/kernels.h"

namespace moe::ik {

struct TableBlock {
    int8_t value[QK_K];    // the table value of each weight
    int16_t kernel[QK_K];  // what the AVX2 kernel multiplies: value + add[e / 16] (0..255 for unsigned kernels)
    int16_t scale[16];     // per 16 weights (the per-32 types repeat theirs)
    int16_t add[16];       // per 16 weights; the min lanes multiply -add * scale with the sums of 16
};

// How each type's AVX2 kernel treats its kernel values.
struct TableKernelShape {
    bool unsigned_values;  // maddubs(kernel value, activation): pair sums saturate at int16
    bool min_lanes;        // the offset's lanes are accumulated (before the value lanes) for every block
    bool row_scale;        // a scale in front of each row (f16 or f32) instead of a block f16 d
};

inline constexpr TableKernelShape table_shape(GgmlType t) {
    switch (t) {
        case GgmlType::IQ2_K:
        case GgmlType::IQ3_K: return {true, true, false};
        case GgmlType::IQ4_K: return {false, false, false};
        case GgmlType::IQ5_K:
        case GgmlType::IQ6_K: return {false, true, false};
        case GgmlType::IQ2_KS:
        case GgmlType::IQ2_KL:
        case GgmlType::IQ4_KSS:
        case GgmlType::IQ5_KS: return {true, true, true};
        case GgmlType::IQ3_KS:
        case GgmlType::IQ4_KS: return {false, false, true};
        default: return {false, false, false};
    }
}

inline constexpr bool is_table_type(GgmlType t) {
    switch (t) {
        case GgmlType::IQ2_K:
        case GgmlType::IQ3_K:
        case GgmlType::IQ4_K:
        case GgmlType::IQ5_K:
        case GgmlType::IQ6_K:
        case GgmlType::IQ2_KS:
        case GgmlType::IQ3_KS:
        case GgmlType::IQ4_KS:
        case GgmlType::IQ5_KS:
        case GgmlType::IQ4_KSS:
        case GgmlType::IQ2_KL: return true;
        default: return false;
    }
}

// Bytes of the row scale in front of a row (0, 2 = f16, 4 = f32).
inline constexpr int row_scale_bytes(GgmlType t) {
    switch (t) {
        case GgmlType::IQ2_KS:
        case GgmlType::IQ3_KS:
        case GgmlType::IQ2_KL:
        case GgmlType::IQ1_S_R4:
        case GgmlType::IQ1_M_R4:
        case GgmlType::IQ1_BN: return 2;
        case GgmlType::IQ4_KS:
        case GgmlType::IQ4_KSS:
        case GgmlType::IQ5_KS:
        case GgmlType::IQ1_KT:
        case GgmlType::IQ2_KT:
        case GgmlType::IQ3_KT:
        case GgmlType::IQ4_KT:
        case GgmlType::IQ4_KS_R4:
        case GgmlType::IQ5_KS_R4:
        case GgmlType::IQ2_BN:
        case GgmlType::Q8_KV: return 4;  // (Q8_KV: then the int32 sum of the row's values)
        default: return 0;
    }
}

// f16 row scales at the start of each interleaved block (one per row of the group), for the forms that keep them
// there instead of in front of the group.
inline constexpr int interleaved_block_scales(GgmlType t) {
    // every computed interleaved form but those with their row scales in front of the group
    if (t == GgmlType::IQ1_S_R4 || t == GgmlType::IQ1_M_R4 || t == GgmlType::IQ4_KS_R4 || t == GgmlType::IQ5_KS_R4 || t == GgmlType::Q8_KV_R8 ||
        t == GgmlType::IQ2_BN_R4)
        return 0;
    if (t == GgmlType::MXFP4_R8 || t == GgmlType::BF16_R16) return 0;                          // E8M0 exponents per block; no scales
    if (t == GgmlType::Q4_K_R4 || t == GgmlType::Q5_K_R4 || t == GgmlType::Q2_K_R4) return 8;  // their rows' d, then their dmin
    const int group = kernels::interleaved_rows(t);
    return group > 1 ? group : 0;
}

// Types whose blocks start with an f16 d (IQ2_K ... IQ6_K, Q6_0).
inline constexpr bool block_has_d(GgmlType t) {
    switch (t) {
        case GgmlType::IQ2_K:
        case GgmlType::IQ3_K:
        case GgmlType::IQ4_K:
        case GgmlType::IQ5_K:
        case GgmlType::IQ6_K:
        case GgmlType::Q6_0: return true;
        default: return false;
    }
}

// The row scale of a row that has one, as a float.
inline float row_scale(GgmlType t, const void* row) {
    if (row_scale_bytes(t) == 2) {
        uint16_t h;
        std::memcpy(&h, row, 2);
        return fp16_to_fp32(h);
    }
    float f;
    std::memcpy(&f, row, 4);
    return f;
}

namespace detail {
inline void set16(TableBlock& b, int g16, int scale, int add) {
    b.scale[g16] = static_cast<int16_t>(scale);
    b.add[g16] = static_cast<int16_t>(add);
}
inline void set32(TableBlock& b, int g32, int scale, int add) { set16(b, 2 * g32, scale, add), set16(b, 2 * g32 + 1, scale, add); }
inline void put(TableBlock& b, int e, int value) {
    b.value[e] = static_cast<int8_t>(value);
    b.kernel[e] = static_cast<int16_t>(value + b.add[e / 16]);
}
}  // namespace detail

// Decodes block `blk` of type t (a table type). The block d (IQ2_K ... IQ6_K) or the row scale is not part of it.
inline void decode_table_block(GgmlType t, const void* blk, TableBlock& b) {
    using detail::put;
    using detail::set16;
    using detail::set32;
    switch (t) {
        case GgmlType::IQ2_K: {  // 2-bit codes; the extra bit (per 16) picks the table half, which is the first + 5
            auto& x = *static_cast<const BlockIQ2_K*>(blk);
            for (int g = 0; g < 16; ++g) {
                const int bit = (x.extra >> g) & 1;
                set16(b, g, ((x.scales[g / 2] >> 4 * (g % 2)) & 0xF) - 8, 32 - 5 * bit);
            }
            for (int e = 0; e < QK_K; ++e) {
                const int ib32 = e / 32, j = e % 32;
                const int q = (x.qs[32 * (ib32 / 4) + j] >> 2 * (ib32 % 4)) & 3;
                put(b, e, kIq2nlValues[q + 4 * ((x.extra >> (e / 16)) & 1)]);
            }
            return;
        }
        case GgmlType::IQ3_K: {  // 3-bit codes, signed odd scales; second table half = first + 4
            auto& x = *static_cast<const BlockIQ3_K*>(blk);
            for (int g = 0; g < 16; ++g) {
                const int nib = (x.scales_l[g / 2] >> 4 * (g % 2)) & 0xF;
                const int sign = (x.scales_h >> g) & 1 ? -1 : 1;
                set16(b, g, (2 * nib + 1) * sign, 64 - 4 * ((x.extra >> g) & 1));
            }
            for (int e = 0; e < QK_K; ++e) {
                const int ib32 = e / 32, j = e % 32;
                const int q = ((x.qs[32 * (ib32 / 4) + j] >> 2 * (ib32 % 4)) & 3) | (((x.qh[j] >> ib32) & 1) << 2);
                put(b, e, kIq3nlValues[q + 8 * ((x.extra >> (e / 16)) & 1)]);
            }
            return;
        }
        case GgmlType::IQ4_K: {  // 4-bit codes, 6-bit scales; both table halves used as they are
            auto& x = *static_cast<const BlockIQ4_K*>(blk);
            for (int g = 0; g < 16; ++g) {
                const int ib = g / 2, sh = x.scales_h[ib / 2] >> 4 * (ib % 2);
                const int lo = (x.scales_l[ib] >> 4 * (g % 2)) & 0xF, hi = g % 2 ? (sh << 2) & 0x30 : (sh << 4) & 0x30;
                set16(b, g, (lo | hi) - 32, 0);
            }
            for (int e = 0; e < QK_K; ++e) {
                const int ib = e / 32, j = e % 16;
                const int q = (e % 32) < 16 ? x.qs[16 * ib + j] & 0xF : x.qs[16 * ib + j] >> 4;
                put(b, e, kIq4kValues[q + 16 * ((x.extra >> (e / 16)) & 1)]);
            }
            return;
        }
        case GgmlType::IQ5_K: {  // 5-bit codes; second table half = first + 2
            auto& x = *static_cast<const BlockIQ5_K*>(blk);
            for (int g = 0; g < 16; ++g) {
                const int ib64 = g / 4, k = g % 4;
                const uint8_t sl = x.scales_l[2 * ib64 + k / 2], sh = x.scales_h[ib64];
                const int lo = k % 2 ? sl >> 4 : sl & 0xF;
                const int hi = k == 0 ? (sh << 4) & 0x30 : k == 1 ? (sh << 2) & 0x30 : k == 2 ? sh & 0x30 : (sh >> 2) & 0x30;
                set16(b, g, (lo | hi) - 32, -2 * ((x.extra >> g) & 1));
            }
            for (int e = 0; e < QK_K; ++e) {
                const int ib64 = e / 64, r = e % 64, k = r / 16, j = r % 16;
                const int shift = 2 * (ib64 % 4);
                const uint8_t qs = x.qs[32 * ib64 + j + 16 * (k % 2)], qh = x.qh[j + 16 * (k % 2)];
                const int q = (k < 2 ? qs & 0xF : qs >> 4) | (((qh >> (shift + k / 2)) & 1) << 4);
                put(b, e, kIq5nlValues[q + 32 * ((x.extra >> (e / 16)) & 1)]);
            }
            return;
        }
        case GgmlType::IQ6_K: {  // 6-bit codes into the 64-value table; second half = first + 1 (the matmul's table)
            auto& x = *static_cast<const BlockIQ6_K*>(blk);
            for (int g = 0; g < 16; ++g) set16(b, g, x.scales[g], -((x.extra >> g) & 1));
            for (int e = 0; e < QK_K; ++e) {
                const int ib64 = e / 64, r = e % 64, k = r / 16, j = r % 16;
                const int shift = 4 * (ib64 % 2);
                const uint8_t qs = x.qs[32 * ib64 + j + 16 * (k % 2)], qh = x.qh[32 * (ib64 / 2) + j + 16 * (k % 2)];
                const int q = (k < 2 ? qs & 0xF : qs >> 4) | (((qh >> shift) >> 2 * (k / 2)) & 3) << 4;
                put(b, e, kIq6nlValues[q + 64 * ((x.extra >> (e / 16)) & 1)]);
            }
            return;
        }
        case GgmlType::IQ2_KS: {  // per 32: 5-bit scale (fifth bit in extra's high byte), table half in extra's low byte
            auto& x = *static_cast<const BlockIQ2_KS*>(blk);
            for (int g = 0; g < 8; ++g) {
                const int nib = (x.scales[g / 2] >> 4 * (g % 2)) & 0xF;
                set32(b, g, (nib | (((x.extra >> (8 + g)) & 1) << 4)) - 16, 32 - 5 * ((x.extra >> g) & 1));
            }
            for (int e = 0; e < QK_K; ++e) {
                const int ib64 = e / 64, half = (e % 64) / 32, j = e % 32;
                const int q = (x.qs[32 * (ib64 / 2) + j] >> (4 * (ib64 % 2) + 2 * half)) & 3;
                put(b, e, kIq2nlValues[q + 4 * ((x.extra >> (e / 32)) & 1)]);
            }
            return;
        }
        case GgmlType::IQ3_KS: {  // per 32: 5-bit scale (fifth bit in extra's low byte), table half in its high byte
            auto& x = *static_cast<const BlockIQ3_KS*>(blk);
            for (int g = 0; g < 8; ++g) {
                const int nib = g < 4 ? x.scales[g] & 0xF : x.scales[g - 4] >> 4;
                set32(b, g, (nib | (((x.extra >> g) & 1) << 4)) - 16, 0);
            }
            for (int e = 0; e < QK_K; ++e) {
                const int g = e / 32, i128 = g / 4, ib = g % 4, j = e % 32;
                const int q = ((x.qs[32 * i128 + j] >> 2 * ib) & 3) | (((x.qh[j] >> g) & 1) << 2);
                put(b, e, kIq3nlValues[q + 8 * ((x.extra >> (8 + g)) & 1)]);
            }
            return;
        }
        case GgmlType::IQ4_KS: {  // per 32: a byte whose bit 0 picks the table half, bits 1-7 the scale
            auto& x = *static_cast<const BlockIQ4_KS*>(blk);
            for (int g = 0; g < 8; ++g) set32(b, g, (x.scales[g] & 254) - 127, 0);
            for (int e = 0; e < QK_K; ++e) {
                const int g = e / 32, j = e % 16;
                const int q = (e % 32) < 16 ? x.qs[16 * g + j] & 0xF : x.qs[16 * g + j] >> 4;
                put(b, e, kIq4kValues[q + 16 * (x.scales[g] & 1)]);
            }
            return;
        }
        case GgmlType::IQ4_KSS: {  // per 32: 8 uint16 whose low bits form the scale byte, the rest the nibbles
            auto& x = *static_cast<const BlockIQ4_KSS*>(blk);
            const auto* q16 = reinterpret_cast<const uint8_t*>(x.qs);
            for (int g = 0; g < 8; ++g) {
                uint16_t aux[8];
                int ls = 0;
                for (int k = 0; k < 8; ++k) {
                    uint16_t q;
                    std::memcpy(&q, q16 + 16 * g + 2 * k, 2);
                    aux[k] = static_cast<uint16_t>(q & 0xfffe);
                    aux[k] = static_cast<uint16_t>(aux[k] ^ (aux[k] >> 1));
                    ls |= (q & 1) << k;
                }
                set32(b, g, (ls & 254) - 127, 128 - 4 * (ls & 1));
                const auto* a8 = reinterpret_cast<const uint8_t*>(aux);
                for (int j = 0; j < 16; ++j) {
                    put(b, 32 * g + j, kIq4kValues[(a8[j] & 0xF) + 16 * (ls & 1)]);
                    put(b, 32 * g + j + 16, kIq4kValues[(a8[j] >> 4) + 16 * (ls & 1)]);
                }
            }
            return;
        }
        case GgmlType::IQ5_KS: {  // per 32: as IQ4_KS; 5-bit codes; second table half = first + 2
            auto& x = *static_cast<const BlockIQ5_KS*>(blk);
            for (int g = 0; g < 8; ++g) set32(b, g, (x.scales[g] & 254) - 127, 128 - 2 * (x.scales[g] & 1));
            for (int e = 0; e < QK_K; ++e) {
                const int g = e / 32, ib64 = g / 2, j = e % 32;
                const uint8_t qs = x.qs[32 * ib64 + j];
                const int q = (g % 2 ? qs >> 4 : qs & 0xF) | (((x.qh[j] >> g) & 1) << 4);
                put(b, e, kIq5nlValues[q + 32 * (x.scales[g] & 1)]);
            }
            return;
        }
        case GgmlType::IQ2_KL: {  // per 32: 6-bit scales; a 5-bit pair index per two weights
            auto& x = *static_cast<const BlockIQ2_KL*>(blk);
            for (int g = 0; g < 8; ++g) {
                const int ib64 = g / 2, h = g % 2;
                const int lo = (x.scales_l[(2 * ib64 + h) % 4] >> 4 * (ib64 / 2)) & 0xF;
                const int hi = (x.scales_h >> (4 * ib64 + 2 * h)) & 3;
                set32(b, g, (lo | (hi << 4)) - 32, 64);
            }
            for (int e = 0; e < QK_K; e += 2) {
                const int g = e / 32, ib64 = g / 2, h = g % 2, j = (e % 32) / 2;
                const uint8_t qs = x.qs[16 * ib64 + j];
                const int idx = (h ? qs >> 4 : qs & 0xF) | (((x.qh[j] >> (2 * ib64 + h)) & 1) << 4);
                put(b, e, static_cast<int8_t>(kIq2klValues[idx] & 0xFF));
                put(b, e + 1, static_cast<int8_t>(kIq2klValues[idx] >> 8));
            }
            return;
        }
        default: return;
    }
}

// The block's d for the types that carry one (IQ2_K ... IQ6_K: the f16 at the block's start).
inline float table_block_d(GgmlType t, const void* blk) {
    if (table_shape(t).row_scale) return 1.f;
    uint16_t h;
    std::memcpy(&h, blk, 2);
    return fp16_to_fp32(h);
}

}  // namespace moe::ik

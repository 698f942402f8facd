// Weight encoders for synthetic models (mkmodel). They produce valid blocks of each layout with a simple
// min/max or abs-max fit; they are not llama-quantize's importance-weighted search, and need not be: the
// engine's job is to read blocks exactly, whoever wrote them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/kernels.h"

namespace moe::kernels {
namespace {

int clampi(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Q4_K / Q5_K: per 32-element sub-block, x ~ d*sc*q - dmin*m with q in [0, 2^bits).
template <typename Block, int Bits>
void quantize_k_minmax(const float* x, Block* y, int64_t n) {
    constexpr int qmax = (1 << Bits) - 1;
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float scale[8], minv[8];
        for (int j = 0; j < 8; ++j) {
            float lo = 0.f, hi = 0.f;  // include 0 so mins stay non-negative
            for (int l = 0; l < 32; ++l) { lo = std::min(lo, x[j * 32 + l]); hi = std::max(hi, x[j * 32 + l]); }
            scale[j] = (hi - lo) / qmax;
            minv[j] = -lo;
        }
        float max_scale = *std::max_element(scale, scale + 8), max_min = *std::max_element(minv, minv + 8);
        float d = max_scale / 63.f, dmin = max_min / 63.f;
        Block& blk = y[b];
        std::memset(&blk, 0, sizeof blk);
        blk.d = fp32_to_fp16(d);
        blk.dmin = fp32_to_fp16(dmin);
        uint8_t ls[8], lm[8];
        for (int j = 0; j < 8; ++j) {
            ls[j] = static_cast<uint8_t>(d > 0 ? clampi(static_cast<int>(std::lround(scale[j] / d)), 0, 63) : 0);
            lm[j] = static_cast<uint8_t>(dmin > 0 ? clampi(static_cast<int>(std::lround(minv[j] / dmin)), 0, 63) : 0);
            if (j < 4) {
                blk.scales[j] = ls[j];
                blk.scales[j + 4] = lm[j];
            } else {
                blk.scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
                blk.scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
                blk.scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
            }
        }
        const float dd = fp16_to_fp32(blk.d), dm = fp16_to_fp32(blk.dmin);
        for (int j = 0; j < 8; ++j) {
            float s = dd * ls[j], m = dm * lm[j];
            for (int l = 0; l < 32; ++l) {
                int q = s > 0 ? clampi(static_cast<int>(std::lround((x[j * 32 + l] + m) / s)), 0, qmax) : 0;
                uint8_t& byte = blk.qs[(j / 2) * 32 + l];
                byte |= static_cast<uint8_t>((q & 0xF) << ((j & 1) ? 4 : 0));
                if constexpr (Bits == 5) {
                    if (q & 16) reinterpret_cast<BlockQ5_K&>(blk).qh[l] |= static_cast<uint8_t>(1u << j);
                }
            }
        }
    }
}

void quantize_q6_K(const float* x, BlockQ6_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float sub[16];
        for (int g = 0; g < 16; ++g) {
            float amax = 0.f;
            for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[g * 16 + l]));
            sub[g] = amax / 31.f;
        }
        float max_sub = *std::max_element(sub, sub + 16);
        BlockQ6_K& blk = y[b];
        std::memset(&blk, 0, sizeof blk);
        float d = max_sub / 127.f;
        blk.d = fp32_to_fp16(d);
        float dd = fp16_to_fp32(blk.d);
        for (int g = 0; g < 16; ++g)
            blk.scales[g] = static_cast<int8_t>(dd > 0 ? clampi(static_cast<int>(std::lround(sub[g] / dd)), -128, 127) : 0);
        for (int e = 0; e < QK_K; ++e) {
            float s = dd * blk.scales[e / 16];
            int q = s != 0 ? clampi(static_cast<int>(std::lround(x[e] / s)), -32, 31) + 32 : 32;
            int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
            uint8_t& low = blk.ql[half * 64 + ((quarter & 1) ? l + 32 : l)];
            low |= static_cast<uint8_t>((q & 0xF) << (quarter >= 2 ? 4 : 0));
            blk.qh[half * 32 + l] |= static_cast<uint8_t>(((q >> 4) & 3) << (2 * quarter));
        }
    }
}

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
    for (int64_t b = 0; b < n / QK4_0; ++b, x += QK4_0) {
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < QK4_0; ++j)
            if (std::fabs(x[j]) > amax) { amax = std::fabs(x[j]); max = x[j]; }
        const float d = max / -8.f, id = d != 0.f ? 1.f / d : 0.f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
            int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
            y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

}  // namespace

void quantize_row(GgmlType t, const float* x, void* dst, int64_t n) {
    switch (t) {
        case GgmlType::F32: std::memcpy(dst, x, static_cast<size_t>(n) * 4); return;
        case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
            prepare_activations(t, x, dst, n);  // same encoding as the activation conversion
            return;
        case GgmlType::Q4_0: quantize_q4_0(x, static_cast<BlockQ4_0*>(dst), n); return;
        case GgmlType::Q4_K: quantize_k_minmax<BlockQ4_K, 4>(x, static_cast<BlockQ4_K*>(dst), n); return;
        case GgmlType::Q5_K: quantize_k_minmax<BlockQ5_K, 5>(x, static_cast<BlockQ5_K*>(dst), n); return;
        case GgmlType::Q6_K: quantize_q6_K(x, static_cast<BlockQ6_K*>(dst), n); return;
        default: throw std::invalid_argument("cannot quantize to type " + type_name(static_cast<uint32_t>(t)));
    }
}

}  // namespace moe::kernels

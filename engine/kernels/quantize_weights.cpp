// Weight encoders for synthetic models (mkmodel). They produce valid blocks of each layout with a simple
// min/max or abs-max fit; they are not llama-quantize's importance-weighted search, and need not be: the
// engine's job is to read blocks exactly, whoever wrote them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/quant_decode.h"

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
            for (int l = 0; l < 32; ++l) {
                lo = std::min(lo, x[j * 32 + l]);
                hi = std::max(hi, x[j * 32 + l]);
            }
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
        for (int g = 0; g < 16; ++g) blk.scales[g] = static_cast<int8_t>(dd > 0 ? clampi(static_cast<int>(std::lround(sub[g] / dd)), -128, 127) : 0);
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
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        const float d = max / -8.f, id = d != 0.f ? 1.f / d : 0.f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
            int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
            y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

// ---- low-bit formats (a min/max or abs-max fit per block, nearest level) ----

// Q4_1 / Q5_1: x ~ d*q + m per 32 with q in [0, 2^bits).
template <int Bits, class Block>
void quantize_q_1(const float* x, Block* y, int64_t n) {
    constexpr int qmax = (1 << Bits) - 1;
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
        Block& blk = y[b];
        std::memset(&blk, 0, sizeof blk);
        blk.d = fp32_to_fp16((hi - lo) / qmax);
        blk.m = fp32_to_fp16(lo);
        const float d = fp16_to_fp32(blk.d), m = fp16_to_fp32(blk.m);
        for (int j = 0; j < 32; ++j) {
            const int q = d > 0 ? clampi(static_cast<int>(std::lround((x[j] - m) / d)), 0, qmax) : 0;
            blk.qs[j % 16] |= static_cast<uint8_t>((q & 0xF) << (j < 16 ? 0 : 4));
            if constexpr (Bits == 5) blk.qh[j / 8] |= static_cast<uint8_t>(((q >> 4) & 1) << (j % 8));
        }
    }
}

// Q5_0: signed 5-bit, d = (value of largest magnitude) / -16 as llama.cpp's reference quantizer.
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        float amax = 0.f, max = 0.f;
        for (int j = 0; j < 32; ++j)
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        BlockQ5_0& blk = y[b];
        std::memset(&blk, 0, sizeof blk);
        blk.d = fp32_to_fp16(max / -16.f);
        const float d = fp16_to_fp32(blk.d);
        for (int j = 0; j < 32; ++j) {
            const int q = d != 0 ? clampi(static_cast<int>(std::lround(x[j] / d)) + 16, 0, 31) : 16;
            blk.qs[j % 16] |= static_cast<uint8_t>((q & 0xF) << (j < 16 ? 0 : 4));
            blk.qh[j / 8] |= static_cast<uint8_t>(((q >> 4) & 1) << (j % 8));
        }
    }
}

// Q2_K: per 16, x ~ d*sc*q - dmin*m with q in 0..3 and 4-bit sc, m.
void quantize_q2_K(const float* x, BlockQ2_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float scale[16], minv[16];
        for (int g = 0; g < 16; ++g) {
            const float lo = std::min(0.f, *std::min_element(x + 16 * g, x + 16 * g + 16));
            const float hi = std::max(0.f, *std::max_element(x + 16 * g, x + 16 * g + 16));
            scale[g] = (hi - lo) / 3.f;
            minv[g] = -lo;
        }
        BlockQ2_K& blk = y[b];
        std::memset(&blk, 0, sizeof blk);
        blk.d = fp32_to_fp16(*std::max_element(scale, scale + 16) / 15.f);
        blk.dmin = fp32_to_fp16(*std::max_element(minv, minv + 16) / 15.f);
        const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
        for (int g = 0; g < 16; ++g) {
            const int sc = d > 0 ? clampi(static_cast<int>(std::lround(scale[g] / d)), 0, 15) : 0;
            const int m = dmin > 0 ? clampi(static_cast<int>(std::lround(minv[g] / dmin)), 0, 15) : 0;
            blk.scales[g] = static_cast<uint8_t>(sc | (m << 4));
            const float s = d * sc, mm = dmin * m;
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * g + l;
                const int q = s > 0 ? clampi(static_cast<int>(std::lround((x[e] + mm) / s)), 0, 3) : 0;
                blk.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * ((e % 128) / 32)));
            }
        }
    }
}

// Q3_K: per 16, x ~ d*sc*q with q in -4..3 and a signed 6-bit sc (stored + 32, packed as quant::q3k_scales reads).
void quantize_q3_K(const float* x, BlockQ3_K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float scale[16];
        for (int g = 0; g < 16; ++g) {
            float amax = 0.f, max = 0.f;
            for (int l = 0; l < 16; ++l)
                if (std::fabs(x[16 * g + l]) > amax) {
                    amax = std::fabs(x[16 * g + l]);
                    max = x[16 * g + l];
                }
            scale[g] = max / -4.f;
        }
        float smax = 0.f, sval = 0.f;
        for (float v : scale)
            if (std::fabs(v) > smax) {
                smax = std::fabs(v);
                sval = v;
            }
        BlockQ3_K& blk = y[b];
        std::memset(&blk, 0, sizeof blk);
        blk.d = fp32_to_fp16(sval / -32.f);
        const float d = fp16_to_fp32(blk.d);
        for (int g = 0; g < 16; ++g) {
            const int sc = d != 0 ? clampi(static_cast<int>(std::lround(scale[g] / d)), -32, 31) : 0;
            const int u = sc + 32;
            if (g < 8) blk.scales[g] |= static_cast<uint8_t>(u & 0xF);
            else blk.scales[g - 8] |= static_cast<uint8_t>((u & 0xF) << 4);
            blk.scales[8 + g % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (g / 4)));
            const float s = d * sc;
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * g + l;
                const int v = s != 0 ? clampi(static_cast<int>(std::lround(x[e] / s)), -4, 3) : 0;
                blk.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(((v + 4) & 3) << (2 * ((e % 128) / 32)));
                blk.hmask[e % 32] |= static_cast<uint8_t>(((v + 4) >> 2) << (e / 32));
            }
        }
    }
}

// The index of the level of `table` (16 entries) nearest to v.
int nearest_level(const int8_t* table, float v) {
    int best = 0;
    for (int k = 1; k < 16; ++k)
        if (std::fabs(v - table[k]) < std::fabs(v - table[best])) best = k;
    return best;
}
// Table values of 32 weights at scale d into IQ4_NL's nibble layout.
void put_levels(const float* x, float d, const int8_t* table, uint8_t* qs) {
    std::memset(qs, 0, 16);
    for (int j = 0; j < 32; ++j) {
        const int q = d != 0 ? nearest_level(table, x[j] / d) : nearest_level(table, 0.f);
        qs[j % 16] |= static_cast<uint8_t>(q << (j < 16 ? 0 : 4));
    }
}
float signed_amax(const float* x, int n) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < n; ++j)
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    return max;
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        y[b].d = fp32_to_fp16(signed_amax(x, 32) / iq::kValuesIq4nl[0]);
        put_levels(x, fp16_to_fp32(y[b].d), iq::kValuesIq4nl, y[b].qs);
    }
}

// IQ4_XS: a super-block d and signed 6-bit scales per 32 (stored + 32).
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float scale[8], smax = 0.f;
        for (int g = 0; g < 8; ++g) {
            scale[g] = signed_amax(x + 32 * g, 32) / iq::kValuesIq4nl[0];
            smax = std::max(smax, std::fabs(scale[g]));
        }
        BlockIQ4_XS& blk = y[b];
        std::memset(&blk, 0, sizeof blk);
        blk.d = fp32_to_fp16(smax / 31.f);
        const float d = fp16_to_fp32(blk.d);
        for (int g = 0; g < 8; ++g) {
            const int ls = d > 0 ? clampi(static_cast<int>(std::lround(scale[g] / d)), -32, 31) : 0;
            blk.scales_l[g / 2] |= static_cast<uint8_t>(((ls + 32) & 0xF) << (4 * (g % 2)));
            blk.scales_h |= static_cast<uint16_t>(((ls + 32) >> 4) << (2 * g));
            put_levels(x + 32 * g, d * ls, iq::kValuesIq4nl, blk.qs + 16 * g);
        }
    }
}

// MXFP4: a power-of-two scale per 32 (E8M0) with FP4 (E2M1) values; the smallest exponent whose range holds
// the block's largest magnitude.
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        const float amax = std::fabs(signed_amax(x, 32));
        int e = 0;
        while (e < 254 && quant::e8m0_half(static_cast<uint8_t>(e)) * 12.f < amax) ++e;
        y[b].e = static_cast<uint8_t>(e);
        put_levels(x, quant::e8m0_half(y[b].e), iq::kValuesFp4, y[b].qs);
    }
}

// TQ1_0 / TQ2_0: ternary weights times the block's mean magnitude (BitNet b1.58's absmean scale: llama.cpp's
// quantizer takes the largest magnitude, right for trained-ternary weights, but random ones would mostly round
// to zero).
template <class Block>
void quantize_ternary(const float* x, Block* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        double sum = 0;
        for (int e = 0; e < QK_K; ++e) sum += std::fabs(x[e]);
        Block& blk = y[b];
        std::memset(&blk, 0, sizeof blk);
        blk.d = fp32_to_fp16(static_cast<float>(sum / QK_K));
        const float d = fp16_to_fp32(blk.d);
        int trit[QK_K];
        for (int e = 0; e < QK_K; ++e) trit[e] = (d > 0 ? clampi(static_cast<int>(std::lround(x[e] / d)), -1, 1) : 0) + 1;
        if constexpr (std::is_same_v<Block, BlockTQ2_0>) {
            for (int e = 0; e < QK_K; ++e) blk.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(trit[e] << (2 * ((e % 128) / 32)));
        } else {
            // A byte holds trits t0..t(k-1) as ceil(sum t_i 3^(k-1-i) * 256 / 243) (k = 5; the qh bytes hold four,
            // scaled by 3 to the same range), so that trit i is the top of (byte * 3^i) mod 256 times 3.
            auto pack = [](const int* t, int k, int stride) {
                int v = 0;
                for (int i = 0; i < k; ++i) v = 3 * v + t[i * stride];
                for (int i = k; i < 5; ++i) v *= 3;
                return static_cast<uint8_t>((v * 256 + 242) / 243);
            };
            for (int j = 0; j < 32; ++j) blk.qs[j] = pack(trit + j, 5, 32);
            for (int j = 0; j < 16; ++j) blk.qs[32 + j] = pack(trit + 160 + j, 5, 16);
            for (int j = 0; j < 4; ++j) blk.qh[j] = pack(trit + 240 + j, 4, 4);
        }
    }
}

}  // namespace

void quantize_row(GgmlType t, const float* x, void* dst, int64_t n) {
    switch (t) {
        case GgmlType::F32: std::memcpy(dst, x, static_cast<size_t>(n) * 4); return;
        case GgmlType::F16:
        case GgmlType::BF16:
        case GgmlType::Q8_0:
            prepare_activations(t, x, dst, n);  // same encoding as the activation conversion
            return;
        case GgmlType::Q4_0: quantize_q4_0(x, static_cast<BlockQ4_0*>(dst), n); return;
        case GgmlType::Q4_K: quantize_k_minmax<BlockQ4_K, 4>(x, static_cast<BlockQ4_K*>(dst), n); return;
        case GgmlType::Q5_K: quantize_k_minmax<BlockQ5_K, 5>(x, static_cast<BlockQ5_K*>(dst), n); return;
        case GgmlType::Q6_K: quantize_q6_K(x, static_cast<BlockQ6_K*>(dst), n); return;
        case GgmlType::Q4_1: quantize_q_1<4>(x, static_cast<BlockQ4_1*>(dst), n); return;
        case GgmlType::Q5_0: quantize_q5_0(x, static_cast<BlockQ5_0*>(dst), n); return;
        case GgmlType::Q5_1: quantize_q_1<5>(x, static_cast<BlockQ5_1*>(dst), n); return;
        case GgmlType::Q2_K: quantize_q2_K(x, static_cast<BlockQ2_K*>(dst), n); return;
        case GgmlType::Q3_K: quantize_q3_K(x, static_cast<BlockQ3_K*>(dst), n); return;
        case GgmlType::IQ4_NL: quantize_iq4_nl(x, static_cast<BlockIQ4_NL*>(dst), n); return;
        case GgmlType::IQ4_XS: quantize_iq4_xs(x, static_cast<BlockIQ4_XS*>(dst), n); return;
        case GgmlType::MXFP4: quantize_mxfp4(x, static_cast<BlockMXFP4*>(dst), n); return;
        case GgmlType::TQ1_0: quantize_ternary(x, static_cast<BlockTQ1_0*>(dst), n); return;
        case GgmlType::TQ2_0: quantize_ternary(x, static_cast<BlockTQ2_0*>(dst), n); return;
        case GgmlType::Q8_KV: ik::quantize_q8_KV(x, dst, n); return;  // ik's weight quantizer is its activations'
        default: throw std::invalid_argument("cannot quantize to type " + type_name(static_cast<uint32_t>(t)));
    }
}

}  // namespace moe::kernels

// Scalar reference dot products of the low-bit formats (Q4_1 ... MXFP4), in the float orders of llama.cpp's x86
// kernels (ggml-cpu/arch/x86/quants.c, repack.cpp), which are the same in its AVX2 and AVX-512 builds. The
// integer parts are exact, so only where a lane's integer lands matters: as ggml's maddubs/madd chains leave it,
// element e of a 32-weight group sums into lane (e % 32) / 4 (Lanes below). The SIMD kernels must equal these.
#include <cmath>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/kernels_internal.h"
#include "engine/kernels/kquant_order.h"
#include "engine/kernels/quant_decode.h"

namespace moe::kernels {
namespace {

using namespace quant;

// Eight int32 lanes of one block's products, element e in lane (e % 32) / 4.
struct Lanes {
    int32_t v[8] = {};
    void add(int e, int32_t product) { v[(e % 32) / 4] += product; }
};

// The common float half of the K-quant/i-quant kernels: per block acc[l] = fma(d, lane[l], acc[l]), then
// factor * hsum_float_8(acc).
struct LaneAcc {
    float acc[8] = {};
    void add(const Lanes& s, float d) {
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(s.v[l]), acc[l]);
    }
    float sum() const { return hsum_float_8(acc); }
};

// ---- 32-weight blocks with Q8_0 / Q8_1 activations ----

// Lane sums of a block's 32 products weight(e) * y[e].
template <class Weight>
Lanes lanes32(Weight weight, const int8_t* y) {
    Lanes s;
    for (int e = 0; e < 32; ++e) s.add(e, weight(e) * y[e]);
    return s;
}

// Q4_1 x Q8_1: lanes FMA'd with x.d*y.d; the mins as `summs += x.m * y.s`, added last (unfused: GCC's gnu11
// build of ggml contracts a*b+c elsewhere in this file, but not this one).
float dot_q4_1_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ4_1*>(w);
    auto* y = static_cast<const BlockQ8_1*>(a);
    LaneAcc acc;
    float summs = 0.f;
    for (int64_t b = 0; b < n / 32; ++b) {
        summs += fp16_to_fp32(x[b].m) * fp16_to_fp32(y[b].s);
        acc.add(lanes32([&](int e) { return nibble(x[b].qs, e); }, y[b].qs), fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d));
    }
    return acc.sum() + summs;
}

// Q5_0 x Q8_0: signed 5-bit values, lanes FMA'd with x.d*y.d (as Q8_0).
float dot_q5_0_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ5_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    LaneAcc acc;
    for (int64_t b = 0; b < n / 32; ++b) {
        acc.add(lanes32([&](int e) { return (nibble(x[b].qs, e) | (q5_high(x[b].qh, e) << 4)) - 16; }, y[b].qs),
                fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d));
    }
    return acc.sum();
}

// Q5_1 x Q8_1: unsigned 5-bit values; mins as Q4_1.
float dot_q5_1_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ5_1*>(w);
    auto* y = static_cast<const BlockQ8_1*>(a);
    LaneAcc acc;
    float summs = 0.f;
    for (int64_t b = 0; b < n / 32; ++b) {
        summs += fp16_to_fp32(x[b].m) * fp16_to_fp32(y[b].s);
        acc.add(lanes32([&](int e) { return nibble(x[b].qs, e) | (q5_high(x[b].qh, e) << 4); }, y[b].qs),
                fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d));
    }
    return acc.sum() + summs;
}

// IQ4_NL and MXFP4 x Q8_0: table values; blocks alternate between two lane accumulators that are added lane by
// lane before the horizontal sum; an odd last block is added on its own afterwards.
template <class Block, class Scale>
float dot_table32_ref(int64_t n, const void* w, const void* a, const int8_t* table, Scale scale) {
    auto* x = static_cast<const Block*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    const int64_t nb = n / 32;
    LaneAcc acc[2];
    int64_t b = 0;
    for (; b + 1 < nb; b += 2)
        for (int k = 0; k < 2; ++k) {
            acc[k].add(lanes32([&](int e) { return table[nibble(x[b + k].qs, e)]; }, y[b + k].qs), fp16_to_fp32(y[b + k].d) * scale(x[b + k]));
        }
    float both[8];
    for (int l = 0; l < 8; ++l) both[l] = acc[0].acc[l] + acc[1].acc[l];
    float sumf = hsum_float_8(both);
    for (; b < nb; ++b) {
        int sumi = 0;
        for (int e = 0; e < 32; ++e) sumi += table[nibble(x[b].qs, e)] * y[b].qs[e];
        sumf += fp16_to_fp32(y[b].d) * scale(x[b]) * static_cast<float>(sumi);
    }
    return sumf;
}
float dot_iq4_nl_ref(int64_t n, const void* w, const void* a) {
    return dot_table32_ref<BlockIQ4_NL>(n, w, a, iq::kValuesIq4nl, [](const BlockIQ4_NL& b) { return fp16_to_fp32(b.d); });
}
float dot_mxfp4_ref(int64_t n, const void* w, const void* a) {
    return dot_table32_ref<BlockMXFP4>(n, w, a, iq::kValuesFp4, [](const BlockMXFP4& b) { return e8m0_half(b.e); });
}

// IQ4_NL / MXFP4 with a multiple of 8 rows, which llama.cpp repacks on AVX2 CPUs (iq4_nl_8x8, mxfp4_8x8 GEMV and
// GEMM alike): each block's whole integer sum FMA'd with x.scale * y.d into one accumulator.
template <class Block, class Scale>
float dot_table32_repacked_ref(int64_t n, const void* w, const void* a, const int8_t* table, Scale scale) {
    auto* x = static_cast<const Block*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    float acc = 0.f;
    for (int64_t b = 0; b < n / 32; ++b) {
        int sumi = 0;
        for (int e = 0; e < 32; ++e) sumi += table[nibble(x[b].qs, e)] * y[b].qs[e];
        acc = std::fma(static_cast<float>(sumi), scale(x[b]) * fp16_to_fp32(y[b].d), acc);
    }
    return acc;
}
float dot_iq4_nl_repacked_ref(int64_t n, const void* w, const void* a) {
    return dot_table32_repacked_ref<BlockIQ4_NL>(n, w, a, iq::kValuesIq4nl, [](const BlockIQ4_NL& b) { return fp16_to_fp32(b.d); });
}
float dot_mxfp4_repacked_ref(int64_t n, const void* w, const void* a) {
    return dot_table32_repacked_ref<BlockMXFP4>(n, w, a, iq::kValuesFp4, [](const BlockMXFP4& b) { return e8m0_half(b.e); });
}

// IQ4_NL for two or more activation rows of a dense matmul whose weights llama.cpp did not repack: llamafile's
// quantized GEMM, one lane accumulator FMA'd with x.d * y.d per block.
float dot_iq4_nl_batch_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockIQ4_NL*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    LaneAcc acc;
    for (int64_t b = 0; b < n / 32; ++b) {
        acc.add(lanes32([&](int e) { return iq::kValuesIq4nl[nibble(x[b].qs, e)]; }, y[b].qs), fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d));
    }
    return acc.sum();
}

// ---- 256-weight super-blocks with Q8_K activations ----

// Q2_K: per block the mins (lane l: sub-blocks 2l and 2l+1 against their activation sums) FMA'd with
// -y.d*x.dmin, then the scaled values FMA'd with y.d*x.d, both into the same lanes.
float dot_q2_K_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ2_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    LaneAcc acc;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        Lanes mins, vals;
        for (int l = 0; l < 8; ++l) mins.v[l] = q2k_min(x[b], 2 * l) * y[b].bsums[2 * l] + q2k_min(x[b], 2 * l + 1) * y[b].bsums[2 * l + 1];
        for (int e = 0; e < QK_K; ++e) vals.add(e, q2k_scale(x[b], e / 16) * q2k_value(x[b], e) * y[b].qs[e]);
        acc.add(mins, -y[b].d * fp16_to_fp32(x[b].dmin));
        acc.add(vals, y[b].d * fp16_to_fp32(x[b].d));
    }
    return acc.sum();
}

// Q2_K with a multiple of 8 rows on AVX-512 CPUs, which llama.cpp repacks (q2_K_8x8): the GEMV FMAs each block's
// whole sum with x.d*y.d and its mins with x.dmin*y.d, subtracted at the end; the GEMM does the same per half
// block of 128 weights.
template <int Parts>
float dot_q2_K_repacked_in(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ2_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    float acc = 0.f, acc_m = 0.f;
    constexpr int kSpan = QK_K / Parts;
    for (int64_t b = 0; b < n / QK_K; ++b)
        for (int p = 0; p < Parts; ++p) {
            int32_t sum = 0, mins = 0;
            for (int e = p * kSpan; e < (p + 1) * kSpan; ++e) sum += q2k_scale(x[b], e / 16) * q2k_value(x[b], e) * y[b].qs[e];
            for (int s = p * kSpan / 16; s < (p + 1) * kSpan / 16; ++s) mins += q2k_min(x[b], s) * y[b].bsums[s];
            acc = std::fma(static_cast<float>(sum), fp16_to_fp32(x[b].d) * y[b].d, acc);
            acc_m = std::fma(static_cast<float>(mins), fp16_to_fp32(x[b].dmin) * y[b].d, acc_m);
        }
    return acc - acc_m;
}
float dot_q2_K_repacked_ref(int64_t n, const void* w, const void* a) { return dot_q2_K_repacked_in<1>(n, w, a); }
float dot_q2_K_repacked_gemm_ref(int64_t n, const void* w, const void* a) { return dot_q2_K_repacked_in<2>(n, w, a); }

// The super-block types whose whole per-block integer is one lane sum: `value(block, e)` is the element's integer
// weight times its integer sub-block multiplier; d = x.d * y.d (or y.d * x.d, the same product); `factor`
// multiplies the final sum (the 0.25 / 0.125 of the i-quants' half-integer scales).
template <class Block, class Value, class Scale>
float dot_lanes_ref(int64_t n, const void* w, const void* a, Value value, Scale scale, float factor) {
    auto* x = static_cast<const Block*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    LaneAcc acc;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        Lanes s;
        for (int e = 0; e < QK_K; ++e) s.add(e, value(x[b], e) * y[b].qs[e]);
        acc.add(s, scale(x[b], y[b]));
    }
    return factor * acc.sum();
}

float dot_q3_K_ref(int64_t n, const void* w, const void* a) {
    return dot_lanes_ref<BlockQ3_K>(
        n, w, a,
        [](const BlockQ3_K& b, int e) {
            int8_t sc[16];
            q3k_scales(b, sc);
            return sc[e / 16] * q3k_value(b, e);
        },
        [](const BlockQ3_K& b, const BlockQ8_K& q) { return q.d * fp16_to_fp32(b.d); }, 1.0f);
}

float dot_iq2_xxs_ref(int64_t n, const void* w, const void* a) {
    return dot_lanes_ref<BlockIQ2_XXS>(
        n, w, a, [](const BlockIQ2_XXS& b, int e) { return (2 * iq2xxs_scale(b, e / 32) + 1) * iq2xxs_value(b, e); },
        [](const BlockIQ2_XXS& b, const BlockQ8_K& q) { return fp16_to_fp32(b.d) * q.d; }, 0.125f);
}

float dot_iq2_xs_ref(int64_t n, const void* w, const void* a) {
    return dot_lanes_ref<BlockIQ2_XS>(
        n, w, a, [](const BlockIQ2_XS& b, int e) { return (2 * iq2xs_scale(b, e) + 1) * iq2xs_value(b, e); },
        [](const BlockIQ2_XS& b, const BlockQ8_K& q) { return fp16_to_fp32(b.d) * q.d; }, 0.125f);
}

float dot_iq2_s_ref(int64_t n, const void* w, const void* a) {
    return dot_lanes_ref<BlockIQ2_S>(
        n, w, a, [](const BlockIQ2_S& b, int e) { return (2 * iq2s_scale(b, e) + 1) * iq2s_value(b, e); },
        [](const BlockIQ2_S& b, const BlockQ8_K& q) { return fp16_to_fp32(b.d) * q.d; }, 0.125f);
}

float dot_iq3_xxs_ref(int64_t n, const void* w, const void* a) {
    return dot_lanes_ref<BlockIQ3_XXS>(
        n, w, a, [](const BlockIQ3_XXS& b, int e) { return (2 * iq3xxs_scale(b, e / 32) + 1) * iq3xxs_value(b, e); },
        [](const BlockIQ3_XXS& b, const BlockQ8_K& q) { return fp16_to_fp32(b.d) * q.d; }, 0.25f);
}

float dot_iq3_s_ref(int64_t n, const void* w, const void* a) {
    return dot_lanes_ref<BlockIQ3_S>(
        n, w, a, [](const BlockIQ3_S& b, int e) { return (2 * iq3s_scale(b, e / 32) + 1) * iq3s_value(b, e); },
        [](const BlockIQ3_S& b, const BlockQ8_K& q) { return fp16_to_fp32(b.d) * q.d; }, 1.0f);
}

float dot_iq4_xs_ref(int64_t n, const void* w, const void* a) {
    return dot_lanes_ref<BlockIQ4_XS>(
        n, w, a, [](const BlockIQ4_XS& b, int e) { return iq4xs_scale(b, e / 32) * iq4xs_value(b, e); },
        [](const BlockIQ4_XS& b, const BlockQ8_K& q) { return fp16_to_fp32(b.d) * q.d; }, 1.0f);
}

// IQ1_S: grid values in lanes FMA'd with y.d*x.d; the +-1/8 shifts as a float `accum1 += d * sumi1` per block
// (contracted into an FMA by GCC: ggml's C files build as gnu11), times IQ1S_DELTA, added last.
float dot_iq1_s_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockIQ1_S*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    LaneAcc acc;
    float accum1 = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        Lanes s;
        int sumi1 = 0;
        for (int e = 0; e < QK_K; ++e) s.add(e, (2 * iq1s_scale(x[b], e / 32) + 1) * iq1s_value(x[b], e) * y[b].qs[e]);
        for (int ib = 0; ib < 8; ++ib)
            sumi1 += (y[b].bsums[2 * ib] + y[b].bsums[2 * ib + 1]) * iq1s_delta_sign(x[b], ib) * (2 * iq1s_scale(x[b], ib) + 1);
        const float d = y[b].d * fp16_to_fp32(x[b].d);
        acc.add(s, d);
        accum1 = std::fma(d, static_cast<float>(sumi1), accum1);
    }
    return acc.sum() + iq::kIq1sDelta * accum1;
}

// IQ1_M: the grid values and the shifts in two lane accumulators, each FMA'd with y.d * (the fp16 scale).
float dot_iq1_m_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockIQ1_M*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    LaneAcc acc1, acc2;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        Lanes s1, s2;
        for (int e = 0; e < QK_K; ++e) {
            const int scale = 2 * iq1m_scale(x[b], e) + 1;
            s1.add(e, scale * iq1m_value(x[b], e) * y[b].qs[e]);
            s2.add(e, scale * iq1m_delta_sign(x[b], e) * y[b].qs[e]);
        }
        const float d = y[b].d * fp16_to_fp32(iq1m_d(x[b]));
        acc1.add(s1, d);
        acc2.add(s2, d);
    }
    return acc1.sum() + iq::kIq1sDelta * acc2.sum();
}

// TQ1_0 / TQ2_0: ggml sums trit * y in sixteen 16-bit lanes (element e in lane (e % 32) / 2, as maddubs pairs the
// bytes of each 32-element register), subtracts the activation sum bsums[p] from 16-bit lane p (not the sums of
// the same elements: only the total is meant), pairs the 16-bit lanes into eight 32-bit ones, and accumulates
// `sumf = add(mul(lane, d), sumf)` per block, which GCC contracts into an FMA.
template <class Block, class Trit>
float dot_ternary_ref(int64_t n, const void* w, const void* a, Trit trit) {
    auto* x = static_cast<const Block*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    float sumf[8] = {};
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int32_t lanes16[16] = {};
        for (int e = 0; e < QK_K; ++e) lanes16[(e % 32) / 2] += trit(x[b], e) * y[b].qs[e];
        for (int p = 0; p < 16; ++p) lanes16[p] -= y[b].bsums[p];
        const float d = y[b].d * fp16_to_fp32(x[b].d);
        for (int l = 0; l < 8; ++l) sumf[l] = std::fma(static_cast<float>(lanes16[2 * l] + lanes16[2 * l + 1]), d, sumf[l]);
    }
    return hsum_float_8(sumf);
}
float dot_tq1_0_ref(int64_t n, const void* w, const void* a) { return dot_ternary_ref<BlockTQ1_0>(n, w, a, tq1_value); }
float dot_tq2_0_ref(int64_t n, const void* w, const void* a) { return dot_ternary_ref<BlockTQ2_0>(n, w, a, tq2_value); }

}  // namespace

void add_quant_reference_kernels(KernelTable& k) {
    auto set = [&](GgmlType t, DotFn f) { k.dot[static_cast<int>(t)] = f; };
    set(GgmlType::Q4_1, dot_q4_1_ref);
    set(GgmlType::Q5_0, dot_q5_0_ref);
    set(GgmlType::Q5_1, dot_q5_1_ref);
    set(GgmlType::IQ4_NL, dot_iq4_nl_ref);
    set(GgmlType::MXFP4, dot_mxfp4_ref);
    set(GgmlType::Q2_K, dot_q2_K_ref);
    set(GgmlType::Q3_K, dot_q3_K_ref);
    set(GgmlType::IQ2_XXS, dot_iq2_xxs_ref);
    set(GgmlType::IQ2_XS, dot_iq2_xs_ref);
    set(GgmlType::IQ2_S, dot_iq2_s_ref);
    set(GgmlType::IQ3_XXS, dot_iq3_xxs_ref);
    set(GgmlType::IQ3_S, dot_iq3_s_ref);
    set(GgmlType::IQ4_XS, dot_iq4_xs_ref);
    set(GgmlType::IQ1_S, dot_iq1_s_ref);
    set(GgmlType::IQ1_M, dot_iq1_m_ref);
    set(GgmlType::TQ1_0, dot_tq1_0_ref);
    set(GgmlType::TQ2_0, dot_tq2_0_ref);
    // Repacked by llama.cpp: IQ4_NL and MXFP4 on every x86 build with AVX2; Q2_K only on AVX-512 CPUs.
    k.dot_repacked[static_cast<int>(GgmlType::IQ4_NL)] = dot_iq4_nl_repacked_ref;
    k.dot_repacked[static_cast<int>(GgmlType::MXFP4)] = dot_mxfp4_repacked_ref;
    k.dot_batch[static_cast<int>(GgmlType::IQ4_NL)] = dot_iq4_nl_batch_ref;
    if (k.flavor == Flavor::Avx512) {
        k.dot_repacked[static_cast<int>(GgmlType::Q2_K)] = dot_q2_K_repacked_ref;
        k.dot_repacked_gemm[static_cast<int>(GgmlType::Q2_K)] = dot_q2_K_repacked_gemm_ref;
    }
}

}  // namespace moe::kernels

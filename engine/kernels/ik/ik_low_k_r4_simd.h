// AVX2 kernels for ik_llama.cpp's Q2_K_R4 and Q3_K_R4 against Q8_K, a group of four rows at a time in ik's lanes
// (lane k: row k's first 16 of each 32 weights, lane 4 + k: its second 16), with the bits of ik_ref_r4_low_k.cpp:
// the mins or the offset through the sums of 16 first, then one FMA per sub-block with the lanes' float scales.
// The AVX-512 translation unit runs two groups per 512-bit register. Included by ik_r4_simd.h.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_r4_lanes.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

// Q2_K_R4 / Q3_K_R4 (Three) for V::kGroups groups from group g, NY tokens per pass (Lone: a lone column's scale
// products).
template <class V, bool Three, bool Lone, int NY>
void low_k_r4_groups(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr size_t kBlock = Three ? sizeof(ik::BlockQ3_K_R4) : sizeof(ik::BlockQ2_K_R4);
    const ik::BlockQ8K* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes);
    const uint8_t* group0 = w + 4 * g * row_bytes;
    const uint8_t* group1 = V::kGroups > 1 ? group0 + 4 * row_bytes : group0;
    F acc[NY];
    for (auto& a : acc) a = V::set1(0.f);
    for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
        const uint8_t* b0 = group0 + ibl * kBlock;
        const uint8_t* b1 = group1 + ibl * kBlock;
        const F dd = V::rows_f16(b0, b1);
        // per sub-block the lanes' scales (int16 pairs, for the sums of 16) and, Q2, their mins
        I iscales[8], imins[8];
        for (int ib = 0; ib < 8; ++ib) {
            if constexpr (Three) {
                constexpr size_t kL = offsetof(ik::BlockQ3_K_R4, scales_l), kH = offsetof(ik::BlockQ3_K_R4, scales_h);
                const size_t l = kL + 8 * (ib % 4), h = kH + 8 * (ib % 2);
                const I low = V::and_(V::srli16(V::pairs(b0 + l, b1 + l), 4 * (ib / 4)), V::set16(0xF));
                const I high = V::and_(V::srli16(V::pairs(b0 + h, b1 + h), 2 * (ib / 2)), V::set16(3));
                iscales[ib] = V::sub16(V::or_(low, V::slli16(high, 4)), V::set16(32));
            } else {
                const size_t c = offsetof(ik::BlockQ2_K_R4, scales) + 8 * ib;
                const I code = V::pairs(b0 + c, b1 + c);
                iscales[ib] = V::and_(code, V::set16(0xF));
                imins[ib] = V::srli16(code, 4);
            }
        }
        F fscales[8];  // Lone: d * y.d comes first, so the lanes' scales stay apart from d
        for (int ib = 0; ib < 8; ++ib) {
            const F s = V::cvt(V::low16(iscales[ib]));
            fscales[ib] = Lone ? s : V::mul(dd, s);
        }
        // the mins' (Q2: -dmin) or the offset's (Q3: -4 d) factor before y.d
        const F cm0 = Three ? V::mul(dd, V::set1(-4.f)) : V::mul(V::set1(-1.f), V::rows_f16(b0 + 8, b1 + 8));
        F D[NY];
        for (int t = 0; t < NY; ++t) {
            const F yd = V::set1(y[t][ibl].d);
            if constexpr (Lone) D[t] = V::mul(dd, yd);
            const F cm = Three && Lone ? V::mul(D[t], V::set1(-4.f)) : V::mul(cm0, yd);
            acc[t] = V::fma(cm, V::cvt(V::offsets(Three ? iscales : imins, y[t][ibl].bsums)), acc[t]);
        }
        constexpr size_t kQs = Three ? offsetof(ik::BlockQ3_K_R4, qs) : offsetof(ik::BlockQ2_K_R4, qs);
        for (int ib = 0; ib < 8; ++ib) {
            // four 2-bit fields (weights 4f + i of each half), Q3 with its third bits
            const I bits = V::bytes32(b0 + kQs + 32 * ib, b1 + kQs + 32 * ib);
            I q[4];
            for (int f = 0; f < 4; ++f) q[f] = V::and_(V::srli16(bits, 2 * f), V::set8(3));
            if constexpr (Three) {
                constexpr size_t kQh = offsetof(ik::BlockQ3_K_R4, qh);
                const I hb = V::bytes16(b0 + kQh + 16 * ib, b1 + kQh + 16 * ib);
                for (int f = 0; f < 4; ++f) q[f] = V::or_(q[f], V::bit_at(hb, f, f + 4, 2));
            }
            for (int t = 0; t < NY; ++t) {
                const F c = Lone ? V::mul(D[t], fscales[ib]) : V::mul(fscales[ib], V::set1(y[t][ibl].d));
                acc[t] = V::fma(c, V::cvt(V::template dot4<7>(q, V::activations(y[t][ibl].qs + 32 * ib))), acc[t]);
            }
        }
    }
    for (int t = 0; t < NY; ++t) V::store(acc[t], out + t * out_stride + 4 * g);
}

template <bool Three, bool Lone, int NY>
void low_k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    each_group_pair<4>(rows, [&]<class V>(int64_t g) { low_k_r4_groups<V, Three, Lone, NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride); });
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

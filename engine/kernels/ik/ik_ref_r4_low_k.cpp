// Scalar reference kernels for ik_llama.cpp's Q2_K_R4 and Q3_K_R4 (its repack of Q2_K / Q3_K rows, what
// `--repack` makes of a Q2_K / Q3_K_M file) against Q8_K, in the arithmetic of ik's AVX2 build
// (mul_mat_q2_k_r4_q8_k, mul_mat_q3_k_r4_q8_k in iqk_gemm_kquants.cpp). Per row two float accumulators: the mins
// (Q2_K's) or the -4 offset (Q3_K's) first, through the activations' sums of 16 with sub-blocks 0..3 in the first
// accumulator and 4..7 in the second; then per sub-block the first 16 weights' integer sum into the first and the
// second 16's into the second, each times its own float scale. A lone activation column folds y.d into d before
// the scale (d * y.d, then * scale); a batch multiplies d by the scale first (exact), then by y.d. ik's AVX-512
// build sums these forms otherwise (in integers per 256); the engine follows the AVX2 build, as for every type.
#include <cmath>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_r4_layout.h"
#include "engine/kernels/ik/ik_ref.h"

namespace moe::ik {
namespace {

int field(const uint8_t* bytes, r4::BitPos p, int mask) { return (bytes[p.byte] >> p.shift) & mask; }

// Row k, sub-block ib of a block: the scale of each 16 (Q3_K_R4: signed, Q2_K_R4: 0..15), Q2_K_R4's min of each
// 16 (Q3_K_R4: none) and the 32 unsigned quants (0..7, 0..3).
void low_k_sub_block(GgmlType t, const uint8_t* block, int k, int ib, int s[2], int m[2], int q[32]) {
    using namespace r4;
    if (t == GgmlType::Q3_K_R4) {
        const auto& b = *reinterpret_cast<const BlockQ3_K_R4*>(block);
        for (int h = 0; h < 2; ++h) {
            const int n = scale_code(ib, k, h);
            s[h] = (field(b.scales_l, scale_nibble(n), 0xF) | field(b.scales_h, scale_high(n), 3) << 4) - 32;
            m[h] = 0;
        }
        for (int e = 0; e < 32; ++e) q[e] = field(b.qs, two_bits(ib, k, e), 3) | field(b.qh, third_bit(ib, k, e), 1) << 2;
        return;
    }
    const auto& b = *reinterpret_cast<const BlockQ2_K_R4*>(block);
    for (int h = 0; h < 2; ++h) {
        const int code = b.scales[8 * ib + 4 * h + k];
        s[h] = code & 0xF, m[h] = code >> 4;
    }
    for (int e = 0; e < 32; ++e) q[e] = field(b.qs, two_bits(ib, k, e), 3);
}

}  // namespace

template <GgmlType T, bool Lone>
void dot_rows_low_k_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    static_assert(T == GgmlType::Q2_K_R4 || T == GgmlType::Q3_K_R4);
    constexpr bool kTwo = T == GgmlType::Q2_K_R4;
    constexpr size_t kBlock = kTwo ? sizeof(BlockQ2_K_R4) : sizeof(BlockQ3_K_R4);
    const auto* y = static_cast<const BlockQ8K*>(a);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                const uint8_t* block = group + ibl * kBlock;
                const BlockQ8K& yb = y[ibl];
                const auto* d16 = reinterpret_cast<const uint16_t*>(block);
                const float d = fp16_to_fp32(d16[k]);
                int s[8][2], m[8][2], q[8][32];
                for (int ib = 0; ib < 8; ++ib) low_k_sub_block(T, block, k, ib, s[ib], m[ib], q[ib]);
                // the mins (Q2) or the offset (Q3): sub-blocks 0..3 into the first accumulator, 4..7 into the second
                int32_t ML = 0, MH = 0;
                for (int ib = 0; ib < 8; ++ib) {
                    const int* c = kTwo ? m[ib] : s[ib];
                    (ib < 4 ? ML : MH) += c[0] * yb.bsums[2 * ib] + c[1] * yb.bsums[2 * ib + 1];
                }
                float cm;
                if constexpr (kTwo) cm = (-1.f * fp16_to_fp32(d16[4 + k])) * yb.d;
                else cm = Lone ? (d * yb.d) * -4.f : (d * -4.f) * yb.d;
                lo = std::fma(cm, static_cast<float>(ML), lo);
                hi = std::fma(cm, static_cast<float>(MH), hi);
                for (int ib = 0; ib < 8; ++ib) {
                    int32_t qa = 0, qb = 0;
                    for (int e = 0; e < 32; ++e) (e < 16 ? qa : qb) += q[ib][e] * yb.qs[32 * ib + e];
                    const float ca = Lone ? (d * yb.d) * static_cast<float>(s[ib][0]) : (d * static_cast<float>(s[ib][0])) * yb.d;
                    const float cb = Lone ? (d * yb.d) * static_cast<float>(s[ib][1]) : (d * static_cast<float>(s[ib][1])) * yb.d;
                    lo = std::fma(ca, static_cast<float>(qa), lo);
                    hi = std::fma(cb, static_cast<float>(qb), hi);
                }
            }
            out[4 * g + k] = lo + hi;
        }
    }
}

// dequantize_row_q{2,3}_k_r4: Q3: (d * (s - 32)) * (q - 4); Q2: (d * scale) * q - dmin * min.
void dequantize_low_k_r4_row(GgmlType t, const uint8_t* group, int k, int64_t n, float* y) {
    const size_t bb = interleaved_block_bytes(t);
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const uint8_t* block = group + ibl * bb;
        const auto* d16 = reinterpret_cast<const uint16_t*>(block);
        const float d = fp16_to_fp32(d16[k]);
        for (int ib = 0; ib < 8; ++ib) {
            int s[2], m[2], q[32];
            low_k_sub_block(t, block, k, ib, s, m, q);
            float* yb = y + QK_K * ibl + 32 * ib;
            for (int e = 0; e < 32; ++e) {
                const float dl = d * static_cast<float>(s[e / 16]);
                yb[e] = t == GgmlType::Q3_K_R4 ? dl * static_cast<float>(q[e] - 4)
                                               : dl * static_cast<float>(q[e]) - fp16_to_fp32(d16[4 + k]) * static_cast<float>(m[e / 16]);
            }
        }
    }
}

template void dot_rows_low_k_r4_ref<GgmlType::Q2_K_R4, true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_low_k_r4_ref<GgmlType::Q2_K_R4, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_low_k_r4_ref<GgmlType::Q3_K_R4, true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_low_k_r4_ref<GgmlType::Q3_K_R4, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);

}  // namespace moe::ik

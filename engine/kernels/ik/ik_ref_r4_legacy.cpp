// Scalar reference kernels for ik_llama.cpp's interleaved legacy forms (Q4_0_R8, Q5_0_R4, Q6_0_R4, IQ4_NL_R4,
// what its --repack makes of Q4_0 / Q5_0 / Q6_0 / IQ4_NL rows) against Q8_2_X4, and IQ4_XS_R8 against Q8_K32, in
// the arithmetic of ik's AVX2 build (iqk_gemm_legacy_quants.cpp, iqk_gemm_kquants.cpp): per row one accumulator
// (the eight-row forms) or two (the first and second 16 of each 32), each offset taken back through the
// activations' block sums in ik's order. The layout is ik_r4_layout.h's.
#include <cmath>
#include <cstring>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_r4_layout.h"
#include "engine/kernels/ik/ik_ref.h"

namespace moe::ik {
namespace {

int field(const uint8_t* bytes, r4::BitPos p, int mask) { return (bytes[p.byte] >> p.shift) & mask; }

// Integer dot of weights [from, to) of a block's indices (or values) with the activation block's.
int32_t dot_range(const int q[32], const int8_t* y, int from, int to) {
    int32_t s = 0;
    for (int t = from; t < to; ++t) s += q[t] * y[t];
    return s;
}

// The Q5_0_R4 / Q6_0_R4 forms' offset (-16, -32) is taken back as half of it in each of a row's two lanes.
constexpr float lane_offset(GgmlType t) { return t == GgmlType::Q5_0_R4 ? -8.f : -16.f; }

}  // namespace

void legacy_r4_indices(GgmlType t, const uint8_t* block, int k, int q[32], float& d) {
    using namespace r4;
    switch (t) {
        case GgmlType::Q4_0_R8: {
            const auto& b = *reinterpret_cast<const BlockQ4_0_R8*>(block);
            d = fp16_to_fp32(b.d[k]);
            for (int e = 0; e < 32; ++e) q[e] = field(b.qs, q4_0_r8_nibble(k, e), 0xF);
            return;
        }
        case GgmlType::Q5_0_R4: {
            const auto& b = *reinterpret_cast<const BlockQ5_0_R4*>(block);
            d = fp16_to_fp32(b.d[k]);
            for (int e = 0; e < 32; ++e) q[e] = field(b.qs, nibble(0, k, e), 0xF) | field(b.qh, q5_0_r4_high(k, e), 1) << 4;
            return;
        }
        case GgmlType::Q6_0_R4: {
            const auto& b = *reinterpret_cast<const BlockQ6_0_R4*>(block);
            d = fp16_to_fp32(b.d[k]);
            for (int e = 0; e < 32; ++e) q[e] = field(b.qs, nibble(0, k, e), 0xF) | field(b.qh, q6_0_r4_high(k, e), 3) << 4;
            return;
        }
        case GgmlType::IQ4_NL_R4: {
            const auto& b = *reinterpret_cast<const BlockIQ4_NL_R4*>(block);
            d = fp16_to_fp32(b.d[k]);
            for (int e = 0; e < 32; ++e) q[e] = field(b.qs, nibble(0, k, e), 0xF);
            return;
        }
        default: throw std::invalid_argument("legacy_r4_indices: not a 32-weight interleaved form");
    }
}

void iq4_xs_r8_sub_block(const uint8_t* block, int k, int ib, int& ls, int q[32]) {
    const auto& b = *reinterpret_cast<const BlockIQ4_XS_R8*>(block);
    const int n = r4::iq4_xs_r8_code(ib, k);
    ls = ((b.scales_l[n % 32] >> (4 * (n / 32))) & 0xF) | ((b.scales_h[n % 16] >> (2 * (n / 16))) & 3) << 4;
    for (int e = 0; e < 32; ++e) q[e] = field(b.qs, r4::iq4_xs_r8_nibble(ib, k, e), 0xF);
}

// Q4_0_R8 (mul_mat_q4_0_r8_q8_2_avx2): one lane per row. A lone column (Lone) sums d * y.d * S and d * m (m =
// y.d * the block's activation sum) apart and takes -8 times the second once; a batch takes -8 per group of four
// blocks (its four d * m summed first), before the group's four quant FMAs, and per tail block after its own.
template <bool Lone>
void dot_rows_q4_0_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    for (int64_t g = 0; g < rows / 8; ++g) {
        const auto* blocks = reinterpret_cast<const uint8_t*>(w + 8 * g * row_bytes);
        for (int k = 0; k < 8; ++k) {
            int q[32];
            float d;
            auto block_terms = [&](int64_t b, float& dd, float& dm, float& S) {
                legacy_r4_indices(GgmlType::Q4_0_R8, blocks + b * sizeof(BlockQ4_0_R8), k, q, d);
                const Q8_2View y = q8_2_block(a, n, b);
                dd = d * y.d, dm = y.d * static_cast<float>(y.s), S = static_cast<float>(dot_range(q, y.qs, 0, 32));
            };
            float dd, m, S;
            if (Lone) {
                float acc1 = 0.f, acc2 = 0.f;
                for (int64_t b = 0; b < nb; ++b) {
                    block_terms(b, dd, m, S);
                    acc1 = std::fma(dd, S, acc1);
                    acc2 = std::fma(d, m, acc2);
                }
                out[8 * g + k] = std::fma(acc2, -8.f, acc1);
                continue;
            }
            float acc = 0.f;
            for (int64_t b0 = 0; b0 < grouped; b0 += 4) {
                float dds[4], Ss[4], sumf = 0.f;
                for (int j = 0; j < 4; ++j) {
                    block_terms(b0 + j, dds[j], m, Ss[j]);
                    sumf = j == 0 ? d * m : std::fma(d, m, sumf);
                }
                acc = std::fma(sumf, -8.f, acc);
                for (int j = 0; j < 4; ++j) acc = std::fma(dds[j], Ss[j], acc);
            }
            for (int64_t b = grouped; b < nb; ++b) {
                block_terms(b, dd, m, S);
                acc = std::fma(dd, S, acc);
                acc = std::fma(d * -8.f, m, acc);
            }
            out[8 * g + k] = acc;
        }
    }
}

// Q5_0_R4 / Q6_0_R4 (mul_mat_q{5,6}_0_r4_q8_2_avx2) and IQ4_NL_R4 (mul_mat_iq4_nl_r4_q8_2): two lanes per row,
// the first 16 weights of each block and the second; per block fma(d * y.d, lane sum, lane), then (Q5_0 / Q6_0,
// unsigned indices) fma(d, -8 m or -16 m, lane) in each. IQ4_NL_R4 multiplies its signed table values.
template <GgmlType T>
void dot_rows_legacy_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    constexpr size_t kBlock = T == GgmlType::Q5_0_R4 ? sizeof(BlockQ5_0_R4) : T == GgmlType::Q6_0_R4 ? sizeof(BlockQ6_0_R4) : sizeof(BlockIQ4_NL_R4);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t b = 0; b < n / 32; ++b) {
                int q[32];
                float d;
                legacy_r4_indices(T, group + b * kBlock, k, q, d);
                if (T == GgmlType::IQ4_NL_R4)
                    for (int& v : q) v = kIq4kValues[v];
                const Q8_2View y = q8_2_block(a, n, b);
                const float dd = d * y.d;
                lo = std::fma(dd, static_cast<float>(dot_range(q, y.qs, 0, 16)), lo);
                hi = std::fma(dd, static_cast<float>(dot_range(q, y.qs, 16, 32)), hi);
                if (T != GgmlType::IQ4_NL_R4) {
                    const float mm = lane_offset(T) * (y.d * static_cast<float>(y.s));
                    lo = std::fma(d, mm, lo);
                    hi = std::fma(d, mm, hi);
                }
            }
            out[4 * g + k] = lo + hi;
        }
    }
}

// IQ4_XS_R8 against Q8_K32 (mul_mat_iq4_xs_r8_q8_k_avx2 without AVX-VNNI): one lane per row; per 256 the exact
// sum over sub-blocks of (scale - 32) times the signed table values' dot, then fma(d * y.d, sum, acc).
void dot_rows_iq4_xs_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8K32*>(a);
    for (int64_t g = 0; g < rows / 8; ++g) {
        const auto* blocks = reinterpret_cast<const BlockIQ4_XS_R8*>(w + 8 * g * row_bytes);
        for (int k = 0; k < 8; ++k) {
            float acc = 0.f;
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                int32_t isum = 0;
                for (int ib = 0; ib < 8; ++ib) {
                    int ls, q[32];
                    iq4_xs_r8_sub_block(reinterpret_cast<const uint8_t*>(blocks + ibl), k, ib, ls, q);
                    for (int& v : q) v = kIq4kValues[v];
                    isum += (ls - 32) * dot_range(q, y[ibl].qs + 32 * ib, 0, 32);
                }
                acc = std::fma(fp16_to_fp32(blocks[ibl].d[k]) * y[ibl].d, static_cast<float>(isum), acc);
            }
            out[8 * g + k] = acc;
        }
    }
}

// dequantize_row_*: row k of a group, n weights.
void dequantize_legacy_r4_row(GgmlType t, const uint8_t* group, int k, int64_t n, float* y) {
    if (t == GgmlType::IQ4_XS_R8) {
        for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
            const uint8_t* block = group + ibl * sizeof(BlockIQ4_XS_R8);
            const float d = fp16_to_fp32(reinterpret_cast<const BlockIQ4_XS_R8*>(block)->d[k]);
            for (int ib = 0; ib < 8; ++ib) {
                int ls, q[32];
                iq4_xs_r8_sub_block(block, k, ib, ls, q);
                const float dl = d * static_cast<float>(ls - 32);
                for (int e = 0; e < 32; ++e) y[QK_K * ibl + 32 * ib + e] = dl * static_cast<float>(kIq4kValues[q[e]]);
            }
        }
        return;
    }
    const size_t bb = interleaved_block_bytes(t);
    const int offset = t == GgmlType::Q4_0_R8 ? 8 : t == GgmlType::Q5_0_R4 ? 16 : 32;  // (IQ4_NL_R4: a table)
    for (int64_t b = 0; b < n / 32; ++b) {
        int q[32];
        float d;
        legacy_r4_indices(t, group + b * bb, k, q, d);
        for (int e = 0; e < 32; ++e)
            y[32 * b + e] = t == GgmlType::IQ4_NL_R4 ? d * static_cast<float>(kIq4kValues[q[e]]) : d * static_cast<float>(q[e] - offset);
    }
}

template void dot_rows_q4_0_r8_ref<true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_q4_0_r8_ref<false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_legacy_r4_ref<GgmlType::Q5_0_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_legacy_r4_ref<GgmlType::Q6_0_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_legacy_r4_ref<GgmlType::IQ4_NL_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);

}  // namespace moe::ik

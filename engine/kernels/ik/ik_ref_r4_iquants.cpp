// Scalar reference kernels for ik_llama.cpp's row-interleaved i-quants: IQ2_XXS_R4, IQ2_XS_R4, IQ3_XXS_R4,
// IQ2_S_R4, IQ3_S_R4 (its repack of the base i-quants, what `--repack` makes of an IQ2_XXS ... IQ3_S file) and
// IQ1_M_R4 (its own 1.75-bit form, 32 weights x 4 rows per block with an f16 scale per row), in the arithmetic of
// ik's AVX2 build (mul_mat_iq*_r4_q8_k in iqk_gemm_iquants.cpp, mul_mat_iq1_m_r4_q8_0 in iqk_gemm_1bit.cpp).
//
// All six decode to signed integer values (grid magnitude and sign; IQ1_M_R4: 8 x grid + the delta's sign) and an
// integer scale per 16 weights. Per row and super-block (IQ1_M_R4: per 128 weights) two int32 sums, the first 16
// weights of every 32 in one and the second 16 in the other, each times its scale; both converted and FMA'd with
// d * y.d (IQ3's 1/4 folded into d first; IQ1_M_R4: y.d alone, its row scale times 1/8 applied to the final sum);
// the output is their sum (times 1/8 for the IQ2 types). ik's AVX2 build has a second kernel for IQ2_XS_R4 and
// IQ2_S_R4, used for every chunk of 16 activation columns: the values offset by +64 (unsigned) and the offset
// taken back through the activations' sums of 16, its own FMA first, with sub-blocks 0..3 in the first sum and
// 4..7 in the second.
#include <cmath>
#include <cstring>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/iq_tables.h"

namespace moe::ik {
namespace {

int grid_byte(uint64_t entry, int j) { return static_cast<int>((entry >> (8 * j)) & 0xFF); }
// The R4 forms keep a sign index as the prefix XOR of its eight sign bits; this undoes it.
int unscrambled_signs(int t) { return (t ^ (t << 1)) & 0xFF; }

// Row k, sub-block ib (32 weights) of a block (IQ1_M_R4: of a 32-weight block): the signed values and the integer
// scales of the first and second 16.
struct SubBlock {
    int v[32];
    int s[2];
};

SubBlock decode(GgmlType t, const uint8_t* block, int k, int ib) {
    SubBlock o{};
    switch (t) {
        case GgmlType::IQ2_XXS_R4:
        case GgmlType::IQ3_XXS_R4: {
            const uint8_t* sas = block + 8 + 16 * ib + 4 * k;
            int sc = 0;
            for (int i = 0; i < 4; ++i) sc |= (sas[i] & 1) << i;
            o.s[0] = o.s[1] = 2 * sc + 1;
            if (t == GgmlType::IQ2_XXS_R4) {
                const uint8_t* qs = block + 136 + 16 * ib + 4 * k;
                for (int i = 0; i < 4; ++i) {
                    const int signs = unscrambled_signs(sas[i] >> 1);
                    for (int j = 0; j < 8; ++j) {
                        const int g = grid_byte(iq::kIq2xxsGrid[qs[i]], j);
                        o.v[8 * i + j] = signs >> j & 1 ? -g : g;
                    }
                }
            } else {
                const uint8_t* qs = block + 136 + 32 * ib + 8 * k;
                for (int i = 0; i < 8; ++i) {
                    const int signs = unscrambled_signs(sas[i / 2] >> 1);
                    for (int j = 0; j < 4; ++j) {
                        const int g = grid_byte(iq::kIq3xxsGrid[qs[i]], j);
                        o.v[4 * i + j] = signs >> (4 * (i % 2) + j) & 1 ? -g : g;
                    }
                }
            }
            return o;
        }
        case GgmlType::IQ2_XS_R4: {
            const int sc = block[264 + 4 * ib + k];
            o.s[0] = 2 * (sc & 15) + 1, o.s[1] = 2 * (sc >> 4) + 1;
            for (int i = 0; i < 4; ++i) {
                uint16_t u;
                std::memcpy(&u, block + 8 + 2 * (16 * ib + 4 * k + i), 2);
                const int signs = unscrambled_signs(u >> 9);
                for (int j = 0; j < 8; ++j) {
                    const int g = grid_byte(iq::kIq2xsGrid[u & 511], j);
                    o.v[8 * i + j] = signs >> j & 1 ? -g : g;
                }
            }
            return o;
        }
        case GgmlType::IQ2_S_R4: {
            const int sc = block[296 + 4 * ib + k], qh = block[136 + 4 * ib + k];
            o.s[0] = 2 * (sc & 15) + 1, o.s[1] = 2 * (sc >> 4) + 1;
            for (int i = 0; i < 4; ++i) {
                const int idx = block[8 + 16 * ib + 4 * k + i] | ((qh >> (2 * i)) & 3) << 8, signs = block[168 + 16 * ib + 4 * k + i];
                for (int j = 0; j < 8; ++j) {
                    const int g = grid_byte(iq::kIq2sGrid[idx], j);
                    o.v[8 * i + j] = signs >> j & 1 ? -g : g;
                }
            }
            return o;
        }
        case GgmlType::IQ3_S_R4: {
            const int n = 4 * ib + k, qh = block[264 + 4 * ib + k];
            o.s[0] = o.s[1] = 2 * ((block[424 + n % 16] >> (4 * (n / 16))) & 15) + 1;
            for (int b = 0; b < 8; ++b) {  // 4-group b: weights 4b..4b+3
                const int idx = block[8 + 32 * ib + 8 * (b % 4) + 4 * (b / 4) + k] | ((qh >> b) & 1) << 8;
                for (int j = 0; j < 4; ++j) {
                    const int g = grid_byte(iq::kIq3sGrid[idx], j);
                    o.v[4 * b + j] = (block[296 + 16 * ib + 4 * k + j] >> b) & 1 ? -g : g;
                }
            }
            return o;
        }
        case GgmlType::IQ1_M_R4: {  // `block` is the 28-byte block of 32 weights x 4 rows
            const int sc = block[24 + k];
            o.s[0] = sc & 15, o.s[1] = sc >> 4;
            for (int g = 0; g < 4; ++g) {
                const int nib = (block[16 + 4 * (g / 2) + k] >> (4 * (g % 2))) & 15, idx = block[4 * g + k] | (nib & 7) << 8;
                for (int j = 0; j < 8; ++j) {
                    const int gr = static_cast<int8_t>(grid_byte(iq::kIq1sGrid[idx], j));
                    o.v[8 * g + j] = 8 * gr + (nib & 8 ? -1 : 1);
                }
            }
            return o;
        }
        default: return o;
    }
}

float f16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}

}  // namespace

template <GgmlType T, bool Chunk16>
void dot_rows_iquant_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    constexpr bool kOneM = T == GgmlType::IQ1_M_R4, kIq2 = T == GgmlType::IQ2_XXS_R4 || T == GgmlType::IQ2_XS_R4 || T == GgmlType::IQ2_S_R4;
    static_assert(!Chunk16 || T == GgmlType::IQ2_XS_R4 || T == GgmlType::IQ2_S_R4);
    const size_t bb = interleaved_block_bytes(T);
    // the span of one pair of int32 sums: a Q8_K block, or IQ1_M_R4's Q8_K128 block of four 32-weight blocks
    constexpr int64_t kSpan = kOneM ? 128 : QK_K;
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t jb = 0; jb < n / kSpan; ++jb) {
                float yd;
                const int8_t* q;
                const int16_t* bsums = nullptr;
                if constexpr (kOneM) {
                    const auto& y = static_cast<const BlockQ8K128*>(a)[jb];
                    yd = y.d, q = y.qs;
                } else {
                    const auto& y = static_cast<const BlockQ8K*>(a)[jb];
                    yd = y.d, q = y.qs, bsums = y.bsums;
                }
                int32_t L = 0, H = 0, ML = 0, MH = 0;
                for (int ib = 0; ib < kSpan / 32; ++ib) {
                    const uint8_t* block = kOneM ? group + 8 + (4 * jb + ib) * bb : group + jb * bb;
                    const SubBlock sb = decode(T, block, k, ib);  // (IQ1_M_R4: `block` is the 32-weight block ib)
                    int32_t sa = 0, sbh = 0;
                    for (int e = 0; e < 32; ++e) (e < 16 ? sa : sbh) += (sb.v[e] + (Chunk16 ? 64 : 0)) * q[32 * ib + e];
                    L += sb.s[0] * sa, H += sb.s[1] * sbh;
                    if constexpr (Chunk16) (ib < 4 ? ML : MH) += sb.s[0] * bsums[2 * ib] + sb.s[1] * bsums[2 * ib + 1];
                }
                if constexpr (kOneM) {
                    lo = std::fma(yd, static_cast<float>(L), lo);
                    hi = std::fma(yd, static_cast<float>(H), hi);
                    continue;
                }
                const float d = f16_at(group + jb * bb + 2 * k) * (T == GgmlType::IQ3_XXS_R4 ? 0.25f : 1.f);
                if constexpr (Chunk16) {
                    const float fm = d * (-64.f * yd);
                    lo = std::fma(fm, static_cast<float>(ML), lo);
                    hi = std::fma(fm, static_cast<float>(MH), hi);
                }
                const float f = d * yd;
                lo = std::fma(f, static_cast<float>(L), lo);
                hi = std::fma(f, static_cast<float>(H), hi);
            }
            out[4 * g + k] = kOneM ? (0.125f * f16_at(group + 2 * k)) * (lo + hi) : kIq2 ? 0.125f * (lo + hi) : lo + hi;
        }
    }
}

// dequantize_row_<type>_r4: (d * scale) * value, with the 1/8 (IQ2 types, IQ1_M_R4) or 1/4 (IQ3_XXS_R4) on d;
// IQ1_M_R4's value is grid +- 1/8.
void dequantize_iquant_r4_row(GgmlType t, const uint8_t* group, int k, int64_t n, float* y) {
    const size_t bb = interleaved_block_bytes(t);
    if (t == GgmlType::IQ1_M_R4) {
        const float d = f16_at(group + 2 * k);
        for (int64_t ib = 0; ib < n / 32; ++ib) {
            const SubBlock sb = decode(t, group + 8 + ib * bb, k, 0);
            for (int e = 0; e < 32; ++e) {
                const float dl = d * static_cast<float>(sb.s[e / 16]);
                // v = 8 grid + delta sign: (grid + delta) = v / 8 exactly
                y[32 * ib + e] = dl * (static_cast<float>(sb.v[e]) * 0.125f);
            }
        }
        return;
    }
    const float scale = t == GgmlType::IQ3_XXS_R4 ? 0.25f : t == GgmlType::IQ3_S_R4 ? 1.f : 0.125f;
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const uint8_t* block = group + ibl * bb;
        const float d = scale * f16_at(block + 2 * k);
        for (int ib = 0; ib < 8; ++ib) {
            const SubBlock sb = decode(t, block, k, ib);
            for (int e = 0; e < 32; ++e) {
                const int v = sb.v[e], m = v < 0 ? -v : v;
                const float w = (d * static_cast<float>(sb.s[e / 16])) * static_cast<float>(m);
                y[QK_K * ibl + 32 * ib + e] = v < 0 ? -w : w;
            }
        }
    }
}

template void dot_rows_iquant_r4_ref<GgmlType::IQ2_XXS_R4, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_iquant_r4_ref<GgmlType::IQ2_XS_R4, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_iquant_r4_ref<GgmlType::IQ2_XS_R4, true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_iquant_r4_ref<GgmlType::IQ3_XXS_R4, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_iquant_r4_ref<GgmlType::IQ2_S_R4, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_iquant_r4_ref<GgmlType::IQ2_S_R4, true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_iquant_r4_ref<GgmlType::IQ3_S_R4, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_iquant_r4_ref<GgmlType::IQ1_M_R4, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);

}  // namespace moe::ik

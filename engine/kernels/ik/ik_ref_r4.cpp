// Scalar reference kernels for ik_llama.cpp's row-interleaved IQ1_S_R4 and IQ4_KS_R4, read in their own layout
// (four rows' scales, then blocks interleaving the four rows), in the arithmetic of ik's AVX2 kernels
// (mul_mat_iq1_s_r4_q8_1, mul_mat_iq4_ks_r4_q8_k): per row two float accumulators (the first and second 16 of
// each 32), the row scale applied last. A row exists only inside its group, so the kernels take whole groups.
#include <cmath>
#include <cstring>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/iq_tables.h"

namespace moe::ik {
namespace {

// IQ1_S_R4 weight w (0..31) of row k in a block: its grid value plus 1 (0, 1 or 2), as the kernel's unsigned grid.
int iq1s_r4_unsigned(const BlockIQ1_S_R4& b, int k, int w) {
    const int i = w / 8;
    const int idx = b.qs[4 * i + k] | (((b.qh[k] >> (3 * i)) & 7) << 8);
    return static_cast<int8_t>(iq::kIq1sGrid[idx] >> (8 * (w % 8))) + 1;
}

// IQ4_KS_R4 nibble of weight w (0..31) of sub-block ib, row k.
int iq4ks_r4_nibble(const BlockIQ4_KS_R4& b, int ib, int k, int w) {
    const int byte = 64 * ib + 4 * k + (w & 3) + 16 * ((w >> 4) & 1) + 32 * ((w >> 2) & 1);
    return (w >> 3) & 1 ? b.qs[byte] >> 4 : b.qs[byte] & 0xF;
}

}  // namespace

// Rows [0, rows) (a multiple of 4) of an IQ1_S_R4 tensor from a group start, against Q8_K128 activations.
void dot_rows_iq1_s_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8K128*>(a);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        const auto* blocks = reinterpret_cast<const BlockIQ1_S_R4*>(group + 8);
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t ib = 0; ib < n / 128; ++ib) {
                const float dy = y[ib].d;
                float d8[4];
                for (int s = 0; s < 4; ++s) d8[s] = dy * static_cast<float>(y[ib].bsums[s]);
                for (int j = 0; j < 4; ++j) {
                    const BlockIQ1_S_R4& b = blocks[4 * ib + j];
                    const int qh = b.qh[k], sc = 2 * ((qh >> 12) & 7) + 1, sgn = qh & 0x8000 ? -9 : -7;
                    const float delta = 0.0625f * static_cast<float>(sgn * sc);
                    int s_lo = 0, s_hi = 0;
                    for (int e = 0; e < 32; ++e) (e < 16 ? s_lo : s_hi) += iq1s_r4_unsigned(b, k, e) * y[ib].qs[32 * j + e];
                    lo = std::fma(dy, static_cast<float>(s_lo * sc), lo);
                    hi = std::fma(dy, static_cast<float>(s_hi * sc), hi);
                    lo = std::fma(d8[j], delta, lo);
                    hi = std::fma(d8[j], delta, hi);
                }
            }
            uint16_t dh;
            std::memcpy(&dh, group + 2 * k, 2);
            out[4 * g + k] = fp16_to_fp32(dh) * (lo + hi);
        }
    }
}

// Rows of an IQ4_KS_R4 tensor against Q8_K32 activations: per 256 first the four odd-scale shifts of each half
// (4 * scale times the activations' float sums of 32; the kernel uses only the first half of the table), then the
// half's integer sum times y.d; the row scale last.
void dot_rows_iq4_ks_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8K32*>(a);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        const auto* blocks = reinterpret_cast<const BlockIQ4_KS_R4*>(group + 16);
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                const BlockIQ4_KS_R4& b = blocks[ibl];
                for (int ib = 0; ib < 4; ++ib) {
                    for (int h = 0; h < 2; ++h) {
                        const int s = b.scales[4 * (ib + 4 * h) + k], ls = (s & 254) - 127;
                        const float P = static_cast<float>(ls) * static_cast<float>(4 * (s & 1));
                        (h ? hi : lo) = std::fma(P, y[ibl].bsums[ib + 4 * h], h ? hi : lo);
                    }
                }
                int32_t i_lo = 0, i_hi = 0;
                for (int ib = 0; ib < 8; ++ib) {
                    const int ls = (b.scales[4 * ib + k] & 254) - 127;
                    int a_lo = 0, a_hi = 0;
                    for (int e = 0; e < 32; ++e) (e < 16 ? a_lo : a_hi) += kIq4kValues[iq4ks_r4_nibble(b, ib, k, e)] * y[ibl].qs[32 * ib + e];
                    i_lo += ls * a_lo;
                    i_hi += ls * a_hi;
                }
                lo = std::fma(y[ibl].d, static_cast<float>(i_lo), lo);
                hi = std::fma(y[ibl].d, static_cast<float>(i_hi), hi);
            }
            float d;
            std::memcpy(&d, group + 4 * k, 4);
            out[4 * g + k] = d * (lo + hi);
        }
    }
}

// dequantize_row_*_r4 over whole groups: four rows of n each, one after another.
void dequantize_r4_rows(GgmlType t, const void* src, float* out, int64_t n, int64_t rows) {
    const size_t row_bytes = *moe::row_bytes(t, static_cast<uint64_t>(n));
    for (int64_t g = 0; g < rows / 4; ++g) {
        const auto* group = static_cast<const uint8_t*>(src) + 4 * g * row_bytes;
        for (int k = 0; k < 4; ++k) {
            float* y = out + (4 * g + k) * n;
            if (t == GgmlType::IQ1_S_R4) {
                uint16_t dh;
                std::memcpy(&dh, group + 2 * k, 2);
                const float d = fp16_to_fp32(dh);
                const auto* blocks = reinterpret_cast<const BlockIQ1_S_R4*>(group + 8);
                for (int64_t b = 0; b < n / 32; ++b) {
                    const int qh = blocks[b].qh[k];
                    const float shift = qh & 0x8000 ? -iq::kIq1sDelta : iq::kIq1sDelta;
                    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
                    for (int e = 0; e < 32; ++e) y[32 * b + e] = dl * (static_cast<float>(iq1s_r4_unsigned(blocks[b], k, e) - 1) + shift);
                }
            } else {
                float d;
                std::memcpy(&d, group + 4 * k, 4);
                const auto* blocks = reinterpret_cast<const BlockIQ4_KS_R4*>(group + 16);
                for (int64_t ibl = 0; ibl < n / QK_K; ++ibl)
                    for (int ib = 0; ib < 8; ++ib) {
                        const int s = blocks[ibl].scales[4 * ib + k];
                        const float dl = d * static_cast<float>((s & 254) - 127);
                        for (int e = 0; e < 32; ++e)
                            y[QK_K * ibl + 32 * ib + e] = dl * static_cast<float>(kIq4kValues[iq4ks_r4_nibble(blocks[ibl], ib, k, e) + 16 * (s & 1)]);
                    }
            }
        }
    }
}

}  // namespace moe::ik

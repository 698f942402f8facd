// Scalar reference kernels for ik_llama.cpp's row-interleaved forms, read in their own layout (ik_r4_layout.h),
// in the arithmetic of ik's AVX2 kernels (iqk_gemm_1bit.cpp, iqk_gemm_iqk_quants.cpp, iqk_gemm_legacy_quants.cpp):
// per row two float accumulators, one for the first and one for the second 16 weights of each 32 (Q8_0_R8: one),
// which integer sums go into which being part of the result. A row exists only inside its group, so the kernels
// take whole groups.
#include <cmath>
#include <cstring>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_r4_layout.h"
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

int field(const uint8_t* bytes, r4::BitPos p, int mask) { return (bytes[p.byte] >> p.shift) & mask; }

float f16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}
float f32_at(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
}

// The offset ik's AVX2 kernel adds to make an IQk_K_R4 type's values unsigned (removed again through the
// activations' sums of 16, split between the row's two accumulators by sub-block, not by half).
int unsigned_offset(GgmlType t) { return t == GgmlType::IQ2_K_R4 ? 32 : t == GgmlType::IQ3_K_R4 ? 64 : 0; }

// Q4_K_R4 / Q5_K_R4 (Five) row k, sub-block ib of a block: its 6-bit scale and min codes and its 32 quants
// (0..15, 0..31).
void q4_k_r4_sub_block(const uint8_t* block, bool five, int k, int ib, int& sc, int& m, int q[32]) {
    const auto& b = *reinterpret_cast<const BlockQ4_K_R4*>(block);  // (the header both share)
    const int n = r4::q4_k_code(ib, k), h = (b.scales_h[n % 16] >> (4 * (n / 16))) & 0xF;
    sc = (b.scales_l[n] & 0xF) | (h & 3) << 4;
    m = (b.scales_l[n] >> 4) | (h >> 2) << 4;
    const uint8_t* qs = five ? reinterpret_cast<const BlockQ5_K_R4*>(block)->qs : b.qs;
    for (int e = 0; e < 32; ++e) q[e] = field(qs, r4::nibble(ib, k, e), 0xF);
    if (five)
        for (int e = 0; e < 32; ++e) q[e] |= field(reinterpret_cast<const BlockQ5_K_R4*>(block)->qh, r4::q5_k_r4_fifth(ib, k, e), 1) << 4;
}
// Q6_K_R4 row k, sub-block ib: the scales of its two 16s and its 32 quants (0..63, 32 the zero).
void q6_k_r4_sub_block(const BlockQ6_K_R4& b, int k, int ib, int s[2], int q[32]) {
    s[0] = b.scales[8 * ib + k], s[1] = b.scales[8 * ib + k + 4];
    for (int e = 0; e < 32; ++e) q[e] = field(b.ql, r4::nibble(ib, k, e), 0xF) | field(b.qh, r4::six_high(ib, k, e), 3) << 4;
}

}  // namespace

size_t interleaved_block_bytes(GgmlType t) {
    const TypeInfo info = type_info(t);
    return info.block_bytes * info.interleave;
}

void decode_r4_sub_block(GgmlType t, const uint8_t* block, int k, int ib, R4SubBlock& out) {
    using namespace r4;
    switch (t) {
        case GgmlType::IQ2_K_R4: {
            const auto& b = *reinterpret_cast<const BlockIQ2_K_R4*>(block);
            for (int h = 0; h < 2; ++h) {
                out.scale[h] = field(b.scales, scale_nibble(scale_code(ib, k, h)), 0xF) - 8;
                out.extra[h] = (b.extra[k + 4 * h] >> ib) & 1;
            }
            for (int e = 0; e < 32; ++e) out.value[e] = kIq2nlValues[field(b.qs, two_bits(ib, k, e), 3) + 4 * out.extra[e / 16]];
            return;
        }
        case GgmlType::IQ3_K_R4: {
            const auto& b = *reinterpret_cast<const BlockIQ3_K_R4*>(block);
            for (int h = 0; h < 2; ++h) {
                const int n = scale_code(ib, k, h);
                const int m = 2 * field(b.scales_l, scale_nibble(n), 0xF) + 1;
                out.scale[h] = field(b.scales_h, scale_sign(n), 1) ? -m : m;
                out.extra[h] = (b.extra[k + 4 * h] >> ib) & 1;
            }
            for (int e = 0; e < 32; ++e) {
                const int idx = field(b.qs, two_bits(ib, k, e), 3) | field(b.qh, third_bit(ib, k, e), 1) << 2;
                out.value[e] = kIq3nlValues[idx + 8 * out.extra[e / 16]];
            }
            return;
        }
        case GgmlType::IQ4_K_R4:
        case GgmlType::IQ5_K_R4: {
            // IQ5_K_R4 is IQ4_K_R4's layout plus the fifth bits after the quants
            const auto& b = *reinterpret_cast<const BlockIQ4_K_R4*>(block);
            const uint8_t* qh = block + sizeof(BlockIQ4_K_R4);
            for (int h = 0; h < 2; ++h) {
                const int n = scale_code(ib, k, h);
                out.scale[h] = (field(b.scales_l, scale_nibble(n), 0xF) | field(b.scales_h, scale_high(n), 3) << 4) - 32;
                out.extra[h] = (b.extra[k + 4 * h] >> ib) & 1;
            }
            for (int e = 0; e < 32; ++e) {
                const int q = field(b.qs, nibble(ib, k, e), 0xF);
                out.value[e] = t == GgmlType::IQ4_K_R4 ? kIq4kValues[q + 16 * out.extra[e / 16]]
                                                       : kIq5nlValues[(q | field(qh, fifth_bit(ib, k, e), 1) << 4) + 32 * out.extra[e / 16]];
            }
            return;
        }
        case GgmlType::IQ4_KS_R4:
        case GgmlType::IQ5_KS_R4: {
            const uint8_t* scales = block;  // then the quants (and IQ5_KS_R4's fifth bits)
            const int sc = scales[4 * ib + k];
            out.scale[0] = out.scale[1] = (sc & 254) - 127;
            out.extra[0] = out.extra[1] = sc & 1;
            for (int e = 0; e < 32; ++e) {
                const int q = field(block + 32, nibble(ib, k, e), 0xF);
                out.value[e] = t == GgmlType::IQ4_KS_R4 ? kIq4kValues[q + 16 * (sc & 1)]
                                                        : kIq5nlValues[(q | field(block + 32 + 512, fifth_bit(ib, k, e), 1) << 4) + 32 * (sc & 1)];
            }
            return;
        }
        default: break;
    }
}

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
            out[4 * g + k] = f16_at(group + 2 * k) * (lo + hi);
        }
    }
}

// IQ4_KS_R4 / IQ5_KS_R4 against Q8_K32 activations (mul_mat_iq4_ks_r4_q8_k, mul_mat_iq5_ks_r4_q8_k): the kernel
// multiplies the first table half; per 256 first the odd scales' shift (4 or 2 times the scale, times the
// activations' float sums of 32) for sub-blocks j and j + 4 into the two accumulators, then each half's
// integer sum times y.d; the row scale last.
template <GgmlType T>
void dot_rows_ks_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8K32*>(a);
    const int shift = T == GgmlType::IQ4_KS_R4 ? 4 : 2;
    const size_t bb = interleaved_block_bytes(T);
    R4SubBlock sb[8];
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                for (int ib = 0; ib < 8; ++ib) decode_r4_sub_block(T, group + 16 + ibl * bb, k, ib, sb[ib]);
                for (int ib = 0; ib < 4; ++ib)
                    for (int h = 0; h < 2; ++h) {
                        const R4SubBlock& s = sb[ib + 4 * h];
                        const float P = static_cast<float>(s.scale[0]) * static_cast<float>(shift * s.extra[0]);
                        (h ? hi : lo) = std::fma(P, y[ibl].bsums[ib + 4 * h], h ? hi : lo);
                    }
                int32_t i_lo = 0, i_hi = 0;
                for (int ib = 0; ib < 8; ++ib) {
                    int a_lo = 0, a_hi = 0;
                    for (int e = 0; e < 32; ++e) (e < 16 ? a_lo : a_hi) += (sb[ib].value[e] - shift * sb[ib].extra[0]) * y[ibl].qs[32 * ib + e];
                    i_lo += sb[ib].scale[0] * a_lo;
                    i_hi += sb[ib].scale[0] * a_hi;
                }
                lo = std::fma(y[ibl].d, static_cast<float>(i_lo), lo);
                hi = std::fma(y[ibl].d, static_cast<float>(i_hi), hi);
            }
            out[4 * g + k] = f32_at(group + 4 * k) * (lo + hi);
        }
    }
}

// IQ2_K_R4 ... IQ5_K_R4 against Q8_K (mul_mat_iq{2,3,4,5}_k_r4_q8_k): per 256, the two halves' integer sums with
// their scales; IQ2/IQ3 multiply unsigned values (value + offset) and take offset * scale * (sums of 16) back
// with sub-blocks 0..3 in the first accumulator and 4..7 in the second. Then fma(d * y.d, sum, acc) per half.
template <GgmlType T>
void dot_rows_k_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8K*>(a);
    const int M = unsigned_offset(T);
    const size_t bb = interleaved_block_bytes(T);
    R4SubBlock sb[8];
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                const uint8_t* block = group + ibl * bb;
                const BlockQ8K& yb = y[ibl];
                int32_t L = 0, H = 0;
                for (int ib = 0; ib < 8; ++ib) {
                    decode_r4_sub_block(T, block, k, ib, sb[ib]);
                    const int mins = sb[ib].scale[0] * yb.bsums[2 * ib] + sb[ib].scale[1] * yb.bsums[2 * ib + 1];
                    (ib < 4 ? L : H) += -M * mins;
                }
                for (int ib = 0; ib < 8; ++ib) {
                    int a_lo = 0, a_hi = 0;
                    for (int e = 0; e < 32; ++e) (e < 16 ? a_lo : a_hi) += (sb[ib].value[e] + M) * yb.qs[32 * ib + e];
                    L += sb[ib].scale[0] * a_lo;
                    H += sb[ib].scale[1] * a_hi;
                }
                const float f = f16_at(block + 2 * k) * yb.d;
                lo = std::fma(f, static_cast<float>(L), lo);
                hi = std::fma(f, static_cast<float>(H), hi);
            }
            out[4 * g + k] = lo + hi;
        }
    }
}

// Q8_0_R8 against Q8_2_X4 (mul_mat_q8_0_r8_q8_2): one accumulator per row, fma(d * y.d, block sum, acc).
void dot_rows_q8_0_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    for (int64_t g = 0; g < rows / 8; ++g) {
        const auto* blocks = reinterpret_cast<const BlockQ8_0_R8*>(w + 8 * g * row_bytes);
        for (int k = 0; k < 8; ++k) {
            float acc = 0.f;
            for (int64_t b = 0; b < n / 32; ++b) {
                const int8_t* qy;
                float dy;
                activation_block(GgmlType::Q8_0_R8, a, n, b, qy, dy);
                int32_t s = 0;
                for (int t = 0; t < 32; ++t) s += blocks[b].qs[r4::q8_0_r8_index(k, t)] * qy[t];
                acc = std::fma(fp16_to_fp32(blocks[b].d[k]) * dy, static_cast<float>(s), acc);
            }
            out[8 * g + k] = acc;
        }
    }
}

// Q4_K_R4 against Q8_K32 (mul_mat_q4_k_r4_q8_k). Per 256 first the mins in float through the activations' float
// sums of 32 (sub-blocks 0..3 into the first accumulator, 4..7 into the second), then each half's integer sum
// times d * y.d. A lone activation column (Lone) sums the mins before scaling by -dmin; a batch scales each.
template <bool Lone, bool Five>
void dot_rows_q4_k_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8K32*>(a);
    constexpr size_t kBlock = Five ? sizeof(BlockQ5_K_R4) : sizeof(BlockQ4_K_R4);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                const BlockQ4_K_R4& b = *reinterpret_cast<const BlockQ4_K_R4*>(group + ibl * kBlock);
                const float* bs = y[ibl].bsums;
                int sc[8], m[8], q[8][32];
                for (int ib = 0; ib < 8; ++ib) q4_k_r4_sub_block(group + ibl * kBlock, Five, k, ib, sc[ib], m[ib], q[ib]);
                const float md = -1.f * fp16_to_fp32(b.d[4 + k]);
                if (Lone) {
                    float s_lo = static_cast<float>(m[0]) * bs[0], s_hi = static_cast<float>(m[4]) * bs[4];
                    for (int j = 1; j < 4; ++j) {
                        s_lo = std::fma(static_cast<float>(m[j]), bs[j], s_lo);
                        s_hi = std::fma(static_cast<float>(m[j + 4]), bs[j + 4], s_hi);
                    }
                    lo = std::fma(md, s_lo, lo);
                    hi = std::fma(md, s_hi, hi);
                } else {
                    for (int j = 0; j < 4; ++j) {
                        lo = std::fma(md * static_cast<float>(m[j]), bs[j], lo);
                        hi = std::fma(md * static_cast<float>(m[j + 4]), bs[j + 4], hi);
                    }
                }
                int32_t L = 0, H = 0;
                for (int ib = 0; ib < 8; ++ib) {
                    int a_lo = 0, a_hi = 0;
                    for (int e = 0; e < 32; ++e) (e < 16 ? a_lo : a_hi) += q[ib][e] * y[ibl].qs[32 * ib + e];
                    L += sc[ib] * a_lo;
                    H += sc[ib] * a_hi;
                }
                const float f = fp16_to_fp32(b.d[k]) * y[ibl].d;
                lo = std::fma(f, static_cast<float>(L), lo);
                hi = std::fma(f, static_cast<float>(H), hi);
            }
            out[4 * g + k] = lo + hi;
        }
    }
}

// Q6_K_R4 against Q8_K (mul_mat_q6_k_r4_q8_k): per 256 the -32 offset through the sums of 16 (sub-blocks 0..3
// into the first accumulator, 4..7 into the second), then per 16 weights the unscaled unsigned sum times its
// float scale. A lone column folds y.d into d first (d * y.d, then the scale); a batch multiplies d by the scale,
// then by y.d.
template <bool Lone>
void dot_rows_q6_k_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8K*>(a);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const auto* blocks = reinterpret_cast<const BlockQ6_K_R4*>(w + 4 * g * row_bytes);
        for (int k = 0; k < 4; ++k) {
            float lo = 0.f, hi = 0.f;
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                const BlockQ6_K_R4& b = blocks[ibl];
                const BlockQ8K& yb = y[ibl];
                int s[8][2], q[8][32];
                for (int ib = 0; ib < 8; ++ib) q6_k_r4_sub_block(b, k, ib, s[ib], q[ib]);
                const float D = Lone ? fp16_to_fp32(b.d[k]) * yb.d : fp16_to_fp32(b.d[k]);
                const float mn = D * -32.f;
                int32_t ML = 0, MH = 0;
                for (int ib = 0; ib < 8; ++ib) (ib < 4 ? ML : MH) += s[ib][0] * yb.bsums[2 * ib] + s[ib][1] * yb.bsums[2 * ib + 1];
                const float cm = Lone ? mn : mn * yb.d;
                lo = std::fma(cm, static_cast<float>(ML), lo);
                hi = std::fma(cm, static_cast<float>(MH), hi);
                for (int ib = 0; ib < 8; ++ib) {
                    int sa = 0, sb = 0;
                    for (int e = 0; e < 32; ++e) (e < 16 ? sa : sb) += q[ib][e] * yb.qs[32 * ib + e];
                    float ca = D * static_cast<float>(s[ib][0]), cb = D * static_cast<float>(s[ib][1]);
                    if (!Lone) ca = ca * yb.d, cb = cb * yb.d;
                    lo = std::fma(ca, static_cast<float>(sa), lo);
                    hi = std::fma(cb, static_cast<float>(sb), hi);
                }
            }
            out[4 * g + k] = lo + hi;
        }
    }
}

template void dot_rows_q4_k_r4_ref<true, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_q4_k_r4_ref<false, false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_q4_k_r4_ref<true, true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_q4_k_r4_ref<false, true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_q6_k_r4_ref<true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_q6_k_r4_ref<false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);

template void dot_rows_ks_r4_ref<GgmlType::IQ4_KS_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_ks_r4_ref<GgmlType::IQ5_KS_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_k_r4_ref<GgmlType::IQ2_K_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_k_r4_ref<GgmlType::IQ3_K_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_k_r4_ref<GgmlType::IQ4_K_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_k_r4_ref<GgmlType::IQ5_K_R4>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);

// dequantize_row_*_r4 over whole groups: the group's rows one after another, w = (d * scale) * value.
void dequantize_r4_rows(GgmlType t, const void* src, float* out, int64_t n, int64_t rows) {
    const size_t row_bytes = *moe::row_bytes(t, static_cast<uint64_t>(n));
    const int rg = row_group(t);
    const size_t bb = interleaved_block_bytes(t);
    for (int64_t g = 0; g < rows / rg; ++g) {
        const auto* group = static_cast<const uint8_t*>(src) + rg * g * row_bytes;
        for (int k = 0; k < rg; ++k) {
            float* y = out + (rg * g + k) * n;
            if (t == GgmlType::Q4_0_R8 || t == GgmlType::Q5_0_R4 || t == GgmlType::Q6_0_R4 || t == GgmlType::IQ4_NL_R4 || t == GgmlType::IQ4_XS_R8) {
                dequantize_legacy_r4_row(t, group, k, n, y);
            } else if (t == GgmlType::Q2_K_R4 || t == GgmlType::Q3_K_R4) {
                dequantize_low_k_r4_row(t, group, k, n, y);
            } else if (t == GgmlType::IQ2_XXS_R4 || t == GgmlType::IQ2_XS_R4 || t == GgmlType::IQ3_XXS_R4 || t == GgmlType::IQ2_S_R4 ||
                       t == GgmlType::IQ3_S_R4 || t == GgmlType::IQ1_M_R4) {
                dequantize_iquant_r4_row(t, group, k, n, y);
            } else if (t == GgmlType::IQ2_BN_R4) {
                dequantize_iq2_bn_r4_row(group, k, n, y);
            } else if (t == GgmlType::Q8_KV_R8 || t == GgmlType::Q8_K_R8 || t == GgmlType::MXFP4_R8 || t == GgmlType::BF16_R16) {
                dequantize_wide_row(t, group, k, n, y);
            } else if (t == GgmlType::IQ1_S_R4) {
                const float d = f16_at(group + 2 * k);
                const auto* blocks = reinterpret_cast<const BlockIQ1_S_R4*>(group + 8);
                for (int64_t b = 0; b < n / 32; ++b) {
                    const int qh = blocks[b].qh[k];
                    const float shift = qh & 0x8000 ? -iq::kIq1sDelta : iq::kIq1sDelta;
                    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
                    for (int e = 0; e < 32; ++e) y[32 * b + e] = dl * (static_cast<float>(iq1s_r4_unsigned(blocks[b], k, e) - 1) + shift);
                }
            } else if (t == GgmlType::Q4_K_R4 || t == GgmlType::Q5_K_R4 || t == GgmlType::Q6_K_R4) {
                for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                    const uint8_t* block = group + ibl * bb;
                    for (int ib = 0; ib < 8; ++ib) {
                        float* yb = y + QK_K * ibl + 32 * ib;
                        int q[32];
                        if (t == GgmlType::Q4_K_R4 || t == GgmlType::Q5_K_R4) {
                            const auto& b = *reinterpret_cast<const BlockQ4_K_R4*>(block);
                            int sc, m;
                            q4_k_r4_sub_block(block, t == GgmlType::Q5_K_R4, k, ib, sc, m, q);
                            const float dl = fp16_to_fp32(b.d[k]) * static_cast<float>(sc), ml = fp16_to_fp32(b.d[4 + k]) * static_cast<float>(m);
                            for (int e = 0; e < 32; ++e) yb[e] = dl * static_cast<float>(q[e]) - ml;
                        } else {
                            const auto& b = *reinterpret_cast<const BlockQ6_K_R4*>(block);
                            int s[2];
                            q6_k_r4_sub_block(b, k, ib, s, q);
                            for (int e = 0; e < 32; ++e)
                                yb[e] = (fp16_to_fp32(b.d[k]) * static_cast<float>(s[e / 16])) * static_cast<float>(q[e] - 32);
                        }
                    }
                }
            } else if (t == GgmlType::Q8_0_R8) {
                const auto* blocks = reinterpret_cast<const BlockQ8_0_R8*>(group);
                for (int64_t b = 0; b < n / 32; ++b)
                    for (int e = 0; e < 32; ++e)
                        y[32 * b + e] = fp16_to_fp32(blocks[b].d[k]) * static_cast<float>(blocks[b].qs[r4::q8_0_r8_index(k, e)]);
            } else {
                const bool row_scales = type_info(t).row_meta > 0;  // the *_KS_R4 forms: four f32 in front of the group
                const uint8_t* blocks = group + (row_scales ? 16 : 0);
                R4SubBlock sb;
                for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                    const uint8_t* block = blocks + ibl * bb;
                    const float d = row_scales ? f32_at(group + 4 * k) : f16_at(block + 2 * k);
                    for (int ib = 0; ib < 8; ++ib) {
                        decode_r4_sub_block(t, block, k, ib, sb);
                        for (int e = 0; e < 32; ++e)
                            y[QK_K * ibl + 32 * ib + e] = (d * static_cast<float>(sb.scale[e / 16])) * static_cast<float>(sb.value[e]);
                    }
                }
            }
        }
    }
}

}  // namespace moe::ik

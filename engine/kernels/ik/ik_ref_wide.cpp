// ik_llama.cpp's wide forms: Q8_KV and Q8_KV_R8 (one f32 scale per row, against Q8_KV activations), Q8_K_R8 (an
// fp16 scale per 256 of each row, against Q8_K), MXFP4_R8 (against Q8_2_X4) and BF16_R16 (against bf16): the
// scalar reference of ik's kernels (iqk_gemm_kquants.cpp, iqk_gemm_legacy_quants.cpp, iqk_gemm_floats.cpp) and
// their layouts. None of them is converted for large batches; ik runs the same kernel for every token count.
#include <algorithm>
#include <cmath>
#include <cfloat>
#include <cstring>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/quant_decode.h"

namespace moe::ik {
namespace {

float f32_at(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}

// Row k's value e of an eight-row group of Q8_KV_R8 (after the group's eight scales): per 16 values, four
// dwords of each row side by side.
size_t q8_kv_r8_index(int k, int64_t e) { return static_cast<size_t>(32 + 128 * (e / 16) + 32 * ((e % 16) / 4) + 4 * k + e % 4); }
// Row k's value e (0..255) of a Q8_K_R8 block of eight rows (after its eight fp16 scales).
size_t q8_k_r8_index(int k, int e) { return static_cast<size_t>(16 + 32 * (e / 4) + 4 * k + e % 4); }
// Row k's nibble of value e (0..31) of a MXFP4_R8 block: byte (after the eight exponents) and shift.
size_t mxfp4_r8_byte(int k, int e) { return static_cast<size_t>(8 + 32 * ((e % 16) / 4) + 4 * k + e % 4); }
int mxfp4_r8_nibble(const uint8_t* block, int k, int e) { return (block[mxfp4_r8_byte(k, e)] >> (e < 16 ? 0 : 4)) & 0xF; }
constexpr size_t kQ8KR8Block = 16 + 8 * 256, kMxfp4R8Block = 8 + 8 * 16;

}  // namespace

void quantize_q8_KV(const float* x, void* out, int64_t n) {
    auto* bytes = static_cast<uint8_t*>(out);
    auto* q = reinterpret_cast<int8_t*>(bytes + 8);
    float amax = 0.f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    float d = 0.f;
    int32_t sum = 0;
    // (amax below ~3.7e-37: 1 / d overflows, and ik's values are undefined; zeros here)
    if (amax == 0.f || !(1.f / (amax / 127.f) <= FLT_MAX)) {
        std::memset(q, 0, static_cast<size_t>(n));
    } else {
        d = amax / 127.f;
        const float id = 1.f / d;  // (not 127 / amax, as ik's Q8_K has it)
        for (int64_t i = 0; i < n; ++i) {
            const int v = static_cast<int>(std::nearbyint(x[i] * id));  // round to nearest even, as _mm256_round_ps
            q[i] = static_cast<int8_t>(std::clamp(v, -128, 127));
            sum += v;
        }
    }
    std::memcpy(bytes, &d, 4);
    std::memcpy(bytes + 4, &sum, 4);
}

// mul_mat_q8_KV_q8_KV: the exact integer dot of the whole row, times (dx * dy).
float dot_q8_kv_ref(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const uint8_t*>(w);
    const auto* y = static_cast<const uint8_t*>(a);
    int32_t isum = 0;
    for (int64_t i = 0; i < n; ++i) isum += static_cast<int8_t>(x[8 + i]) * static_cast<int8_t>(y[8 + i]);
    return (f32_at(x) * f32_at(y)) * static_cast<float>(isum);
}

// mul_mat_q8_KV_r8_q8_KV: the same per row of a group of eight.
void dot_rows_q8_kv_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const uint8_t*>(a);
    const auto* qy = reinterpret_cast<const int8_t*>(y + 8);
    for (int64_t g = 0; g < rows / 8; ++g) {
        const uint8_t* group = w + 8 * g * row_bytes;
        for (int k = 0; k < 8; ++k) {
            int32_t isum = 0;
            for (int64_t e = 0; e < n; ++e) isum += static_cast<int8_t>(group[q8_kv_r8_index(k, e)]) * qy[e];
            out[8 * g + k] = (f32_at(group + 4 * k) * f32_at(y)) * static_cast<float>(isum);
        }
    }
}

// mul_mat_q8_k_r8_q8_k: per 256 the exact integer dot, acc = fma(d * y.d, isum, acc).
void dot_rows_q8_k_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const BlockQ8K*>(a);
    for (int64_t g = 0; g < rows / 8; ++g) {
        const uint8_t* group = w + 8 * g * row_bytes;
        for (int k = 0; k < 8; ++k) {
            float acc = 0.f;
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                const uint8_t* block = group + ibl * kQ8KR8Block;
                int32_t isum = 0;
                for (int e = 0; e < QK_K; ++e) isum += static_cast<int8_t>(block[q8_k_r8_index(k, e)]) * y[ibl].qs[e];
                uint16_t d;
                std::memcpy(&d, block + 2 * k, 2);
                acc = std::fma(fp16_to_fp32(d) * y[ibl].d, static_cast<float>(isum), acc);
            }
            out[8 * g + k] = acc;
        }
    }
}

// mul_mat_mxfp4_r8_q8_2_avx2: the values + 12 (unsigned) times the activations, exact per 32; the + 12 comes back
// through the blocks' activation sums s, with my = y.d * s. A lone column (Lone) keeps the two sums apart and joins
// them at the end; a call of several columns folds each group of four blocks' correction in first.
template <bool Lone>
void dot_rows_mxfp4_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    for (int64_t g = 0; g < rows / 8; ++g) {
        const uint8_t* group = w + 8 * g * row_bytes;
        for (int k = 0; k < 8; ++k) {
            float acc = 0.f, acc_min = 0.f;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t* block = group + b * kMxfp4R8Block;
                const Q8_2View y = q8_2_block(a, n, b);
                int32_t isum = 0;
                for (int e = 0; e < 32; ++e) isum += (iq::kValuesFp4[mxfp4_r8_nibble(block, k, e)] + 12) * y.qs[e];
                const float dw = quant::e8m0_half(block[k]), my = y.d * static_cast<float>(y.s);
                if (Lone) {
                    acc = std::fma(dw * y.d, static_cast<float>(isum), acc);
                    acc_min = std::fma(dw, my, acc_min);
                } else if (b < grouped) {
                    if (b % 4 == 0) {  // the group's four corrections first
                        float sum = 0.f;
                        for (int r = 0; r < 4; ++r) {
                            const Q8_2View yr = q8_2_block(a, n, b + r);
                            const float dr = quant::e8m0_half(group[(b + r) * kMxfp4R8Block + k]), mr = yr.d * static_cast<float>(yr.s);
                            sum = r == 0 ? dr * mr : std::fma(dr, mr, sum);
                        }
                        acc = std::fma(sum, -12.f, acc);
                    }
                    acc = std::fma(dw * y.d, static_cast<float>(isum), acc);
                } else {
                    acc = std::fma(dw * y.d, static_cast<float>(isum), acc);
                    acc = std::fma(dw * -12.f, my, acc);
                }
            }
            out[8 * g + k] = Lone ? std::fma(acc_min, -12.f, acc) : acc;
        }
    }
}
template void dot_rows_mxfp4_r8_ref<true>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);
template void dot_rows_mxfp4_r8_ref<false>(int64_t, const uint8_t*, size_t, int64_t, const void*, float*);

// mul_mat_bf16_r16_bf16 (ik's AVX512-BF16 build; its AVX2 build has no kernel for the type): one VDPBF16PS lane
// per row over the whole row, pair by pair.
void dot_rows_bf16_r16_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const uint16_t*>(a);
    for (int64_t g = 0; g < rows / 16; ++g) {
        const auto* group = reinterpret_cast<const uint16_t*>(w + 16 * g * row_bytes);
        for (int k = 0; k < 16; ++k) {
            float acc = 0.f;
            for (int64_t p = 0; p < n / 2; ++p) acc = dpbf16_lane(acc, group + 32 * p + 2 * k, y + 2 * p);
            out[16 * g + k] = acc;
        }
    }
}

void dequantize_q8_kv(const void* src, float* out, int64_t n) {
    const auto* row = static_cast<const uint8_t*>(src);
    const float d = f32_at(row);
    for (int64_t i = 0; i < n; ++i) out[i] = d * static_cast<float>(static_cast<int8_t>(row[8 + i]));
}

void dequantize_wide_row(GgmlType t, const uint8_t* group, int k, int64_t n, float* y) {
    switch (t) {
        case GgmlType::Q8_KV_R8:
            for (int64_t e = 0; e < n; ++e) y[e] = f32_at(group + 4 * k) * static_cast<float>(static_cast<int8_t>(group[q8_kv_r8_index(k, e)]));
            return;
        case GgmlType::Q8_K_R8:
            for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
                const uint8_t* block = group + ibl * kQ8KR8Block;
                uint16_t d;
                std::memcpy(&d, block + 2 * k, 2);
                for (int e = 0; e < QK_K; ++e)
                    y[QK_K * ibl + e] = fp16_to_fp32(d) * static_cast<float>(static_cast<int8_t>(block[q8_k_r8_index(k, e)]));
            }
            return;
        case GgmlType::MXFP4_R8:  // ggml's MXFP4 expression: the doubled value times half the scale
            for (int64_t b = 0; b < n / 32; ++b) {
                const uint8_t* block = group + b * kMxfp4R8Block;
                for (int e = 0; e < 32; ++e)
                    y[32 * b + e] = static_cast<float>(iq::kValuesFp4[mxfp4_r8_nibble(block, k, e)]) * quant::e8m0_half(block[k]);
            }
            return;
        case GgmlType::BF16_R16: {
            const auto* h = reinterpret_cast<const uint16_t*>(group);
            for (int64_t e = 0; e < n; ++e) y[e] = bf16_to_fp32(h[32 * (e / 2) + 2 * k + e % 2]);
            return;
        }
        default: throw std::invalid_argument("dequantize_wide_row: " + type_name(static_cast<uint32_t>(t)));
    }
}

void repack_wide_rows(GgmlType t, const uint8_t* base_rows, int64_t n, uint8_t* out) {
    const size_t base_rb = *row_bytes(interleaved_base(t), static_cast<uint64_t>(n));
    switch (t) {
        case GgmlType::Q8_KV_R8:  // the rows' scales in front; their stored sums are dropped
            for (int k = 0; k < 8; ++k) {
                const uint8_t* row = base_rows + k * base_rb;
                std::memcpy(out + 4 * k, row, 4);
                for (int64_t e = 0; e < n; ++e) out[q8_kv_r8_index(k, e)] = row[8 + e];
            }
            return;
        case GgmlType::MXFP4_R8:
            for (int64_t b = 0; b < n / 32; ++b) {
                uint8_t* block = out + b * kMxfp4R8Block;
                std::memset(block, 0, kMxfp4R8Block);
                for (int k = 0; k < 8; ++k) {
                    const auto& x = reinterpret_cast<const BlockMXFP4*>(base_rows + k * base_rb)[b];
                    block[k] = x.e;
                    for (int j = 0; j < 16; ++j) block[mxfp4_r8_byte(k, j)] = x.qs[j];  // values j (low) and j + 16 (high)
                }
            }
            return;
        case GgmlType::BF16_R16: {
            auto* h = reinterpret_cast<uint16_t*>(out);
            for (int k = 0; k < 16; ++k) {
                const auto* row = reinterpret_cast<const uint16_t*>(base_rows + k * base_rb);
                for (int64_t e = 0; e < n; ++e) h[32 * (e / 2) + 2 * k + e % 2] = row[e];
            }
            return;
        }
        default: throw std::invalid_argument("repack_wide_rows: " + type_name(static_cast<uint32_t>(t)));
    }
}

}  // namespace moe::ik

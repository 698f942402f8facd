// Scalar reference kernels for ik_llama.cpp's types, in the arithmetic of its AVX2 build (the one that recorded
// ../shared/oracle/expected/shared-ik-*.json): activations converted as its quantize_row_* do, integer block sums
// split into the same eight int32 lanes as its kernels leave them (iqk_gemm_*.cpp), and the float steps in its
// order. The SIMD kernels are tested equal to these, bit for bit.
#include "engine/kernels/ik/ik_ref.h"

#include <cfloat>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_decode.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/kquant_order.h"

namespace moe::ik {
namespace {

// _mm256_round_ps(x, _MM_ROUND_NEAREST) then _mm256_cvtps_epi32: round half to even in the default mode.
inline int round_even(float x) { return static_cast<int>(std::nearbyint(x)); }
// _mm256_packs_epi32 then _mm256_packs_epi16: saturation to int8.
inline int8_t sat8(int v) { return static_cast<int8_t>(std::clamp(v, -128, 127)); }
inline int sat16(int v) { return std::clamp(v, -32768, 32767); }

}  // namespace

// ---- activations ----

// iqk_quantize_row_q8_K_T<0> (AVX2): d = amax / 127, values x * (127 / amax) rounded half to even, sums of 16, and
// sum = d * (their total).
void quantize_q8_K(const float* x, void* out, int64_t n) {
    auto* y = static_cast<BlockQ8K*>(out);
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float amax = 0.f;
        for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
        // (an amax so small that 127 / amax overflows: zeros, where ik's values are undefined)
        const float d = amax / 127.f, id = amax != 0.f && 127.f / amax <= FLT_MAX ? 127.f / amax : 0.f;
        y[b].d = d;
        int total = 0;
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) {
                const int8_t q = sat8(round_even(id * x[16 * g + j]));
                y[b].qs[16 * g + j] = q;
                sum += q;
            }
            y[b].bsums[g] = static_cast<int16_t>(sum);
            total += sum;
        }
        y[b].sum = d * static_cast<float>(total);
    }
}

// quantize_row_q8_K32: the same values; the sums area holds d * (sum of each 32) as floats, `sum` their float total
// in order.
void quantize_q8_K32(const float* x, void* out, int64_t n) {
    quantize_q8_K(x, out, n);
    auto* y = static_cast<BlockQ8K32*>(out);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        float total = 0.f;
        float sums[8];
        for (int g = 0; g < 8; ++g) {
            int s = 0;
            for (int j = 0; j < 32; ++j) s += y[b].qs[32 * g + j];
            sums[g] = y[b].d * static_cast<float>(s);
            total += sums[g];
        }
        std::memcpy(y[b].bsums, sums, sizeof(sums));
        y[b].sum = total;
    }
}

// quantize_row_q8_K128 (AVX2): per 128, d = amax / 127, values rounded half to even, sums of 32.
void quantize_q8_K128(const float* x, void* out, int64_t n) {
    auto* y = static_cast<BlockQ8K128*>(out);
    for (int64_t b = 0; b < n / 128; ++b, x += 128) {
        float amax = 0.f;
        for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float id = amax != 0.f && 127.f / amax <= FLT_MAX ? 127.f / amax : 0.f;  // (as quantize_q8_K)
        y[b].d = amax / 127.f;
        for (int g = 0; g < 4; ++g) {
            int sum = 0;
            for (int j = 0; j < 32; ++j) {
                const int8_t q = sat8(round_even(id * x[32 * g + j]));
                y[b].qs[32 * g + j] = q;
                sum += q;
            }
            y[b].bsums[g] = static_cast<int16_t>(sum);
        }
    }
}

// ---- dot products ----

// The eleven table types (IQ2_K ... IQ6_K, IQ2_KS ... IQ5_KS, IQ4_KSS, IQ2_KL) against ik's Q8_K: as
// mul_mat_qX_K_q8_K_T / mul_mat_qY_K_q8_K_T. Per block, eight int32 lanes of value products (lane l: elements
// 4l..4l+3 of each 32, each pair's sum through maddubs, then times its 16's scale) FMA'd with d * y.d into eight
// float accumulators; where the kernel works on offset values, first the offset's lanes (lane l: the min
// coefficients of the two 16s of 32-group l times their activation sums) with the same factor.
float dot_table_ref(GgmlType t, int64_t n, const void* w, const void* a) {
    const TableKernelShape shape = table_shape(t);
    const auto* row = static_cast<const uint8_t*>(w);
    const float d_row = shape.row_scale ? row_scale(t, row) : 0.f;
    row += row_scale_bytes(t);
    const size_t block_bytes = type_info(t).block_bytes;
    const auto* y = static_cast<const BlockQ8K*>(a);
    float acc[8] = {};
    TableBlock b;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t* blk = row + static_cast<size_t>(i) * block_bytes;
        decode_table_block(t, blk, b);
        const float f = (shape.row_scale ? d_row : table_block_d(t, blk)) * y[i].d;
        if (shape.min_lanes)
            for (int l = 0; l < 8; ++l) {
                const int m = -b.add[2 * l] * b.scale[2 * l] * y[i].bsums[2 * l] - b.add[2 * l + 1] * b.scale[2 * l + 1] * y[i].bsums[2 * l + 1];
                acc[l] = std::fma(f, static_cast<float>(m), acc[l]);
            }
        int32_t lanes[8] = {};
        for (int e = 0; e < QK_K; e += 2) {
            int pair = b.kernel[e] * y[i].qs[e] + b.kernel[e + 1] * y[i].qs[e + 1];
            if (shape.unsigned_values) pair = sat16(pair);
            lanes[(e % 32) / 4] += b.scale[e / 16] * pair;
        }
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(f, static_cast<float>(lanes[l]), acc[l]);
    }
    return kernels::hsum_float_8(acc);
}

// The table types for a large batch: ik converts each row to 8-bit rows (Q8_K_R8: per 256 weights, the products
// value * scale requantized to int8 with one fp16 scale) and multiplies those (mul_mat_q8_k_r8_q8_k): per block,
// the exact integer dot, then acc = fma(fp16 scale * y.d, isum, acc) in one float.
void requantize_table_block(GgmlType t, const TableBlock& b, float d, int8_t q[QK_K], uint16_t& scale) {
    const float d0 = t == GgmlType::IQ2_KS || t == GgmlType::IQ2_KL ? 1.f / 125 : t == GgmlType::IQ2_K ? 1.f / 120 : 1.f / 127;
    int16_t p[QK_K];
    int m = 0;
    for (int e = 0; e < QK_K; ++e) {
        p[e] = static_cast<int16_t>(b.value[e] * b.scale[e / 16]);
        m = std::max(m, std::abs(static_cast<int>(p[e])));
    }
    float dnew = static_cast<float>(m) * d0;
    const bool rescale = dnew >= 1.f;
    if (!rescale) dnew = 1.f;
    const float inv = 1.f / dnew;
    for (int e = 0; e < QK_K; ++e) q[e] = rescale ? sat8(round_even(inv * static_cast<float>(p[e]))) : sat8(p[e]);
    scale = fp32_to_fp16(d * dnew);
}

void convert_table_row(GgmlType t, int64_t n, const void* w, int8_t* q, float* scales) {
    const TableKernelShape shape = table_shape(t);
    const auto* row = static_cast<const uint8_t*>(w);
    const float d_row = shape.row_scale ? row_scale(t, row) : 0.f;
    row += row_scale_bytes(t);
    const size_t block_bytes = type_info(t).block_bytes;
    TableBlock b;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t* blk = row + static_cast<size_t>(i) * block_bytes;
        decode_table_block(t, blk, b);
        uint16_t scale;
        requantize_table_block(t, b, shape.row_scale ? d_row : table_block_d(t, blk), q + QK_K * i, scale);
        scales[i] = fp16_to_fp32(scale);
    }
}

// ---- dequantization (dequantize_row_<type>: get_rows) ----

void dequantize_table(GgmlType t, const void* src, float* out, int64_t n) {
    const TableKernelShape shape = table_shape(t);
    const auto* row = static_cast<const uint8_t*>(src);
    const float d_row = shape.row_scale ? row_scale(t, row) : 0.f;
    row += row_scale_bytes(t);
    const size_t block_bytes = type_info(t).block_bytes;
    TableBlock b;
    for (int64_t i = 0; i < n / QK_K; ++i, out += QK_K) {
        const uint8_t* blk = row + static_cast<size_t>(i) * block_bytes;
        decode_table_block(t, blk, b);
        const float d = shape.row_scale ? d_row : table_block_d(t, blk);
        if (t == GgmlType::IQ6_K) {
            // Not the matmul's table: a cubic in the 6-bit code (iq6nl_values is that cubic rounded), evaluated
            // as GCC contracts it with FMA (ik builds with -mfma), plus 1 for the second half.
            const auto& x = *reinterpret_cast<const BlockIQ6_K*>(blk);
            for (int e = 0; e < QK_K; ++e) {
                const int ib64 = e / 64, r = e % 64, k = r / 16, j = r % 16;
                const int shift = 4 * (ib64 % 2);
                const uint8_t qs = x.qs[32 * ib64 + j + 16 * (k % 2)], qh = x.qh[32 * (ib64 / 2) + j + 16 * (k % 2)];
                const float q = static_cast<float>((k < 2 ? qs & 0xF : qs >> 4) | ((((qh >> shift) >> 2 * (k / 2)) & 3) << 4));
                const float m = (x.extra >> (e / 16)) & 1 ? 1.f : 0.f;
                const float dl = d * static_cast<float>(b.scale[e / 16]);
                out[e] = dl * (std::fma(q, std::fma(q, std::fma(q, kIq6kD, -kIq6kC), kIq6kB), kIq6kA) + m);
            }
            continue;
        }
        for (int e = 0; e < QK_K; ++e) out[e] = (d * static_cast<float>(b.scale[e / 16])) * static_cast<float>(b.value[e]);
    }
}

// ---- the converted rows of a large batch ----

int converted_block(GgmlType t) { return is_table_type(t) ? QK_K : 32; }

void convert_row(GgmlType t, int64_t n, const void* w, int8_t* q, float* scales) {
    if (is_table_type(t)) convert_table_row(t, n, w, q, scales);
    else convert_q8_0_r8_row(t, n, w, q, scales);
}

// One converted row against one token: per block the exact integer dot, then acc = fma(scale * y.d, isum, acc).
float dot_converted_ref(GgmlType t, int64_t n, const void* w, const void* a) {
    const int block = converted_block(t);
    std::vector<int8_t> q(static_cast<size_t>(n));
    std::vector<float> scales(static_cast<size_t>(n / block));
    convert_row(t, n, w, q.data(), scales.data());
    float acc = 0.f;
    for (int64_t b = 0; b < n / block; ++b) {
        const int8_t* y;
        float dy;
        activation_block(t, a, n, b, y, dy);
        int32_t isum = 0;
        for (int e = 0; e < block; ++e) isum += q[b * block + e] * y[e];
        acc = std::fma(scales[b] * dy, static_cast<float>(isum), acc);
    }
    return acc;
}

// ---- tables ----

GgmlType activation_type(GgmlType t) {
    if (is_table_type(t)) return GgmlType::IK_Q8_K;
    if (is_trellis_type(t) || t == GgmlType::Q6_0 || t == GgmlType::IK_Q8_0) return GgmlType::IK_Q8_2_X4;
    if (t == GgmlType::IQ1_S_R4 || t == GgmlType::IQ1_M_R4) return GgmlType::IK_Q8_K128;
    if (t == GgmlType::IQ4_KS_R4 || t == GgmlType::IQ5_KS_R4 || t == GgmlType::Q4_K_R4 || t == GgmlType::Q5_K_R4) return GgmlType::IK_Q8_K32;
    if (t == GgmlType::IQ2_K_R4 || t == GgmlType::IQ3_K_R4 || t == GgmlType::IQ4_K_R4 || t == GgmlType::IQ5_K_R4 || t == GgmlType::Q6_K_R4 ||
        t == GgmlType::Q2_K_R4 || t == GgmlType::Q3_K_R4 || t == GgmlType::IQ2_XXS_R4 || t == GgmlType::IQ2_XS_R4 || t == GgmlType::IQ3_XXS_R4 ||
        t == GgmlType::IQ2_S_R4 || t == GgmlType::IQ3_S_R4)
        return GgmlType::IK_Q8_K;
    if (t == GgmlType::Q8_0_R8 || t == GgmlType::Q4_0_R8 || t == GgmlType::Q5_0_R4 || t == GgmlType::Q6_0_R4 || t == GgmlType::IQ4_NL_R4)
        return GgmlType::IK_Q8_2_X4;
    if (t == GgmlType::IQ4_XS_R8) return GgmlType::IK_Q8_K32;
    if (t == GgmlType::Q8_KV || t == GgmlType::Q8_KV_R8) return GgmlType::IK_Q8_KV;
    if (t == GgmlType::Q8_K_R8) return GgmlType::IK_Q8_K;
    if (t == GgmlType::MXFP4_R8) return GgmlType::IK_Q8_2_X4;
    if (t == GgmlType::BF16_R16) return GgmlType::BF16;
    if (t == GgmlType::IQ1_BN || t == GgmlType::IQ2_BN) return GgmlType::IK_Q8_K64;
    if (t == GgmlType::IQ2_BN_R4) return GgmlType::IK_Q8_K16;
    return t;
}

void add_reference_kernels(kernels::KernelTable& k) {
    using kernels::set_dot;
    auto converted = [&](GgmlType t, kernels::DotFn f, int min_tokens) {
        k.dot_converted[kernels::type_slot(t)] = f;
        k.converted_min_tokens[kernels::type_slot(t)] = static_cast<uint8_t>(min_tokens);
    };
    converted(GgmlType::IQ2_K, dot_converted_ref_of<GgmlType::IQ2_K>, 32);
    converted(GgmlType::IQ3_K, dot_converted_ref_of<GgmlType::IQ3_K>, 32);
    converted(GgmlType::IQ4_K, dot_converted_ref_of<GgmlType::IQ4_K>, 32);
    converted(GgmlType::IQ5_K, dot_converted_ref_of<GgmlType::IQ5_K>, 32);
    converted(GgmlType::IQ6_K, dot_converted_ref_of<GgmlType::IQ6_K>, 32);
    converted(GgmlType::IQ2_KS, dot_converted_ref_of<GgmlType::IQ2_KS>, 32);
    converted(GgmlType::IQ3_KS, dot_converted_ref_of<GgmlType::IQ3_KS>, 32);
    converted(GgmlType::IQ4_KS, dot_converted_ref_of<GgmlType::IQ4_KS>, 32);
    converted(GgmlType::IQ5_KS, dot_converted_ref_of<GgmlType::IQ5_KS>, 32);
    converted(GgmlType::IQ4_KSS, dot_converted_ref_of<GgmlType::IQ4_KSS>, 32);
    converted(GgmlType::IQ2_KL, dot_converted_ref_of<GgmlType::IQ2_KL>, 32);
    set_dot<dot_ik_q8_0_ref>(k, GgmlType::IK_Q8_0);
    // A row of the interleaved forms exists only in its group of four: rows kernels, no one-row dot.
    k.dot_rows[kernels::type_slot(GgmlType::IQ1_S_R4)] = dot_rows_iq1_s_r4_ref;
    k.dot_rows[kernels::type_slot(GgmlType::IQ4_KS_R4)] = dot_rows_ks_r4_ref<GgmlType::IQ4_KS_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ5_KS_R4)] = dot_rows_ks_r4_ref<GgmlType::IQ5_KS_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ2_K_R4)] = dot_rows_k_r4_ref<GgmlType::IQ2_K_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ3_K_R4)] = dot_rows_k_r4_ref<GgmlType::IQ3_K_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ4_K_R4)] = dot_rows_k_r4_ref<GgmlType::IQ4_K_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ5_K_R4)] = dot_rows_k_r4_ref<GgmlType::IQ5_K_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::Q8_0_R8)] = dot_rows_q8_0_r8_ref;
    k.dot_rows[kernels::type_slot(GgmlType::Q4_K_R4)] = dot_rows_q4_k_r4_ref<true>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::Q4_K_R4)] = dot_rows_q4_k_r4_ref<false>;
    k.dot_rows[kernels::type_slot(GgmlType::Q5_K_R4)] = dot_rows_q4_k_r4_ref<true, true>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::Q5_K_R4)] = dot_rows_q4_k_r4_ref<false, true>;
    k.dot_rows[kernels::type_slot(GgmlType::Q2_K_R4)] = dot_rows_low_k_r4_ref<GgmlType::Q2_K_R4, true>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::Q2_K_R4)] = dot_rows_low_k_r4_ref<GgmlType::Q2_K_R4, false>;
    k.dot_rows[kernels::type_slot(GgmlType::Q3_K_R4)] = dot_rows_low_k_r4_ref<GgmlType::Q3_K_R4, true>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::Q3_K_R4)] = dot_rows_low_k_r4_ref<GgmlType::Q3_K_R4, false>;
    k.dot_rows[kernels::type_slot(GgmlType::Q6_K_R4)] = dot_rows_q6_k_r4_ref<true>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::Q6_K_R4)] = dot_rows_q6_k_r4_ref<false>;
    k.dot_rows[kernels::type_slot(GgmlType::Q4_0_R8)] = dot_rows_q4_0_r8_ref<true>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::Q4_0_R8)] = dot_rows_q4_0_r8_ref<false>;
    k.dot_rows[kernels::type_slot(GgmlType::Q5_0_R4)] = dot_rows_legacy_r4_ref<GgmlType::Q5_0_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::Q6_0_R4)] = dot_rows_legacy_r4_ref<GgmlType::Q6_0_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ4_NL_R4)] = dot_rows_legacy_r4_ref<GgmlType::IQ4_NL_R4>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ4_XS_R8)] = dot_rows_iq4_xs_r8_ref;
    k.dot_rows[kernels::type_slot(GgmlType::IQ2_XXS_R4)] = dot_rows_iquant_r4_ref<GgmlType::IQ2_XXS_R4, false>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ3_XXS_R4)] = dot_rows_iquant_r4_ref<GgmlType::IQ3_XXS_R4, false>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ3_S_R4)] = dot_rows_iquant_r4_ref<GgmlType::IQ3_S_R4, false>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ1_M_R4)] = dot_rows_iquant_r4_ref<GgmlType::IQ1_M_R4, false>;
    // IQ2_XS_R4 / IQ2_S_R4: ik's AVX2 build computes each whole chunk of 16 columns with another kernel
    for (GgmlType t : {GgmlType::IQ2_XS_R4, GgmlType::IQ2_S_R4}) k.batch_chunk[kernels::type_slot(t)] = 16;
    k.dot_rows[kernels::type_slot(GgmlType::IQ2_XS_R4)] = dot_rows_iquant_r4_ref<GgmlType::IQ2_XS_R4, false>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::IQ2_XS_R4)] = dot_rows_iquant_r4_ref<GgmlType::IQ2_XS_R4, true>;
    k.dot_rows[kernels::type_slot(GgmlType::IQ2_S_R4)] = dot_rows_iquant_r4_ref<GgmlType::IQ2_S_R4, false>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::IQ2_S_R4)] = dot_rows_iquant_r4_ref<GgmlType::IQ2_S_R4, true>;
    set_dot<dot_q6_0_ref>(k, GgmlType::Q6_0);
    set_dot<dot_q8_kv_ref>(k, GgmlType::Q8_KV);
    k.dot_rows[kernels::type_slot(GgmlType::Q8_KV_R8)] = dot_rows_q8_kv_r8_ref;
    k.dot_rows[kernels::type_slot(GgmlType::Q8_K_R8)] = dot_rows_q8_k_r8_ref;
    k.dot_rows[kernels::type_slot(GgmlType::MXFP4_R8)] = dot_rows_mxfp4_r8_ref<true>;
    k.dot_rows_batch[kernels::type_slot(GgmlType::MXFP4_R8)] = dot_rows_mxfp4_r8_ref<false>;
    k.dot_rows[kernels::type_slot(GgmlType::BF16_R16)] = dot_rows_bf16_r16_ref;
    set_dot<dot_bn_ref_of<GgmlType::IQ1_BN>>(k, GgmlType::IQ1_BN);
    set_dot<dot_bn_ref_of<GgmlType::IQ2_BN>>(k, GgmlType::IQ2_BN);
    k.dot_rows[kernels::type_slot(GgmlType::IQ2_BN_R4)] = dot_rows_iq2_bn_r4_ref;
    set_dot<dot_trellis_ref_of<GgmlType::IQ1_KT>>(k, GgmlType::IQ1_KT);
    set_dot<dot_trellis_ref_of<GgmlType::IQ2_KT>>(k, GgmlType::IQ2_KT);
    set_dot<dot_trellis_ref_of<GgmlType::IQ3_KT>>(k, GgmlType::IQ3_KT);
    set_dot<dot_trellis_ref_of<GgmlType::IQ4_KT>>(k, GgmlType::IQ4_KT);
    converted(GgmlType::IK_Q8_0, dot_converted_ref_of<GgmlType::IK_Q8_0>, 32);
    converted(GgmlType::Q6_0, dot_converted_ref_of<GgmlType::Q6_0>, 32);
    converted(GgmlType::IQ1_KT, dot_converted_ref_of<GgmlType::IQ1_KT>, 16);
    converted(GgmlType::IQ2_KT, dot_converted_ref_of<GgmlType::IQ2_KT>, 16);
    converted(GgmlType::IQ3_KT, dot_converted_ref_of<GgmlType::IQ3_KT>, 16);
    converted(GgmlType::IQ4_KT, dot_converted_ref_of<GgmlType::IQ4_KT>, 24);
    set_dot<dot_table_ref_of<GgmlType::IQ2_K>>(k, GgmlType::IQ2_K);
    set_dot<dot_table_ref_of<GgmlType::IQ3_K>>(k, GgmlType::IQ3_K);
    set_dot<dot_table_ref_of<GgmlType::IQ4_K>>(k, GgmlType::IQ4_K);
    set_dot<dot_table_ref_of<GgmlType::IQ5_K>>(k, GgmlType::IQ5_K);
    set_dot<dot_table_ref_of<GgmlType::IQ6_K>>(k, GgmlType::IQ6_K);
    set_dot<dot_table_ref_of<GgmlType::IQ2_KS>>(k, GgmlType::IQ2_KS);
    set_dot<dot_table_ref_of<GgmlType::IQ3_KS>>(k, GgmlType::IQ3_KS);
    set_dot<dot_table_ref_of<GgmlType::IQ4_KS>>(k, GgmlType::IQ4_KS);
    set_dot<dot_table_ref_of<GgmlType::IQ5_KS>>(k, GgmlType::IQ5_KS);
    set_dot<dot_table_ref_of<GgmlType::IQ4_KSS>>(k, GgmlType::IQ4_KSS);
    set_dot<dot_table_ref_of<GgmlType::IQ2_KL>>(k, GgmlType::IQ2_KL);
}

}  // namespace moe::ik

// Scalar reference kernels for the formats ik_llama.cpp's AVX2 build multiplies with Q8_2_X4 activations: its
// trellis types (IQ1_KT ... IQ4_KT), Q6_0, and llama.cpp's Q8_0 in an ik file (iqk_gemm_ktquants.cpp,
// iqk_gemm_legacy_quants.cpp). Same conventions as ik_ref.cpp.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_decode.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/kquant_order.h"

namespace moe::ik {
namespace {

int32_t dot_range(const int8_t* w, const int8_t* y, int from, int to) {
    int32_t s = 0;
    for (int e = from; e < to; ++e) s += w[e] * y[e];
    return s;
}

// The weights of block b of a 32-weight-block row as ik's kernels see them, with the block's fp16 d.
struct Block32 {
    float d;
    int8_t q[32];
};
Block32 block32(GgmlType t, const void* row, int64_t b) {
    Block32 out;
    if (t == GgmlType::Q6_0) {
        const auto& x = static_cast<const BlockQ6_0*>(row)[b];
        out.d = fp16_to_fp32(x.d);
        for (int j = 0; j < 32; ++j) out.q[j] = static_cast<int8_t>(q6_0_unsigned(x, j) - 32);
    } else {
        const auto& x = static_cast<const BlockQ8_0*>(row)[b];
        out.d = fp16_to_fp32(x.d);
        std::memcpy(out.q, x.qs, 32);
    }
    return out;
}

}  // namespace

Q8_2View q8_2_block(const void* row, int64_t n, int64_t b) {
    const auto* p = static_cast<const uint8_t*>(row);
    const int64_t grouped = 4 * (n / 128);
    if (b < grouped) {
        const auto& g = reinterpret_cast<const BlockQ8_2x4*>(p)[b / 4];
        return {bf16_to_fp32(g.d[b % 4]), g.s[b % 4], g.qs + 32 * (b % 4)};
    }
    const uint8_t* blk = p + 36 * b;
    uint16_t d;
    int16_t s;
    std::memcpy(&d, blk, 2);
    std::memcpy(&s, blk + 2, 2);
    return {bf16_to_fp32(d), s, reinterpret_cast<const int8_t*>(blk + 4)};
}

// quantize_row_q8_2_x4 (AVX2): per 32, d = bf16(amax / 127) rounded to nearest even, values x * (1 / d) with that
// rounded d, rounded half to even; s = the values' integer sum.
void quantize_q8_2_x4(const float* x, void* out, int64_t n) {
    auto* p = static_cast<uint8_t*>(out);
    const int64_t nb = n / 32, grouped = 4 * (nb / 4);
    for (int64_t b = 0; b < nb; ++b, x += 32) {
        float amax = 0.f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const uint16_t dh = fp32_to_bf16(amax / 127.f);
        const float d = bf16_to_fp32(dh);
        // (a d so small that 1 / d overflows, amax below ~3.7e-37: zeros, where ik's values are undefined)
        const float id = d > 0.f && 1.f / d <= FLT_MAX ? 1.f / d : 0.f;
        int8_t q[32];
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            const int v = static_cast<int>(std::nearbyint(x[j] * id));
            sum += v;
            q[j] = static_cast<int8_t>(std::clamp(v, -128, 127));
        }
        const auto s = static_cast<int16_t>(sum);
        if (b < grouped) {
            auto& g = reinterpret_cast<BlockQ8_2x4*>(p)[b / 4];
            g.d[b % 4] = dh;
            g.s[b % 4] = s;
            std::memcpy(g.qs + 32 * (b % 4), q, 32);
        } else {
            uint8_t* blk = p + 36 * b;
            std::memcpy(blk, &dh, 2);
            std::memcpy(blk + 2, &s, 2);
            std::memcpy(blk + 4, q, 32);
        }
    }
}

// Q8_0 (llama.cpp's blocks) x Q8_2_X4, mul_mat_qX_0_q8_0_T: per block of a group of four, its two 16-value halves'
// sums FMA'd with d * y.d into lanes 4h + k (k = the block's place in the group); blocks after the last whole
// group into lanes of four consecutive values.
float dot_ik_q8_0_ref(int64_t n, const void* w, const void* a) {
    const int64_t nb = n / 32, grouped = 4 * (nb / 4);
    float acc[8] = {};
    for (int64_t b = 0; b < nb; ++b) {
        const Block32 x = block32(GgmlType::Q8_0, w, b);
        const Q8_2View y = q8_2_block(a, n, b);
        const float P = x.d * y.d;
        if (b < grouped) {
            for (int h = 0; h < 2; ++h)
                acc[4 * h + b % 4] = std::fma(P, static_cast<float>(dot_range(x.q, y.qs, 16 * h, 16 * h + 16)), acc[4 * h + b % 4]);
        } else {
            for (int l = 0; l < 8; ++l) acc[l] = std::fma(P, static_cast<float>(dot_range(x.q, y.qs, 4 * l, 4 * l + 4)), acc[l]);
        }
    }
    return kernels::hsum_float_8(acc);
}

// Q6_0 x Q8_2_X4, mul_mat_qX_1_q8_2_T: the unsigned 6-bit values' sums as for Q8_0, and the -32 offset from the
// activations' sums: per block (d * -32) * (y.d * s) added into four accumulators (the block's own in a group, a
// quarter into each after the groups); at the end lane l = (acc[l] + acc[l + 4]) + m[l], then (0 + 2) + (1 + 3).
float dot_q6_0_ref(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const BlockQ6_0*>(w);
    const int64_t nb = n / 32, grouped = 4 * (nb / 4);
    float acc[8] = {}, m[4] = {};
    for (int64_t b = 0; b < nb; ++b) {
        const Q8_2View y = q8_2_block(a, n, b);
        int8_t u[32];
        for (int j = 0; j < 32; ++j) u[j] = static_cast<int8_t>(q6_0_unsigned(x[b], j));
        const float dw = fp16_to_fp32(x[b].d), P = dw * y.d;
        if (b < grouped) {
            m[b % 4] = m[b % 4] + (dw * -32.f) * (y.d * static_cast<float>(y.s));
            for (int h = 0; h < 2; ++h)
                acc[4 * h + b % 4] = std::fma(P, static_cast<float>(dot_range(u, y.qs, 16 * h, 16 * h + 16)), acc[4 * h + b % 4]);
        } else {
            const float q = ((-dw) * 32.f) * (y.d * static_cast<float>(y.s)) * 0.25f;
            for (int l = 0; l < 4; ++l) m[l] = m[l] + q;
            for (int l = 0; l < 8; ++l) acc[l] = std::fma(P, static_cast<float>(dot_range(u, y.qs, 4 * l, 4 * l + 4)), acc[l]);
        }
    }
    float v[4];
    for (int l = 0; l < 4; ++l) v[l] = (acc[l] + acc[l + 4]) + m[l];
    return (v[0] + v[2]) + (v[1] + v[3]);
}

// The trellis types x Q8_2_X4, mul_mat_iq*_kt_q8_2_x4_T: per 32-weight block k of each 128, P = (d * scale) * y.d,
// its two halves' exact sums FMA'd into lanes 4h + k; hsum_float_8 at the end.
float dot_trellis_ref(GgmlType t, int64_t n, const void* w, const void* a) {
    float d;
    std::memcpy(&d, w, 4);
    d = trellis_matmul_scale(t, d);
    const auto* blocks = static_cast<const uint8_t*>(w) + 4;
    const size_t block_bytes = type_info(t).block_bytes;
    float acc[8] = {};
    TrellisBlock tb;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        decode_trellis_block(t, blocks + static_cast<size_t>(i) * block_bytes, tb);
        float S[8];
        for (int b = 0; b < 8; ++b) S[b] = d * static_cast<float>(tb.scale[b]);
        for (int b = 0; b < 8; ++b) {
            const Q8_2View y = q8_2_block(a, n, 8 * i + b);
            const float P = S[b] * y.d;
            for (int h = 0; h < 2; ++h) {
                const int32_t s = dot_range(tb.value + 32 * b, y.qs, 16 * h, 16 * h + 16);
                acc[4 * h + b % 4] = std::fma(P, static_cast<float>(s), acc[4 * h + b % 4]);
            }
        }
    }
    return kernels::hsum_float_8(acc);
}

// The same formats for a large batch, converted as ik converts them to Q8_0_R8: 8-bit values and an fp16 scale
// per 32 weights; only the trellis scales round (d * scale to fp16), the values are copied (Q6_0: u - 32).
void convert_q8_0_r8_row(GgmlType t, int64_t n, const void* w, int8_t* q, float* scales) {
    if (is_trellis_type(t)) {
        float d;
        std::memcpy(&d, w, 4);
        d = trellis_matmul_scale(t, d);
        const auto* blocks = static_cast<const uint8_t*>(w) + 4;
        TrellisBlock tb;
        const size_t block_bytes = type_info(t).block_bytes;
        for (int64_t i = 0; i < n / QK_K; ++i) {
            decode_trellis_block(t, blocks + static_cast<size_t>(i) * block_bytes, tb);
            std::memcpy(q + QK_K * i, tb.value, QK_K);
            for (int b = 0; b < 8; ++b) scales[8 * i + b] = fp16_to_fp32(fp32_to_fp16(d * static_cast<float>(tb.scale[b])));
        }
        return;
    }
    for (int64_t b = 0; b < n / 32; ++b) {
        const Block32 x = block32(t, w, b);
        std::memcpy(q + 32 * b, x.q, 32);
        scales[b] = x.d;
    }
}

void activation_block(GgmlType t, const void* a, int64_t n, int64_t b, const int8_t*& qs, float& d) {
    if (is_table_type(t)) {
        const auto& y = static_cast<const BlockQ8K*>(a)[b];
        qs = y.qs, d = y.d;
        return;
    }
    const Q8_2View y = q8_2_block(a, n, b);
    qs = y.qs, d = y.d;
}

// dequantize_row_iq*_kt (get_rows): (d * scale) * value, without the matmul's 1.05 / 1.01.
void dequantize_trellis(GgmlType t, const void* src, float* out, int64_t n) {
    float d;
    std::memcpy(&d, src, 4);
    const auto* blocks = static_cast<const uint8_t*>(src) + 4;
    TrellisBlock tb;
    const size_t block_bytes = type_info(t).block_bytes;
    for (int64_t i = 0; i < n / QK_K; ++i, out += QK_K) {
        decode_trellis_block(t, blocks + static_cast<size_t>(i) * block_bytes, tb);
        for (int e = 0; e < QK_K; ++e) {
            const float sl = d * static_cast<float>(tb.scale[e / 32]);
            if (t == GgmlType::IQ3_KT) {  // |value| scaled, then negated where the sign bit says
                const float v = sl * static_cast<float>(std::abs(static_cast<int>(tb.value[e])));
                out[e] = tb.value[e] < 0 ? -v : v;
            } else {
                out[e] = sl * static_cast<float>(tb.value[e]);
            }
        }
    }
}

void dequantize_for_matmul(GgmlType t, const void* src, float* out, int64_t n) {
    if (is_trellis_type(t)) {
        std::vector<uint8_t> row(static_cast<size_t>(*row_bytes(t, static_cast<uint64_t>(n))));
        std::memcpy(row.data(), src, row.size());
        float d;
        std::memcpy(&d, row.data(), 4);
        d = trellis_matmul_scale(t, d);
        std::memcpy(row.data(), &d, 4);
        dequantize_trellis(t, row.data(), out, n);
        return;
    }
    if (t == GgmlType::IQ6_K) {
        TableBlock b;
        const auto* x = static_cast<const uint8_t*>(src);
        for (int64_t i = 0; i < n / QK_K; ++i, out += QK_K) {
            const uint8_t* blk = x + static_cast<size_t>(i) * sizeof(BlockIQ6_K);
            decode_table_block(t, blk, b);
            const float d = table_block_d(t, blk);
            for (int e = 0; e < QK_K; ++e) out[e] = (d * static_cast<float>(b.scale[e / 16])) * static_cast<float>(b.value[e]);
        }
        return;
    }
    kernels::dequantize_row(t, src, out, n);
}

void dequantize_q6_0(const void* src, float* out, int64_t n) {
    const auto* x = static_cast<const BlockQ6_0*>(src);
    for (int64_t b = 0; b < n / 32; ++b)
        for (int j = 0; j < 32; ++j) out[32 * b + j] = static_cast<float>(q6_0_unsigned(x[b], j) - 32) * fp16_to_fp32(x[b].d);
}

}  // namespace moe::ik

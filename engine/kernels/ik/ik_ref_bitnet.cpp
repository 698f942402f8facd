// ik_llama.cpp's ternary (BitNet) forms, weights d (t - 1) with t in {0, 1, 2}: IQ1_BN (five trits per byte, an fp16
// row scale) and IQ2_BN (two bits each, an f32 row scale) against Q8_K64 activations, IQ2_BN_R4 (IQ2_BN's rows in
// groups of four) against Q8_K16. The scalar reference of ik's kernels (iqk_gemm_1bit.cpp), the layouts from its
// quantizer and repack (iqk_quantize.cpp). ik's AVX2 build reads the wrong activations for the last block of an
// IQ2_BN row with an odd count of 64s; the engine computes what its AVX-512 build computes there (docs/correctness.md).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_ref.h"

namespace moe::ik {
namespace {

constexpr int kBnBlock = 64;
constexpr uint8_t kTritMult[5] = {81, 27, 9, 3, 1};

float f32_at(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}
// Trit j (0..4) of a byte holding five as a base-3 fraction: the fraction times 3^(4 - j), its first digit.
int trit(uint8_t byte, int j) { return (3 * static_cast<uint8_t>(byte * kTritMult[j])) >> 8; }

// The row scale (IQ1_BN: fp16, IQ2_BN: f32) and the blocks after it.
float bn_row_scale(GgmlType t, const uint8_t* row) {
    if (t == GgmlType::IQ1_BN) {
        uint16_t h;
        std::memcpy(&h, row, 2);
        return fp16_to_fp32(h);
    }
    return f32_at(row);
}

}  // namespace

void bn_trits(GgmlType t, const uint8_t* block, uint8_t out[64]) {
    if (t == GgmlType::IQ1_BN) {  // per 16: three bytes of five, the sixteenth from the extra byte's trit i16
        for (int i16 = 0; i16 < 4; ++i16) {
            for (int k = 0; k < 3; ++k)
                for (int j = 0; j < 5; ++j) out[16 * i16 + 5 * k + j] = static_cast<uint8_t>(trit(block[3 * i16 + k], j));
            out[16 * i16 + 15] = static_cast<uint8_t>(trit(block[12], i16));
        }
        return;
    }
    for (int e = 0; e < kBnBlock; ++e) out[e] = (block[e % 16] >> (2 * (e / 16))) & 3;  // IQ2_BN
}

void quantize_q8_K64(const float* x, void* out, int64_t n) {
    auto* d = static_cast<float*>(out);
    auto* q = reinterpret_cast<int8_t*>(d + 8);
    float amax[4] = {}, id[4];
    for (int64_t e = 0; e < n; ++e) amax[(e % 16) / 4] = std::max(amax[(e % 16) / 4], std::fabs(x[e]));
    for (int i = 0; i < 4; ++i) d[i] = amax[i] / 127, id[i] = d[i] > 0 && 1 / d[i] <= FLT_MAX ? 1 / d[i] : 0.f;  // (overflow: zeros)
    int32_t sum[4] = {};
    for (int64_t e = 0; e < n; ++e) {
        const int s = static_cast<int>((e % 16) / 4);
        q[e] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(id[s] * x[e])), -128, 127));
        sum[s] += q[e];
    }
    for (int i = 0; i < 4; ++i) d[4 + i] = d[i] * static_cast<float>(sum[i]);
}

void quantize_q8_K16(const float* x, void* out, int64_t n) {
    auto* d = static_cast<float*>(out);
    auto* q = reinterpret_cast<int8_t*>(d + 5);
    float amax[4] = {}, id[4];
    for (int64_t e = 0; e < n; ++e) amax[(e % 64) / 16] = std::max(amax[(e % 64) / 16], std::fabs(x[e]));
    for (int k = 0; k < 4; ++k) d[k] = amax[k] / 127, id[k] = d[k] > 0 && 1 / d[k] <= FLT_MAX ? 1 / d[k] : 0.f;  // (overflow: zeros)
    // ik's scalar C++ as GCC compiles it in ik's AVX2 build (its AVX2 branch is disabled), contracted with FMA:
    // nearest_int(id x)'s magic-number add fused with the product, so the exact product is rounded once; the
    // scales times the sums as fma(d3, s3, fma(d2, s2, fma(d0, s0, d1 s1))).
    int32_t sum[4] = {};
    for (int64_t e = 0; e < n; ++e) {
        const int k = static_cast<int>((e % 64) / 16);
        const float f = std::fma(id[k], x[e], 12582912.f);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        const int v = static_cast<int>(bits & 0x7fffff) - 0x400000;
        q[e] = static_cast<int8_t>(std::clamp(v, -128, 127));
        sum[k] += v;
    }
    float s = std::fma(d[0], static_cast<float>(sum[0]), d[1] * static_cast<float>(sum[1]));
    for (int k = 2; k < 4; ++k) s = std::fma(d[k], static_cast<float>(sum[k]), s);
    d[4] = s;
}

// mul_mat_iq1bn_q8_K64 / mul_mat_iq2bn_q8_K64: per activation stream ((e % 16) / 4) the exact sum of t q, then
// per stream d S - m in one rounding, summed as (0 + 2) + (1 + 3), times the row scale.
float dot_bn_ref(GgmlType t, int64_t n, const void* w, const void* a) {
    const auto* row = static_cast<const uint8_t*>(w);
    const auto* y = static_cast<const float*>(a);
    const auto* q = reinterpret_cast<const int8_t*>(y + 8);
    const size_t meta = t == GgmlType::IQ1_BN ? 2 : 4, block = t == GgmlType::IQ1_BN ? 13 : 16;
    int32_t S[4] = {};
    uint8_t tr[kBnBlock];
    for (int64_t b = 0; b < n / kBnBlock; ++b) {
        bn_trits(t, row + meta + b * block, tr);
        for (int e = 0; e < kBnBlock; ++e) S[(e % 16) / 4] += tr[e] * q[kBnBlock * b + e];
    }
    float l[4];
    for (int i = 0; i < 4; ++i) l[i] = std::fma(y[i], static_cast<float>(S[i]), -y[4 + i]);
    return bn_row_scale(t, row) * ((l[0] + l[2]) + (l[1] + l[3]));
}
template <GgmlType T>
float dot_bn_ref_of(int64_t n, const void* w, const void* a) {
    return dot_bn_ref(T, n, w, a);
}
template float dot_bn_ref_of<GgmlType::IQ1_BN>(int64_t, const void*, const void*);
template float dot_bn_ref_of<GgmlType::IQ2_BN>(int64_t, const void*, const void*);

// IQ2_BN_R4's value e of row k in a block of 64: byte 16 l + 4 k + i, bits 2 m (e = 16 l + 4 m + i).
int iq2_bn_r4_trit(const uint8_t* block, int k, int e) { return (block[16 * (e / 16) + 4 * k + e % 4] >> (2 * ((e % 16) / 4))) & 3; }

// mul_mat_iq2_bn_r4_q8_k16_avx2 (calls of up to four columns; ik's AVX2 build sums calls of five to eight in
// another order, its AVX-512 build never): per row and stream l the exact sum A_l of t q, then
// A_0 (d y_0), + A_1 (d y_1), + A_2 (d y_2), + A_3 (d y_3) and - d y_sum, each an FMA.
void dot_rows_iq2_bn_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const float*>(a);
    const auto* q = reinterpret_cast<const int8_t*>(y + 5);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        for (int k = 0; k < 4; ++k) {
            int32_t A[4] = {};
            for (int64_t ib = 0; ib < n / kBnBlock; ++ib)
                for (int e = 0; e < kBnBlock; ++e) A[e / 16] += iq2_bn_r4_trit(group + 16 + kBnBlock * ib, k, e) * q[kBnBlock * ib + e];
            const float dk = f32_at(group + 4 * k);
            float s = static_cast<float>(A[0]) * (dk * y[0]);
            for (int l = 1; l < 4; ++l) s = std::fma(static_cast<float>(A[l]), dk * y[l], s);
            out[4 * g + k] = std::fma(dk, -y[4], s);
        }
    }
}

void dequantize_bn(GgmlType t, const void* src, float* out, int64_t n) {
    const auto* row = static_cast<const uint8_t*>(src);
    const float d = bn_row_scale(t, row);
    const size_t meta = t == GgmlType::IQ1_BN ? 2 : 4, block = t == GgmlType::IQ1_BN ? 13 : 16;
    uint8_t tr[kBnBlock];
    for (int64_t b = 0; b < n / kBnBlock; ++b) {
        bn_trits(t, row + meta + b * block, tr);
        for (int e = 0; e < kBnBlock; ++e) out[kBnBlock * b + e] = d * static_cast<float>(tr[e] - 1);
    }
}

void dequantize_iq2_bn_r4_row(const uint8_t* group, int k, int64_t n, float* y) {
    const float d = f32_at(group + 4 * k);
    for (int64_t e = 0; e < n; ++e)
        y[e] = d * static_cast<float>(iq2_bn_r4_trit(group + 16 + kBnBlock * (e / kBnBlock), k, static_cast<int>(e % kBnBlock)) - 1);
}

void repack_iq2_bn_rows(const uint8_t* base_rows, int64_t n, uint8_t* out) {
    const size_t rb = *row_bytes(GgmlType::IQ2_BN, static_cast<uint64_t>(n));
    std::memset(out, 0, rb * 4);
    for (int k = 0; k < 4; ++k) {
        const uint8_t* row = base_rows + k * rb;
        std::memcpy(out + 4 * k, row, 4);
        uint8_t tr[kBnBlock];
        for (int64_t ib = 0; ib < n / kBnBlock; ++ib) {
            bn_trits(GgmlType::IQ2_BN, row + 4 + 16 * ib, tr);
            for (int e = 0; e < kBnBlock; ++e)
                out[16 + kBnBlock * ib + 16 * (e / 16) + 4 * k + e % 4] |= static_cast<uint8_t>(tr[e] << (2 * ((e % 16) / 4)));
        }
    }
}

}  // namespace moe::ik

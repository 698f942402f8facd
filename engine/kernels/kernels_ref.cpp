// Scalar reference kernels: plain loops, written for clarity; the oracle for the SIMD paths.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ggml_numerics.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_internal.h"
#include "engine/kernels/kquant_order.h"
#include "engine/kernels/quant_decode.h"

namespace moe::kernels {
namespace {

// Round half to even through the float mantissa, as ggml's nearest_int (valid for |x| < 2^22).
inline int nearest_int(float x) {
    float v = x + 12582912.f;
    int i;
    std::memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

}  // namespace

// ---- activation preparation ----

void quantize_q8_0(const float* x, void* out, int64_t n) {
    auto* y = static_cast<BlockQ8_0*>(out);
    for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
        float amax = 0.f;
        for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
        // As llama.cpp's x86 path: scale stored as fp16(amax/127), values multiplied by 127/amax and
        // rounded half to even.
        const float d = amax / 127.f;
        const float id = amax != 0.f ? 127.f / amax : 0.f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
    }
}

void quantize_q8_K(const float* x, void* out, int64_t n) {
    auto* y = static_cast<BlockQ8_K*>(out);
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        float max = 0.f, amax = 0.f;
        for (int j = 0; j < QK_K; ++j) {
            float ax = std::fabs(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.f) {
            std::memset(&y[b], 0, sizeof(BlockQ8_K));
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) y[b].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += y[b].qs[j * 16 + i];
            y[b].bsums[j] = static_cast<int16_t>(sum);
        }
        y[b].d = 1.f / iscale;
    }
}

// llama.cpp's x86 quantize_row_q8_1: as Q8_0 (scale fp16(amax/127), values x*127/amax rounded to nearest even)
// plus s = fp16(d * sum of the values) with the unrounded d.
void quantize_q8_1(const float* x, void* out, int64_t n) {
    auto* y = static_cast<BlockQ8_1*>(out);
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        float amax = 0.f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.f;
        const float id = amax != 0.f ? 127.f / amax : 0.f;
        y[b].d = fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            y[b].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
            sum += y[b].qs[j];
        }
        y[b].s = fp32_to_fp16(d * static_cast<float>(sum));
    }
}

// The activation type llama.cpp pairs with each weight type (type_traits_cpu[].vec_dot_type).
GgmlType activation_type(GgmlType w) {
    switch (w) {
        case GgmlType::F32: return GgmlType::F32;
        case GgmlType::F16: return GgmlType::F16;
        case GgmlType::BF16: return GgmlType::BF16;
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:
        case GgmlType::Q5_0:
        case GgmlType::IQ4_NL:
        case GgmlType::MXFP4: return GgmlType::Q8_0;
        case GgmlType::Q4_1:
        case GgmlType::Q5_1: return GgmlType::Q8_1;
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ2_XXS:
        case GgmlType::IQ2_XS:
        case GgmlType::IQ2_S:
        case GgmlType::IQ3_XXS:
        case GgmlType::IQ3_S:
        case GgmlType::IQ1_S:
        case GgmlType::IQ1_M:
        case GgmlType::IQ4_XS:
        case GgmlType::TQ1_0:
        case GgmlType::TQ2_0: return GgmlType::Q8_K;
        default:
            if (const GgmlType a = ik::activation_type(w); a != w) return a;
            throw std::invalid_argument("no kernel for tensor type " + type_name(static_cast<uint32_t>(w)));
    }
}

size_t activation_bytes(GgmlType w, int64_t n) {
    const GgmlType a = activation_type(w);
    const auto blocks = [&](int64_t per, size_t bytes) { return static_cast<size_t>((n + per - 1) / per) * bytes; };
    switch (a) {
        case GgmlType::Q8_K: return blocks(QK_K, sizeof(BlockQ8_K));
        case GgmlType::IK_Q8_K: return blocks(QK_K, sizeof(ik::BlockQ8K));
        case GgmlType::IK_Q8_K32: return blocks(QK_K, sizeof(ik::BlockQ8K32));
        case GgmlType::IK_Q8_K128: return blocks(128, sizeof(ik::BlockQ8K128));
        case GgmlType::IK_Q8_2_X4: return static_cast<size_t>(n / 32) * 36;  // groups of four blocks, then single ones
        case GgmlType::IK_Q8_KV: return 8 + static_cast<size_t>(n);
        case GgmlType::IK_Q8_K64: return 32 + static_cast<size_t>(n);
        case GgmlType::IK_Q8_K16: return 20 + static_cast<size_t>(n);
        default: return static_cast<size_t>(*row_bytes(a, static_cast<uint64_t>(n)));
    }
}

void prepare_activations(GgmlType w, const float* x, void* out, int64_t n) {
    switch (activation_type(w)) {
        case GgmlType::F32: std::memcpy(out, x, static_cast<size_t>(n) * 4); break;
        case GgmlType::F16: {
            auto* o = static_cast<uint16_t*>(out);
            for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_fp16(x[i]);
            break;
        }
        case GgmlType::BF16: {
            auto* o = static_cast<uint16_t*>(out);
            for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_bf16(x[i]);
            break;
        }
        case GgmlType::Q8_0: quantize_q8_0(x, out, n); break;
        case GgmlType::Q8_1: quantize_q8_1(x, out, n); break;
        case GgmlType::IK_Q8_K:  // (the reference's where MOESTREAM_ISA=scalar checks a whole run against it)
            if (active_table().isa != Isa::Scalar) ik::quantize_q8_K_avx2(x, out, n);
            else ik::quantize_q8_K(x, out, n);
            break;
        case GgmlType::IK_Q8_K32: ik::quantize_q8_K32(x, out, n); break;
        case GgmlType::IK_Q8_KV: ik::quantize_q8_KV(x, out, n); break;
        case GgmlType::IK_Q8_K64: ik::quantize_q8_K64(x, out, n); break;
        case GgmlType::IK_Q8_K16: ik::quantize_q8_K16(x, out, n); break;
        case GgmlType::IK_Q8_K128: ik::quantize_q8_K128(x, out, n); break;
        case GgmlType::IK_Q8_2_X4:
            if (active_table().isa != Isa::Scalar) ik::quantize_q8_2_x4_avx2(x, out, n);
            else ik::quantize_q8_2_x4(x, out, n);
            break;
        default: quantize_q8_K(x, out, n); break;
    }
}

// ---- reference dot products ----

// F32 and F16 weights: llama.cpp's one-token order (ggml_vec_dot_*) and, for dense matmuls of two or more
// tokens, llamafile's (see kernels.h matmul_dots), in the flavor's register width.
template <Flavor F>
float dot_f32_ref(int64_t n, const void* w, const void* a) {
    return ggml::dot_vec_order<F>(static_cast<const float*>(w), static_cast<const float*>(a), n, ggml::as_float, false);
}
template <Flavor F>
float dot_f32_batch_ref(int64_t n, const void* w, const void* a) {
    return ggml::dot_gemm_order<F>(static_cast<const float*>(w), static_cast<const float*>(a), n, ggml::as_float);
}
template <Flavor F>
float dot_f16_ref(int64_t n, const void* w, const void* a) {
    return ggml::dot_vec_order<F>(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n, ggml::half_as_float, true);
}
template <Flavor F>
float dot_f16_batch_ref(int64_t n, const void* w, const void* a) {
    return ggml::dot_gemm_order<F>(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n, ggml::half_as_float);
}
template float dot_f32_ref<Flavor::Avx512>(int64_t, const void*, const void*);
template float dot_f32_ref<Flavor::Avx2>(int64_t, const void*, const void*);
template float dot_f32_batch_ref<Flavor::Avx512>(int64_t, const void*, const void*);
template float dot_f32_batch_ref<Flavor::Avx2>(int64_t, const void*, const void*);
template float dot_f16_ref<Flavor::Avx512>(int64_t, const void*, const void*);
template float dot_f16_ref<Flavor::Avx2>(int64_t, const void*, const void*);
template float dot_f16_batch_ref<Flavor::Avx512>(int64_t, const void*, const void*);
template float dot_f16_batch_ref<Flavor::Avx2>(int64_t, const void*, const void*);

// BF16 weights, AVX-512 build: llama.cpp on CPUs with AVX512-BF16 sums with VDPBF16PS (fp16.h dpbf16_lane).

// ggml_vec_dot_bf16 (AVX512-BF16): two 16-lane accumulators over 64-element steps, each reduced as one
// register into a double; the tail in double.
float dot_bf16_ref_avx512(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    float c[2][16] = {};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int h = 0; h < 2; ++h)
            for (int j = 0; j < 16; ++j) c[h][j] = dpbf16_lane(c[h][j], x + i + 32 * h + 2 * j, y + i + 32 * h + 2 * j);
    double s = ggml::reduce16(c[0]);
    s += ggml::reduce16(c[1]);
    for (; i < n; ++i) s += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    return static_cast<float>(s);
}

// llamafile's tinyBLAS for BF16 on AVX512-BF16 (two or more tokens, n % 32 == 0): one VDPBF16PS accumulator.
float dot_bf16_batch_ref_avx512(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    float c[16] = {};
    for (int64_t i = 0; i + 32 <= n; i += 32)
        for (int j = 0; j < 16; ++j) c[j] = dpbf16_lane(c[j], x + i + 2 * j, y + i + 2 * j);
    return ggml::reduce16(c);
}

// BF16 weights, AVX2 build: ggml_vec_dot_bf16 widens to f32 and runs four 8-lane accumulators over 32-element
// steps (product and sum fused, as GCC contracts ggml's C++), adds them as (c1+c3)+(c2+c4), reduces one
// register into a double; the tail in double.
float dot_bf16_ref_avx2(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    float c[4][8] = {};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            for (int l = 0; l < 8; ++l) c[k][l] = std::fma(bf16_to_fp32(x[i + 8 * k + l]), bf16_to_fp32(y[i + 8 * k + l]), c[k][l]);
    float r[8];
    for (int l = 0; l < 8; ++l) r[l] = (c[0][l] + c[2][l]) + (c[1][l] + c[3][l]);
    double s = ggml::hsum8(r);
    for (; i < n; ++i) s += static_cast<double>(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    return static_cast<float>(s);
}

// tinyBLAS for BF16 on AVX2 (n % 8 == 0): one 8-lane FMA accumulator of widened values.
float dot_bf16_batch_ref_avx2(int64_t n, const void* w, const void* a) {
    return ggml::dot_gemm_order<Flavor::Avx2>(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n, bf16_to_fp32);
}

// Q8_0 and Q4_0 as llama.cpp's x86 kernels sum them: eight lanes of four-product integer sums, each
// lane's float FMA'd with the block's scale product, the lanes added as hsum_float_8.

float dot_q8_0_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ8_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    float acc[8] = {};
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float d = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
        for (int l = 0; l < 8; ++l) {
            int sumi = 0;
            for (int j = 4 * l; j < 4 * l + 4; ++j) sumi += x[b].qs[j] * y[b].qs[j];
            acc[l] = std::fma(d, static_cast<float>(sumi), acc[l]);
        }
    }
    return hsum_float_8(acc);
}

float dot_q4_0_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ4_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    float acc[8] = {};
    for (int64_t b = 0; b < n / QK4_0; ++b) {
        const float d = fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d);
        for (int l = 0; l < 8; ++l) {
            int sumi = 0;
            for (int j = 4 * l; j < 4 * l + 4; ++j) {  // element j: low nibbles first, then high
                const int q = j < 16 ? (x[b].qs[j] & 0xF) : (x[b].qs[j - 16] >> 4);
                sumi += (q - 8) * y[b].qs[j];
            }
            acc[l] = std::fma(d, static_cast<float>(sumi), acc[l]);
        }
    }
    return hsum_float_8(acc);
}

// Q4_0 weights with a multiple of 8 rows, which llama.cpp repacks on AVX2 CPUs (q4_0_8x8 GEMV/GEMM): the
// block's whole integer sum FMA'd with x.d * y.d, one accumulator.
float dot_q4_0_repacked_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ4_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    float acc = 0.f;
    for (int64_t b = 0; b < n / QK4_0; ++b) {
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; ++j) sumi += ((x[b].qs[j] & 0xF) - 8) * y[b].qs[j] + ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + QK4_0 / 2];
        acc = std::fma(static_cast<float>(sumi), fp16_to_fp32(x[b].d) * fp16_to_fp32(y[b].d), acc);
    }
    return acc;
}

// K-quants: exact integer sums per block in ggml's lane layout, accumulated by kquant_order.h's orders.

// Weight value of element e of a Q4_K/Q5_K block (qh null for Q4_K).
inline int q45_value(const uint8_t* qs, const uint8_t* qh, int e) {
    const int s = e / 32, l = e % 32;
    const uint8_t* q = qs + (s / 2) * 32;
    int v = (s & 1) ? (q[l] >> 4) : (q[l] & 0xF);
    if (qh) v |= ((qh[l] >> s) & 1) << 4;
    return v;
}

inline KBlockSums q45_sums(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, const BlockQ8_K& y) {
    KBlockSums out{};
    for (int s = 0; s < 8; ++s) {
        uint8_t sc, m;
        k_scale_min(s, scales, sc, m);
        out.mins[s] = m * (y.bsums[2 * s] + y.bsums[2 * s + 1]);
        for (int l = 0; l < 32; ++l) out.pair[s / 2][l / 4] += sc * q45_value(qs, qh, 32 * s + l) * y.qs[32 * s + l];
    }
    return out;
}

float dot_q4_K_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ4_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    Q4KVecOrder o;
    for (int64_t b = 0; b < n / QK_K; ++b)
        o.add(q45_sums(x[b].scales, x[b].qs, nullptr, y[b]), y[b].d * fp16_to_fp32(x[b].d), -y[b].d * fp16_to_fp32(x[b].dmin));
    return o.result();
}

// llama.cpp repacks Q4_K weights with a multiple of 8 rows on AVX2 CPUs (its q4_K_8x8 GEMV and GEMM).
template <class Order>
float dot_q4_K_repacked_in(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ4_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    Order o;
    for (int64_t b = 0; b < n / QK_K; ++b)
        o.add(q45_sums(x[b].scales, x[b].qs, nullptr, y[b]), fp16_to_fp32(x[b].d) * y[b].d, fp16_to_fp32(x[b].dmin) * y[b].d);
    return o.result();
}
float dot_q4_K_repacked_ref(int64_t n, const void* w, const void* a) { return dot_q4_K_repacked_in<Q4KRepackedOrder>(n, w, a); }
float dot_q4_K_repacked_gemm_ref(int64_t n, const void* w, const void* a) { return dot_q4_K_repacked_in<Q4KRepackedGemmOrder>(n, w, a); }

float dot_q5_K_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ5_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    Q5KVecOrder o;
    for (int64_t b = 0; b < n / QK_K; ++b)
        o.add(q45_sums(x[b].scales, x[b].qs, x[b].qh, y[b]), y[b].d * fp16_to_fp32(x[b].d), -y[b].d * fp16_to_fp32(x[b].dmin));
    return o.result();
}

// ggml_vec_dot_q6_K_q8_K (x86): lanes of scale * q * y with q unsigned (0..63), then the "-32" part as
// 32 * (bsums[2l] * scale[2l] + bsums[2l+1] * scale[2l+1]) subtracted from lane l: the block total is
// sum((q - 32) * y * scale), but the lanes split it by sub-block pairs, not by element.
float dot_q6_K_ref(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ6_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    Q6KVecOrder o;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int32_t lanes[8] = {};
        for (int e = 0; e < QK_K; ++e) lanes[(e % 32) / 4] += x[b].scales[e / 16] * quant::q6_value(x[b], e) * y[b].qs[e];
        for (int l = 0; l < 8; ++l) lanes[l] -= 32 * (y[b].bsums[2 * l] * x[b].scales[2 * l] + y[b].bsums[2 * l + 1] * x[b].scales[2 * l + 1]);
        o.add(lanes, y[b].d * fp16_to_fp32(x[b].d));
    }
    return o.result();
}

template <Flavor F>
KernelTable make_reference_table() {
    KernelTable k{Isa::Scalar, F};
    k.dot[0] = dot_f32_ref<F>;
    k.dot_batch[0] = dot_f32_batch_ref<F>;
    k.dot[1] = dot_f16_ref<F>;
    k.dot_batch[1] = dot_f16_batch_ref<F>;
    k.dot[30] = F == Flavor::Avx512 ? dot_bf16_ref_avx512 : dot_bf16_ref_avx2;
    k.dot_batch[30] = F == Flavor::Avx512 ? dot_bf16_batch_ref_avx512 : dot_bf16_batch_ref_avx2;
    k.dot_repacked[2] = dot_q4_0_repacked_ref;
    k.dot_repacked[12] = dot_q4_K_repacked_ref;
    k.dot_repacked_gemm[12] = dot_q4_K_repacked_gemm_ref;
    k.dot[2] = dot_q4_0_ref;
    k.dot[8] = dot_q8_0_ref;
    k.dot[12] = dot_q4_K_ref;
    k.dot[13] = dot_q5_K_ref;
    k.dot[14] = dot_q6_K_ref;
    add_quant_reference_kernels(k);
    ik::add_reference_kernels(k);
    return k;
}

const KernelTable& reference_table(Flavor f) {
    static const KernelTable avx512 = make_reference_table<Flavor::Avx512>();
    static const KernelTable avx2 = make_reference_table<Flavor::Avx2>();
    return f == Flavor::Avx512 ? avx512 : avx2;
}

}  // namespace moe::kernels

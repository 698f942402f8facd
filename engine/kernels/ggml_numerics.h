// Scalar statements of the summation orders and vector idioms of llama.cpp's CPU backend, for both builds it
// ships on x86 (flavor.h): AVX-512 (16-lane registers) and AVX2 (8 lanes). GCC also fuses a*b+c in ggml's C++
// files, and the statements below fuse exactly there. The engine reproduces them so that its float results
// are llama.cpp's bit for bit; the SIMD kernels must equal these.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/kernels/flavor.h"
#include "engine/kernels/fp16.h"

namespace moe::ggml {
using kernels::Flavor;
// Internal linkage: translation units built with other ISA flags include this too, and must not share these
// functions with baseline code through the linker.
namespace {

// GCC's _mm512_reduce_add_ps: upper and lower halves added pairwise down to one lane.
inline float reduce16(const float* v) {
    float t8[8], t4[4];
    for (int i = 0; i < 8; ++i) t8[i] = v[i + 8] + v[i];
    for (int i = 0; i < 4; ++i) t4[i] = t8[i + 4] + t8[i];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

// The movehl/movehdup reduction of eight lanes (llama.cpp's hsum_float_8, tinyBLAS's hsum, the AVX2 softmax):
// ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)).
inline float hsum8(const float* v) { return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])); }

// GGML_F32x8_REDUCE's last step (two hadds): ((v0+v4)+(v1+v5)) + ((v2+v6)+(v3+v7)).
inline float hadd8(const float* v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

// One register's horizontal sum where llama.cpp reduces a single vector (softmax groups, tinyBLAS).
template <Flavor F>
inline float reduce_register(const float* v) {
    if constexpr (F == Flavor::Avx512) return reduce16(v);
    else return hsum8(v);
}

// ggml_vec_dot_f32 / ggml_vec_dot_f16 (one token): steps of four registers into four FMA accumulators, reduced
// pairwise and then as one register (GGML_F32x16_REDUCE / GGML_F32x8_REDUCE). The tail: F32 fuses it into
// the float sum, F16 adds in double.
template <Flavor F, class Elem, class ToFloat>
float dot_vec_order(const Elem* x, const Elem* y, int64_t n, ToFloat f, bool double_tail) {
    constexpr int L = kernels::f32_lanes(F);
    float acc[4][L] = {};
    const int64_t np = n & ~int64_t{4 * L - 1};
    for (int64_t i = 0; i < np; i += 4 * L)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < L; ++l) acc[j][l] = std::fma(f(x[i + L * j + l]), f(y[i + L * j + l]), acc[j][l]);
    for (int l = 0; l < L; ++l) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < L; ++l) acc[0][l] += acc[1][l];
    float head;
    if constexpr (F == Flavor::Avx512) head = reduce16(acc[0]);
    else head = hadd8(acc[0]);
    if (double_tail) {
        double s = head;
        for (int64_t i = np; i < n; ++i) s += static_cast<double>(f(x[i]) * f(y[i]));
        return static_cast<float>(s);
    }
    float s = head;
    for (int64_t i = np; i < n; ++i) s = std::fma(f(x[i]), f(y[i]), s);
    return s;
}

// llamafile's tinyBLAS (two or more tokens, n a multiple of the lane count): one FMA accumulator, reduced as
// one register.
template <Flavor F, class Elem, class ToFloat>
float dot_gemm_order(const Elem* x, const Elem* y, int64_t n, ToFloat f) {
    constexpr int L = kernels::f32_lanes(F);
    float acc[L] = {};
    for (int64_t i = 0; i < n; ++i) acc[i % L] = std::fma(f(x[i]), f(y[i]), acc[i % L]);
    return reduce_register<F>(acc);
}

inline float as_float(float v) { return v; }
inline float half_as_float(uint16_t h) { return fp16_to_fp32_lut(h); }

inline float bits_to_float(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
inline uint32_t float_to_bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

// ggml_v_expf (adapted from Arm's optimized routines; within 1.5 ulp of exp), as each build writes it: the
// AVX-512 one scales 1+poly by 2^n (VSCALEFPS); the AVX2 one builds 2^n from the bits of z and computes
// k + k*poly, with a separate path for |n| > 126.
template <Flavor F>
inline float expf_v(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    if constexpr (F == Flavor::Avx512) {
        if (std::fabs(n) > 192.f) return n <= 0.f ? 0.f : std::numeric_limits<float>::infinity();
        const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                                 std::fma(0x1.ffffecp-1f, b, 1.0f));
        // j * 2^n: one multiply by the power of two where it is a normal float (one rounding, as ldexp's);
        // ldexp itself below that, where the power would be subnormal.
        const int ni = static_cast<int>(n);
        if (ni >= -126 && ni <= 127) return j * bits_to_float(static_cast<uint32_t>(ni + 127) << 23);
        return std::ldexp(j, ni);
    } else {
        const uint32_t e = float_to_bits(z) << 23;
        const float k = bits_to_float(e + float_to_bits(1.0f));
        const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                                 0x1.ffffecp-1f * b);
        if (!(std::fabs(n) > 126.f)) return std::fma(j, k, k);
        const uint32_t g = n <= 0.f ? 0x82000000u : 0u;
        const float s1 = bits_to_float(g + 0x7f000000u);
        const float s2 = bits_to_float(e - g);
        if (std::fabs(n) > 192.f) return s1 * s1;
        return std::fma(s2, j, s2) * s1;
    }
}

// ggml_v_silu: x / (1 + exp(-x)) with the vector exp.
template <Flavor F>
inline float silu_v(float x) {
    return x / (1.0f + expf_v<F>(0.0f - x));
}

// ggml_vec_soft_max_f32: y = exp(x - max), full registers through the vector exp (each summed as one register
// into a double), the tail through expf. Returns the sum.
template <Flavor F>
inline double vec_soft_max(int n, float* y, const float* x, float max) {
    constexpr int L = kernels::f32_lanes(F);
    double sum = 0.0;
    int i = 0;
    for (; i + L <= n; i += L) {
        for (int l = 0; l < L; ++l) y[i + l] = expf_v<F>(x[i + l] - max);
        sum += static_cast<double>(reduce_register<F>(y + i));
    }
    for (; i < n; ++i) {
        y[i] = std::exp(x[i] - max);
        sum += static_cast<double>(y[i]);
    }
    return sum;
}

// The online-softmax step of ggml's tiled flash attention for one tile of 64 scores, masked entries at -inf:
// the running max M grows to the tile's, rescaling the accumulator and the sum S with expf; the scores become
// exp(score - M) through vec_soft_max, whose sum is added to S in double. A tile with nothing visible changes
// nothing (ggml skips it).
constexpr int kFaTile = 64;
template <Flavor F>
inline bool tiled_softmax_step(float* kq, float& M, float& S, float* acc, int dim) {
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < kFaTile; ++i) tile_max = std::max(tile_max, kq[i]);
    if (tile_max == -std::numeric_limits<float>::infinity()) return false;
    const float m_new = std::fmax(M, tile_max);
    if (m_new > M) {
        const float ms = std::exp(M - m_new);
        for (int d = 0; d < dim; ++d) acc[d] *= ms;
        S *= ms;
    }
    M = m_new;
    S = static_cast<float>(static_cast<double>(S) + vec_soft_max<F>(kFaTile, kq, kq, M));
    return true;
}

}  // namespace
}  // namespace moe::ggml

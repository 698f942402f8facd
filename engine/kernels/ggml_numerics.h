// Scalar statements of the summation orders and vector idioms of llama.cpp's CPU backend (built for AVX-512
// by GCC, which also fuses a*b+c in its scalar code). The engine reproduces them so that its float results
// are llama.cpp's bit for bit: on these small-margin paths a one-ulp difference flips an fp16 or 8-bit
// rounding later on and grows into a different token. The SIMD kernels must equal these.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/kernels/fp16.h"

namespace moe::ggml {
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

// ggml_vec_dot_f32 / ggml_vec_dot_f16 (one token): 64-element steps into four 16-lane FMA accumulators,
// reduced pairwise and then as one register. The tail: F32 fuses it into the float sum, F16 adds in double.
template <class Elem, class ToFloat>
float dot_vec_order(const Elem* x, const Elem* y, int64_t n, ToFloat f, bool double_tail) {
    float acc[4][16] = {};
    const int64_t np = n & ~int64_t{63};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 16; ++l) acc[j][l] = std::fma(f(x[i + 16 * j + l]), f(y[i + 16 * j + l]), acc[j][l]);
    for (int l = 0; l < 16; ++l) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; ++l) acc[0][l] += acc[1][l];
    const float head = reduce16(acc[0]);
    if (double_tail) {
        double s = head;
        for (int64_t i = np; i < n; ++i) s += static_cast<double>(f(x[i]) * f(y[i]));
        return static_cast<float>(s);
    }
    float s = head;
    for (int64_t i = np; i < n; ++i) s = std::fma(f(x[i]), f(y[i]), s);
    return s;
}

// llamafile's tinyBLAS (two or more tokens): one 16-lane FMA accumulator, reduced as one register.
template <class Elem, class ToFloat>
float dot_gemm_order(const Elem* x, const Elem* y, int64_t n, ToFloat f) {
    float acc[16] = {};
    for (int64_t i = 0; i < n; ++i) acc[i % 16] = std::fma(f(x[i]), f(y[i]), acc[i % 16]);
    return reduce16(acc);
}

inline float as_float(float v) { return v; }
inline float half_as_float(uint16_t h) { return fp16_to_fp32_lut(h); }

// ggml_v_expf for AVX-512 (adapted from Arm's optimized routines; within 1.5 ulp of exp): used by
// llama.cpp's softmax and SiLU for every full group of 16 values.
inline float expf_v(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    if (std::fabs(n) > 192.f) return n <= 0.f ? 0.f : std::numeric_limits<float>::infinity();
    const float u = b * b;
    const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                             u, std::fma(0x1.ffffecp-1f, b, 1.0f));
    return std::ldexp(j, static_cast<int>(n));
}

// ggml_v_silu: x / (1 + exp(-x)) with the vector exp.
inline float silu_v(float x) { return x / (1.0f + expf_v(0.0f - x)); }

// The online-softmax step of ggml's tiled flash attention for one tile of 64 scores, the first `visible` of
// them real (the rest masked): the running max M grows to the tile's, rescaling the accumulator and the sum
// S with expf; the scores become the vector exp of (score - M), summed per 16 into S in double.
inline void tiled_softmax_step(float* kq, int visible, float& M, float& S, float* acc, int dim) {
    constexpr int kTile = 64;
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < visible; ++i) tile_max = std::max(tile_max, kq[i]);
    for (int i = visible; i < kTile; ++i) kq[i] = -std::numeric_limits<float>::infinity();
    const float m_new = std::fmax(M, tile_max);
    if (m_new > M) {
        const float ms = std::exp(M - m_new);
        for (int d = 0; d < dim; ++d) acc[d] *= ms;
        S *= ms;
    }
    M = m_new;
    double sum = 0.0;
    for (int g = 0; g < kTile; g += 16) {
        for (int i = g; i < g + 16; ++i) kq[i] = expf_v(kq[i] - M);
        sum += static_cast<double>(reduce16(kq + g));
    }
    S = static_cast<float>(static_cast<double>(S) + sum);
}

}  // namespace
}  // namespace moe::ggml

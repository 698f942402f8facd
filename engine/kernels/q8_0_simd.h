// Q8_0 dot products for the SIMD tables (AVX2 and AVX-512 translation units include it with their own
// 8-bit dot, maddubs or VPDPBUSD, which give the same int32 lanes; internal linkage keeps each build apart).
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/kernels/blocks.h"
#include "engine/kernels/kquant_simd.h"
#include "engine/kernels/tile_simd.h"

namespace moe::kernels {
namespace {

// Q8_0: per block, eight int32 lanes of four products FMA'd with the scale product into eight float
// lanes, summed at the end as llama.cpp's hsum_float_8.
template <class DotI8>
float q8_0_dot(int64_t n, const void* w, const void* a, DotI8 dot_i8) {
    auto* x = static_cast<const BlockQ8_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
        const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
        const __m256 d = _mm256_set1_ps(h2f(x[b].d) * h2f(y[b].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(qx, qy)), acc);
    }
    return hsum_float_8(acc);
}

// The same chain as a step kernel (tile_simd.h) for prompt tiles; DotI8 is the translation unit's 8-bit dot.
template <class DotI8>
struct Q8_0Step {
    using Block = BlockQ8_0;
    using Act = BlockQ8_0;
    static constexpr int64_t kBlockElems = QK8_0;
    using State = Acc8State;
    static State init() { return {_mm256_setzero_ps()}; }
    static void step(State& s, const BlockQ8_0& x, const BlockQ8_0& y) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
        const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs));
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x.d) * h2f(y.d)), _mm256_cvtepi32_ps(DotI8{}(qx, qy)), s.acc);
    }
    static float finish(const State& s) { return hsum_float_8(s.acc); }
};

// Rows x tokens for prompts: Q8_0Step's chain per pair, with the block scales converted once per call (the
// tokens') and per row, four tokens per pass over a row's blocks, and the tokens addressed from one base so
// that the loop keeps its pointers and accumulators in registers.
template <class DotI8>
void q8_0_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
               int64_t out_stride) {
    const int64_t nb = n / QK8_0;
    thread_local std::vector<float> dy, dx;
    dy.resize(static_cast<size_t>(nb * n_tok));
    dx.resize(static_cast<size_t>(nb));
    for (int t = 0; t < n_tok; ++t) {
        const auto* y = reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * act_bytes);
        for (int64_t b = 0; b < nb; ++b) dy[static_cast<size_t>(b * n_tok + t)] = h2f(y[b].d);
    }
    for (int64_t r = 0; r < rows; ++r) {
        const auto* x = reinterpret_cast<const BlockQ8_0*>(w + static_cast<size_t>(r) * row_bytes);
        for (int64_t b = 0; b < nb; ++b) dx[static_cast<size_t>(b)] = h2f(x[b].d);
        int t0 = 0;
        for (; t0 + 4 <= n_tok; t0 += 4) {
            const uint8_t* y0 = act + static_cast<size_t>(t0) * act_bytes;
            __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int64_t b = 0; b < nb; ++b) {
                const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
                const float* d = dy.data() + b * n_tok + t0;
                const size_t off = static_cast<size_t>(b) * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
#pragma GCC unroll 4
                for (int t = 0; t < 4; ++t) {
                    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y0 + t * act_bytes + off));
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx[static_cast<size_t>(b)] * d[t]), _mm256_cvtepi32_ps(DotI8{}(qx, qy)), acc[t]);
                }
            }
            for (int t = 0; t < 4; ++t) out[(t0 + t) * out_stride + r] = hsum_float_8(acc[t]);
        }
        for (; t0 < n_tok; ++t0) out[t0 * out_stride + r] = step_dot<Q8_0Step<DotI8>>(n, x, act + static_cast<size_t>(t0) * act_bytes);
    }
}

// Eight rows at once: their eight accumulators transposed so that each output lane is one row, then added
// in hsum_float_8's order ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)); every row equals dot_q8_0 bit for bit.
template <class DotI8>
void q8_0_dot_rows(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out, DotI8 dot_i8) {
    const auto* y = static_cast<const BlockQ8_0*>(a);
    const int64_t nb = n / QK8_0;
    // Eight rows at once pay for short rows (a 64-wide output head), where per-row overhead dominates; long
    // rows stream better one at a time.
    const int64_t grouped = nb > 4 ? 0 : rows - rows % 8;
    int64_t r = 0;
    for (; r < grouped; r += 8) {
        __m256 acc[8];
        for (auto& v : acc) v = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
            const float dy = h2f(y[b].d);
            for (int i = 0; i < 8; ++i) {
                const BlockQ8_0* x = reinterpret_cast<const BlockQ8_0*>(w + static_cast<size_t>(r + i) * row_bytes) + b;
                const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs));
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x->d) * dy), _mm256_cvtepi32_ps(dot_i8(qx, qy)), acc[i]);
            }
        }
        __m256 t[8];  // t[k]: lane k of the eight rows
        transpose8(acc, t);
        const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(t[0], t[4]), _mm256_add_ps(t[2], t[6])),
                                         _mm256_add_ps(_mm256_add_ps(t[1], t[5]), _mm256_add_ps(t[3], t[7])));
        _mm256_storeu_ps(out + r, sum);
    }
    for (; r < rows; ++r) out[r] = q8_0_dot(n, w + static_cast<size_t>(r) * row_bytes, a, dot_i8);
}

}  // namespace
}  // namespace moe::kernels

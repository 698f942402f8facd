// Prompt tiles for F16, BF16 and F32 weights in llama.cpp's two float orders: vec_dot's (experts, one token) and
// llamafile's GEMM (dense matmuls of several tokens). fp16 -> f32 is exact, so F16 rows widened to f32 once per
// call and tokens converted as loaded give every dot its bits. The gain is register reuse: R rows x T tokens of
// accumulators, so each weight load serves T tokens and each activation load R rows, as many as the order's
// accumulators leave registers for. Each ISA unit includes this file (internal linkage, its own flags) and
// instantiates the orders in its register width (kernels_avx2.cpp, kernels_avx512.cpp).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {

inline void widen_f16(const uint8_t* src, float* dst, int64_t n) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    for (; i < n; ++i) dst[i] = _cvtsh_ss(h[i]);
}

// A bf16 element (its own type, so that loads and widening pick the bf16 conversion: the bits shifted up).
struct Bf16 {
    uint16_t bits;
};
inline float bf16_value(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline void widen_bf16(const uint8_t* src, float* dst, int64_t n) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_value(h[i]);
}

inline float elem(const float* p, int64_t i) { return p[i]; }
inline float elem(const uint16_t* p, int64_t i) { return _cvtsh_ss(p[i]); }
inline float elem(const Bf16* p, int64_t i) { return bf16_value(p[i].bits); }

// ggml_vec_dot_f16's tail past the vector steps, summed in double onto the vector part (F32: a float FMA chain).
template <bool DoubleTail, class Y>
float vec_tail(float head, const float* x, const Y* y, int64_t from, int64_t n) {
    if constexpr (DoubleTail) {
        double s = head;
        for (int64_t i = from; i < n; ++i) s += static_cast<double>(x[i] * elem(y, i));
        return static_cast<float>(s);
    } else {
        float s = head;
        for (int64_t i = from; i < n; ++i) s = std::fma(x[i], elem(y, i), s);
        return s;
    }
}

// llamafile's GEMM past its vector steps: element i into lane i % L, then the L lanes reduced as the build does
// (hsum_float_8; for 16 lanes the two halves added first, as reduce16).
template <int L, class Y>
float gemm_tail_reduce(float* lanes, const float* x, const Y* y, int64_t np, int64_t n) {
    for (int64_t i = np; i < n; ++i) lanes[i % L] = std::fma(x[i], elem(y, i), lanes[i % L]);
    if constexpr (L == 8) return hsum_float_8(_mm256_loadu_ps(lanes));
    else return hsum_float_8(_mm256_add_ps(_mm256_loadu_ps(lanes + 8), _mm256_loadu_ps(lanes)));
}

// An order over 8-lane ymm registers: kAcc accumulators of kStep / kAcc elements each per step (element
// i + 8k of a step goes to accumulator k), finish() its reduction and tail.
// The AVX2 build's vec_dot (dot_vec_order_avx2): four accumulators over 32-element steps, two hadds.
template <bool DoubleTail>
struct VecOrderAvx2 {
    using V = __m256;
    static constexpr int kAcc = 4, kLanes = 8;
    template <class Y>
    static float finish(const V* a, const float* x, const Y* y, int64_t np, int64_t n) {
        const __m256 v = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
        const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 t1 = _mm_hadd_ps(t0, t0);
        return vec_tail<DoubleTail>(_mm_cvtss_f32(_mm_hadd_ps(t1, t1)), x, y, np, n);
    }
};
// BF16's vec_dot in the AVX2 build (dot_bf16_a2): four 8-lane accumulators over 32-element steps,
// hsum_float_8 of (c0 + c2) + (c1 + c3) into a double, the tail in double.
struct VecOrderBf16Avx2 {
    using V = __m256;
    static constexpr int kAcc = 4, kLanes = 8;
    template <class Y>
    static float finish(const V* a, const float* x, const Y* y, int64_t np, int64_t n) {
        return vec_tail<true>(hsum_float_8(_mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]))), x, y, np, n);
    }
};
// llamafile's GEMM in the AVX2 build (F32, F16 and BF16 alike): one 8-lane accumulator, the tail lane-wise,
// hsum_float_8.
struct GemmOrderAvx2 {
    using V = __m256;
    static constexpr int kAcc = 1, kLanes = 8;
    template <class Y>
    static float finish(const V* a, const float* x, const Y* y, int64_t np, int64_t n) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, a[0]);
        return gemm_tail_reduce<8>(lanes, x, y, np, n);
    }
};
// llamafile's GEMM in the AVX-512 build, one 16-lane accumulator as two 8-lane halves (element i + 8k of a
// 16-element step in half k), reduced as reduce16: the halves added, then hsum_float_8.
struct GemmOrderAvx512InYmm {
    using V = __m256;
    static constexpr int kAcc = 2, kLanes = 8;
    template <class Y>
    static float finish(const V* a, const float* x, const Y* y, int64_t np, int64_t n) {
        alignas(32) float lanes[16];
        _mm256_store_ps(lanes, a[0]);
        _mm256_store_ps(lanes + 8, a[1]);
        return gemm_tail_reduce<16>(lanes, x, y, np, n);
    }
};

inline __m256 vload(const float* p, __m256) { return _mm256_loadu_ps(p); }
inline __m256 vload(const uint16_t* p, __m256) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 vload(const Bf16* p, __m256) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline __m256 vfma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
inline void vzero(__m256& v) { v = _mm256_setzero_ps(); }

#if defined(__AVX512F__)
// The AVX-512 build's orders in zmm: a 16-lane accumulator is one register (the ymm forms above hold it as two
// halves, element i + 8k of a 16-element step in half k, which is the zmm's lane layout).
inline __m512 vload(const float* p, __m512) { return _mm512_loadu_ps(p); }
inline __m512 vload(const uint16_t* p, __m512) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 vfma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
inline void vzero(__m512& v) { v = _mm512_setzero_ps(); }
inline __m256 high_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// vec_dot (dot_vec_order): four 16-lane accumulators over 64-element steps, then reduce16 (halves added,
// hsum_float_8).
template <bool DoubleTail>
struct VecOrderAvx512 {
    using V = __m512;
    static constexpr int kAcc = 4, kLanes = 16;
    template <class Y>
    static float finish(const V* a, const float* x, const Y* y, int64_t np, int64_t n) {
        const __m512 v = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        return vec_tail<DoubleTail>(hsum_float_8(_mm256_add_ps(high_half(v), _mm512_castps512_ps256(v))), x, y, np, n);
    }
};
// llamafile's GEMM: one 16-lane accumulator, the tail lane-wise, reduce16.
struct GemmOrderAvx512 {
    using V = __m512;
    static constexpr int kAcc = 1, kLanes = 16;
    template <class Y>
    static float finish(const V* a, const float* x, const Y* y, int64_t np, int64_t n) {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, a[0]);
        return gemm_tail_reduce<16>(lanes, x, y, np, n);
    }
};
#endif

// R rows x T tokens of one order: out[r * T + t] = dot(x[r], y[t]).
template <class O, int R, int T, class Y>
void float_dots(int64_t n, const float* const* x, const Y* const* y, float* const* out) {
    using V = typename O::V;
    constexpr int64_t step = O::kAcc * O::kLanes;
    V acc[R][T][O::kAcc];
    for (auto& a : acc)
        for (auto& b : a)
            for (auto& c : b) vzero(c);
    const int64_t np = n - n % step;
    for (int64_t i = 0; i < np; i += step)
#pragma GCC unroll 4
        for (int k = 0; k < O::kAcc; ++k) {
            V xv[R];
            for (int r = 0; r < R; ++r) xv[r] = vload(x[r] + i + O::kLanes * k, V{});
            for (int t = 0; t < T; ++t) {
                const V yv = vload(y[t] + i + O::kLanes * k, V{});
                for (int r = 0; r < R; ++r) acc[r][t][k] = vfma(xv[r], yv, acc[r][t][k]);
            }
        }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) *out[r * T + t] = O::finish(acc[r][t], x[r], y[t], np, n);
}

// Rows x tokens in register tiles of R rows x T tokens (edges one pair at a time). Elem: the weights' and the
// activations' element (float or fp16). F16 rows are widened to f32 once per call; the tokens stay fp16 and are
// converted as they are loaded (once per R rows), which keeps a prompt's tokens in L1 at half the bytes.
template <class O, int R, int T, class Elem>
void float_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                int64_t out_stride) {
    constexpr bool kWiden = !std::is_same_v<Elem, float>;
    thread_local std::vector<float> wf;
    const size_t un = static_cast<size_t>(n);
    if constexpr (kWiden) wf.resize(un * R);
    for (int64_t r0 = 0; r0 < rows; r0 += R) {
        const int nr = static_cast<int>(std::min<int64_t>(R, rows - r0));
        const float* x[R];
        for (int r = 0; r < nr; ++r) {
            const uint8_t* row = w + static_cast<size_t>(r0 + r) * row_bytes;
            if constexpr (kWiden) {
                if constexpr (std::is_same_v<Elem, Bf16>) widen_bf16(row, wf.data() + static_cast<size_t>(r) * un, n);
                else widen_f16(row, wf.data() + static_cast<size_t>(r) * un, n);
                x[r] = wf.data() + static_cast<size_t>(r) * un;
            } else {
                x[r] = reinterpret_cast<const float*>(row);
            }
        }
        for (int t0 = 0; t0 < n_tok; t0 += T) {
            const int nt = std::min(T, n_tok - t0);
            const Elem* y[T];
            for (int t = 0; t < nt; ++t) y[t] = reinterpret_cast<const Elem*>(act + static_cast<size_t>(t0 + t) * act_bytes);
            if (nr == R && nt == T) {
                float* o[R * T];
                for (int r = 0; r < R; ++r)
                    for (int t = 0; t < T; ++t) o[r * T + t] = out + (t0 + t) * out_stride + r0 + r;
                float_dots<O, R, T>(n, x, y, o);
            } else {
                for (int r = 0; r < nr; ++r)
                    for (int t = 0; t < nt; ++t) {
                        float* o = out + (t0 + t) * out_stride + r0 + r;
                        float_dots<O, 1, 1>(n, &x[r], &y[t], &o);
                    }
            }
        }
    }
}

}  // namespace
}  // namespace moe::kernels

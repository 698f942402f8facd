// AVX2 + FMA + F16C dot products. Integer sums are exact, so results differ from the scalar reference only
// in float summation order.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/kernels/bf16_simd.h"
#include "engine/kernels/blocks.h"
#include "engine/kernels/f16_tiles.h"
#include "engine/kernels/ik/ik_converted_simd.h"
#include "engine/kernels/ik/ik_table_simd.h"
#include "engine/kernels/ik/ik_r4_simd.h"
#include "engine/kernels/ik/ik_x4_simd.h"
#include "engine/kernels/kernels_internal.h"
#include "engine/kernels/kquant_simd.h"
#include "engine/kernels/iquant_panels.h"
#include "engine/kernels/kquant_panels.h"
#include "engine/kernels/ternary_panels.h"
#include "engine/kernels/iquants_simd.h"
#include "engine/kernels/q8_0_simd.h"
#include "engine/kernels/quants_simd.h"
#include "engine/kernels/q2k_row_lanes.h"
#include "engine/kernels/row_lane_tiles.h"

namespace moe::kernels {
namespace {

// Signed x signed byte dot product of 32 pairs, as 8 int32 partial sums.
inline __m256i dot_i8(__m256i x, __m256i y) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// Float weights in llama.cpp's orders (ggml_numerics.h). A 16-lane register of the AVX-512 build is a pair
// of 256-bit halves here; reduce16 adds the halves, then sums eight lanes as _mm512_reduce_add_ps does.
inline float reduce16(__m256 lo, __m256 hi) { return hsum_float_8(_mm256_add_ps(hi, lo)); }

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline float to_float(float v) { return v; }
inline float to_float(uint16_t h) { return _cvtsh_ss(h); }
inline __m256 load8(const Bf16* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline float to_float(Bf16 h) { return bf16_value(h.bits); }

// ggml_vec_dot_f32 / _f16: four 16-lane accumulators over 64-element steps.
template <class Elem>
float dot_vec_order(const Elem* x, const Elem* y, int64_t n, bool double_tail) {
    __m256 acc[4][2];
    for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
    const int64_t np = n & ~int64_t{63};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j)
            for (int h = 0; h < 2; ++h) {
                const int64_t o = i + 16 * j + 8 * h;
                acc[j][h] = _mm256_fmadd_ps(load8(x + o), load8(y + o), acc[j][h]);
            }
    for (int h = 0; h < 2; ++h) {
        acc[0][h] = _mm256_add_ps(acc[0][h], acc[2][h]);
        acc[1][h] = _mm256_add_ps(acc[1][h], acc[3][h]);
        acc[0][h] = _mm256_add_ps(acc[0][h], acc[1][h]);
    }
    const float head = reduce16(acc[0][0], acc[0][1]);
    if (double_tail) {
        double s = head;
        for (int64_t i = np; i < n; ++i) s += static_cast<double>(to_float(x[i]) * to_float(y[i]));
        return static_cast<float>(s);
    }
    float s = head;
    for (int64_t i = np; i < n; ++i) s = std::fma(to_float(x[i]), to_float(y[i]), s);
    return s;
}

// llamafile's tinyBLAS: one 16-lane accumulator (dense_dot only picks it for n % 16 == 0).
template <class Elem>
float dot_gemm_order(const Elem* x, const Elem* y, int64_t n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(load8(x + i), load8(y + i), lo);
        hi = _mm256_fmadd_ps(load8(x + i + 8), load8(y + i + 8), hi);
    }
    alignas(32) float acc[16];
    _mm256_store_ps(acc, lo);
    _mm256_store_ps(acc + 8, hi);
    for (; i < n; ++i) acc[i % 16] = std::fma(to_float(x[i]), to_float(y[i]), acc[i % 16]);
    return reduce16(_mm256_load_ps(acc), _mm256_load_ps(acc + 8));
}

// The AVX2 build's orders: ggml_vec_dot_f32/_f16 run four 8-lane accumulators over 32-element steps and reduce
// with two hadds (GGML_F32x8_REDUCE); tinyBLAS runs one 8-lane accumulator reduced by hsum_float_8.
inline float hadd_reduce(__m256 v) {
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

template <class Elem>
float dot_vec_order_avx2(const Elem* x, const Elem* y, int64_t n, bool double_tail) {
    __m256 acc[4];
    for (auto& a : acc) a = _mm256_setzero_ps();
    const int64_t np = n & ~int64_t{31};
    for (int64_t i = 0; i < np; i += 32)
        for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(load8(x + i + 8 * j), load8(y + i + 8 * j), acc[j]);
    acc[0] = _mm256_add_ps(acc[0], acc[2]);
    acc[1] = _mm256_add_ps(acc[1], acc[3]);
    const float head = hadd_reduce(_mm256_add_ps(acc[0], acc[1]));
    if (double_tail) {
        double s = head;
        for (int64_t i = np; i < n; ++i) s += static_cast<double>(to_float(x[i]) * to_float(y[i]));
        return static_cast<float>(s);
    }
    float s = head;
    for (int64_t i = np; i < n; ++i) s = std::fma(to_float(x[i]), to_float(y[i]), s);
    return s;
}

template <class Elem>
float dot_gemm_order_avx2(const Elem* x, const Elem* y, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(load8(x + i), load8(y + i), acc);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (; i < n; ++i) lanes[i % 8] = std::fma(to_float(x[i]), to_float(y[i]), lanes[i % 8]);
    return hsum_float_8(_mm256_load_ps(lanes));
}

float dot_f32(int64_t n, const void* w, const void* a) { return dot_vec_order(static_cast<const float*>(w), static_cast<const float*>(a), n, false); }
float dot_f32_batch(int64_t n, const void* w, const void* a) { return dot_gemm_order(static_cast<const float*>(w), static_cast<const float*>(a), n); }
float dot_f16(int64_t n, const void* w, const void* a) {
    return dot_vec_order(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n, true);
}
float dot_f16_batch(int64_t n, const void* w, const void* a) {
    return dot_gemm_order(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n);
}
float dot_f32_a2(int64_t n, const void* w, const void* a) {
    return dot_vec_order_avx2(static_cast<const float*>(w), static_cast<const float*>(a), n, false);
}
float dot_f32_batch_a2(int64_t n, const void* w, const void* a) {
    return dot_gemm_order_avx2(static_cast<const float*>(w), static_cast<const float*>(a), n);
}
float dot_f16_a2(int64_t n, const void* w, const void* a) {
    return dot_vec_order_avx2(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n, true);
}
float dot_f16_batch_a2(int64_t n, const void* w, const void* a) {
    return dot_gemm_order_avx2(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n);
}

inline __m256i load_bf16x16(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline float bf2f(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// ggml_vec_dot_bf16 (AVX512-BF16): two 16-lane accumulators over 64-element steps; the tail in double.
float dot_bf16(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m256 c[2][2];
    for (auto& h : c) h[0] = h[1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 2; ++k)
            for (int h = 0; h < 2; ++h) {
                const int64_t o = i + 32 * k + 16 * h;
                c[k][h] = dpbf16(c[k][h], load_bf16x16(x + o), load_bf16x16(y + o));
            }
    double s = reduce16(c[0][0], c[0][1]);
    s += reduce16(c[1][0], c[1][1]);
    for (; i < n; ++i) s += static_cast<double>(bf2f(x[i]) * bf2f(y[i]));
    return static_cast<float>(s);
}

// llamafile's tinyBLAS for BF16: one 16-lane accumulator over 32-element steps (n % 32 == 0).
float dot_bf16_batch(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t i = 0; i + 32 <= n; i += 32) {
        lo = dpbf16(lo, load_bf16x16(x + i), load_bf16x16(y + i));
        hi = dpbf16(hi, load_bf16x16(x + i + 16), load_bf16x16(y + i + 16));
    }
    return reduce16(lo, hi);
}

// BF16 in the AVX2 build: widened to f32, four 8-lane FMA accumulators over 32-element steps, (c1+c3)+(c2+c4)
// reduced by hsum_float_8 into a double, the tail in double; its tinyBLAS: one 8-lane FMA accumulator.
float dot_bf16_a2(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const Bf16*>(w);
    auto* y = static_cast<const Bf16*>(a);
    __m256 c[4];
    for (auto& v : c) v = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k) c[k] = _mm256_fmadd_ps(load8(x + i + 8 * k), load8(y + i + 8 * k), c[k]);
    double s = hsum_float_8(_mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3])));
    for (; i < n; ++i) s += static_cast<double>(to_float(x[i]) * to_float(y[i]));
    return static_cast<float>(s);
}

float dot_bf16_batch_a2(int64_t n, const void* w, const void* a) {
    return dot_gemm_order_avx2(static_cast<const Bf16*>(w), static_cast<const Bf16*>(a), n);
}

float dot_q8_0(int64_t n, const void* w, const void* a) { return q8_0_dot(n, w, a, dot_i8); }
void dot_rows_q8_0(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    q8_0_dot_rows(n, w, row_bytes, rows, a, out, dot_i8);
}

struct DotI8 {
    __m256i operator()(__m256i x, __m256i y) const { return dot_i8(x, y); }
};

// Q4_0's 32 weights as signed bytes (nibble - 8).
inline __m256i q4_0_bytes(const BlockQ4_0& x) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs));
    return _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0xF)), _mm256_set1_epi8(8));
}

// Q4_0: vec_dot's eight float lanes; with `Repacked`, the order of weights llama.cpp repacks (rows % 8 == 0):
// one FMA per block of its whole integer sum.
template <bool Repacked>
struct Q4_0Step {
    using Block = BlockQ4_0;
    using Act = BlockQ8_0;
    static constexpr int64_t kBlockElems = QK4_0;
    struct State {
        __m256 acc;
        float acc1;
    };
    static State init() { return {_mm256_setzero_ps(), 0.f}; }
    static void step(State& s, const BlockQ4_0& x, const BlockQ8_0& y) {
        const __m256i lanes = dot_i8(q4_0_bytes(x), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs)));
        if constexpr (Repacked) s.acc1 = std::fma(static_cast<float>(hsum_lanes(lanes)), h2f(x.d) * h2f(y.d), s.acc1);
        else s.acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x.d) * h2f(y.d)), _mm256_cvtepi32_ps(lanes), s.acc);
    }
    static float finish(const State& s) { return Repacked ? s.acc1 : hsum_float_8(s.acc); }
};
constexpr auto dot_q4_0 = step_dot<Q4_0Step<false>>;
constexpr auto dot_q4_0_repacked = step_dot<Q4_0Step<true>>;

}  // namespace

void fill_avx2_table(KernelTable& t) {
    t.isa = Isa::Avx2;
    const bool a2 = t.flavor == Flavor::Avx2;
    t.dot[0] = a2 ? dot_f32_a2 : dot_f32;
    t.dot[1] = a2 ? dot_f16_a2 : dot_f16;
    t.dot[2] = dot_q4_0;
    t.dot[8] = dot_q8_0;
    t.dot[30] = a2 ? dot_bf16_a2 : dot_bf16;
    t.dot_rows[0] = a2 ? dot_rows_of<dot_f32_a2> : dot_rows_of<dot_f32>;
    t.dot_rows[1] = a2 ? dot_rows_of<dot_f16_a2> : dot_rows_of<dot_f16>;
    t.dot_rows[2] = dot_rows_of<dot_q4_0>;
    t.dot_rows[8] = dot_rows_q8_0;
    t.dot_batch[0] = a2 ? dot_f32_batch_a2 : dot_f32_batch;
    t.dot_batch[1] = a2 ? dot_f16_batch_a2 : dot_f16_batch;
    t.dot_batch[30] = a2 ? dot_bf16_batch_a2 : dot_bf16_batch;
    t.dot_repacked[2] = dot_q4_0_repacked;
    t.dot_rows_repacked[2] = dot_rows_of<dot_q4_0_repacked>;
    t.tile[2] = step_tile<Q4_0Step<false>>;
    t.tile_repacked[2] = step_tile<Q4_0Step<true>>;
    t.tile[8] = q8_0_tile<DotI8>;
    // F32/F16 tiles: the AVX-512 build's vec_dot order needs eight ymm accumulators per pair, too many to tile.
    if (a2) {
        t.tile[0] = float_tile<VecOrderAvx2<false>, 2, 1, float>;
        t.tile[1] = float_tile<VecOrderAvx2<true>, 2, 1, uint16_t>;
    }
    t.tile_batch[0] = a2 ? float_tile<GemmOrderAvx2, 3, 3, float> : float_tile<GemmOrderAvx512InYmm, 2, 3, float>;
    t.tile_batch[1] = a2 ? float_tile<GemmOrderAvx2, 3, 3, uint16_t> : float_tile<GemmOrderAvx512InYmm, 2, 3, uint16_t>;
    if (a2) {  // the AVX-512 build's BF16 order is VDPBF16PS's pairing, which these tiles do not follow
        t.tile[30] = float_tile<VecOrderBf16Avx2, 2, 1, Bf16>;
        t.tile_batch[30] = float_tile<GemmOrderAvx2, 3, 3, Bf16>;
    }
    t.dot_rows[30] = a2 ? dot_rows_of<dot_bf16_a2> : dot_rows_of<dot_bf16>;
    add_simd_kquant_kernels(t);
    add_simd_quant_kernels(t);
    add_simd_iquant_kernels(t);
    add_iquant_panel_tiles(t);
    add_kquant_panel_tiles(t);
    add_ternary_panel_tiles(t);
    add_row_lane_tiles(t);
    add_q2k_row_lane_tiles(t);
    add_ik_table_kernels(t);
    add_ik_converted_tiles(t);
    add_ik_x4_kernels(t);
    add_ik_r4_kernels(t);
}

}  // namespace moe::kernels

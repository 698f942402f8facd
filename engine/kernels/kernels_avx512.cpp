// The AVX-512 table: the AVX2 table's kernels rebuilt with AVX-512 flags (VPDPBUSD for the byte products),
// Q8_0 through VPDPBUSD, and BF16 through VDPBF16PS where the CPU has it.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/kernels/blocks.h"
#include "engine/kernels/f16_tiles.h"
#include "engine/kernels/ik/ik_converted_simd.h"
#include "engine/kernels/ik/ik_table_avx512.h"
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

// Signed x signed bytes through VPDPBUSD: |x| (unsigned) times y carrying x's sign; the same int32 lanes as
// the AVX2 maddubs/madd pair.
inline __m256i dot_i8(__m256i x, __m256i y) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)); }

struct DotI8 {
    __m256i operator()(__m256i x, __m256i y) const { return dot_i8(x, y); }
};

float dot_q8_0(int64_t n, const void* w, const void* a) { return q8_0_dot(n, w, a, dot_i8); }
void dot_rows_q8_0(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    q8_0_dot_rows(n, w, row_bytes, rows, a, out, dot_i8);
}

// BF16 on CPUs with AVX512-BF16: VDPBF16PS itself, the instruction llama.cpp's BF16 kernels use (the AVX2
// table emulates it; the kernel tests hold the two equal).
__attribute__((target("avx512bf16"))) float dot_bf16_native(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m512 c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        c1 = _mm512_dpbf16_ps(c1, (__m512bh)_mm512_loadu_si512(x + i), (__m512bh)_mm512_loadu_si512(y + i));
        c2 = _mm512_dpbf16_ps(c2, (__m512bh)_mm512_loadu_si512(x + i + 32), (__m512bh)_mm512_loadu_si512(y + i + 32));
    }
    double s = _mm512_reduce_add_ps(c1);
    s += _mm512_reduce_add_ps(c2);
    for (; i < n; ++i) {
        const uint32_t bx = static_cast<uint32_t>(x[i]) << 16, by = static_cast<uint32_t>(y[i]) << 16;
        float fx, fy;
        std::memcpy(&fx, &bx, 4);
        std::memcpy(&fy, &by, 4);
        s += static_cast<double>(fx * fy);
    }
    return static_cast<float>(s);
}

__attribute__((target("avx512bf16"))) float dot_bf16_batch_native(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m512 c = _mm512_setzero_ps();
    for (int64_t i = 0; i + 32 <= n; i += 32) c = _mm512_dpbf16_ps(c, (__m512bh)_mm512_loadu_si512(x + i), (__m512bh)_mm512_loadu_si512(y + i));
    return _mm512_reduce_add_ps(c);
}

// Prompt tiles of the two: R rows x T tokens of their accumulators (vec_dot: two per pair over 64-element
// steps; the GEMM: one over 32), so each load serves several pairs; per pair the same instructions in the same
// order, so the same bits.
template <bool Gemm, int R, int T>
__attribute__((target("avx512bf16"))) void bf16_dots_native(int64_t n, const uint16_t* const* x, const uint16_t* const* y, float* const* out) {
    __m512 c1[R][T], c2[R][T];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) c1[r][t] = c2[r][t] = _mm512_setzero_ps();
    constexpr int64_t kStep = Gemm ? 32 : 64;
    int64_t i = 0;
    for (; i + kStep <= n; i += kStep) {
        __m512i x1[R], x2[R];
        for (int r = 0; r < R; ++r) {
            x1[r] = _mm512_loadu_si512(x[r] + i);
            if constexpr (!Gemm) x2[r] = _mm512_loadu_si512(x[r] + i + 32);
        }
        for (int t = 0; t < T; ++t) {
            const __m512i y1 = _mm512_loadu_si512(y[t] + i);
            for (int r = 0; r < R; ++r) c1[r][t] = _mm512_dpbf16_ps(c1[r][t], (__m512bh)x1[r], (__m512bh)y1);
            if constexpr (!Gemm) {
                const __m512i y2 = _mm512_loadu_si512(y[t] + i + 32);
                for (int r = 0; r < R; ++r) c2[r][t] = _mm512_dpbf16_ps(c2[r][t], (__m512bh)x2[r], (__m512bh)y2);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) {
            if constexpr (Gemm) {
                *out[r * T + t] = _mm512_reduce_add_ps(c1[r][t]);  // dot_bf16_batch_native has no tail either
            } else {
                double s = _mm512_reduce_add_ps(c1[r][t]);
                s += _mm512_reduce_add_ps(c2[r][t]);
                for (int64_t k = i; k < n; ++k) {
                    const uint32_t bx = static_cast<uint32_t>(x[r][k]) << 16, by = static_cast<uint32_t>(y[t][k]) << 16;
                    float fx, fy;
                    std::memcpy(&fx, &bx, 4);
                    std::memcpy(&fy, &by, 4);
                    s += static_cast<double>(fx * fy);
                }
                *out[r * T + t] = static_cast<float>(s);
            }
        }
}

template <bool Gemm>
__attribute__((target("avx512bf16"))) void bf16_tile_native(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act,
                                                            size_t act_bytes, int n_tok, float* out, int64_t out_stride) {
    constexpr int R = Gemm ? 4 : 2, T = 4;
    for (int64_t r0 = 0; r0 < rows; r0 += R) {
        const int nr = static_cast<int>(std::min<int64_t>(R, rows - r0));
        const uint16_t* x[R];
        for (int r = 0; r < nr; ++r) x[r] = reinterpret_cast<const uint16_t*>(w + static_cast<size_t>(r0 + r) * row_bytes);
        for (int t0 = 0; t0 < n_tok; t0 += T) {
            const int nt = std::min(T, n_tok - t0);
            const uint16_t* y[T];
            for (int t = 0; t < nt; ++t) y[t] = reinterpret_cast<const uint16_t*>(act + static_cast<size_t>(t0 + t) * act_bytes);
            if (nr == R && nt == T) {
                float* o[R * T];
                for (int r = 0; r < R; ++r)
                    for (int t = 0; t < T; ++t) o[r * T + t] = out + (t0 + t) * out_stride + r0 + r;
                bf16_dots_native<Gemm, R, T>(n, x, y, o);
            } else {
                for (int r = 0; r < nr; ++r)
                    for (int t = 0; t < nt; ++t) {
                        float* o = out + (t0 + t) * out_stride + r0 + r;
                        bf16_dots_native<Gemm, 1, 1>(n, &x[r], &y[t], &o);
                    }
            }
        }
    }
}

}  // namespace

// Float and Q4_0 kernels come from the AVX2 table: their summation order is llama.cpp's 8-lane one (16-lane
// for floats, as pairs of halves), so wider registers would only change the order. Integer sums are
// order-free: VPDPBUSD computes Q8_0's and the low-bit formats', 512-bit registers the K-quants'.
void fill_avx512_table(KernelTable& t) {
    fill_avx2_table(t);
    t.isa = Isa::Avx512;
    t.dot[8] = dot_q8_0;
    t.dot_rows[8] = dot_rows_q8_0;
    t.tile[8] = q8_0_tile<DotI8>;
    if (t.flavor == Flavor::Avx512 && __builtin_cpu_supports("avx512bf16")) {
        t.dot[30] = dot_bf16_native;
        t.dot_rows[30] = dot_rows_of<dot_bf16_native>;
        t.dot_batch[30] = dot_bf16_batch_native;
        t.tile[30] = bf16_tile_native<false>;
        t.tile_batch[30] = bf16_tile_native<true>;
    }
    add_simd_kquant_kernels(t);  // the same kernels, their byte products through VPDPBUSD
    add_simd_quant_kernels(t);
    add_simd_iquant_kernels(t);
    add_iquant_panel_tiles(t);
    add_kquant_panel_tiles(t);
    add_ternary_panel_tiles(t);
    add_row_lane_tiles(t);
    add_q2k_row_lane_tiles(t);
    add_ik_table_kernels(t);
    add_ik_table_kernels_avx512(t);
    if (__builtin_cpu_supports("avx512vbmi")) add_ik_table_kernels_vbmi(t);
    add_ik_converted_tiles(t);
    add_ik_x4_kernels(t);
    add_ik_trellis_kernels_avx512(t);  // the trellis types' one-token and small-batch kernels in 512-bit registers
    add_ik_r4_kernels(t);
    if (t.flavor == Flavor::Avx512) {  // the AVX2 build's orders keep the AVX2 table's ymm tiles
        t.tile[0] = float_tile<VecOrderAvx512<false>, 4, 1, float>;
        t.tile[1] = float_tile<VecOrderAvx512<true>, 4, 1, uint16_t>;
        t.tile_batch[0] = float_tile<GemmOrderAvx512, 4, 4, float>;
        t.tile_batch[1] = float_tile<GemmOrderAvx512, 4, 4, uint16_t>;
    }
}

}  // namespace moe::kernels

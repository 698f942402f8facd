// The AVX-512 table: the AVX2 table's kernels rebuilt with AVX-512 flags (VPDPBUSD for the byte products),
// Q8_0 through VPDPBUSD, and BF16 through VDPBF16PS where the CPU has it.
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/blocks.h"
#include "engine/kernels/f16_tiles.h"
#include "engine/kernels/kernels_internal.h"
#include "engine/kernels/kquant_simd.h"
#include "engine/kernels/iquant_panels.h"
#include "engine/kernels/iquants_simd.h"
#include "engine/kernels/q8_0_simd.h"
#include "engine/kernels/quants_simd.h"
#include "engine/kernels/q2k_row_lanes.h"
#include "engine/kernels/row_lane_tiles.h"

namespace moe::kernels {
namespace {

// Signed x signed bytes through VPDPBUSD: |x| (unsigned) times y carrying x's sign; the same int32 lanes as
// the AVX2 maddubs/madd pair.
inline __m256i dot_i8(__m256i x, __m256i y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

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
    for (int64_t i = 0; i + 32 <= n; i += 32)
        c = _mm512_dpbf16_ps(c, (__m512bh)_mm512_loadu_si512(x + i), (__m512bh)_mm512_loadu_si512(y + i));
    return _mm512_reduce_add_ps(c);
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
    }
    add_simd_kquant_kernels(t);  // the same kernels, their byte products through VPDPBUSD
    add_simd_quant_kernels(t);
    add_simd_iquant_kernels(t);
    add_iquant_panel_tiles(t);
    add_row_lane_tiles(t);
    add_q2k_row_lane_tiles(t);
    if (t.flavor == Flavor::Avx512) {  // the AVX2 build's orders keep the AVX2 table's ymm tiles
        t.tile[0] = float_tile<VecOrderAvx512<false>, 4, 1, float>;
        t.tile[1] = float_tile<VecOrderAvx512<true>, 4, 1, uint16_t>;
        t.tile_batch[0] = float_tile<GemmOrderAvx512, 4, 4, float>;
        t.tile_batch[1] = float_tile<GemmOrderAvx512, 4, 4, uint16_t>;
    }
}

}  // namespace moe::kernels

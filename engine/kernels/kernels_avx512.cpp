// AVX-512 (F, BW, VL) K-quant dot products: 512-bit integer sums, the float order shared (kquant_order.h).
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/blocks.h"
#include "engine/kernels/kernels_internal.h"
#include "engine/kernels/kquant_simd.h"
#include "engine/kernels/q8_0_simd.h"
#include "engine/kernels/quants_simd.h"

namespace moe::kernels {
namespace {

// Signed x signed bytes through VPDPBUSD: |x| (unsigned) times y carrying x's sign; the same int32 lanes as
// the AVX2 maddubs/madd pair.
inline __m256i dot_i8(__m256i x, __m256i y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

float dot_q8_0(int64_t n, const void* w, const void* a) { return q8_0_dot(n, w, a, dot_i8); }
void dot_rows_q8_0(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    q8_0_dot_rows(n, w, row_bytes, rows, a, out, dot_i8);
}

// Folds a 16-lane integer register whose halves hold two 32-element chunks into ggml's eight lanes.
inline __m256i fold(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

// Q4_K/Q5_K block sums in kquant_order.h's layout: one 512-bit register per pair of sub-blocks (low half
// sub-block 2j, high half 2j+1), folded to eight lanes.
inline KBlockLanes q45_block(const uint8_t* blk, size_t qs_off, size_t qh_off, bool five, const BlockQ8_K& y) {
    const __m512i low4 = _mm512_set1_epi8(0xF), one = _mm512_set1_epi8(1);
    KBlockLanes out;
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) {
        k_scale_min(j, blk + 4, sc[j], mn[j]);
        out.mins[j] = mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    }
    const __m256i h256 = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qh_off)) : _mm256_setzero_si256();
    const __m512i hbits = _mm512_inserti64x4(_mm512_castsi256_si512(h256), h256, 1);
    for (int j = 0; j < 4; ++j) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + qs_off + 32 * j));
        __m512i q = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(bits), _mm256_srli_epi16(bits, 4), 1), low4);
        if (five) {
            const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * j)),
                                                     _mm256_set1_epi16(static_cast<short>(2 * j + 1)), 1);
            q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hbits, shift), one), 4));
        }
        const __m512i q8 = _mm512_loadu_si512(y.qs + 64 * j);
        // u8 x s8 pairs to i16 (at most 31*127*2), then times the sub-block scale into i32.
        const __m512i scale_v = _mm512_inserti64x4(_mm512_set1_epi16(sc[2 * j]), _mm256_set1_epi16(sc[2 * j + 1]), 1);
        out.pair[j] = fold(_mm512_madd_epi16(_mm512_maddubs_epi16(q, q8), scale_v));
    }
    return out;
}

using Q45 = Q45Dots<q45_block>;

// Lanes of sum(scale * q * y) with q unsigned, folded to ggml's eight, minus the sub-block pairs' 32 * scaled
// activation sums (see dot_q6_K_ref).
__m256i q6_lanes(const BlockQ6_K& x, const BlockQ8_K& y) {
    const __m512i low4 = _mm512_set1_epi8(0xF);
    __m512i sumi = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * half));
        const __m512i l = _mm512_loadu_si512(x.ql + 64 * half);  // ql[0..31] | ql[32..63]
        // Elements 0..63 of this half: low nibbles of ql[0..63] with qh bits 0-1 (first 32) and 2-3 (next 32).
        const __m512i hlo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(h, _mm256_set1_epi8(3))),
                                               _mm256_and_si256(_mm256_srli_epi16(h, 2), _mm256_set1_epi8(3)), 1);
        const __m512i hhi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(h, 4), _mm256_set1_epi8(3))),
                                               _mm256_and_si256(_mm256_srli_epi16(h, 6), _mm256_set1_epi8(3)), 1);
        const __m512i q_lo = _mm512_or_si512(_mm512_and_si512(l, low4), _mm512_slli_epi16(hlo, 4));
        const __m512i q_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4), _mm512_slli_epi16(hhi, 4));
        const __m512i y_lo = _mm512_loadu_si512(y.qs + 128 * half);
        const __m512i y_hi = _mm512_loadu_si512(y.qs + 128 * half + 64);
        const int8_t* sc = x.scales + 8 * half;
        // One i16 scale per 16 elements = 8 i16 lanes each (maddubs pairs elements 2k, 2k+1).
        const __m512i s_lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]))),
                                                _mm256_set_m128i(_mm_set1_epi16(sc[3]), _mm_set1_epi16(sc[2])), 1);
        const __m512i s_hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(sc[5]), _mm_set1_epi16(sc[4]))),
                                                _mm256_set_m128i(_mm_set1_epi16(sc[7]), _mm_set1_epi16(sc[6])), 1);
        sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q_lo, y_lo), s_lo));
        sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q_hi, y_hi), s_hi));
    }
    const __m256i scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    return _mm256_sub_epi32(fold(sumi), _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5));
}

using Q6 = Q6Dots<q6_lanes>;

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
    if (t.flavor == Flavor::Avx512 && __builtin_cpu_supports("avx512bf16")) {
        t.dot[30] = dot_bf16_native;
        t.dot_rows[30] = dot_rows_of<dot_bf16_native>;
        t.dot_batch[30] = dot_bf16_batch_native;
    }
    t.dot[12] = Q45::q4_K;
    t.dot[13] = Q45::q5_K;
    t.dot[14] = Q6::dot;
    t.dot_rows[12] = dot_rows_of<Q45::q4_K>;
    t.dot_rows[13] = dot_rows_of<Q45::q5_K>;
    t.dot_rows[14] = Q6::rows;
    t.dot_repacked[12] = Q45::q4_K_repacked;
    t.dot_repacked_gemm[12] = Q45::q4_K_repacked_gemm;
    t.dot_rows_repacked[12] = dot_rows_of<Q45::q4_K_repacked>;
    add_simd_quant_kernels(t);  // the same kernels, their byte products through VPDPBUSD
}

}  // namespace moe::kernels

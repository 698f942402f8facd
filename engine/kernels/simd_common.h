// Small AVX2 helpers shared by the SIMD translation units. Internal linkage: each unit is built with its own
// ISA flags, and none of this may reach baseline code through the linker.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/kernels/fp16.h"

namespace moe::kernels {
namespace {

// A block's fp16 scale as float: fp16.h's table (a load, where F16C's VCVTPH2PS would cost shuffle-port uops).
inline float h2f(uint16_t h) { return fp16_to_fp32_lut(h); }
inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline int32_t hsum_lanes(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// ---- integer building blocks ----

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
// Four registers' 128-bit lanes summed: lane 4h + k = the sum of half h of register k (ik's row lanes, where
// register k holds row k).
inline __m256i halves4(__m256i d0, __m256i d1, __m256i d2, __m256i d3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_hadd_epi32(d2, d3));
}

// Unsigned x signed bytes, four consecutive products summed into each of eight int32 lanes. Callers keep
// u * s pair sums inside int16 (PMADDUBSW saturates; VPDPBUSD does not), so both forms agree.
inline __m256i dot_us8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
// acc + dot_us8(u, s): one VPDPBUSD where the CPU has it.
inline __m256i dot_us8_add(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, dot_us8(u, s));
#endif
}
// Signed x signed: the sign moved onto the activations.
inline __m256i dot_ss8(__m256i x, __m256i y) { return dot_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)); }

// Pair sums times an int16 multiplier per half group: elements 0..15 by `lo`, 16..31 by `hi`.
inline __m256i halves16(int lo, int hi) {
    return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo)));
}
inline __m256i dot_us8_scaled(__m256i u, __m256i s, __m256i scale) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale); }
inline __m256i dot_ss8_scaled(__m256i x, __m256i y, __m256i scale) { return dot_us8_scaled(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x), scale); }

// A 32-weight group's 4-bit values: the low nibbles of 16 bytes are elements 0..15, the high ones 16..31.
inline __m256i nibbles32(const uint8_t* qs) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}
// The same through a 16-entry signed table.
inline __m256i table_nibbles32(const uint8_t* qs, __m128i table) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), low4 = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), low4)), _mm_shuffle_epi8(table, _mm_and_si128(b, low4)));
}

// 0xFF in byte e where bit e of `bits` is set.
inline __m256i bits_to_bytes(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// llama.cpp's hsum_float_8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
inline float hsum_float_8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 8x8 transpose: out[j] holds element j of the eight rows.
inline void transpose8(const __m256 r[8], __m256 out[8]) {
    const __m256 u0 = _mm256_unpacklo_ps(r[0], r[1]), u1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 u2 = _mm256_unpacklo_ps(r[2], r[3]), u3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 u4 = _mm256_unpacklo_ps(r[4], r[5]), u5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 u6 = _mm256_unpacklo_ps(r[6], r[7]), u7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xEE);
    const __m256 v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xEE);
    const __m256 v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xEE);
    const __m256 v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xEE);
    out[0] = _mm256_permute2f128_ps(v0, v4, 0x20), out[4] = _mm256_permute2f128_ps(v0, v4, 0x31);
    out[1] = _mm256_permute2f128_ps(v1, v5, 0x20), out[5] = _mm256_permute2f128_ps(v1, v5, 0x31);
    out[2] = _mm256_permute2f128_ps(v2, v6, 0x20), out[6] = _mm256_permute2f128_ps(v2, v6, 0x31);
    out[3] = _mm256_permute2f128_ps(v3, v7, 0x20), out[7] = _mm256_permute2f128_ps(v3, v7, 0x31);
}

// Lane i = the sum of v[i]'s eight int32 lanes (integer sums: every order gives the same value). Eight
// horizontal sums for the price of one transpose, for kernels that keep one row per lane.
inline __m256i row_sums8(const __m256i v[8]) {
    __m256 f[8], t[8];
    for (int i = 0; i < 8; ++i) f[i] = _mm256_castsi256_ps(v[i]);
    transpose8(f, t);
    __m256i s = _mm256_castps_si256(t[0]);
    for (int k = 1; k < 8; ++k) s = _mm256_add_epi32(s, _mm256_castps_si256(t[k]));
    return s;
}

}  // namespace
}  // namespace moe::kernels

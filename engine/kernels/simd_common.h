// Small AVX2 helpers shared by the SIMD translation units. Internal linkage: each unit is built with its own
// ISA flags, and none of this may reach baseline code through the linker.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace moe::kernels {
namespace {

// fp16 to float through F16C: the same value as fp16.h's portable conversion, without its branches.
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline int32_t hsum_lanes(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
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

}  // namespace
}  // namespace moe::kernels

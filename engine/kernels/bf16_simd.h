// VDPBF16PS emulated in AVX2 registers, for the BF16 kernels of CPUs without AVX512-BF16. Internal linkage, as
// simd_common.h: each SIMD unit is built with its own ISA flags.
#pragma once
#include <immintrin.h>

namespace moe::kernels {
namespace {

// BF16 weights as VDPBF16PS sums them (fp16.h dpbf16_lane), emulated on 8 lanes: each 32-bit lane
// holds an even (low half) and an odd (high half) bf16; the odd product is added first, each product and sum
// rounded once, denormal inputs and results flushed to signed zero.
inline __m256 flush_denormal(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 tiny = _mm256_cmp_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(1.17549435e-38f), _CMP_LT_OQ);
    return _mm256_blendv_ps(x, _mm256_and_ps(x, sign), tiny);
}

inline __m256 dpbf16(__m256 acc, __m256i a, __m256i b) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    const __m256 a_odd = flush_denormal(_mm256_castsi256_ps(_mm256_and_si256(a, high)));
    const __m256 b_odd = flush_denormal(_mm256_castsi256_ps(_mm256_and_si256(b, high)));
    const __m256 a_even = flush_denormal(_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)));
    const __m256 b_even = flush_denormal(_mm256_castsi256_ps(_mm256_slli_epi32(b, 16)));
    acc = flush_denormal(_mm256_fmadd_ps(a_odd, b_odd, acc));
    return flush_denormal(_mm256_fmadd_ps(a_even, b_even, acc));
}

}  // namespace
}  // namespace moe::kernels

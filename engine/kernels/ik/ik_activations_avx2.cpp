// ik's activation types eight lanes at a time with the scalar statements' bytes. Q8_K (ik_ref.cpp: quantize_q8_K,
// the statement of its AVX2 iqk_quantize_row_q8_K_T<0>): the block's largest magnitude (exact in any order; NaN passed over as
// std::max passes it), each value times 127 / amax rounded half to even and saturated to int8 through two packs,
// the sums of 16 from the stored bytes. The scalar form's libm nearbyint per value was 9% of an ik file's prompt.
#include <cfloat>
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_ref.h"

namespace moe::ik {

void quantize_q8_K_avx2(const float* x, void* out, int64_t n) {
    auto* y = static_cast<BlockQ8K*>(out);
    const __m256 sign = _mm256_set1_ps(-0.f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), mx);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.f, id = amax != 0.f && 127.f / amax <= FLT_MAX ? 127.f / amax : 0.f;  // (as quantize_q8_K)
        y[b].d = d;
        const __m256 scale = _mm256_set1_ps(id);
        int total = 0;
        for (int j = 0; j < QK_K; j += 32) {
            __m256i i[4];
            for (int k = 0; k < 4; ++k)
                i[k] = _mm256_cvtps_epi32(
                    _mm256_round_ps(_mm256_mul_ps(scale, _mm256_loadu_ps(x + j + 8 * k)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3])), order);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + j), q);
            // the two groups of 16 in this register: sums of 4 (lanes 0-3 the first group, 4-7 the second), then each half's
            const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
            const __m256i s2 = _mm256_hadd_epi32(s4, s4), s1 = _mm256_hadd_epi32(s2, s2);
            const int first = _mm256_cvtsi256_si32(s1), second = _mm_cvtsi128_si32(_mm256_extracti128_si256(s1, 1));
            y[b].bsums[j / 16] = static_cast<int16_t>(first);
            y[b].bsums[j / 16 + 1] = static_cast<int16_t>(second);
            total += first + second;
        }
        y[b].sum = d * static_cast<float>(total);
    }
}

// Q8_2_X4 (ik_ref_x4.cpp: quantize_q8_2_x4) the same way, per 32: the bf16-rounded scale from the scalar amax,
// each value times 1 / d rounded half to even (NaN and inf to INT_MIN, as the scalar cast gives), the stored bytes
// saturated by the packs as its clamp, the sum over the unclamped integers (wrapping alike).
void quantize_q8_2_x4_avx2(const float* x, void* out, int64_t n) {
    auto* p = static_cast<uint8_t*>(out);
    const __m256 sign = _mm256_set1_ps(-0.f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const int64_t nb = n / 32, grouped = 4 * (nb / 4);
    for (int64_t b = 0; b < nb; ++b, x += 32) {
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < 32; j += 8) mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), mx);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const uint16_t dh = fp32_to_bf16(_mm_cvtss_f32(m4) / 127.f);
        const float d = bf16_to_fp32(dh);
        const __m256 id = _mm256_set1_ps(d > 0.f && 1.f / d <= FLT_MAX ? 1.f / d : 0.f);  // (as quantize_q8_2_x4)
        __m256i i[4];
        for (int k = 0; k < 4; ++k)
            i[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3])), order);
        __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        const auto s = static_cast<int16_t>(_mm_cvtsi128_si32(s4));
        if (b < grouped) {
            auto& g = reinterpret_cast<BlockQ8_2x4*>(p)[b / 4];
            g.d[b % 4] = dh;
            g.s[b % 4] = s;
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(g.qs + 32 * (b % 4)), q);
        } else {
            uint8_t* blk = p + 36 * b;
            std::memcpy(blk, &dh, 2);
            std::memcpy(blk + 2, &s, 2);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + 4), q);
        }
    }
}

}  // namespace moe::ik

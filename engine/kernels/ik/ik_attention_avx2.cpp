// ik_llama.cpp's flash attention for one query row (ik_attention.cpp states it in scalar form), on AVX2+FMA+F16C
// with the same bits: eight keys at a time, their fp16 rows transposed 8x8 so each score's two FMA chains (dims
// d % 8 < 4 and the others, ascending) run in the keys' lanes; the block's probabilities through the AVX2 vector
// exp, summed into the eight lanes the scalar form names; V accumulated with one FMA per key and dim, in order.
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/kernels/expf_simd.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/simd_common.h"

namespace moe::ik {
namespace {

inline __m256 half8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Eight keys' scores (lo + hi chains over dk dims); keys past `valid` read key 0 and are masked by the caller.
inline __m256 scores8(const float* q, const ops::KvView& kv, int first, int valid) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    const uint16_t* rows[8];
    for (int c = 0; c < 8; ++c) rows[c] = kv.k + static_cast<size_t>(first + (c < valid ? c : 0)) * kv.k_stride;
    for (int d = 0; d < kv.dk; d += 8) {
        __m256 r[8], t[8];
        for (int c = 0; c < 8; ++c) r[c] = half8(rows[c] + d);
        kernels::transpose8(r, t);  // t[j]: dim d + j of the eight keys
        for (int j = 0; j < 4; ++j) lo = _mm256_fmadd_ps(t[j], _mm256_set1_ps(q[d + j]), lo);
        for (int j = 4; j < 8; ++j) hi = _mm256_fmadd_ps(t[j], _mm256_set1_ps(q[d + j]), hi);
    }
    return _mm256_add_ps(lo, hi);
}

void attend_ik_avx2(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    constexpr int kBlock = 128;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const int dv = kv.dv;
    std::vector<float>& acc = s.acc;
    acc.assign(static_cast<size_t>(dv), 0.f);
    alignas(32) float score[kBlock], p[kBlock];
    float M = neg_inf, S = 0.f;
    for (int b0 = 0; b0 < kv.n_kv; b0 += kBlock) {
        const int nb = std::min(kBlock, kv.n_kv - b0);
        for (int c = 0; c < kBlock; c += 8) {
            const int valid = std::max(0, std::min(8, nb - c));
            __m256 sc = _mm256_set1_ps(neg_inf);
            if (valid > 0) sc = _mm256_mul_ps(_mm256_add_ps(scores8(q, kv, b0 + c, valid), _mm256_setzero_ps()), _mm256_set1_ps(scale));
            _mm256_store_ps(score + c, sc);
            for (int k = 0; k < 8; ++k)
                if (k >= valid || (kv.visible && !kv.visible[b0 + c + k])) score[c + k] = neg_inf;
        }
        float smax = neg_inf;
        for (int c = 0; c < nb; ++c) smax = std::max(smax, score[c]);
        if (smax == neg_inf) continue;
        if (smax > M) {
            if (M > neg_inf) {
                const float m = std::exp(M - smax);
                S *= m;
                for (float& a : acc) a = m * a;
            }
            M = smax;
        }
        __m256 lanes = _mm256_setzero_ps();
        for (int c = 0; c < kBlock; c += 8) {
            const __m256 sc = _mm256_load_ps(score + c);
            const __m256 masked = _mm256_cmp_ps(sc, _mm256_set1_ps(neg_inf), _CMP_EQ_OQ);
            const __m256 e = _mm256_andnot_ps(masked, kernels::expf8<kernels::Flavor::Avx2>(_mm256_sub_ps(sc, _mm256_set1_ps(M))));
            _mm256_store_ps(p + c, e);
            lanes = _mm256_add_ps(lanes, e);
        }
        S += kernels::hsum_float_8(lanes);
        for (int c = 0; c < nb; ++c) {
            if (score[c] == neg_inf) continue;
            const uint16_t* v = kv.v + static_cast<size_t>(b0 + c) * kv.v_stride;
            const __m256 pc = _mm256_set1_ps(p[c]);
            int d = 0;
            for (; d + 8 <= dv; d += 8) _mm256_storeu_ps(&acc[d], _mm256_fmadd_ps(half8(v + d), pc, _mm256_loadu_ps(&acc[d])));
            for (; d < dv; ++d) acc[d] = std::fma(_cvtsh_ss(v[d]), p[c], acc[d]);
        }
    }
    const float norm = S > 0.f ? 1.0f / S : 0.f;
    for (int d = 0; d < dv; ++d) out[d] = S > 0.f ? acc[d] * norm : 0.f;
}

}  // namespace

ops::AttendFn attend_ik_simd() { return attend_ik_avx2; }

}  // namespace moe::ik

// ik_llama.cpp's flash attention (ik_attention.cpp states it for one query row in scalar form) on AVX2+FMA+F16C
// with the same bits, for a group of rows sharing a view: each block's keys transposed 8x8 to f32 so each score's
// two FMA chains (dims d % 8 < 4 and the others, ascending) run in the keys' lanes; the block's probabilities
// through the AVX2 vector exp, summed into the eight lanes the scalar form names; V accumulated with one FMA per
// key and dim, in key order.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/kernels/expf_simd.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/simd_common.h"

namespace moe::ik {
namespace {

inline __m256 half8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Several query rows (the heads of one kv head, and with kv.rows_per_position a block of consecutive tokens) in
// one pass over the cache: each 128-key block's keys transposed to f32 once ([key group][dim][8 keys]) and its
// values converted once, then every row takes the scalar form's steps on them, so each row's bits are that
// function's. Rows whose causal prefix ends inside a block see the rest of it masked; a block wholly past a row's
// prefix is skipped for that row, as the one-row form never reaches it.
void attend_ik_group_avx2(const float* q_rows, int64_t q_stride, int rows, const ops::KvView& kv, float scale, float* out_rows, int64_t out_stride,
                          ops::AttnScratch& s) {
    constexpr int kBlock = kAttentionBlock;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const int dk = kv.dk, dv = kv.dv;
    auto row_n_kv = [&](int r) { return kv.rows_per_position > 0 ? kv.n_kv + r / kv.rows_per_position : kv.n_kv; };
    const int max_kv = row_n_kv(rows - 1);
    const GroupBuffers buf = group_buffers(s, rows, dk, dv);
    float* kt = buf.keys;    // [kBlock / 8][dk][8]
    float* vf = buf.values;  // [kBlock][dv]
    alignas(32) float score[kBlock], p[kBlock];
    for (int b0 = 0; b0 < max_kv; b0 += kBlock) {
        const int nb = std::min(kBlock, max_kv - b0);
        for (int c = 0; c < nb; c += 8) {
            const uint16_t* krow[8];
            for (int j = 0; j < 8; ++j) krow[j] = kv.k + static_cast<size_t>(b0 + (c + j < nb ? c + j : c)) * kv.k_stride;
            for (int d = 0; d < dk; d += 8) {
                __m256 r8[8], t8[8];
                for (int j = 0; j < 8; ++j) r8[j] = half8(krow[j] + d);
                kernels::transpose8(r8, t8);
                for (int j = 0; j < 8; ++j) _mm256_storeu_ps(kt + (static_cast<size_t>(c / 8) * dk + d + j) * 8, t8[j]);
            }
        }
        for (int c = 0; c < nb; ++c) {
            const uint16_t* v = kv.v + static_cast<size_t>(b0 + c) * kv.v_stride;
            float* dst = vf + static_cast<size_t>(c) * dv;
            int d = 0;
            for (; d + 8 <= dv; d += 8) _mm256_storeu_ps(dst + d, half8(v + d));
            for (; d < dv; ++d) dst[d] = _cvtsh_ss(v[d]);
        }
        for (int r = 0; r < rows; ++r) {
            const int n_r = row_n_kv(r);
            if (b0 >= n_r) continue;
            const int valid_r = std::min(nb, n_r - b0);
            const float* q = q_rows + r * q_stride;
            float& M = buf.max_sum[2 * static_cast<size_t>(r)];
            float& S = buf.max_sum[2 * static_cast<size_t>(r) + 1];
            float* acc = buf.acc + static_cast<size_t>(r) * dv;
            // four key groups per pass over the dims: each q[d] broadcast once for them, every group's two chains
            // in the scalar form's order
            for (int c0 = 0; c0 < kBlock; c0 += 32) {
                __m256 lo[4], hi[4];
                for (int g = 0; g < 4; ++g) lo[g] = hi[g] = _mm256_setzero_ps();
                const int groups = std::clamp((valid_r - c0 + 7) / 8, 0, 4);
                const float* kg = kt + static_cast<size_t>(c0 / 8) * dk * 8;
                auto chains = [&](auto n_groups) {
                    for (int d = 0; d < dk; d += 8) {
                        for (int j = 0; j < 8; ++j) {
                            const __m256 qd = _mm256_set1_ps(q[d + j]);
                            for (int g = 0; g < decltype(n_groups)::value; ++g) {
                                const __m256 k = _mm256_loadu_ps(kg + (static_cast<size_t>(g) * dk + d + j) * 8);
                                if (j < 4) lo[g] = _mm256_fmadd_ps(k, qd, lo[g]);
                                else hi[g] = _mm256_fmadd_ps(k, qd, hi[g]);
                            }
                        }
                    }
                };
                switch (groups) {
                    case 4: chains(std::integral_constant<int, 4>{}); break;
                    case 3: chains(std::integral_constant<int, 3>{}); break;
                    case 2: chains(std::integral_constant<int, 2>{}); break;
                    case 1: chains(std::integral_constant<int, 1>{}); break;
                    default: break;
                }
                for (int g = 0; g < 4; ++g) {
                    const int c = c0 + 8 * g, valid = std::max(0, std::min(8, valid_r - c));
                    const __m256 sc = valid > 0
                                          ? _mm256_mul_ps(_mm256_add_ps(_mm256_add_ps(lo[g], hi[g]), _mm256_setzero_ps()), _mm256_set1_ps(scale))
                                          : _mm256_set1_ps(neg_inf);
                    _mm256_store_ps(score + c, sc);
                    for (int k = 0; k < 8; ++k)
                        if (k >= valid || (kv.visible && !kv.visible[b0 + c + k])) score[c + k] = neg_inf;
                }
            }
            float smax = neg_inf;
            for (int c = 0; c < valid_r; ++c) smax = std::max(smax, score[c]);
            if (smax == neg_inf) continue;
            if (smax > M) {
                if (M > neg_inf) {
                    const float m = std::exp(M - smax);
                    S *= m;
                    for (int d = 0; d < dv; ++d) acc[d] = m * acc[d];
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
            // V: up to 64 dims of the accumulator held in registers across the block's keys (per element the
            // same FMA per key, in key order)
            int d = 0;
            auto accumulate = [&](auto n_regs) {
                constexpr int R = decltype(n_regs)::value;
                __m256 a[R];
                for (int k = 0; k < R; ++k) a[k] = _mm256_loadu_ps(acc + d + 8 * k);
                for (int c = 0; c < valid_r; ++c) {
                    if (score[c] == neg_inf) continue;
                    const float* v = vf + static_cast<size_t>(c) * dv + d;
                    const __m256 pc = _mm256_set1_ps(p[c]);
                    for (int k = 0; k < R; ++k) a[k] = _mm256_fmadd_ps(_mm256_loadu_ps(v + 8 * k), pc, a[k]);
                }
                for (int k = 0; k < R; ++k) _mm256_storeu_ps(acc + d + 8 * k, a[k]);
                d += 8 * R;
            };
            while (d + 64 <= dv) accumulate(std::integral_constant<int, 8>{});
            while (d + 8 <= dv) accumulate(std::integral_constant<int, 1>{});
            for (; d < dv; ++d)
                for (int c = 0; c < valid_r; ++c)
                    if (score[c] != neg_inf) acc[d] = std::fma(vf[static_cast<size_t>(c) * dv + d], p[c], acc[d]);
        }
    }
    finish_group_rows(kv, buf, rows, out_rows, out_stride);
}

// One row: the group form with a single row.
void attend_ik_avx2(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    ops::KvView one = kv;
    one.rows_per_position = 0;
    attend_ik_group_avx2(q, 0, 1, one, scale, out, 0, s);
}

}  // namespace

ops::AttendFn attend_ik_simd() { return attend_ik_avx2; }
ops::AttendGroupFn attend_ik_group_simd() { return attend_ik_group_avx2; }

}  // namespace moe::ik

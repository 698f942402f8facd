// Compiled with -mavx2 -mfma -mf16c. Uses intrinsics and internal-linkage helpers only (simd_common.h,
// ggml_numerics.h), so nothing compiled with these flags can leak into baseline code through the linker.
// Call the getters only on CPUs with AVX2/F16C (attention.cpp checks). This one: fp16 caches (the one-row loop,
// the chunks of a split view, the group pass); attention_typed_f16c.cpp: the other cache types;
// attention_tiled_f16c.cpp: a prompt batch's tiles.
#include "engine/kernels/attention_f16c_blocks.h"

namespace moe::kernels {
namespace {

// ggml_vec_dot_f16 in each build's order: four accumulators of 16 (pairs of 256-bit halves) or 8 lanes over
// steps of four registers, added pairwise, reduced as one register; the tail in double. The query y is the fp16
// row already converted to f32 (exact: the same products, so the same bits).
template <Flavor F>
float dot_f16_vec_order(const uint16_t* x, const float* y, int n) {
    if constexpr (F == Flavor::Avx512) {
        __m256 acc[4][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
        const int np = n & ~63;
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 4; ++j)
                for (int h = 0; h < 2; ++h)
                    acc[j][h] = _mm256_fmadd_ps(load_f16x8(x + i + 16 * j + 8 * h), _mm256_loadu_ps(y + i + 16 * j + 8 * h), acc[j][h]);
        for (int h = 0; h < 2; ++h) {
            acc[0][h] = _mm256_add_ps(acc[0][h], acc[2][h]);
            acc[1][h] = _mm256_add_ps(acc[1][h], acc[3][h]);
            acc[0][h] = _mm256_add_ps(acc[0][h], acc[1][h]);
        }
        double s = hsum_float_8(_mm256_add_ps(acc[0][1], acc[0][0]));
        for (int i = np; i < n; ++i) s += static_cast<double>(h2f(x[i]) * y[i]);
        return static_cast<float>(s);
    } else {
        __m256 acc[4];
        for (auto& a : acc) a = _mm256_setzero_ps();
        const int np = n & ~31;
        for (int i = 0; i < np; i += 32)
            for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(load_f16x8(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), acc[j]);
        acc[0] = _mm256_add_ps(acc[0], acc[2]);
        acc[1] = _mm256_add_ps(acc[1], acc[3]);
        const __m256 v = _mm256_add_ps(acc[0], acc[1]);
        const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 t1 = _mm_hadd_ps(t0, t0);
        double s = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
        for (int i = np; i < n; ++i) s += static_cast<double>(h2f(x[i]) * y[i]);
        return static_cast<float>(s);
    }
}

// x rounded to fp16 and back: what a store to an fp16 accumulator and its reload give.
inline __m256 round_f16(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

// The AVX2 order's scores (dot_f16_vec_order<Avx2>, then * scale + the mask's zero) of up to eight keys (k: rows
// stride apart; dk a multiple of 32, so no double tail) with one query row in f32, the reductions of eight keys
// together: lo + hi halves as two permutes and an add per pair of keys, then two rounds of hadd, each pairing the
// same operands as one key's own reduction, so every score keeps its bits.
inline void scores8_avx2(const uint16_t* k, size_t stride, const int* idx, int cnt, const float* q, int dk, float scale, float* out) {
    __m256 v[8];
    for (int t = 0; t < 8; ++t) {
        const uint16_t* kr = k + static_cast<size_t>(idx[t < cnt ? t : 0]) * stride;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int i = 0; i < dk; i += 32)
            for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(load_f16x8(kr + i + 8 * j), _mm256_loadu_ps(q + i + 8 * j), acc[j]);
        v[t] = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    }
    __m256 p[4];
    for (int t = 0; t < 4; ++t)
        p[t] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * t], v[2 * t + 1], 0x20), _mm256_permute2f128_ps(v[2 * t], v[2 * t + 1], 0x31));
    const __m256 f = _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));  // keys 0 2 4 6 | 1 3 5 7
    const __m256 inorder = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, _mm256_add_ps(_mm256_mul_ps(inorder, _mm256_set1_ps(scale)), _mm256_setzero_ps()));
    for (int t = 0; t < cnt; ++t) out[t] = tmp[t];
}

// One block for all rows: per row the block's scores (the AVX2 order eight keys at a time) and exps, then the
// value updates key by key with the rows interleaved, each key's value row converted once per 32 values for the
// kv head's G rows (every accumulator value takes the same scale, round, multiply-add and round in the same key
// order). Rows h * G .. h * G + G - 1 read kv head h (queries qf in f32), dk (dv) values into each key (value) row.
template <Flavor F>
void group_block_256(const float* qf, int G, int H, const ops::KvView& kv, const int* idx, int n, float scale, float* M, float* S, uint16_t* acc16,
                     RowBlock* rows) {
    const int dk = kv.dk, dv = kv.dv;
    for (int h = 0, r = 0; h < H; ++h)
        for (int g = 0; g < G; ++g, ++r) {
            RowBlock& b = rows[r];
            const uint16_t* k = kv.k + static_cast<size_t>(h) * dk;
            if (F == Flavor::Avx2 && dk % 32 == 0) {
                for (int i = 0; i < n; i += 8)
                    scores8_avx2(k, kv.k_stride, idx + i, std::min(8, n - i), qf + static_cast<size_t>(r) * dk, dk, scale, b.sc + i);
            } else {
                for (int i = 0; i < n; ++i)
                    b.sc[i] = dot_f16_vec_order<F>(k + static_cast<size_t>(idx[i]) * kv.k_stride, qf + static_cast<size_t>(r) * dk, dk) * scale +
                              0.0f;  // + the mask's zero
            }
            b.exps<false>(n, M[r]);
        }
    const int dv32 = dv & ~31;
    for (int i = 0; i < n; ++i)
        for (int h = 0; h < H; ++h) {
            const uint16_t* vj = kv.v + static_cast<size_t>(idx[i]) * kv.v_stride + static_cast<size_t>(h) * dv;
            for (int d0 = 0; d0 < dv32; d0 += 32) {
                __m256 x[4];
                for (int c = 0; c < 4; ++c) x[c] = load_f16x8(vj + d0 + 8 * c);
                for (int g = 0, r = h * G; g < G; ++g, ++r) {
                    const RowBlock& b = rows[r];
                    const bool raise = b.raise[i];
                    const __m256 ms = _mm256_set1_ps(raise ? b.e[i] : 1.f), vs = _mm256_set1_ps(raise ? 1.f : b.e[i]);
                    uint16_t* acc = acc16 + static_cast<size_t>(r) * dv + d0;
                    for (int c = 0; c < 4; ++c) {
                        __m256 a = load_f16x8(acc + 8 * c);
                        if (raise) a = round_f16(_mm256_mul_ps(a, ms));
                        _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + 8 * c),
                                         _mm256_cvtps_ph(_mm256_fmadd_ps(x[c], vs, a), _MM_FROUND_TO_NEAREST_INT));
                    }
                }
            }
            for (int g = 0, r = h * G; g < G; ++g, ++r) {
                const RowBlock& b = rows[r];
                const float ms = b.raise[i] ? b.e[i] : 1.f, vs = b.raise[i] ? 1.f : b.e[i];
                if (dv32 < dv) {
                    uint16_t* acc = acc16 + static_cast<size_t>(r) * dv + dv32;
                    if (b.raise[i]) scale_f16_256(acc, ms, dv - dv32);
                    mad_f16_256(acc, vj + dv32, vs, dv - dv32);
                }
                S[r] = std::fma(S[r], ms, vs);  // contracted, as GCC builds ggml
            }
        }
}

// The same in 512-bit registers (AVX-512 CPUs, by function target): the value updates are elementwise, and the
// AVX-512 build's dot keeps its sixteen-lane accumulators in one register each, so the bits do not change.
// acc (fp16) = acc * m: sixteen values per register, then eight, then one.
__attribute__((target("avx512f"), always_inline)) inline void scale_f16_512(uint16_t* acc, float m, int n) {
    int d = 0;
    const __m512 mv = _mm512_set1_ps(m);
    for (; d + 16 <= n; d += 16) {
        const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + d)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + d), _mm512_cvtps_ph(_mm512_mul_ps(a, mv), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d + 8 <= n; d += 8) {
        const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + d)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + d), _mm256_cvtps_ph(_mm256_mul_ps(a, _mm256_set1_ps(m)), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < n; ++d) acc[d] = f2h(h2f(acc[d]) * m);
}
// ggml_vec_dot_f16's order over rows already converted to f32 (the same values, so the same bits): the
// AVX-512 build's four sixteen-lane accumulators, or the AVX2 build's four of eight over 32-value steps.
template <Flavor F>
__attribute__((target("avx512f"), always_inline)) inline float dot_f32_in_f16_order(const float* x, const float* y, int n) {
    double s;
    int np;
    if constexpr (F == Flavor::Avx512) {
        __m512 acc[4];
        for (auto& a : acc) a = _mm512_setzero_ps();
        np = n & ~63;
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 4; ++j) acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), _mm512_loadu_ps(y + i + 16 * j), acc[j]);
        acc[0] = _mm512_add_ps(acc[0], acc[2]);
        acc[1] = _mm512_add_ps(acc[1], acc[3]);
        acc[0] = _mm512_add_ps(acc[0], acc[1]);
        const __m256 lo = _mm512_castps512_ps256(acc[0]), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[0]), 1));
        s = hsum_float_8(_mm256_add_ps(hi, lo));
    } else {
        __m256 acc[4];
        for (auto& a : acc) a = _mm256_setzero_ps();
        np = n & ~31;
        for (int i = 0; i < np; i += 32)
            for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), acc[j]);
        acc[0] = _mm256_add_ps(acc[0], acc[2]);
        acc[1] = _mm256_add_ps(acc[1], acc[3]);
        const __m256 v = _mm256_add_ps(acc[0], acc[1]);
        const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 t1 = _mm_hadd_ps(t0, t0);
        s = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    }
    for (int i = np; i < n; ++i) s += static_cast<double>(x[i] * y[i]);
    return static_cast<float>(s);
}

// acc (fp16) = v * m + acc with v already in f32.
__attribute__((target("avx512f"), always_inline)) inline void mad_f32_into_f16_512(uint16_t* acc, const float* v, float m, int n) {
    int d = 0;
    const __m512 mv = _mm512_set1_ps(m);
    for (; d + 16 <= n; d += 16) {
        const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + d)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + d),
                            _mm512_cvtps_ph(_mm512_fmadd_ps(_mm512_loadu_ps(v + d), mv, a), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < n; ++d) acc[d] = f2h(std::fma(v[d], m, h2f(acc[d])));
}

__attribute__((target("avx512f"), always_inline)) inline void f16_to_f32_512(const uint16_t* h, float* f, int n) {
    int d = 0;
    for (; d + 16 <= n; d += 16) _mm512_storeu_ps(f + d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + d))));
    for (; d < n; ++d) f[d] = h2f(h[d]);
}

// The f32 copies start on a cache line (their buffers hold 16 floats more), so that no 64-byte store straddles two.
inline float* line_aligned(float* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63}); }
// Where kv head h's block of rows starts in the f32 copies: a cache line more than the block apart, so that the
// heads' copies are not a multiple of 4 KiB apart (loads would wait on unrelated stores to the same page offset).
inline size_t head_rows(int h, int width) { return static_cast<size_t>(h) * (static_cast<size_t>(kKeyBlock) * width + 16); }

// The AVX-512 order's scores (dot_f32_in_f16_order, then * scale + the mask's zero) of a block's n <= 16 keys
// (k: rows dk apart, dk a multiple of 64, so no double tail) with one query row, sixteen keys at once: each key's
// four accumulators added as there, then the reduction's steps (upper eight lanes onto the lower eight, then
// four, two, one) for all the keys together, shuffles pairing the same two operands as each key's own steps, so
// every score keeps its bits with a third of the shuffles and additions.
__attribute__((target("avx512f"))) inline void scores_in_avx512_order(const float* k, const float* q, int dk, int n, float scale, float* sc) {
    __m512 u[8];  // lanes 0..7: key 2p's eight sums (lanes d and d + 8 added), lanes 8..15: key 2p + 1's
    for (int p = 0; p < 8; ++p) {
        __m512 t[2];
        for (int e = 0; e < 2; ++e) {
            const int key = 2 * p + e;
            const float* kr = k + static_cast<size_t>(key < n ? key : 0) * dk;  // keys past n: any row, unused
            __m512 acc[4];
            for (int j = 0; j < 4; ++j) acc[j] = _mm512_mul_ps(_mm512_loadu_ps(kr + 16 * j), _mm512_loadu_ps(q + 16 * j));
            for (int d = 64; d < dk; d += 64)
                for (int j = 0; j < 4; ++j) acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(kr + d + 16 * j), _mm512_loadu_ps(q + d + 16 * j), acc[j]);
            t[e] = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
        }
        u[p] = _mm512_add_ps(_mm512_shuffle_f32x4(t[0], t[1], 0x44), _mm512_shuffle_f32x4(t[0], t[1], 0xEE));
    }
    __m512 w[4];  // 128-bit block c of w[p]: key 4p + c's four sums (u lanes m and m + 4)
    for (int p = 0; p < 4; ++p)
        w[p] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * p], u[2 * p + 1], 0x88), _mm512_shuffle_f32x4(u[2 * p], u[2 * p + 1], 0xDD));
    __m512 x[2];  // block c of x[p]: two sums (w lanes 0 + 2, 1 + 3) of key 4 (2p) + c, then of key 4 (2p + 1) + c
    for (int p = 0; p < 2; ++p)
        x[p] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * p], w[2 * p + 1], 0x44), _mm512_shuffle_ps(w[2 * p], w[2 * p + 1], 0xEE));
    // Lane 4c + j holds key 4j + c; the permute puts key i in lane i.
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], 0x88), _mm512_shuffle_ps(x[0], x[1], 0xDD));
    const __m512i key_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m512 scores = _mm512_add_ps(_mm512_mul_ps(_mm512_permutexvar_ps(key_order, s), _mm512_set1_ps(scale)), _mm512_setzero_ps());
    _mm512_storeu_ps(sc, scores);
}

// The block's value updates (dv a multiple of 16) with each row's fp16 accumulator held in registers as f32
// across the block, rounded to fp16 after every operation as the memory form rounds it on store: the same
// values, without a store and reload per key. Two rows and 64 values at a time, the rows' chains overlapping.
__attribute__((target("avx512f"))) inline void values_in_registers(int G, int H, int dv, int n, const float* vf, const RowBlock* rows, float* S,
                                                                   uint16_t* acc16) {
    const int R = H * G;
    for (int d0 = 0; d0 < dv; d0 += 64) {
        const int nv = std::min(4, (dv - d0) / 16);
        for (int r0 = 0; r0 < R; r0 += 2) {
            const int pr = std::min(2, R - r0);
            __m512 a[2][4];
            for (int p = 0; p < pr; ++p)
                for (int j = 0; j < nv; ++j)
                    a[p][j] = _mm512_cvtph_ps(
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc16 + static_cast<size_t>(r0 + p) * dv + d0 + 16 * j)));
            for (int i = 0; i < n; ++i)
                for (int p = 0; p < pr; ++p) {
                    const int r = r0 + p;
                    const RowBlock& b = rows[r];
                    const float* vj = vf + head_rows(r / G, dv) + static_cast<size_t>(i) * dv + d0;
                    const float ms = b.raise[i] ? b.e[i] : 1.f, vs = b.raise[i] ? 1.f : b.e[i];
                    if (b.raise[i])
                        for (int j = 0; j < nv; ++j)
                            a[p][j] = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(a[p][j], _mm512_set1_ps(ms)), _MM_FROUND_TO_NEAREST_INT));
                    for (int j = 0; j < nv; ++j)
                        a[p][j] = _mm512_cvtph_ps(
                            _mm512_cvtps_ph(_mm512_fmadd_ps(_mm512_loadu_ps(vj + 16 * j), _mm512_set1_ps(vs), a[p][j]), _MM_FROUND_TO_NEAREST_INT));
                    if (d0 == 0) S[r] = std::fma(S[r], ms, vs);  // contracted, as GCC builds ggml
                }
            for (int p = 0; p < pr; ++p)
                for (int j = 0; j < nv; ++j)
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc16 + static_cast<size_t>(r0 + p) * dv + d0 + 16 * j),
                                        _mm512_cvtps_ph(a[p][j], _MM_FROUND_TO_NEAREST_INT));
        }
    }
}

// The 512-bit block: the block's keys and values converted to f32 once for all rows (exact; H heads' rows,
// kKeyBlock apart), the queries given in f32 (qf, H G x dk), then as group_block_256.
template <Flavor F>
__attribute__((target("avx512f"))) void group_block_512(const float* qf, int G, int H, const ops::KvView& kv, const int* idx, int n, float scale,
                                                        float* M, float* S, uint16_t* acc16, RowBlock* rows, float* kf, float* vf) {
    const int dk = kv.dk, dv = kv.dv;
    for (int i = 0; i < n; ++i) {
        const uint16_t* k = kv.k + static_cast<size_t>(idx[i]) * kv.k_stride;
        const uint16_t* v = kv.v + static_cast<size_t>(idx[i]) * kv.v_stride;
        for (int h = 0; h < H; ++h) {
            f16_to_f32_512(k + static_cast<size_t>(h) * dk, kf + head_rows(h, dk) + static_cast<size_t>(i) * dk, dk);
            f16_to_f32_512(v + static_cast<size_t>(h) * dv, vf + head_rows(h, dv) + static_cast<size_t>(i) * dv, dv);
        }
    }
    for (int h = 0, r = 0; h < H; ++h)
        for (int g = 0; g < G; ++g, ++r) {
            RowBlock& b = rows[r];
            const float* k = kf + head_rows(h, dk);
            if (F == Flavor::Avx512 && dk % 64 == 0) {
                scores_in_avx512_order(k, qf + static_cast<size_t>(r) * dk, dk, n, scale, b.sc);
            } else {
                for (int i = 0; i < n; ++i)
                    b.sc[i] = dot_f32_in_f16_order<F>(k + static_cast<size_t>(i) * dk, qf + static_cast<size_t>(r) * dk, dk) * scale +
                              0.0f;  // + the mask's zero
            }
            b.exps<true>(n, M[r]);
        }
    if (dv % 16 == 0) {
        values_in_registers(G, H, dv, n, vf, rows, S, acc16);
        return;
    }
    for (int i = 0; i < n; ++i)
        for (int h = 0, r = 0; h < H; ++h)
            for (int g = 0; g < G; ++g, ++r) {
                const float* vj = vf + head_rows(h, dv) + static_cast<size_t>(i) * dv;
                const RowBlock& b = rows[r];
                const float ms = b.raise[i] ? b.e[i] : 1.f, vs = b.raise[i] ? 1.f : b.e[i];
                uint16_t* acc = acc16 + static_cast<size_t>(r) * dv;
                if (b.raise[i]) scale_f16_512(acc, ms, dv);
                mad_f32_into_f16_512(acc, vj, vs, dv);
                S[r] = std::fma(S[r], ms, vs);  // contracted, as GCC builds ggml
            }
}

// The H G rows (queries q16, H G x dk fp16; rows h G .. h G + G - 1 of kv head h) over keys [0, kv.n_kv),
// masked ones skipped; M, S and the fp16 accumulators (H G x dv) carried in and out. The heads go through each
// block together, so a position's row of all heads is read once, whole.
template <Flavor F, bool Wide>
void group_keys(const uint16_t* q16, int G, int H, const ops::KvView& kv, float scale, float* M, float* S, uint16_t* acc16) {
    thread_local std::vector<RowBlock> rows;
    thread_local std::vector<float> qf, kf, vf;
    if (rows.size() < static_cast<size_t>(H * G)) rows.resize(static_cast<size_t>(H * G));
    qf.resize(static_cast<size_t>(H * G) * kv.dk);
    for (size_t i = 0; i < qf.size(); ++i) qf[i] = h2f(q16[i]);
    if constexpr (Wide) {
        kf.resize(head_rows(H, kv.dk) + 16);  // + a cache line for line_aligned
        vf.resize(head_rows(H, kv.dv) + 16);
    }
    int idx[kKeyBlock];
    for (int j = 0; j < kv.n_kv;) {
        int n = 0;
        for (; j < kv.n_kv && n < kKeyBlock; ++j)
            if (!kv.visible || kv.visible[j]) idx[n++] = j;
        if (n == 0) continue;
        if constexpr (Wide)
            group_block_512<F>(qf.data(), G, H, kv, idx, n, scale, M, S, acc16, rows.data(), line_aligned(kf.data()), line_aligned(vf.data()));
        else group_block_256<F>(qf.data(), G, H, kv, idx, n, scale, M, S, acc16, rows.data());
    }
}

// The one-row loop: the keys' scores, the online softmax and the fp16 accumulator (s.acc16), as the reference.
template <Flavor F, bool Wide = false>
void attend_f16c_loop(const float* q, const ops::KvView& kv, float scale, float& M, float& S, ops::AttnScratch& s) {
    const int dk = kv.dk, dv = kv.dv;
    s.q16.resize(static_cast<size_t>(dk));
    s.acc16.assign(static_cast<size_t>(dv), 0);
    for (int d = 0; d < dk; ++d) s.q16[d] = f2h(q[d]);
    M = kNegInf, S = 0.f;
    group_keys<F, Wide>(s.q16.data(), 1, 1, kv, scale, &M, &S, s.acc16.data());
}

// The chunk kernel for the G query rows that share a view (the heads of one kv head, or all of MLA's), for H kv
// heads at once: a long cache is read from memory once per group instead of once per row, each position's row of
// the H heads whole (their rows sit side by side), and the rows' update chains overlap. Row r (kv head r / G) has
// its query at q + r * q_stride, its M, S and f32 accumulator in M[r], S[r], acc_out + r * dv; sinks[r].
template <Flavor F, bool Wide>
void attend_chunk_group_f16c_impl(const float* q, int64_t q_stride, int G, int H, const ops::KvView& kv, float scale, float* M, float* S,
                                  float* acc_out, ops::AttnScratch& s) {
    const int dk = kv.dk, dv = kv.dv, R = H * G;
    s.q16.resize(static_cast<size_t>(R) * dk);
    s.acc16.assign(static_cast<size_t>(R) * dv, 0);
    for (int g = 0; g < R; ++g) {
        for (int d = 0; d < dk; ++d) s.q16[static_cast<size_t>(g) * dk + d] = f2h(q[g * q_stride + d]);
        M[g] = kNegInf, S[g] = 0.f;
    }
    group_keys<F, Wide>(s.q16.data(), G, H, kv, scale, M, S, s.acc16.data());
    for (int g = 0; g < R; ++g) {
        float* acc = acc_out + static_cast<size_t>(g) * dv;
        for (int d = 0; d < dv; ++d) acc[d] = h2f(s.acc16[static_cast<size_t>(g) * dv + d]);
        if (kv.sinks) {  // as the chunk kernel's tail, with row g's sink
            ops::KvView one = kv;
            one.sinks = kv.sinks + g;
            const float sink_scale = ops::apply_sink(one, 0, M[g], S[g]);
            M[g] = std::max(M[g], one.sinks[0]);
            for (int d = 0; d < dv; ++d) acc[d] *= sink_scale;
        }
    }
}

template <Flavor F>
void attend_f16c_impl(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    float M, S;
    attend_f16c_loop<F>(q, kv, scale, M, S, s);
    const float sink_scale = ops::apply_sink(kv, 0, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < kv.dv; ++d) out[d] = h2f(s.acc16[d]) * sink_scale * inv;
}

// ops::attend_chunk's tail after the same loop (masked keys skipped as there).
template <Flavor F>
void attend_chunk_f16c_impl(const float* q, const ops::KvView& kv, float scale, float& M, float& S, float* acc_out, ops::AttnScratch& s) {
    attend_f16c_loop<F>(q, kv, scale, M, S, s);
    for (int d = 0; d < kv.dv; ++d) acc_out[d] = h2f(s.acc16[d]);
    const float sink_scale = ops::apply_sink(kv, 0, M, S);
    if (kv.sinks) {
        M = std::max(M, kv.sinks[0]);
        for (int d = 0; d < kv.dv; ++d) acc_out[d] *= sink_scale;
    }
}

}  // namespace

ops::AttendFn attend_f16c(Flavor f) { return f == Flavor::Avx512 ? &attend_f16c_impl<Flavor::Avx512> : &attend_f16c_impl<Flavor::Avx2>; }
ops::AttendChunkFn attend_chunk_f16c(Flavor f) {
    return f == Flavor::Avx512 ? &attend_chunk_f16c_impl<Flavor::Avx512> : &attend_chunk_f16c_impl<Flavor::Avx2>;
}
bool libm_expf_lanes_match() { return libm_expf_checked(); }
void libm_expf_for_tests(const float* x, float* y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf8_lanes(_mm256_loadu_ps(x + i)));
    for (; i < n; ++i) y[i] = std::exp(x[i]);
}

ops::AttendChunkGroupFn attend_chunk_group_f16c(Flavor f, bool wide) {
    if (wide && !__builtin_cpu_supports("avx512f")) return nullptr;
    if (wide) return f == Flavor::Avx512 ? &attend_chunk_group_f16c_impl<Flavor::Avx512, true> : &attend_chunk_group_f16c_impl<Flavor::Avx2, true>;
    return f == Flavor::Avx512 ? &attend_chunk_group_f16c_impl<Flavor::Avx512, false> : &attend_chunk_group_f16c_impl<Flavor::Avx2, false>;
}

}  // namespace moe::kernels

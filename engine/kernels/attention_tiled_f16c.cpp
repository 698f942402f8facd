// Compiled with -mavx2 -mfma -mf16c (see attention_f16c.cpp). The reference's tiled flash attention for a
// prompt batch, from the view's f32 copies: one row, a sparse view, and the rows sharing a kv head.
#include "engine/kernels/attention_f16c_blocks.h"

namespace moe::kernels {
namespace {

// The reference's tiled path with the same operations per value: the score chains of eight positions run side
// by side (their K rows transposed eight dimensions at a time), V is added eight dimensions at a time.
// The f32-copy loops of the tiled path, in 256-bit registers and (for AVX-512 CPUs, by function target) in
// 512-bit ones: the same FMA per lane in the same order, so the same bits. Scores of a full 64-position tile
// from keys laid out [dk][64]: independent chains of 8 (or 16) positions.
inline void tile_scores_256(const float* kt, const float* q, int dk, float scale, float* kq) {
    __m256 sc[8];
    for (auto& v : sc) v = _mm256_setzero_ps();
    for (int d = 0; d < dk; ++d) {
        const __m256 qd = _mm256_set1_ps(q[d]);
        for (int j = 0; j < 8; ++j) sc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(kt + static_cast<size_t>(d) * 64 + 8 * j), qd, sc[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_store_ps(kq + 8 * j, _mm256_mul_ps(sc[j], _mm256_set1_ps(scale)));
}
__attribute__((target("avx512f"))) void tile_scores_512(const float* kt, const float* q, int dk, float scale, float* kq) {
    __m512 sc[4];
    for (auto& v : sc) v = _mm512_setzero_ps();
    for (int d = 0; d < dk; ++d) {
        const __m512 qd = _mm512_set1_ps(q[d]);
        for (int j = 0; j < 4; ++j) sc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(kt + static_cast<size_t>(d) * 64 + 16 * j), qd, sc[j]);
    }
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(kq + 16 * j, _mm512_mul_ps(sc[j], _mm512_set1_ps(scale)));
}
// acc[d..) += sum over the tile's positions of kq[i] * v[i][d] (v: the tile's first position, rows dv apart), in
// chunks of 128 and then 64 values from d; returns where it stopped (the rest take the 8-wide loop).
inline int tile_values_256(const float* v, int dv, const float* kq, int in_tile, float* acc, int d = 0) {
    for (; d + 64 <= dv; d += 64) {
        __m256 a[8];
        for (int j = 0; j < 8; ++j) a[j] = _mm256_loadu_ps(&acc[d + 8 * j]);
        for (int i = 0; i < in_tile; ++i) {
            if (kq[i] == 0.f) continue;
            const __m256 w = _mm256_set1_ps(kq[i]);
            const float* vi = v + static_cast<size_t>(i) * dv + d;
            for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(vi + 8 * j), w, a[j]);
        }
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(&acc[d + 8 * j], a[j]);
    }
    return d;
}
__attribute__((target("avx512f"))) int tile_values_512(const float* v, int dv, const float* kq, int in_tile, float* acc) {
    int d = 0;
    for (; d + 128 <= dv; d += 128) {
        __m512 a[8];
        for (int j = 0; j < 8; ++j) a[j] = _mm512_loadu_ps(&acc[d + 16 * j]);
        for (int i = 0; i < in_tile; ++i) {
            if (kq[i] == 0.f) continue;
            const __m512 w = _mm512_set1_ps(kq[i]);
            const float* vi = v + static_cast<size_t>(i) * dv + d;
            for (int j = 0; j < 8; ++j) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(vi + 16 * j), w, a[j]);
        }
        for (int j = 0; j < 8; ++j) _mm512_storeu_ps(&acc[d + 16 * j], a[j]);
    }
    return tile_values_256(v, dv, kq, in_tile, acc, d);
}

// R query rows against one full tile from the f32 copies, the tile's keys and values loaded once for all R
// (one row at a time, a row's 64 x dk + 64 x dv multiply-adds stream 2 x 64 x dk floats from L2: that, not the
// arithmetic, bounded long prompts). Each row's score chains and value sums run in the one-row path's order;
// the value sums do not skip zero weights, which changes nothing while the tile's values are finite (a + 0 x v
// is a; the accumulators never hold -0), so callers check that first.
struct RowTile {
    const float* q;  // the row's query
    float* acc;      // its dv accumulators
    float* M;        // its running max and sum
    float* S;
};
template <int R>
__attribute__((target("avx512f"))) void tile_scores_rows_512(const float* kt, const RowTile* rows, int dk, float scale, float (*kq)[64]) {
    __m512 sc[R][4];
    for (auto& row : sc)
        for (auto& v : row) v = _mm512_setzero_ps();
    for (int d = 0; d < dk; ++d) {
        __m512 k[4];
        for (int j = 0; j < 4; ++j) k[j] = _mm512_loadu_ps(kt + static_cast<size_t>(d) * 64 + 16 * j);
        for (int r = 0; r < R; ++r) {
            const __m512 qd = _mm512_set1_ps(rows[r].q[d]);
            for (int j = 0; j < 4; ++j) sc[r][j] = _mm512_fmadd_ps(k[j], qd, sc[r][j]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < 4; ++j) _mm512_storeu_ps(kq[r] + 16 * j, _mm512_mul_ps(sc[r][j], _mm512_set1_ps(scale)));
}
template <int R>
__attribute__((target("avx512f"))) void tile_values_rows_512(const float* v, int dv, const float (*kq)[64], const RowTile* rows) {
    for (int d = 0; d < dv; d += 64) {
        __m512 a[R][4];
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < 4; ++j) a[r][j] = _mm512_loadu_ps(rows[r].acc + d + 16 * j);
        for (int i = 0; i < 64; ++i) {
            __m512 x[4];
            for (int j = 0; j < 4; ++j) x[j] = _mm512_loadu_ps(v + static_cast<size_t>(i) * dv + d + 16 * j);
            for (int r = 0; r < R; ++r) {
                const __m512 w = _mm512_set1_ps(kq[r][i]);
                for (int j = 0; j < 4; ++j) a[r][j] = _mm512_fmadd_ps(x[j], w, a[r][j]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < 4; ++j) _mm512_storeu_ps(rows[r].acc + d + 16 * j, a[r][j]);
    }
}
// The same in 256-bit registers (sixteen of them): R rows x W positions of scores, R rows x W dims of values,
// W = 64 / R so that R x W / 8 accumulators stay at eight.
template <int R>
void tile_scores_rows_256(const float* kt, const RowTile* rows, int dk, float scale, float (*kq)[64]) {
    constexpr int J = 8 / R, W = 8 * J;
    for (int part = 0; part < 64; part += W) {
        __m256 sc[R][J];
        for (auto& row : sc)
            for (auto& v : row) v = _mm256_setzero_ps();
        for (int d = 0; d < dk; ++d) {
            __m256 k[J];
            for (int j = 0; j < J; ++j) k[j] = _mm256_loadu_ps(kt + static_cast<size_t>(d) * 64 + part + 8 * j);
            for (int r = 0; r < R; ++r) {
                const __m256 qd = _mm256_set1_ps(rows[r].q[d]);
                for (int j = 0; j < J; ++j) sc[r][j] = _mm256_fmadd_ps(k[j], qd, sc[r][j]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < J; ++j) _mm256_storeu_ps(kq[r] + part + 8 * j, _mm256_mul_ps(sc[r][j], _mm256_set1_ps(scale)));
    }
}
template <int R>
void tile_values_rows_256(const float* v, int dv, const float (*kq)[64], const RowTile* rows) {
    constexpr int J = 8 / R, W = 8 * J;
    for (int d = 0; d < dv; d += W) {
        __m256 a[R][J];
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < J; ++j) a[r][j] = _mm256_loadu_ps(rows[r].acc + d + 8 * j);
        for (int i = 0; i < 64; ++i) {
            __m256 x[J];
            for (int j = 0; j < J; ++j) x[j] = _mm256_loadu_ps(v + static_cast<size_t>(i) * dv + d + 8 * j);
            for (int r = 0; r < R; ++r) {
                const __m256 w = _mm256_set1_ps(kq[r][i]);
                for (int j = 0; j < J; ++j) a[r][j] = _mm256_fmadd_ps(x[j], w, a[r][j]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < J; ++j) _mm256_storeu_ps(rows[r].acc + d + 8 * j, a[r][j]);
    }
}
// True when every value of the tile (64 positions x dv) is finite.
inline bool finite_values(const float* v, int count) {
    __m256 bad = _mm256_setzero_ps();
    const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity()), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int i = 0;
    for (; i + 8 <= count; i += 8) bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(v + i), abs_mask), inf, _CMP_NLT_UQ));
    bool ok = _mm256_movemask_ps(bad) == 0;
    for (; i < count; ++i) ok = ok && std::isfinite(v[i]);
    return ok;
}
// One full tile for R rows: scores, each row's softmax step, values. A row whose scores are all masked keeps
// its state (weights zeroed, so the shared value sums leave its accumulators as they are).
template <Flavor F, bool Wide, int R>
void tile_rows_step(const float* kt, const float* v, int dk, int dv, float scale, const uint8_t* visible, const RowTile* rows) {
    alignas(64) float kq[R][64];
    if constexpr (Wide) tile_scores_rows_512<R>(kt, rows, dk, scale, kq);
    else tile_scores_rows_256<R>(kt, rows, dk, scale, kq);
    bool any = false;
    for (int r = 0; r < R; ++r) {
        if (visible)
            for (int t = 0; t < 64; ++t)
                if (!visible[t]) kq[r][t] = -std::numeric_limits<float>::infinity();
        if (tiled_softmax_step8<F>(kq[r], *rows[r].M, *rows[r].S, rows[r].acc, dv)) any = true;
        else std::fill_n(kq[r], 64, 0.f);
    }
    if (!any) return;
    if constexpr (Wide) tile_values_rows_512<R>(v, dv, kq, rows);
    else tile_values_rows_256<R>(v, dv, kq, rows);
}

// Rows per block: four in both widths (AVX2's as 4 rows x 16 positions or dims, see tile_scores_rows_256), so a
// tile's keys and values stream from L2 once per four rows (AVX2 had two: 4,096-token prompt +11%).
inline constexpr int kRowBlock = 4;

// One query row over a sparse view (ops::KvView::positions): the tiles are llama.cpp's view positions, each
// holding the rows that sit in it (the others masked), so the bits are ops::float_ops' attend_tiled's. Scores
// eight rows at a time (transposed loads, the same FMA chain per row), values by position order.
template <Flavor F>
void attend_tiled_positions(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    constexpr int kTile = ggml::kFaTile;
    const int dk = kv.dk, dv = kv.dv;
    s.acc.assign(static_cast<size_t>(dv), 0.f);
    float* acc = s.acc.data();
    float M = kNegInf, S = 0.f;
    alignas(32) float kq[kTile];
    for (int j0 = 0; j0 < kv.n_kv;) {
        const int base = kv.positions[j0] / kTile * kTile;
        int j1 = j0;
        while (j1 < kv.n_kv && kv.positions[j1] < base + kTile) ++j1;
        std::fill_n(kq, kTile, kNegInf);
        int j = j0;
        for (; j + 8 <= j1; j += 8) {
            __m256 sc = _mm256_setzero_ps();
            int d = 0;
            for (; d + 8 <= dk; d += 8) {
                __m256 rows[8], cols[8];
                for (int p = 0; p < 8; ++p) rows[p] = load_f16x8(kv.k + static_cast<size_t>(j + p) * kv.k_stride + d);
                transpose8(rows, cols);
                for (int c = 0; c < 8; ++c) sc = _mm256_fmadd_ps(cols[c], _mm256_set1_ps(q[d + c]), sc);
            }
            alignas(32) float part[8];
            _mm256_store_ps(part, sc);
            for (; d < dk; ++d)
                for (int p = 0; p < 8; ++p) part[p] = std::fma(h2f(kv.k[static_cast<size_t>(j + p) * kv.k_stride + d]), q[d], part[p]);
            for (int p = 0; p < 8; ++p) kq[kv.positions[j + p] - base] = part[p] * scale;
        }
        for (; j < j1; ++j) {
            const uint16_t* kt = kv.k + static_cast<size_t>(j) * kv.k_stride;
            float sc = 0.f;
            for (int d = 0; d < dk; ++d) sc = std::fma(h2f(kt[d]), q[d], sc);
            kq[kv.positions[j] - base] = sc * scale;
        }
        if (kv.visible)
            for (j = j0; j < j1; ++j)
                if (!kv.visible[j]) kq[kv.positions[j] - base] = kNegInf;
        if (tiled_softmax_step8<F>(kq, M, S, acc, dv)) {
            int d = 0;
            for (; d + 8 <= dv; d += 8) {
                __m256 a = _mm256_loadu_ps(&acc[d]);
                for (j = j0; j < j1; ++j) {
                    const float w = kq[kv.positions[j] - base];
                    if (w != 0.f) a = _mm256_fmadd_ps(load_f16x8(kv.v + static_cast<size_t>(j) * kv.v_stride + d), _mm256_set1_ps(w), a);
                }
                _mm256_storeu_ps(&acc[d], a);
            }
            for (; d < dv; ++d) {
                float a = acc[d];
                for (j = j0; j < j1; ++j) {
                    const float w = kq[kv.positions[j] - base];
                    if (w != 0.f) a = std::fma(h2f(kv.v[static_cast<size_t>(j) * kv.v_stride + d]), w, a);
                }
                acc[d] = a;
            }
        }
        j0 = j1;
    }
    const float sink_scale = ops::apply_sink(kv, 0, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < dv; ++d) out[d] = acc[d] * sink_scale * inv;
}

// Several query rows (the heads that share a kv head) against one view, tile by tile, so that each tile of
// keys and values is read from memory once for all of them; each row's arithmetic is the one-row path's.
template <Flavor F, bool Wide>
void attend_tiled_group_impl(const float* q_rows, int64_t q_stride, int rows, const ops::KvView& kv, float scale, float* out_rows, int64_t out_stride,
                             ops::AttnScratch& s) {
    constexpr int kTile = ggml::kFaTile;
    const int dk = kv.dk, dv = kv.dv;
    s.acc.assign(static_cast<size_t>(rows) * dv, 0.f);
    s.max_sum.assign(static_cast<size_t>(rows) * 2, 0.f);
    for (int r = 0; r < rows; ++r) s.max_sum[2 * r] = kNegInf;
    alignas(32) float kq[kTile];
    // Each row's positions: all the same, or one more per token of a block (kv.rows_per_position).
    auto row_n_kv = [&](int r) { return kv.rows_per_position > 0 ? kv.n_kv + r / kv.rows_per_position : kv.n_kv; };
    const int most_kv = row_n_kv(rows - 1);
    for (int ic = 0; ic < most_kv; ic += kTile) {
        // A tile with no visible position (DSA's sparse selection) leaves the softmax state as it is
        // (tiled_softmax_step returns false): skip its scores.
        if (kv.visible && std::none_of(kv.visible + ic, kv.visible + std::min(most_kv, ic + kTile), [](uint8_t v) { return v != 0; })) continue;
        // Rows whose view holds the whole tile go R at a time through the f32 copies (rows are in position
        // order, so once one does, the rest do); the others, and tiles with non-finite values, row by row.
        constexpr int R = kRowBlock;
        int finite = -1;  // the tile's values: not yet checked
        for (int r = 0; r < rows; ++r) {
            if (kv.k_tiles && kv.v_f32 && dv % (Wide ? 64 : 32) == 0 && r + R <= rows && ic + kTile <= row_n_kv(r)) {
                const float* v = kv.v_f32 + static_cast<size_t>(ic) * dv;
                if (finite < 0) finite = finite_values(v, kTile * dv);
                if (finite) {
                    RowTile block[R];
                    for (int i = 0; i < R; ++i)
                        block[i] = {q_rows + (r + i) * q_stride, s.acc.data() + static_cast<size_t>(r + i) * dv, &s.max_sum[2 * (r + i)],
                                    &s.max_sum[2 * (r + i) + 1]};
                    tile_rows_step<F, Wide, R>(kv.k_tiles + static_cast<size_t>(ic / kTile) * dk * kTile, v, dk, dv, scale,
                                               kv.visible ? kv.visible + ic : nullptr, block);
                    r += R - 1;
                    continue;
                }
            }
            // Past a row's last position the tile is invisible to it: skipped, as a single-row call would.
            if (ic >= row_n_kv(r)) continue;
            const int in_tile = std::min(kTile, row_n_kv(r) - ic);
            const float* q = q_rows + r * q_stride;
            float* acc = s.acc.data() + static_cast<size_t>(r) * dv;
            float& M = s.max_sum[2 * r];
            float& S = s.max_sum[2 * r + 1];
            int t = 0;
            if (kv.k_tiles) {
                // The same FMA chain per position, its keys already f32 with positions side by side. A partial
                // tile (the diagonal one of a causal prompt) is allocated whole (float_ops.h): the scores past
                // its end are computed from whatever the copy holds there and masked below.
                const float* kt = kv.k_tiles + static_cast<size_t>(ic / kTile) * dk * kTile;
                if constexpr (Wide) tile_scores_512(kt, q, dk, scale, kq);
                else tile_scores_256(kt, q, dk, scale, kq);
                t = kTile;
            }
            for (; t + 8 <= in_tile; t += 8) {
                __m256 sc = _mm256_setzero_ps();
                int d = 0;
                for (; d + 8 <= dk; d += 8) {
                    __m256 rows[8], cols[8];
                    for (int p = 0; p < 8; ++p) rows[p] = load_f16x8(kv.k + static_cast<size_t>(ic + t + p) * kv.k_stride + d);
                    transpose8(rows, cols);
                    for (int j = 0; j < 8; ++j) sc = _mm256_fmadd_ps(cols[j], _mm256_set1_ps(q[d + j]), sc);
                }
                alignas(32) float part[8];
                _mm256_store_ps(part, sc);
                for (; d < dk; ++d)
                    for (int p = 0; p < 8; ++p) part[p] = std::fma(h2f(kv.k[static_cast<size_t>(ic + t + p) * kv.k_stride + d]), q[d], part[p]);
                _mm256_store_ps(kq + t, _mm256_mul_ps(_mm256_load_ps(part), _mm256_set1_ps(scale)));
            }
            for (; t < in_tile; ++t) {
                const uint16_t* kt = kv.k + static_cast<size_t>(ic + t) * kv.k_stride;
                float sc = 0.f;
                for (int d = 0; d < dk; ++d) sc = std::fma(h2f(kt[d]), q[d], sc);
                kq[t] = sc * scale;
            }
            for (t = 0; t < kTile; ++t)
                if (t >= in_tile || (kv.visible && !kv.visible[ic + t])) kq[t] = kNegInf;
            if (!tiled_softmax_step8<F>(kq, M, S, acc, dv)) continue;
            int d = 0;
            if (kv.v_f32) {
                const float* v = kv.v_f32 + static_cast<size_t>(ic) * dv;
                d = Wide ? tile_values_512(v, dv, kq, in_tile, acc) : tile_values_256(v, dv, kq, in_tile, acc);
            }
            for (; d + 8 <= dv; d += 8) {
                __m256 a = _mm256_loadu_ps(&acc[d]);
                if (kv.v_f32) {
                    for (int i = 0; i < in_tile; ++i)
                        if (kq[i] != 0.f)
                            a = _mm256_fmadd_ps(_mm256_loadu_ps(kv.v_f32 + static_cast<size_t>(ic + i) * dv + d), _mm256_set1_ps(kq[i]), a);
                } else {
                    for (int i = 0; i < in_tile; ++i)
                        if (kq[i] != 0.f)
                            a = _mm256_fmadd_ps(load_f16x8(kv.v + static_cast<size_t>(ic + i) * kv.v_stride + d), _mm256_set1_ps(kq[i]), a);
                }
                _mm256_storeu_ps(&acc[d], a);
            }
            for (int d = dv - dv % 8; d < dv; ++d) {
                float a = acc[d];
                for (int i = 0; i < in_tile; ++i)
                    if (kq[i] != 0.f) a = std::fma(h2f(kv.v[static_cast<size_t>(ic + i) * kv.v_stride + d]), kq[i], a);
                acc[d] = a;
            }
        }
    }
    for (int r = 0; r < rows; ++r) {
        float S = s.max_sum[2 * r + 1];
        const float sink_scale = ops::apply_sink(kv, r, s.max_sum[2 * r], S);
        const float inv = S == 0.f ? 0.f : 1.0f / S;
        const float* acc = s.acc.data() + static_cast<size_t>(r) * dv;
        for (int d = 0; d < dv; ++d) out_rows[r * out_stride + d] = acc[d] * sink_scale * inv;
    }
}

template <Flavor F, bool Wide>
void attend_tiled_f16c_impl(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    if (kv.positions) return attend_tiled_positions<F>(q, kv, scale, out, s);
    attend_tiled_group_impl<F, Wide>(q, 0, 1, kv, scale, out, 0, s);
}

}  // namespace

ops::SoftmaxStepFn tiled_softmax_step_f16c(Flavor f) {
    return f == Flavor::Avx512 ? &tiled_softmax_step8<Flavor::Avx512> : &tiled_softmax_step8<Flavor::Avx2>;
}

ops::AttendFn attend_tiled_f16c(Flavor f) {
    return f == Flavor::Avx512 ? &attend_tiled_f16c_impl<Flavor::Avx512, false> : &attend_tiled_f16c_impl<Flavor::Avx2, false>;
}

ops::AttendGroupFn attend_tiled_group(Flavor f, bool wide) {
    if (wide && !__builtin_cpu_supports("avx512f")) return nullptr;
    if (wide) return f == Flavor::Avx512 ? &attend_tiled_group_impl<Flavor::Avx512, true> : &attend_tiled_group_impl<Flavor::Avx2, true>;
    return f == Flavor::Avx512 ? &attend_tiled_group_impl<Flavor::Avx512, false> : &attend_tiled_group_impl<Flavor::Avx2, false>;
}

ops::AttendFn attend_tiled_avx512(Flavor f) {
    if (!__builtin_cpu_supports("avx512f")) return nullptr;
    return f == Flavor::Avx512 ? &attend_tiled_f16c_impl<Flavor::Avx512, true> : &attend_tiled_f16c_impl<Flavor::Avx2, true>;
}

}  // namespace moe::kernels

// Prompt tiles for Q2_K in the order llama.cpp's AVX-512 build repacks it to: per (row, token) two float chains,
// each block's (GEMM: each half block's) integer value sum times d x d_y and its min sum times dmin x d_y,
// subtracted at the end. As in row_lane_tiles.h, eight rows sit in the lanes: a block of eight rows is
// unpacked once into scale x value bytes (<= 45, unsigned) laid out four elements per lane, and each token's
// value sums come from 64 VPDPBUSDs against broadcast activation bytes, its min sums from eight PMADDWDs of
// the rows' int16 mins against broadcast pairs of the token's 16-element sums. No horizontal sums; each lane
// is its row's chains, so the bits are Q2KRepackedStep's.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/kquant_simd.h"
#include "engine/kernels/row_lane_tiles.h"

namespace moe::kernels {
namespace {

struct Q2RowPanel {   // one block of eight rows
    __m256i w[64];    // w[k]: scale x value of elements 4k..4k+3 of row r, in lane r
    __m256i mins[8];  // mins[j]: row r's mins of sub-blocks 2j and 2j+1 as two int16, in lane r
    __m256 d, dmin;   // row r's block scales
};

inline void decode_q2_row_lanes(const uint8_t* w, size_t row_bytes, int64_t nb, Q2RowPanel* p) {
    for (int64_t b = 0; b < nb; ++b) {
        __m256i vals[8][8];  // [row][group]
        alignas(32) float d[8], dmin[8];
        alignas(32) uint32_t mins[8][8];  // [pair j][row]
        for (int r = 0; r < 8; ++r) {
            const auto& x = reinterpret_cast<const BlockQ2_K*>(w + static_cast<size_t>(r) * row_bytes)[b];
            q2_scaled_values(x, vals[r]);
            d[r] = h2f(x.d);
            dmin[r] = h2f(x.dmin);
            for (int j = 0; j < 8; ++j)
                mins[j][r] = static_cast<uint32_t>(x.scales[2 * j] >> 4) | static_cast<uint32_t>(x.scales[2 * j + 1] >> 4) << 16;
        }
        for (int g = 0; g < 8; ++g) {
            __m256 v[8], t[8];
            for (int r = 0; r < 8; ++r) v[r] = _mm256_castsi256_ps(vals[r][g]);
            transpose8(v, t);
            for (int j = 0; j < 8; ++j) p[b].w[8 * g + j] = _mm256_castps_si256(t[j]);
        }
        for (int j = 0; j < 8; ++j) p[b].mins[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(mins[j]));
        p[b].d = _mm256_load_ps(d);
        p[b].dmin = _mm256_load_ps(dmin);
    }
}

// Eight rows x T tokens; Parts = 1 (whole blocks, llama.cpp's GEMV) or 2 (half blocks, its GEMM).
template <int Parts, int T>
void q2_row_lanes_8xT(int64_t nb, const Q2RowPanel* p, const BlockQ8_K* const* y, float* const* out) {
    __m256 acc[T], acc_m[T];
    for (int t = 0; t < T; ++t) acc[t] = acc_m[t] = _mm256_setzero_ps();
    constexpr int kChunks = 64 / Parts, kPairs = 8 / Parts;
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 1
        for (int t = 0; t < T; ++t) {
            const BlockQ8_K& yb = y[t][b];
            const __m256 dxy = _mm256_mul_ps(p[b].d, _mm256_set1_ps(yb.d)), dmy = _mm256_mul_ps(p[b].dmin, _mm256_set1_ps(yb.d));
#pragma GCC unroll 2
            for (int part = 0; part < Parts; ++part) {
                const __m256i* wk = p[b].w + part * kChunks;
                const uint8_t* yk = reinterpret_cast<const uint8_t*>(yb.qs) + 4 * part * kChunks;
                __m256i v0 = _mm256_setzero_si256(), v1 = _mm256_setzero_si256();
#pragma GCC unroll 32
                for (int k = 0; k < kChunks; k += 2) {
                    uint32_t piece[2];
                    std::memcpy(piece, yk + 4 * k, 8);
                    v0 = lane_products(v0, wk[k], _mm256_set1_epi32(static_cast<int>(piece[0])));
                    v1 = lane_products(v1, wk[k + 1], _mm256_set1_epi32(static_cast<int>(piece[1])));
                }
                __m256i m = _mm256_setzero_si256();
                for (int j = part * kPairs; j < (part + 1) * kPairs; ++j) {
                    uint32_t pair;
                    std::memcpy(&pair, yb.bsums + 2 * j, 4);
                    m = _mm256_add_epi32(m, _mm256_madd_epi16(p[b].mins[j], _mm256_set1_epi32(static_cast<int>(pair))));
                }
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(v0, v1)), dxy, acc[t]);
                acc_m[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), dmy, acc_m[t]);
            }
        }
    }
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(out[t], _mm256_sub_ps(acc[t], acc_m[t]));
}

template <int Parts>
void q2k_row_lane_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                       int64_t out_stride) {
    const int64_t full = rows & ~int64_t{7}, nb = n / QK_K;
    if (n_tok < 2 || full == 0) return step_tile<Q2KRepackedStep<Parts>>(n, w, row_bytes, rows, act, act_bytes, n_tok, out, out_stride);
    thread_local std::vector<Q2RowPanel> panel;
    if (static_cast<int64_t>(panel.size()) < nb) panel.resize(static_cast<size_t>(nb));
    for (int64_t r = 0; r < full; r += 8) {
        decode_q2_row_lanes(w + static_cast<size_t>(r) * row_bytes, row_bytes, nb, panel.data());
        for (int t0 = 0; t0 < n_tok; t0 += 4) {
            const int T = std::min(4, n_tok - t0);
            const BlockQ8_K* yt[4];
            float* o[4];
            for (int t = 0; t < T; ++t) {
                yt[t] = reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t0 + t) * act_bytes);
                o[t] = out + (t0 + t) * out_stride + r;
            }
            switch (T) {
                case 4: q2_row_lanes_8xT<Parts, 4>(nb, panel.data(), yt, o); break;
                case 3: q2_row_lanes_8xT<Parts, 3>(nb, panel.data(), yt, o); break;
                case 2: q2_row_lanes_8xT<Parts, 2>(nb, panel.data(), yt, o); break;
                default: q2_row_lanes_8xT<Parts, 1>(nb, panel.data(), yt, o); break;
            }
        }
    }
    if (full < rows)
        step_tile<Q2KRepackedStep<Parts>>(n, w + static_cast<size_t>(full) * row_bytes, row_bytes, rows - full, act, act_bytes, n_tok, out + full,
                                          out_stride);
}

inline void add_q2k_row_lane_tiles(KernelTable& t) {
    if (t.flavor != Flavor::Avx512) return;  // the AVX2 build does not repack Q2_K
    const int q2k = static_cast<int>(GgmlType::Q2_K);
    t.tile_repacked[q2k] = q2k_row_lane_tile<1>;
    t.tile_repacked_gemm[q2k] = q2k_row_lane_tile<2>;
}

}  // namespace
}  // namespace moe::kernels

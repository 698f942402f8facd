// Prompt tiles for the orders that keep one float chain per (row, token): llama.cpp's repacked Q4_0, IQ4_NL and
// MXFP4 (per 32-weight block, one FMA of the block's integer sum times scale x d_y). Eight weight rows sit in the
// eight lanes of a register, so a block's integer sums for eight rows come out of eight VPDPBUSDs (4 bytes of
// eight rows against one broadcast 4-byte piece of the activations) with no horizontal sum, and each lane's
// FMA is that row's chain, unchanged: the same bits as the one-row step. VPDPBUSD wants unsigned x signed bytes:
// the activations are biased by +128 and each row's block sum of weights x 128 is subtracted (integers, exact).
// Without VNNI the products go through PMADDUBSW, whose int16 pairs only hold biased activations for weights of
// magnitude <= 64 (Q4_0, MXFP4); IQ4_NL's go through the signed form below.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/kernels/quants_simd.h"

namespace moe::kernels {
namespace {

struct RowLanePanel {  // one 32-weight block of eight rows
    __m256i w[8];      // w[k]: bytes 4k..4k+3 of row r in lane r
    __m256i bias;      // 128 x the sum of row r's 32 weights, in lane r
    __m256 scale;      // row r's block scale
};
// Without VNNI, for weights too large for the biased form's PMADDUBSW pairs (IQ4_NL): the activations stay
// signed and take each weight's sign (PSIGNB of the broadcast piece against the lanes), multiplied by |w|;
// pairs stay within 127 x 128 x 2.
struct RowLanePanelSigned : RowLanePanel {
    __m256i abs_w[8];
};

// Unsigned activation bytes x signed weight bytes, four products summed into each lane.
inline __m256i lane_products(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

template <class Tbl, class Panel>
void decode_row_lanes(const uint8_t* w, size_t row_bytes, int64_t nb, Panel* p) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(Tbl::kTable));
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < nb; ++b) {
        __m256 v[8], t[8];
        alignas(32) float scale[8];
        for (int r = 0; r < 8; ++r) {
            const auto& x = reinterpret_cast<const typename Tbl::Block*>(w + static_cast<size_t>(r) * row_bytes)[b];
            v[r] = _mm256_castsi256_ps(table_nibbles32(x.qs, table));
            scale[r] = Tbl::kScale(x);
        }
        transpose8(v, t);
        __m256i sum = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
            p[b].w[k] = _mm256_castps_si256(t[k]);
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(ones, p[b].w[k]), _mm256_set1_epi16(1)));
            if constexpr (std::is_same_v<Panel, RowLanePanelSigned>) p[b].abs_w[k] = _mm256_sign_epi8(p[b].w[k], p[b].w[k]);
        }
        p[b].bias = _mm256_slli_epi32(sum, 7);
        p[b].scale = _mm256_load_ps(scale);
    }
}

// Eight rows x T tokens: yu[t] the token's activation bytes (+ 128 unless the panel is signed), dy[t] its block
// scales.
template <int T, class Panel>
void row_lanes_8xT(int64_t nb, const Panel* p, const uint8_t* const* yu, const float* const* dy, float* const* out) {
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                uint32_t piece;
                std::memcpy(&piece, yu[t] + 32 * b + 4 * k, 4);
                const __m256i y4 = _mm256_set1_epi32(static_cast<int>(piece));
                if constexpr (std::is_same_v<Panel, RowLanePanelSigned>)
                    s = _mm256_add_epi32(
                        s, _mm256_madd_epi16(_mm256_maddubs_epi16(p[b].abs_w[k], _mm256_sign_epi8(y4, p[b].w[k])), _mm256_set1_epi16(1)));
                else s = lane_products(s, y4, p[b].w[k]);
            }
            if constexpr (!std::is_same_v<Panel, RowLanePanelSigned>) s = _mm256_sub_epi32(s, p[b].bias);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(p[b].scale, _mm256_set1_ps(dy[t][b])), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(out[t], acc[t]);
}

// Tbl: a Table32 (quants_simd.h); Step its repacked order's step kernel, which takes rows past a multiple of 8.
template <class Tbl, class Step, int MinTokens = 2, class Panel = RowLanePanel>
void row_lane_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                   int64_t out_stride) {
    const int64_t full = rows & ~int64_t{7}, nb = n / 32;
    if (n_tok >= MinTokens && full > 0) {
        thread_local std::vector<Panel> panel;
        thread_local std::vector<uint8_t> yu;
        thread_local std::vector<float> dy;
        if (static_cast<int64_t>(panel.size()) < nb) panel.resize(static_cast<size_t>(nb));
        yu.resize(static_cast<size_t>(n) * n_tok);
        dy.resize(static_cast<size_t>(nb) * n_tok);
        for (int t = 0; t < n_tok; ++t) {
            const auto* y = reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(t) * act_bytes);
            for (int64_t b = 0; b < nb; ++b) {
                const __m256i bias = std::is_same_v<Panel, RowLanePanelSigned> ? _mm256_setzero_si256() : _mm256_set1_epi8(static_cast<char>(0x80));
                const __m256i q = _mm256_xor_si256(load32(y[b].qs), bias);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(yu.data() + static_cast<size_t>(t) * n + 32 * b), q);
                dy[static_cast<size_t>(t * nb + b)] = h2f(y[b].d);
            }
        }
        for (int64_t r = 0; r < full; r += 8) {
            decode_row_lanes<Tbl, Panel>(w + static_cast<size_t>(r) * row_bytes, row_bytes, nb, panel.data());
            for (int t0 = 0; t0 < n_tok; t0 += 4) {
                const int T = std::min(4, n_tok - t0);
                const uint8_t* yt[4];
                const float* dt[4];
                float* o[4];
                for (int t = 0; t < T; ++t) {
                    yt[t] = yu.data() + static_cast<size_t>(t0 + t) * n;
                    dt[t] = dy.data() + static_cast<size_t>(t0 + t) * nb;
                    o[t] = out + (t0 + t) * out_stride + r;
                }
                switch (T) {
                    case 4: row_lanes_8xT<4>(nb, panel.data(), yt, dt, o); break;
                    case 3: row_lanes_8xT<3>(nb, panel.data(), yt, dt, o); break;
                    case 2: row_lanes_8xT<2>(nb, panel.data(), yt, dt, o); break;
                    default: row_lanes_8xT<1>(nb, panel.data(), yt, dt, o); break;
                }
            }
        }
    } else {
        return step_tile<Step>(n, w, row_bytes, rows, act, act_bytes, n_tok, out, out_stride);
    }
    if (full < rows)
        step_tile<Step>(n, w + static_cast<size_t>(full) * row_bytes, row_bytes, rows - full, act, act_bytes, n_tok, out + full, out_stride);
}

// Q4_0 in the Table32 shape: nibble - 8 through a table, the block's fp16 scale (llama.cpp repacks it too).
struct Q4_0Lanes {
    using Block = BlockQ4_0;
    static constexpr int8_t kValues[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
    static constexpr const int8_t* kTable = kValues;
    static float kScale(const BlockQ4_0& b) { return h2f(b.d); }
};
// Q4_0's repacked order as a step (kernels_avx2.cpp's Q4_0Step<true>, restated here for the rows past a
// multiple of 8: one FMA per block of the block's integer sum times d_x * d_y).
struct Q4_0RepackedStep {
    using Block = BlockQ4_0;
    using Act = BlockQ8_0;
    static constexpr int64_t kBlockElems = QK4_0;
    struct State {
        float acc;
    };
    static State init() { return {0.f}; }
    static void step(State& s, const BlockQ4_0& x, const BlockQ8_0& y) {
        const __m256i v = table_nibbles32(x.qs, _mm_loadu_si128(reinterpret_cast<const __m128i*>(Q4_0Lanes::kValues)));
        s.acc = std::fma(static_cast<float>(hsum_lanes(dot_ss8(v, load32(y.qs)))), h2f(x.d) * h2f(y.d), s.acc);
    }
    static float finish(const State& s) { return s.acc; }
};

// One token (generation): the same kernel as a row kernel.
template <class Tbl, class Step, class Panel = RowLanePanel>
void row_lane_rows(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    row_lane_tile<Tbl, Step, 1, Panel>(n, w, row_bytes, rows, static_cast<const uint8_t*>(a), 0, 1, out, 0);
}

inline void add_row_lane_tiles(KernelTable& t) {
    t.dot_rows_repacked[static_cast<int>(GgmlType::MXFP4)] = row_lane_rows<MXFP4, MXFP4::RepackedStep>;
    t.tile_repacked[static_cast<int>(GgmlType::Q4_0)] = row_lane_tile<Q4_0Lanes, Q4_0RepackedStep>;  // |values| <= 8
    t.dot_rows_repacked[static_cast<int>(GgmlType::Q4_0)] = row_lane_rows<Q4_0Lanes, Q4_0RepackedStep>;
    t.tile_repacked[static_cast<int>(GgmlType::MXFP4)] = row_lane_tile<MXFP4, MXFP4::RepackedStep>;  // |values| <= 12
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    t.tile_repacked[static_cast<int>(GgmlType::IQ4_NL)] = row_lane_tile<IQ4NL, IQ4NL::RepackedStep>;
    t.dot_rows_repacked[static_cast<int>(GgmlType::IQ4_NL)] = row_lane_rows<IQ4NL, IQ4NL::RepackedStep>;
#else
    t.tile_repacked[static_cast<int>(GgmlType::IQ4_NL)] = row_lane_tile<IQ4NL, IQ4NL::RepackedStep, 2, RowLanePanelSigned>;  // |values| to 127
    t.dot_rows_repacked[static_cast<int>(GgmlType::IQ4_NL)] = row_lane_rows<IQ4NL, IQ4NL::RepackedStep, RowLanePanelSigned>;
#endif
}

}  // namespace
}  // namespace moe::kernels

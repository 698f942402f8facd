// Prompt tiles of the K-quants through decoded panels (iquant_panels.h's panel_tile, or eight-row panels for
// Q4_K's repacked orders): a row's values, high-bit masks and sub-block scales were unpacked again for every
// four tokens (shifts, masks, scale shuffles: most of a step's instructions); here once per row and call.
// Each (row, token) keeps the one-row kernel's integer sums and float chain, so the same bits as Q2KStep,
// Q3KStep, Q45VecStep, q6_K_dot and q45_dot's repacked orders. Both ISA units include this.
#pragma once
#include <immintrin.h>

#include "engine/kernels/iquant_panels.h"
#include "engine/kernels/kquant_simd.h"

namespace moe::kernels {
namespace {

// Q3_K's groups for PlainPanel: value = low two bits - 4 where the high bit is clear (-4..3), a signed 6-bit
// scale per 16 weights (q3_lanes' pairs, whose two PMADDUBSWs sum to this one value's products).
struct Q3kGroups {
    using Block = BlockQ3_K;
    const Block& x;
    __m256i scales[2];  // per half block: its eight int16 scales in both 128-bit lanes
    __m256i hmask;
    explicit Q3kGroups(const Block& b) : x(b), hmask(load32(b.hmask)) {
        const __m128i s8 = q3_scales(b.scales);
        scales[0] = both_lanes(_mm_cvtepi8_epi16(s8));
        scales[1] = both_lanes(_mm_cvtepi8_epi16(_mm_unpackhi_epi64(s8, s8)));
    }
    [[gnu::always_inline]] GroupBytes operator()(int g) const {
        const int half = g / 4, k = g % 4;
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(load32(x.qs + 32 * half), 2 * k), _mm256_set1_epi8(3));
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << g));
        const __m256i minus4 = _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), bit), _mm256_set1_epi8(4));
        return signed_values(_mm256_sub_epi8(low, minus4), scale_pair(scales[half], k));
    }
};

// Q2KStep's chain over a panel of scale x value bytes (<= 3 x 15: unsigned, against the signed activations
// directly). Two groups' PMADDUBSW pairs (each <= 2 x 45 x 127, two < 2^15) add as int16 before one PMADDWD; on AVX-512
// one VPDPBUSD per two groups. Integer lanes equal to q2_lanes' (value x scale summed in another order).
struct Q2kPanel {
    using Block = BlockQ2_K;
    static constexpr bool kBiasedActivations = false;
    struct Panel {
        __m256i w[8];  // group g: scale x value of elements 32g..32g+31
        __m256i mins;  // the sixteen 4-bit mins as int16
        float d, dmin;
    };
    using State = Acc8State;
    static void decode(const Block& x, Panel& p) {
        q2_scaled_values(x, p.w);
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
        p.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F)));
        p.d = h2f(x.d);
        p.dmin = h2f(x.dmin);
    }
    static State init() { return {_mm256_setzero_ps()}; }
    // Group pair j (elements 64j..64j+63) of a token: PMADDUBSW pairs of both groups as int16 (AVX2) or one
    // VPDPBUSD (AVX-512) into `sum`.
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    using Wide = __m512i;
    static Wide zero() { return _mm512_setzero_si512(); }
    [[gnu::always_inline]] static Wide add_pair(Wide sum, const Panel& p, int j, const int8_t* y) {
        return _mm512_dpbusd_epi32(sum, load64(&p.w[2 * j]), load64(y + 64 * j));
    }
    static __m256i lanes(Wide sum) { return fold_halves(sum); }
#else
    using Wide = __m256i;
    static Wide zero() { return _mm256_setzero_si256(); }
    [[gnu::always_inline]] static Wide add_pair(Wide sum, const Panel& p, int j, const int8_t* y) {
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(p.w[2 * j], load32(y + 64 * j)),
                                               _mm256_maddubs_epi16(p.w[2 * j + 1], load32(y + 64 * j + 32)));
        return _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
    }
    static __m256i lanes(Wide sum) { return sum; }
#endif
    [[gnu::always_inline]] static void add_block(State& s, const Panel& p, const BlockQ8_K& y, __m256i values) {
        const __m256i mins = _mm256_madd_epi16(p.mins, load32(y.bsums));
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(-y.d * p.dmin), _mm256_cvtepi32_ps(mins), s.acc);
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(y.d * p.d), _mm256_cvtepi32_ps(values), s.acc);
    }
    // One row by T tokens, group pair by group pair: each pair's panel registers loaded once for the T tokens.
    template <int T>
    [[gnu::always_inline]] static void step_tokens(State* s, const Panel& p, const BlockQ8_K* const* yb) {
        Wide sum[T];
        for (int t = 0; t < T; ++t) sum[t] = zero();
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j)
            for (int t = 0; t < T; ++t) sum[t] = add_pair(sum[t], p, j, yb[t]->qs);
        for (int t = 0; t < T; ++t) add_block(s[t], p, *yb[t], lanes(sum[t]));
    }
    static float finish(const State& s) { return hsum_float_8(s.acc); }
};

// ---- Q4_K, Q5_K, Q6_K: unsigned values, an int16 scale per value ----

// A block's eight 32-weight groups, group g against activations qs[32g..32g+31]: unsigned values (< 64, so a
// PMADDUBSW pair with two activations stays below 2^15, as in the one-row dots) and each value's sub-block
// scale as int16 words (the one-row dots shuffle these out of one register per group and token).
struct ScaledGroups {
    __m256i q[8], scale[8];
};

// T tokens' lanes of scale x value x activation over a block, each group's registers loaded once for the T
// tokens: the integer lanes of q45_apply and q6_apply (before their mins and bias terms), summed in another
// order. AVX-512: two groups per register, one VPDPWSSD per two groups.
template <int T>
[[gnu::always_inline]] inline void scaled_group_lanes(const ScaledGroups& p, const BlockQ8_K* const* y, __m256i* lanes) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    __m512i sum[T];
    for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
        const __m512i q = load64(&p.q[2 * k]), c = load64(&p.scale[2 * k]);
        for (int t = 0; t < T; ++t) sum[t] = _mm512_dpwssd_epi32(sum[t], _mm512_maddubs_epi16(q, load64(y[t]->qs + 64 * k)), c);
    }
    for (int t = 0; t < T; ++t) lanes[t] = fold_halves(sum[t]);
#else
    for (int t = 0; t < T; ++t) lanes[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
        const __m256i q = p.q[g], c = p.scale[g];
        for (int t = 0; t < T; ++t) lanes[t] = _mm256_add_epi32(lanes[t], dot_us8_scaled(q, load32(y[t]->qs + 32 * g), c));
    }
#endif
}

// Q4_K / Q5_K in their vec_dot orders (Q45VecStep's chains).
template <class B, bool Five>
struct Q45Panel {
    using Block = B;
    using Step = Q45VecStep<B, Five>;
    static constexpr bool kBiasedActivations = false;
    struct Panel : ScaledGroups {
        __m128i mins16;
        float d, dmin;
    };
    using State = typename Step::State;
    static void decode(const Block& x, Panel& p) {
        const uint8_t* qh = nullptr;
        if constexpr (Five) qh = x.qh;
        const Q45Decoded d = q45_decode<Five>(x.scales, x.qs, qh);
        for (int j = 0; j < 4; ++j) {
            p.q[2 * j] = d.lo[j];
            p.q[2 * j + 1] = d.hi[j];
        }
        for (int g = 0; g < 8; ++g) p.scale[g] = scale_word(d.scales, g);
        p.mins16 = d.mins16;
        p.d = h2f(x.d);
        p.dmin = h2f(x.dmin);
    }
    static State init() { return Step::init(); }
    static float finish(const State& s) { return Step::finish(s); }
    template <int T>
    [[gnu::always_inline]] static void step_tokens(State* s, const Panel& p, const BlockQ8_K* const* yb) {
        __m256i lanes[T];
        scaled_group_lanes<T>(p, yb, lanes);
        for (int t = 0; t < T; ++t) Step::add_block(s[t], lanes[t], q45_mins(p.mins16, *yb[t]), yb[t]->d * p.d, -yb[t]->d * p.dmin);
    }
};

// Q6_K (q6_K_dot's chain): values 0..63 against the activations, minus 32 x the scaled activation sums.
struct Q6kPanel {
    using Block = BlockQ6_K;
    static constexpr bool kBiasedActivations = false;
    struct Panel : ScaledGroups {
        __m256i scales16;  // the sixteen scales as int16, against the sixteen activation sums
        float d;
    };
    using State = Acc8State;
    static void decode(const Block& x, Panel& p) {
        const Q6Decoded d = q6_decode(x);
        for (int half = 0; half < 2; ++half)
            for (int k = 0; k < 4; ++k) {
                p.q[4 * half + k] = d.q[half][k];
                p.scale[4 * half + k] = scale_pair(d.scales[half], k);
            }
        p.scales16 = _mm256_cvtepi8_epi16(d.sc8);
        p.d = h2f(x.d);
    }
    static State init() { return {_mm256_setzero_ps()}; }
    static float finish(const State& s) { return hsum_float_8(s.acc); }
    template <int T>
    [[gnu::always_inline]] static void step_tokens(State* s, const Panel& p, const BlockQ8_K* const* yb) {
        __m256i lanes[T];
        scaled_group_lanes<T>(p, yb, lanes);
        for (int t = 0; t < T; ++t) {
            const __m256i bias = _mm256_slli_epi32(_mm256_madd_epi16(load32(yb[t]->bsums), p.scales16), 5);
            s[t].acc = _mm256_fmadd_ps(_mm256_set1_ps(yb[t]->d * p.d), _mm256_cvtepi32_ps(_mm256_sub_epi32(lanes[t], bias)), s[t].acc);
        }
    }
};

// Q4_K in llama.cpp's repacked orders (a float step per block, or per pair of sub-blocks in its GEMM) for eight
// rows at a time, lane i = row i (Q4RepackedRowChains). Reducing each pair's lanes per row and token cost as much
// as the products, so the panel and the activations are both permuted: every register holds a slice of each of
// the four pairs, each pair in lanes of its own (AVX2: int32 lanes 2k and 2k + 1; AVX-512: 128-bit lane k). A
// block's products then add up in one register per (row, token), and eight rows' pair sums come out of eight
// such registers with a few shuffles and blends. Integer sums: the same values as pair by pair.
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
using PairVec = __m512i;
#else
using PairVec = __m256i;
#endif
inline constexpr int kPairRegs = QK_K / sizeof(PairVec);  // registers per block
inline constexpr int kPairSlice = sizeof(PairVec) / 4;    // bytes of each pair per register

// Byte j of pair k's slice in register r <- element 64k + kPairSlice * r + j (pair k: elements 64k..64k+63).
inline void permute_pairs(const uint8_t* in, uint8_t* out) {
    for (int r = 0; r < kPairRegs; ++r)
        for (int k = 0; k < 4; ++k) std::memcpy(out + r * sizeof(PairVec) + k * kPairSlice, in + 64 * k + kPairSlice * r, kPairSlice);
}

struct Q4kPairPanel {
    PairVec q[kPairRegs];
    PairVec scale[2];  // registers [0, kPairRegs / 2) hold each pair's first sub-block, the others its second
    __m128i mins16;
    float d, dmin;
};

inline void decode_pair_panel(const BlockQ4_K& x, Q4kPairPanel& p) {
    const Q45Decoded d = q45_decode<false>(x.scales, x.qs, nullptr);
    alignas(64) uint8_t values[QK_K];  // element order
    for (int j = 0; j < 4; ++j) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(values + 64 * j), d.lo[j]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(values + 64 * j + 32), d.hi[j]);
    }
    permute_pairs(values, reinterpret_cast<uint8_t*>(p.q));
    alignas(16) int16_t sc[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm256_castsi256_si128(d.scales));
    for (int h = 0; h < 2; ++h) {
        alignas(64) int16_t words[sizeof(PairVec) / 2];
        for (int k = 0; k < 4; ++k)
            for (int w = 0; w < kPairSlice / 2; ++w) words[k * kPairSlice / 2 + w] = sc[2 * k + h];
        std::memcpy(&p.scale[h], words, sizeof words);
    }
    p.mins16 = d.mins16;
    p.d = h2f(x.d);
    p.dmin = h2f(x.dmin);
}

// T tokens' products with one row's block (activations permuted as the panel), each register loaded once.
template <int T>
[[gnu::always_inline]] inline void pair_products(const Q4kPairPanel& p, const BlockQ8_K* const* y, PairVec* u) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (int t = 0; t < T; ++t) u[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int r = 0; r < kPairRegs; ++r) {
        const __m512i q = p.q[r], c = p.scale[r / (kPairRegs / 2)];
        for (int t = 0; t < T; ++t) u[t] = _mm512_dpwssd_epi32(u[t], _mm512_maddubs_epi16(q, load64(y[t]->qs + 64 * r)), c);
    }
#else
    for (int t = 0; t < T; ++t) u[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int r = 0; r < kPairRegs; ++r) {
        const __m256i q = p.q[r], c = p.scale[r / (kPairRegs / 2)];
        for (int t = 0; t < T; ++t) u[t] = _mm256_add_epi32(u[t], dot_us8_scaled(q, load32(y[t]->qs + 32 * r), c));
    }
#endif
}

// out[k] lane i = row i's sum of pair k, from the eight rows' pair_products.
inline void pair_row_sums(const PairVec (&u)[8], __m256i (&out)[4]) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    __m512i v[8];  // each 128-bit lane k: pair k's total in all four int32 lanes
    for (int i = 0; i < 8; ++i) {
        v[i] = _mm512_add_epi32(u[i], _mm512_shuffle_epi32(u[i], _MM_PERM_BADC));
        v[i] = _mm512_add_epi32(v[i], _mm512_shuffle_epi32(v[i], _MM_PERM_CDAB));
    }
    __m512i rows[2];  // lane 4k + i: row 4h + i's pair k
    for (int h = 0; h < 2; ++h) {
        rows[h] = _mm512_mask_blend_epi32(0x2222, v[4 * h], v[4 * h + 1]);
        rows[h] = _mm512_mask_blend_epi32(0x4444, rows[h], v[4 * h + 2]);
        rows[h] = _mm512_mask_blend_epi32(0x8888, rows[h], v[4 * h + 3]);
    }
    const __m512i pairs01 = _mm512_permutex2var_epi32(rows[0], _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23), rows[1]);
    const __m512i pairs23 = _mm512_permutex2var_epi32(rows[0], _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31),
                                                      rows[1]);
    out[0] = _mm512_castsi512_si256(pairs01);
    out[1] = _mm512_extracti64x4_epi64(pairs01, 1);
    out[2] = _mm512_castsi512_si256(pairs23);
    out[3] = _mm512_extracti64x4_epi64(pairs23, 1);
#else
    __m256i v[8];  // int32 lanes 2k and 2k + 1: pair k's total
    for (int i = 0; i < 8; ++i) v[i] = _mm256_add_epi32(u[i], _mm256_shuffle_epi32(u[i], 0xb1));
    __m256i two[4];  // rows 2m (even lanes) and 2m + 1 (odd lanes)
    for (int m = 0; m < 4; ++m) two[m] = _mm256_blend_epi32(v[2 * m], v[2 * m + 1], 0xAA);
    const __m256i p02_lo = _mm256_unpacklo_epi64(two[0], two[1]), p13_lo = _mm256_unpackhi_epi64(two[0], two[1]);  // rows 0..3
    const __m256i p02_hi = _mm256_unpacklo_epi64(two[2], two[3]), p13_hi = _mm256_unpackhi_epi64(two[2], two[3]);  // rows 4..7
    out[0] = _mm256_permute2x128_si256(p02_lo, p02_hi, 0x20);
    out[2] = _mm256_permute2x128_si256(p02_lo, p02_hi, 0x31);
    out[1] = _mm256_permute2x128_si256(p13_lo, p13_hi, 0x20);
    out[3] = _mm256_permute2x128_si256(p13_lo, p13_hi, 0x31);
#endif
}

template <Q45Order O, int T>
void q4_K_pair_panel_8xT(int64_t nb, const Q4kPairPanel* panels, const BlockQ8_K* const* y, float* const* out) {
    using Chains = Q4RepackedRowChains<O, T>;
    Chains chains;
    for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_K* yb[T];
        for (int t = 0; t < T; ++t) yb[t] = &y[t][b];
        alignas(32) float dx[8], dm[8];
        PairVec u[T][8];
        __m256i mins[T][8];
        for (int i = 0; i < 8; ++i) {
            const Q4kPairPanel& p = panels[8 * b + i];
            PairVec ui[T];
            pair_products<T>(p, yb, ui);
            for (int t = 0; t < T; ++t) {
                u[t][i] = ui[t];
                mins[t][i] = _mm256_zextsi128_si256(q45_mins(p.mins16, *yb[t]));
            }
            dx[i] = p.d;
            dm[i] = p.dmin;
        }
        for (int t = 0; t < T; ++t) {
            __m256i parts[Chains::P], min_parts[Chains::P];
            if constexpr (Chains::P == 1) {
                __m256i lanes[8];
                for (int i = 0; i < 8; ++i) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
                    lanes[i] = fold_halves(u[t][i]);
#else
                    lanes[i] = u[t][i];
#endif
                }
                parts[0] = row_sums8(lanes);
            } else {
                pair_row_sums(u[t], parts);
            }
            Chains::min_rows(mins[t], min_parts);
            chains.add_rows(t, parts, min_parts, Chains::row_scales(dx, y, t, b), Chains::row_scales(dm, y, t, b));
        }
    }
    chains.store(out);
}

// From five tokens the eight-row panels beat unpacking per four tokens (one thread, 512 x 1024: at 5 tokens
// 44-71 against 39-64 GMAC/s, at 4 tokens 39-64 against 40-71).
inline constexpr int kPairPanelMinTokens = 5;

template <Q45Order O>
void q4_K_panel_repacked_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok,
                              float* out, int64_t out_stride) {
    if (n_tok < kPairPanelMinTokens || rows < 8) return q4_K_repacked_tile<O>(n, w, row_bytes, rows, act, act_bytes, n_tok, out, out_stride);
    const int64_t nb = n / QK_K;
    // The activations with their quant bytes permuted as the panels' (scale and sums as they are).
    thread_local std::vector<BlockQ8_K> permuted;
    permuted.resize(static_cast<size_t>(n_tok * nb));
    for (int t = 0; t < n_tok; ++t)
        for (int64_t b = 0; b < nb; ++b) {
            const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_bytes)[b];
            BlockQ8_K& yp = permuted[static_cast<size_t>(t * nb + b)];
            yp = y;
            permute_pairs(reinterpret_cast<const uint8_t*>(y.qs), reinterpret_cast<uint8_t*>(yp.qs));
        }
    thread_local std::vector<Q4kPairPanel> panels;
    if (panels.size() < static_cast<size_t>(8 * nb)) panels.resize(static_cast<size_t>(8 * nb));
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8) {
        for (int i = 0; i < 8; ++i) {
            const auto* x = reinterpret_cast<const BlockQ4_K*>(w + static_cast<size_t>(r + i) * row_bytes);
            for (int64_t b = 0; b < nb; ++b) decode_pair_panel(x[b], panels[static_cast<size_t>(8 * b + i)]);
        }
        for_token_tiles<BlockQ8_K>(n_tok, reinterpret_cast<const uint8_t*>(permuted.data()), static_cast<size_t>(nb) * sizeof(BlockQ8_K), out,
                                   out_stride, r,
                                   [&]<int T>(const BlockQ8_K* const* y, float* const* o) { q4_K_pair_panel_8xT<O, T>(nb, panels.data(), y, o); });
    }
    if (r < rows) q4_K_repacked_tile<O>(n, w + static_cast<size_t>(r) * row_bytes, row_bytes, rows - r, act, act_bytes, n_tok, out + r, out_stride);
}

inline void add_kquant_panel_tiles(KernelTable& t) {
    const int q4k = static_cast<int>(GgmlType::Q4_K);
    t.tile[q4k] = panel_tile<Q45Panel<BlockQ4_K, false>, step_tile<Q45VecStep<BlockQ4_K, false>>>;
    t.tile_repacked[q4k] = q4_K_panel_repacked_tile<Q45Order::Q4Repacked>;
    t.tile_repacked_gemm[q4k] = q4_K_panel_repacked_tile<Q45Order::Q4RepackedGemm>;
    t.tile[static_cast<int>(GgmlType::Q5_K)] = panel_tile<Q45Panel<BlockQ5_K, true>, step_tile<Q45VecStep<BlockQ5_K, true>>>;
    t.tile[static_cast<int>(GgmlType::Q6_K)] = panel_tile<Q6kPanel, tile_rows_by_tokens<BlockQ6_K, BlockQ8_K, QK_K, Q6Tile>>;
    t.tile[static_cast<int>(GgmlType::Q3_K)] = panel_tile<PlainPanel<Q3kGroups, 1.0f, true>, step_tile<Q3KStep>>;
    t.tile[static_cast<int>(GgmlType::Q2_K)] = panel_tile<Q2kPanel, step_tile<Q2KStep>>;
}

}  // namespace
}  // namespace moe::kernels

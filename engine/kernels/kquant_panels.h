// Prompt tiles of Q2_K and Q3_K in their vec_dot orders through decoded panels (iquant_panels.h's panel_tile):
// a row's 2- and 3-bit values, their high-bit masks and sub-block scales were unpacked again for every token
// (shifts, masks, scale shuffles: most of the step's instructions); here once per row and chunk of tokens.
// Each (row, token) keeps the one-row step's integer lanes and float chain, so the same bits as Q2KStep and
// Q3KStep. Both ISA units include this.
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
    [[gnu::always_inline]] static Wide add_pair(Wide sum, const Panel& p, int j, const int8_t* y) { return _mm512_dpbusd_epi32(sum, load64(&p.w[2 * j]), load64(y + 64 * j)); }
    static __m256i lanes(Wide sum) { return fold_halves(sum); }
#else
    using Wide = __m256i;
    static Wide zero() { return _mm256_setzero_si256(); }
    [[gnu::always_inline]] static Wide add_pair(Wide sum, const Panel& p, int j, const int8_t* y) {
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(p.w[2 * j], load32(y + 64 * j)), _mm256_maddubs_epi16(p.w[2 * j + 1], load32(y + 64 * j + 32)));
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

inline void add_kquant_panel_tiles(KernelTable& t) {
    t.tile[static_cast<int>(GgmlType::Q3_K)] = panel_tile<PlainPanel<Q3kGroups, 1.0f, true>, Q3KStep>;
    t.tile[static_cast<int>(GgmlType::Q2_K)] = panel_tile<Q2kPanel, Q2KStep>;
}

}  // namespace
}  // namespace moe::kernels

// Prompt tiles of the ternary types (TQ1_0, TQ2_0) through decoded panels (iquant_panels.h's panel_tile): a
// row's trits unpacked once instead of per four tokens (TQ1_0's base-3 digits cost more than their products),
// and on AVX-512 one VPDPBUSD per two groups where TernaryStep adds PMADDUBSW pairs as int16. Each (row,
// token) keeps TernaryStep's int32 lanes (integer sums, so any order gives them) and its float chain, so the
// same bits. Both ISA units include this.
#pragma once
#include <immintrin.h>

#include "engine/kernels/iquant_panels.h"
#include "engine/kernels/quants_simd.h"

namespace moe::kernels {
namespace {

template <class B, class Groups>
struct TernaryPanel {
    using Block = B;
    using Step = TernaryStep<B, Groups>;
    static constexpr bool kBiasedActivations = false;
    struct Panel {
        __m256i trits[8];  // group g: elements 32g..32g+31 as 0, 1, 2 (the value + 1)
        float d;
    };
    using State = typename Step::State;
    static void decode(const Block& x, Panel& p) {
        Groups{}(x, p.trits);
        p.d = h2f(x.d);
    }
    static State init() { return Step::init(); }
    static float finish(const State& s) { return Step::finish(s); }
    // Lane L: the trits x activations of bytes 4L..4L+3 of every group, minus the activation sums of elements
    // 32L..32L+31 (the value - 1 offset), as TernaryStep's PMADDWD leaves it.
    template <int T>
    [[gnu::always_inline]] static void step_tokens(State* s, const Panel& p, const BlockQ8_K* const* yb) {
        __m256i lanes[T];
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
        __m512i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i w = load64(&p.trits[2 * k]);
            for (int t = 0; t < T; ++t) sum[t] = _mm512_dpbusd_epi32(sum[t], w, load64(yb[t]->qs + 64 * k));
        }
        for (int t = 0; t < T; ++t) lanes[t] = _mm256_sub_epi32(fold_halves(sum[t]), _mm256_madd_epi16(load32(yb[t]->bsums), _mm256_set1_epi16(1)));
#else
        __m256i lanes16[T];
        for (int t = 0; t < T; ++t) lanes16[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            const __m256i w = p.trits[g];
            for (int t = 0; t < T; ++t) lanes16[t] = _mm256_add_epi16(lanes16[t], _mm256_maddubs_epi16(w, load32(yb[t]->qs + 32 * g)));
        }
        for (int t = 0; t < T; ++t) lanes[t] = _mm256_madd_epi16(_mm256_sub_epi16(lanes16[t], load32(yb[t]->bsums)), _mm256_set1_epi16(1));
#endif
        for (int t = 0; t < T; ++t) s[t].acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes[t]), _mm256_set1_ps(yb[t]->d * p.d), s[t].acc);
    }
};

inline void add_ternary_panel_tiles(KernelTable& t) {
    t.tile[static_cast<int>(GgmlType::TQ1_0)] =
        panel_tile<TernaryPanel<BlockTQ1_0, std::remove_const_t<decltype(tq1_0_groups)>>, step_tile<TQ1_0Step>>;
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    // (On AVX2 TQ2_0's shift-and-mask unpacking costs less than storing and reloading a panel: 82 against 72
    // GMAC/s, one thread, 512 x 1024 x 64, so its step tile stays.)
    t.tile[static_cast<int>(GgmlType::TQ2_0)] =
        panel_tile<TernaryPanel<BlockTQ2_0, std::remove_const_t<decltype(tq2_0_groups)>>, step_tile<TQ2_0Step>>;
#endif
}

}  // namespace
}  // namespace moe::kernels

// Prompt tiles of the i-quants through decoded panels. Their blocks cost more to unpack (grid lookups, sign
// tables, scale fields) than to multiply, so a tile that unpacks a block for four tokens at a time spends most
// of its time unpacking. Here a weight row is unpacked once into a panel (per 32-weight group: grid magnitudes,
// sign bytes for PSIGNB, the int16 scale words; per block the float scale) and every token of the tile is
// multiplied against that panel with the same byte products, the same integer lanes and the same float chain
// as the one-row dot in iquants_simd.h, so each (row, token) keeps that dot's bits. Both ISA units include this.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/kernels/iquants_simd.h"

namespace moe::kernels {
namespace {

// One block's groups, unpacked (iquants_simd.h's GroupBytes, stored by field so that two groups load as one
// 512-bit register).
struct PanelGroups {
    __m256i mag[8], sgn[8], scale[8];
};

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Two groups per 512-bit register: its halves hold the two groups' eight lanes, added at the end (integers, so
// the order of the additions cannot change them). AVX-512 has no PSIGNB: the activations are negated under the
// sign bytes' mask instead, which differs only where a sign byte is 0, where the magnitude is 0 too.
inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }
[[gnu::always_inline]] inline __m512i signed_products(__m512i sum, __m512i mag, __m512i sgn, __m512i scale, __m512i y) {
    const __m512i ys = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(sgn), _mm512_setzero_si512(), y);
    return _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(mag, ys), scale);
}
inline __m256i fold_halves(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
[[gnu::always_inline]] inline __m256i panel_lanes(const PanelGroups& p, const BlockQ8_K& y) {
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
        sum = signed_products(sum, load64(&p.mag[2 * k]), load64(&p.sgn[2 * k]), load64(&p.scale[2 * k]), load64(y.qs + 64 * k));
    return fold_halves(sum);
}
#endif

// The grid i-quants with each weight's sign folded into its magnitude (|w| <= 62: a signed byte). Q8_K
// activations lie in [-127, 127] (quantize_q8_K scales by -127 / max), where PSIGNB's negation is exact, so
// mag x sign(y) = sign(mag) x y. Against the activations biased to unsigned bytes (+128) one PMADDUBSW per group
// replaces PSIGNB + PMADDUBSW (pairs <= 2 x 255 x 62 < 2^15: no saturation, as in the one-row dot), and each
// lane's 128 x its scaled weight sums, known per row, is subtracted: the one-row dot's integer lanes exactly.
struct SignedGroups {
    __m256i w[8], scale[8];
    __m256i bias;
};
// yb: a block of activations biased by +128 (or the bias itself: every byte 0x80).
[[gnu::always_inline]] inline __m256i signed_group_sums(const SignedGroups& p, const int8_t* yb) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
        sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(load64(yb + 64 * k), load64(&p.w[2 * k])), load64(&p.scale[2 * k]));
    return fold_halves(sum);
#else
    __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) sum[g & 1] = _mm256_add_epi32(sum[g & 1], dot_us8_scaled(load32(yb + 32 * g), p.w[g], p.scale[g]));
    return _mm256_add_epi32(sum[0], sum[1]);
#endif
}

// IquantStep's chain (one FMA per block of x.d * y.d, the final sum times Factor) over panels unpacked by the
// same Groups as the one-row dot: signed weights against biased activations where the grid fits a signed
// byte (SignFolded), else magnitudes and PSIGNB's sign bytes (IQ4_XS: values up to 127).
template <class Groups, float Factor, bool SignFolded>
struct PlainPanel {
    using Block = typename Groups::Block;
    struct Panel : std::conditional_t<SignFolded, SignedGroups, PanelGroups> {
        float d;
    };
    using State = Acc8State;
    static constexpr bool kBiasedActivations = SignFolded;
    static void decode(const Block& x, Panel& p) {
        const Groups groups(x);
        for (int g = 0; g < 8; ++g) {
            const GroupBytes b = groups(g);
            if constexpr (SignFolded) {
                p.w[g] = _mm256_sign_epi8(b.mag, b.sgn);
            } else {
                p.mag[g] = b.mag;
                p.sgn[g] = b.sgn;
            }
            p.scale[g] = b.scale;
        }
        if constexpr (SignFolded) {
            alignas(64) int8_t bias_bytes[QK_K];
            std::memset(bias_bytes, 0x80, sizeof bias_bytes);
            p.bias = signed_group_sums(p, bias_bytes);
        }
        p.d = h2f(x.d);
    }
    static State init() { return {_mm256_setzero_ps()}; }
    static float finish(const State& s) { return Factor * hsum_float_8(s.acc); }
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    // One row, one token (the odd row of a row group).
    [[gnu::always_inline]] static void step(State& s, const Panel& p, const BlockQ8_K& y) {
        __m256i lanes;
        if constexpr (SignFolded) lanes = _mm256_sub_epi32(signed_group_sums(p, y.qs), p.bias);
        else lanes = panel_lanes(p, y);
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(p.d * y.d), _mm256_cvtepi32_ps(lanes), s.acc);
    }
    // Two rows by T tokens of one block, each activation register loaded once for both rows and each weight
    // register once for the T tokens (one row at a time, a row's pass re-read every token's activations from
    // L2); per pair the same products, lanes and float step as `step`.
    template <int T>
    [[gnu::always_inline]] static void step_two_rows(State* s0, State* s1, const Panel& p0, const Panel& p1, const BlockQ8_K* const* yb) {
        __m512i sum0[T], sum1[T];
        for (int t = 0; t < T; ++t) sum0[t] = sum1[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i c0 = load64(&p0.scale[2 * k]), c1 = load64(&p1.scale[2 * k]);
            if constexpr (SignFolded) {
                const __m512i w0 = load64(&p0.w[2 * k]), w1 = load64(&p1.w[2 * k]);
                for (int t = 0; t < T; ++t) {
                    const __m512i y = load64(yb[t]->qs + 64 * k);
                    sum0[t] = _mm512_dpwssd_epi32(sum0[t], _mm512_maddubs_epi16(y, w0), c0);
                    sum1[t] = _mm512_dpwssd_epi32(sum1[t], _mm512_maddubs_epi16(y, w1), c1);
                }
            } else {
                const __m512i m0 = load64(&p0.mag[2 * k]), g0 = load64(&p0.sgn[2 * k]), m1 = load64(&p1.mag[2 * k]), g1 = load64(&p1.sgn[2 * k]);
                for (int t = 0; t < T; ++t) {
                    const __m512i y = load64(yb[t]->qs + 64 * k);
                    sum0[t] = signed_products(sum0[t], m0, g0, c0, y);
                    sum1[t] = signed_products(sum1[t], m1, g1, c1, y);
                }
            }
        }
        for (int t = 0; t < T; ++t) {
            __m256i l0 = fold_halves(sum0[t]), l1 = fold_halves(sum1[t]);
            if constexpr (SignFolded) {
                l0 = _mm256_sub_epi32(l0, p0.bias);
                l1 = _mm256_sub_epi32(l1, p1.bias);
            }
            s0[t].acc = _mm256_fmadd_ps(_mm256_set1_ps(p0.d * yb[t]->d), _mm256_cvtepi32_ps(l0), s0[t].acc);
            s1[t].acc = _mm256_fmadd_ps(_mm256_set1_ps(p1.d * yb[t]->d), _mm256_cvtepi32_ps(l1), s1[t].acc);
        }
    }
#else
    // One row by T tokens of one block, group by group: each group's panel registers loaded once for the T
    // tokens (a token at a time reloaded them per token); the same integer lanes and float step as IquantStep.
    template <int T>
    [[gnu::always_inline]] static void step_tokens(State* s, const Panel& p, const BlockQ8_K* const* yb) {
        __m256i sum[T];
        for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            if constexpr (SignFolded) {
                const __m256i w = p.w[g], c = p.scale[g];
                for (int t = 0; t < T; ++t) sum[t] = _mm256_add_epi32(sum[t], dot_us8_scaled(load32(yb[t]->qs + 32 * g), w, c));
            } else {
                const GroupBytes b{p.mag[g], p.sgn[g], p.scale[g]};
                for (int t = 0; t < T; ++t) sum[t] = _mm256_add_epi32(sum[t], group_lanes(b, load32(yb[t]->qs + 32 * g)));
            }
        }
        for (int t = 0; t < T; ++t) {
            __m256i lanes = sum[t];
            if constexpr (SignFolded) lanes = _mm256_sub_epi32(lanes, p.bias);
            s[t].acc = _mm256_fmadd_ps(_mm256_set1_ps(p.d * yb[t]->d), _mm256_cvtepi32_ps(lanes), s[t].acc);
        }
    }
#endif
};

// IQ1_S / IQ1_M: a weight's grid value (-1, 0, 1) times its 3-bit scale (2s + 1 <= 15) fits a signed byte, so
// their panels hold those products and VPDPBUSD multiplies them with the activations biased to unsigned bytes
// (+128, once per call: kBiasedActivations); each lane's 128 x its weight sum, known per row, is subtracted.
// The same integer lanes as the one-row dot with a quarter of the operations.
struct BiasedGroups {
    __m256i w[8];  // group g's scale x grid value per weight, as int8
    __m256i bias;  // 128 x the sum of each lane's weights over the block
};
// A group's scale words (int16, < 256) as bytes, times its -1/0/1 values.
inline __m256i scaled_values(__m256i scale_words, __m256i values) {
    return _mm256_sign_epi8(_mm256_or_si256(scale_words, _mm256_slli_epi16(scale_words, 8)), values);
}
inline void set_bias(BiasedGroups& p) {
    __m256i sum = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g)
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p.w[g]), _mm256_set1_epi16(1)));
    p.bias = _mm256_slli_epi32(sum, 7);
}
// yb: a block of activations biased by +128.
[[gnu::always_inline]] inline __m256i biased_lanes(const BiasedGroups& p, const BlockQ8_K& yb) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) sum = _mm512_dpbusd_epi32(sum, load64(yb.qs + 64 * k), load64(&p.w[2 * k]));
    return _mm256_sub_epi32(fold_halves(sum), p.bias);
#else
    // Four groups' byte-pair sums added as int16 before one PMADDWD (each pair <= 2 x 255 x 15, four of them
    // < 2^15): the same int32 lanes with a quarter of the widenings.
    __m256i half[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        __m256i pairs = _mm256_maddubs_epi16(load32(yb.qs + 128 * h), p.w[4 * h]);
#pragma GCC unroll 3
        for (int g = 1; g < 4; ++g) pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(load32(yb.qs + 128 * h + 32 * g), p.w[4 * h + g]));
        half[h] = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    }
    return _mm256_sub_epi32(_mm256_add_epi32(half[0], half[1]), p.bias);
#endif
}

// Iq1sStep's chain: the grid lanes, plus the delta term from the activations' 16-element sums times each
// group's signed scale (integer), FMA'd per block as a scalar; the delta sums of up to four tokens come out of
// one horizontal-add tree.
struct Iq1sPanel {
    using Block = BlockIQ1_S;
    static constexpr bool kBiasedActivations = true;
    struct Panel : BiasedGroups {
        __m256i delta_scales;  // int16 per 16-element sum: group g's scale, negative where its delta is
        float d;
    };
    struct State {
        __m256 acc;
        float accum1;
    };
    static void decode(const Block& x, Panel& p) {
        const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qh));
        const __m128i odd = _mm_add_epi16(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1), _mm_set1_epi16(1));
        const __m256i scales = both_lanes(odd);
        alignas(32) int16_t ds[16];
        for (int g = 0; g < 8; ++g) {
            const uint32_t h = x.qh[g];
            p.w[g] = scaled_values(scale_word(scales, g), iq1_grid<0x0700070007000700ull>(x.qs + 4 * g, h & 0x0FFF));
            const int scale = 2 * static_cast<int>((h >> 12) & 7) + 1;
            ds[2 * g] = ds[2 * g + 1] = static_cast<int16_t>((h & 0x8000) ? -scale : scale);
        }
        set_bias(p);
        p.delta_scales = load32(ds);
        p.d = h2f(x.d);
    }
    static State init() { return {_mm256_setzero_ps(), 0.f}; }
    // Token t's delta sum in lane t of sumi1.
    template <int T>
    [[gnu::always_inline]] static void delta_sums(const Panel& p, const BlockQ8_K* const* yb, int32_t* sumi1) {
        __m256i m[4];
        for (int t = 0; t < 4; ++t) m[t] = t < T ? _mm256_madd_epi16(load32(yb[t]->bsums), p.delta_scales) : _mm256_setzero_si256();
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(m[0], m[1]), _mm256_hadd_epi32(m[2], m[3]));
        _mm_store_si128(reinterpret_cast<__m128i*>(sumi1), _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
    }
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    // Two rows by T tokens, as PlainPanel's: both rows' grid products from one load of each activation register.
    template <int T>
    [[gnu::always_inline]] static void step_two_rows(State* s0, State* s1, const Panel& p0, const Panel& p1, const BlockQ8_K* const* yb) {
        __m512i g0[T], g1[T];
        for (int t = 0; t < T; ++t) g0[t] = g1[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i a = load64(&p0.w[2 * k]), c = load64(&p1.w[2 * k]);
            for (int t = 0; t < T; ++t) {
                const __m512i y = load64(yb[t]->qs + 64 * k);
                g0[t] = _mm512_dpbusd_epi32(g0[t], y, a);
                g1[t] = _mm512_dpbusd_epi32(g1[t], y, c);
            }
        }
        alignas(16) int32_t delta0[4], delta1[4];
        delta_sums<T>(p0, yb, delta0);
        delta_sums<T>(p1, yb, delta1);
        for (int t = 0; t < T; ++t) {
            const float d0 = yb[t]->d * p0.d, d1 = yb[t]->d * p1.d;
            s0[t].acc = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(_mm256_sub_epi32(fold_halves(g0[t]), p0.bias)), s0[t].acc);
            s0[t].accum1 = std::fma(d0, static_cast<float>(delta0[t]), s0[t].accum1);
            s1[t].acc = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(_mm256_sub_epi32(fold_halves(g1[t]), p1.bias)), s1[t].acc);
            s1[t].accum1 = std::fma(d1, static_cast<float>(delta1[t]), s1[t].accum1);
        }
    }
#endif
    template <int T>
    [[gnu::always_inline]] static void step_tokens(State* s, const Panel& p, const BlockQ8_K* const* yb) {
        alignas(16) int32_t sumi1[4];  // token t's delta sum in lane t
        delta_sums<T>(p, yb, sumi1);
        for (int t = 0; t < T; ++t) {
            const float d = yb[t]->d * p.d;
            s[t].acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(biased_lanes(p, *yb[t])), s[t].acc);
            s[t].accum1 = std::fma(d, static_cast<float>(sumi1[t]), s[t].accum1);
        }
    }
    static float finish(const State& s) { return hsum_float_8(s.acc) + iq::kIq1sDelta * s.accum1; }
};

// IQ1_M's activations: the Q8_K block biased to unsigned bytes for the grid products, and the unbiased values'
// sums over each 4-element lane of every group, as int16 pairs: int32 lane l of register k holds group 2k's
// sum (low half) and group 2k+1's (high half) of lane l's four elements (each |sum| <= 508).
struct Q8KWithSums {
    BlockQ8_K q;
    alignas(32) int16_t sums[64];
};
inline void prepare_q8k_with_sums(const BlockQ8_K& y, Q8KWithSums& out) {
    out.q.d = y.d;
    std::memcpy(out.q.bsums, y.bsums, sizeof y.bsums);
    __m256i s4[8];
    for (int g = 0; g < 8; ++g) {
        const __m256i v = load32(y.qs + 32 * g);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.qs + 32 * g), _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))));
        s4[g] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
    }
    for (int k = 0; k < 4; ++k)
        _mm256_store_si256(reinterpret_cast<__m256i*>(out.sums + 16 * k),
                           _mm256_or_si256(_mm256_and_si256(s4[2 * k], _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s4[2 * k + 1], 16)));
}

// Iq1mStep's chain: the grid lanes and the shifts' lanes (each 8 weights' shift sign times the same scales) in
// two accumulators, both as biased byte products (AVX-512 builds).
struct Iq1mPanel {
    using Block = BlockIQ1_M;
    static constexpr bool kBiasedActivations = true;
    struct Panel {
        BiasedGroups grid, shift;
        float d;
    };
    struct State {
        __m256 acc1, acc2;
    };
    static void decode(const Block& x, Panel& p) {
        const __m256i scales = iq1m_scales(x);
        for (int g = 0; g < 8; ++g) {
            uint16_t qh;
            std::memcpy(&qh, x.qh + 2 * g, 2);
            const __m256i scale = scale_word(scales, g);
            p.grid.w[g] = scaled_values(scale, iq1_grid<0x0f000f000f000f00ull>(x.qs + 4 * g, qh & 0x7777u));
            const uint32_t delta_bits = static_cast<uint32_t>(_pdep_u64(qh & 0x8888u, 0xf0f0f0f0ull));
            p.shift.w[g] = scaled_values(scale,
                                         _mm256_or_si256(_mm256_set1_epi8(1), _mm256_cvtepi8_epi64(_mm_set1_epi32(static_cast<int>(delta_bits)))));
        }
        set_bias(p.grid);
        set_bias(p.shift);
        p.d = h2f(quant::iq1m_d(x));
    }
    static State init() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    template <int T>
    [[gnu::always_inline]] static void step_tokens(State* s, const Panel& p, const BlockQ8_K* const* yb) {
        for (int t = 0; t < T; ++t) {
            const __m256 d = _mm256_set1_ps(yb[t]->d * p.d);
            s[t].acc1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(biased_lanes(p.grid, *yb[t])), s[t].acc1);
            s[t].acc2 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(biased_lanes(p.shift, *yb[t])), s[t].acc2);
        }
    }
    static float finish(const State& s) { return hsum_float_8(s.acc1) + iq::kIq1sDelta * hsum_float_8(s.acc2); }
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    // Two rows by T tokens, as PlainPanel's: the grid and shift products of both rows from one load of each
    // activation register.
    template <int T>
    [[gnu::always_inline]] static void step_two_rows(State* s0, State* s1, const Panel& p0, const Panel& p1, const BlockQ8_K* const* yb) {
        __m512i g0[T], h0[T], g1[T], h1[T];
        for (int t = 0; t < T; ++t) g0[t] = h0[t] = g1[t] = h1[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m512i a = load64(&p0.grid.w[2 * k]), b = load64(&p0.shift.w[2 * k]);
            const __m512i c = load64(&p1.grid.w[2 * k]), e = load64(&p1.shift.w[2 * k]);
            for (int t = 0; t < T; ++t) {
                const __m512i y = load64(yb[t]->qs + 64 * k);
                g0[t] = _mm512_dpbusd_epi32(g0[t], y, a);
                h0[t] = _mm512_dpbusd_epi32(h0[t], y, b);
                g1[t] = _mm512_dpbusd_epi32(g1[t], y, c);
                h1[t] = _mm512_dpbusd_epi32(h1[t], y, e);
            }
        }
        for (int t = 0; t < T; ++t) {
            const __m256 d0 = _mm256_set1_ps(yb[t]->d * p0.d), d1 = _mm256_set1_ps(yb[t]->d * p1.d);
            s0[t].acc1 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(_mm256_sub_epi32(fold_halves(g0[t]), p0.grid.bias)), s0[t].acc1);
            s0[t].acc2 = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(_mm256_sub_epi32(fold_halves(h0[t]), p0.shift.bias)), s0[t].acc2);
            s1[t].acc1 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(_mm256_sub_epi32(fold_halves(g1[t]), p1.grid.bias)), s1[t].acc1);
            s1[t].acc2 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(_mm256_sub_epi32(fold_halves(h1[t]), p1.shift.bias)), s1[t].acc2);
        }
    }
#endif
};

// Iq1mStep's chain: the grid lanes and the shifts' lanes in two accumulators. A shift (scale x +-1) is constant
// over each 4-weight lane, so its lane is scale x sign x the activations' 4-sum: PMADDWD of the token's paired
// sums with the row's paired shifts, four per block, instead of a byte product per weight. For AVX2 builds
// (1.22x Iq1mPanel there); with VPDPBUSD the byte products cost less than preparing the sums.
struct Iq1mSumsPanel {
    using Block = BlockIQ1_M;
    using Act = Q8KWithSums;
    static constexpr bool kBiasedActivations = false;  // prepare() biases
    struct Panel {
        BiasedGroups grid;
        __m256i shift[4];  // int16 pairs as Q8KWithSums::sums: group 2k's and 2k+1's shift for lane l
        float d;
    };
    struct State {
        __m256 acc1, acc2;
    };
    static void prepare(const BlockQ8_K& y, Act& out) { prepare_q8k_with_sums(y, out); }
    static void decode(const Block& x, Panel& p) {
        const __m256i scales = iq1m_scales(x);
        __m256i shift32[8];
        for (int g = 0; g < 8; ++g) {
            uint16_t qh;
            std::memcpy(&qh, x.qh + 2 * g, 2);
            const __m256i scale = scale_word(scales, g);
            p.grid.w[g] = scaled_values(scale, iq1_grid<0x0f000f000f000f00ull>(x.qs + 4 * g, qh & 0x7777u));
            const uint32_t delta_bits = static_cast<uint32_t>(_pdep_u64(qh & 0x8888u, 0xf0f0f0f0ull));
            const __m256i shift_bytes = scaled_values(
                scale, _mm256_or_si256(_mm256_set1_epi8(1), _mm256_cvtepi8_epi64(_mm_set1_epi32(static_cast<int>(delta_bits)))));
            shift32[g] = _mm256_srai_epi32(_mm256_slli_epi32(shift_bytes, 24), 24);  // lane l's shift (its four bytes are equal)
        }
        for (int k = 0; k < 4; ++k)
            p.shift[k] = _mm256_or_si256(_mm256_and_si256(shift32[2 * k], _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(shift32[2 * k + 1], 16));
        set_bias(p.grid);
        p.d = h2f(quant::iq1m_d(x));
    }
    [[gnu::always_inline]] static __m256i shift_lanes(const Panel& p, const Act& y) {
        const __m256i* s = reinterpret_cast<const __m256i*>(y.sums);
        const __m256i a = _mm256_add_epi32(_mm256_madd_epi16(s[0], p.shift[0]), _mm256_madd_epi16(s[1], p.shift[1]));
        const __m256i b = _mm256_add_epi32(_mm256_madd_epi16(s[2], p.shift[2]), _mm256_madd_epi16(s[3], p.shift[3]));
        return _mm256_add_epi32(a, b);
    }
    static State init() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    template <int T>
    [[gnu::always_inline]] static void step_tokens(State* s, const Panel& p, const Act* const* yb) {
        for (int t = 0; t < T; ++t) {
            const __m256 d = _mm256_set1_ps(yb[t]->q.d * p.d);
            s[t].acc1 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(biased_lanes(p.grid, yb[t]->q)), s[t].acc1);
            s[t].acc2 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(shift_lanes(p, *yb[t])), s[t].acc2);
        }
    }
    static float finish(const State& s) { return hsum_float_8(s.acc1) + iq::kIq1sDelta * hsum_float_8(s.acc2); }
};

// The activations a panel multiplies: Q8_K blocks, or the panel's own form of them (P::Act, built by P::prepare).
template <class P>
struct PanelAct {
    using type = BlockQ8_K;
};
template <class P>
requires requires { typename P::Act; }
struct PanelAct<P> {
    using type = typename P::Act;
};

template <class P, int T, class Act = typename PanelAct<P>::type>
void panel_1xT(int64_t nb, const typename P::Panel* x, const Act* const* y, float* const* out) {
    typename P::State s[T];
    for (int t = 0; t < T; ++t) s[t] = P::init();
    for (int64_t b = 0; b < nb; ++b) {
        if constexpr (requires { P::template step_tokens<T>; }) {
            const Act* yb[T];
            for (int t = 0; t < T; ++t) yb[t] = &y[t][b];
            P::template step_tokens<T>(s, x[b], yb);
        } else {
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) P::step(s[t], x[b], y[t][b]);
        }
    }
    for (int t = 0; t < T; ++t) *out[t] = P::finish(s[t]);
}

// The activation rows with every quant byte biased by +128 (xor 0x80), for the panels that multiply unsigned
// activations with signed weights.
inline const uint8_t* biased_activations(const uint8_t* act, size_t act_bytes, int n_tok) {
    thread_local std::vector<uint8_t> biased;
    biased.assign(act, act + act_bytes * static_cast<size_t>(n_tok));
    const size_t blocks = act_bytes * static_cast<size_t>(n_tok) / sizeof(BlockQ8_K);
    auto* y = reinterpret_cast<BlockQ8_K*>(biased.data());
    for (size_t b = 0; b < blocks; ++b)
        for (int k = 0; k < QK_K; k += 32)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + k),
                                _mm256_xor_si256(load32(y[b].qs + k), _mm256_set1_epi8(static_cast<char>(0x80))));
    return biased.data();
}

// Below this many tokens the step tile (which unpacks per four tokens, without a store and reload) is as fast.
inline constexpr int kPanelMinTokens = 8;

// Small: the tile for fewer than kPanelMinTokens tokens.
template <class P, DotTileFn Small>
void panel_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                int64_t out_stride) {
    if (n_tok < kPanelMinTokens) return Small(n, w, row_bytes, rows, act, act_bytes, n_tok, out, out_stride);
    const int64_t nb = n / QK_K;
    using Act = typename PanelAct<P>::type;
    // (Per call: a matmul's row slices bias the same activations again; about 3% of a slice's products at
    // 512 tokens, cheaper than a second activation format through the runner.)
    if constexpr (P::kBiasedActivations) act = biased_activations(act, act_bytes, n_tok);
    if constexpr (!std::is_same_v<Act, BlockQ8_K>) {
        thread_local std::vector<Act> prepared;
        prepared.resize(static_cast<size_t>(n_tok * nb));
        for (int t = 0; t < n_tok; ++t)
            for (int64_t b = 0; b < nb; ++b)
                P::prepare(reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * act_bytes)[b],
                           prepared[static_cast<size_t>(t * nb + b)]);
        act = reinterpret_cast<const uint8_t*>(prepared.data());
        act_bytes = static_cast<size_t>(nb) * sizeof(Act);
    }
    // Rows in groups whose panels are decoded once, tokens in chunks: a chunk's activations stay in L1 while
    // each row of the group multiplies them (a row over all the tokens at once streamed every token's
    // activations from L2 or beyond once per row). About 24 KiB of panels and 24 KiB of activations.
    const int64_t group = std::max<int64_t>(2, static_cast<int64_t>((size_t{24} << 10) / (static_cast<size_t>(nb) * sizeof(typename P::Panel)))) &
                          ~int64_t{1};
    const int chunk = std::max(8, static_cast<int>((size_t{24} << 10) / act_bytes)) & ~3;
    thread_local std::vector<typename P::Panel> panels;
    if (panels.size() < static_cast<size_t>(group * nb)) panels.resize(static_cast<size_t>(group * nb));
    for (int64_t r0 = 0; r0 < rows; r0 += group) {
        const int64_t g = std::min(group, rows - r0);
        for (int64_t i = 0; i < g; ++i) {
            const auto* x = reinterpret_cast<const typename P::Block*>(w + static_cast<size_t>(r0 + i) * row_bytes);
            for (int64_t b = 0; b < nb; ++b) P::decode(x[b], panels[static_cast<size_t>(i * nb + b)]);
        }
        for (int t0 = 0; t0 < n_tok; t0 += chunk) {
            const int nt = std::min(chunk, n_tok - t0);
            const uint8_t* a = act + static_cast<size_t>(t0) * act_bytes;
            float* o_chunk = out + t0 * out_stride;
            int64_t i = 0;
            if constexpr (requires { P::template step_two_rows<1>; }) {
                for (; i + 2 <= g; i += 2) {
                    const typename P::Panel* first = panels.data() + i * nb;
                    const typename P::Panel* second = first + nb;
                    for_token_tiles<Act>(nt, a, act_bytes, o_chunk, out_stride, r0 + i, [&]<int T>(const Act* const* y, float* const* o) {
                        typename P::State s0[T], s1[T];
                        for (int t = 0; t < T; ++t) s0[t] = s1[t] = P::init();
                        for (int64_t b = 0; b < nb; ++b) {
                            const Act* yb[T];
                            for (int t = 0; t < T; ++t) yb[t] = &y[t][b];
                            P::template step_two_rows<T>(s0, s1, first[b], second[b], yb);
                        }
                        for (int t = 0; t < T; ++t) {
                            o[t][0] = P::finish(s0[t]);
                            o[t][1] = P::finish(s1[t]);
                        }
                    });
                }
            }
            for (; i < g; ++i) {
                const typename P::Panel* x = panels.data() + i * nb;
                for_token_tiles<Act>(nt, a, act_bytes, o_chunk, out_stride, r0 + i,
                                     [&]<int T>(const Act* const* y, float* const* o) { panel_1xT<P, T>(nb, x, y, o); });
            }
        }
    }
}

inline void add_iquant_panel_tiles(KernelTable& t) {
    t.tile[static_cast<int>(GgmlType::IQ2_XXS)] = panel_tile<PlainPanel<Iq2xxsGroups, 0.125f, true>, step_tile<simd_iq2_xxs_step>>;
    t.tile[static_cast<int>(GgmlType::IQ2_XS)] = panel_tile<PlainPanel<Iq2xsGroups, 0.125f, true>, step_tile<Iq2xsStep>>;
    t.tile[static_cast<int>(GgmlType::IQ2_S)] = panel_tile<PlainPanel<Iq2sGroups, 0.125f, true>, step_tile<Iq2sStep>>;
    t.tile[static_cast<int>(GgmlType::IQ3_XXS)] = panel_tile<PlainPanel<Iq3xxsGroups, 0.25f, true>, step_tile<simd_iq3_xxs_step>>;
    t.tile[static_cast<int>(GgmlType::IQ3_S)] = panel_tile<PlainPanel<Iq3sGroups, 1.0f, true>, step_tile<simd_iq3_s_step>>;
    t.tile[static_cast<int>(GgmlType::IQ4_XS)] = panel_tile<PlainPanel<Iq4xsGroups, 1.0f, false>, step_tile<simd_iq4_xs_step>>;
    t.tile[static_cast<int>(GgmlType::IQ1_S)] = panel_tile<Iq1sPanel, step_tile<Iq1sStep>>;
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    t.tile[static_cast<int>(GgmlType::IQ1_M)] = panel_tile<Iq1mPanel, step_tile<Iq1mStep>>;
#else
    t.tile[static_cast<int>(GgmlType::IQ1_M)] = panel_tile<Iq1mSumsPanel, step_tile<Iq1mStep>>;
#endif
}

}  // namespace
}  // namespace moe::kernels

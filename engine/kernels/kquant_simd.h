// K-quant dot products (Q2_K ... Q6_K) for the AVX2 and AVX-512 tables: each block's integer sums in
// kernels_ref.cpp's lane layout (element e of a 32-weight group in lane (e % 32) / 4), then the reference's
// float orders (kquant_order.h), lane for lane, kept in registers. Sub-block scales reach the lanes through
// byte shuffles of one register per block rather than scalar broadcasts (which would bound the loop on the
// shuffle port). Both ISA translation units include this file (internal linkage, their own flags).
#pragma once
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/kernels/blocks.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/quant_decode.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {

// ---- scale broadcasts ----

// PSHUFB controls over a register holding eight int16 scales in each 128-bit lane: kScaleWord[s] puts word s in
// every word of both lanes (one scale per 32 weights); kScalePair[p] puts word 2p in the low lane and word
// 2p + 1 in the high one (a scale per 16 weights: elements 0..15 of a group sit in the low lane).
struct ScaleShuffles {
    alignas(32) uint8_t word[8][32];
    alignas(32) uint8_t pair[4][32];
    constexpr ScaleShuffles() : word(), pair() {
        for (int s = 0; s < 8; ++s)
            for (int b = 0; b < 32; ++b) word[s][b] = static_cast<uint8_t>(2 * s + (b & 1));
        for (int p = 0; p < 4; ++p)
            for (int b = 0; b < 32; ++b) pair[p][b] = static_cast<uint8_t>(2 * (2 * p + (b >= 16)) + (b & 1));
    }
};
inline constexpr ScaleShuffles kScaleShuffles{};

inline __m256i scale_word(__m256i scales, int s) { return _mm256_shuffle_epi8(scales, load32(kScaleShuffles.word[s])); }
inline __m256i scale_pair(__m256i scales, int p) { return _mm256_shuffle_epi8(scales, load32(kScaleShuffles.pair[p])); }
// Eight int16 values in both lanes.
inline __m256i both_lanes(__m128i v) { return _mm256_set_m128i(v, v); }

// ---- Q4_K / Q5_K ----

// The 12 scale bytes as eight 6-bit scales (bytes 0..7) and eight 6-bit mins (bytes 8..15); see k_scale_min.
inline __m128i q45_scales_mins(const uint8_t* s) {
    uint32_t u[3];
    std::memcpy(u, s, 12);
    constexpr uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const uint32_t scales_hi = (u[2] & m4) | (((u[0] >> 6) & m2) << 4);
    const uint32_t mins_hi = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
    return _mm_set_epi32(static_cast<int>(mins_hi), static_cast<int>(u[1] & m6), static_cast<int>(scales_hi), static_cast<int>(u[0] & m6));
}

// A Q4_K/Q5_K block: pair[j] holds sub-blocks 2j and 2j+1 (times their scales) in eight lanes; mins lane k
// holds min[2k] * (their activation sums) + min[2k+1] * (...).
struct Q45Lanes {
    __m256i pair[4];
    __m128i mins;
    __m256i lanes() const { return _mm256_add_epi32(_mm256_add_epi32(pair[0], pair[1]), _mm256_add_epi32(pair[2], pair[3])); }
};

template <bool Five>
inline Q45Lanes q45_lanes(const uint8_t* scales12, const uint8_t* qs, const uint8_t* qh, const BlockQ8_K& y) {
    const __m256i scales_mins = _mm256_cvtepu8_epi16(q45_scales_mins(scales12));
    const __m128i bsums = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8)));
    Q45Lanes out;
    out.mins = _mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), bsums);
    const __m256i scales = both_lanes(_mm256_castsi256_si128(scales_mins));
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i hbits = Five ? load32(qh) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        const __m256i bits = load32(qs + 32 * j);
        __m256i lo = _mm256_and_si256(bits, low4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
        if (Five) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one), 4));
        }
        const __m256i plo = dot_us8_scaled(lo, load32(y.qs + 64 * j), scale_word(scales, 2 * j));
        const __m256i phi = dot_us8_scaled(hi, load32(y.qs + 64 * j + 32), scale_word(scales, 2 * j + 1));
        out.pair[j] = _mm256_add_epi32(plo, phi);
    }
    return out;
}

inline float hsum_mins4(__m128 m) {  // ((m0 + m2) + (m1 + m3))
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
}
inline int32_t hsum4(__m128i v) {
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1)));
}

// The four float orders of kquant_order.h (Q4KVecOrder, Q4KRepackedOrder, Q4KRepackedGemmOrder, Q5KVecOrder).
enum class Q45Order { Q4Vec, Q4Repacked, Q4RepackedGemm, Q5Vec };

template <class Block, bool Five, Q45Order O>
float q45_dot(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const Block*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    float acc1 = 0.f, acc1_m = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const uint8_t* qh = nullptr;
        if constexpr (Five) qh = x[b].qh;
        const Q45Lanes l = q45_lanes<Five>(x[b].scales, x[b].qs, qh, y[b]);
        if constexpr (O == Q45Order::Q4Vec || O == Q45Order::Q5Vec) {
            const float d = y[b].d * h2f(x[b].d), dmin = -y[b].d * h2f(x[b].dmin);
            if constexpr (O == Q45Order::Q4Vec) acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(l.mins), acc_m);
            else acc1_m = std::fma(dmin, static_cast<float>(hsum4(l.mins)), acc1_m);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(l.lanes()), acc);
        } else {
            const float dxy = h2f(x[b].d) * y[b].d, dmy = h2f(x[b].dmin) * y[b].d;
            if constexpr (O == Q45Order::Q4Repacked) {
                acc1 = std::fma(static_cast<float>(hsum_lanes(l.lanes())), dxy, acc1);
                acc1_m = std::fma(static_cast<float>(hsum4(l.mins)), dmy, acc1_m);
            } else {
                alignas(16) int32_t m[4];
                _mm_store_si128(reinterpret_cast<__m128i*>(m), l.mins);
                for (int p = 0; p < 4; ++p) {
                    acc1 = std::fma(static_cast<float>(hsum_lanes(l.pair[p])), dxy, acc1);
                    acc1_m = std::fma(static_cast<float>(m[p]), dmy, acc1_m);
                }
            }
        }
    }
    if constexpr (O == Q45Order::Q4Vec) return hsum_float_8(acc) + hsum_mins4(acc_m);
    if constexpr (O == Q45Order::Q5Vec) return hsum_float_8(acc) + acc1_m;
    return acc1 - acc1_m;
}

// ---- Q6_K ----

// Eight lanes of sum(scale * q * y) with q unsigned (0..63), minus 32 * (scale-weighted activation sums of
// sub-block pairs), in ggml's split (dot_q6_K_ref).
inline __m256i q6_lanes(const BlockQ6_K& x, const BlockQ8_K& y) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
        const __m256i scales = both_lanes(_mm_cvtepi8_epi16(half ? _mm_unpackhi_epi64(sc8, sc8) : sc8));
        const __m256i l0 = load32(x.ql + 64 * half), l1 = load32(x.ql + 64 * half + 32), h = load32(x.qh + 32 * half);
        // The high bit pairs moved to bits 4-5 by masking first, so that each takes one shift (or none).
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_slli_epi16(_mm256_and_si256(h, three), 4)),
            _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(0x0C)), 2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, _mm256_set1_epi8(0x30))),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), _mm256_srli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(static_cast<char>(0xC0))), 2)),
        };
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
            sum[k & 1] = _mm256_add_epi32(sum[k & 1], dot_us8_scaled(q[k], load32(y.qs + 128 * half + 32 * k), scale_pair(scales, k)));
    }
    const __m256i bsum_scaled = _mm256_madd_epi16(load32(y.bsums), _mm256_cvtepi8_epi16(sc8));
    return _mm256_sub_epi32(_mm256_add_epi32(sum[0], sum[1]), _mm256_slli_epi32(bsum_scaled, 5));
}

float q6_K_dot(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ6_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * h2f(x[b].d)), _mm256_cvtepi32_ps(q6_lanes(x[b], y[b])), acc);
    return hsum_float_8(acc);
}

// ---- Q2_K ----

// The mins' lanes (sub-blocks 2l, 2l+1 against their activation sums) and the scaled values' lanes per half block.
struct Q2Lanes {
    __m256i mins, vals[2];
};
inline Q2Lanes q2_lanes(const BlockQ2_K& x, const BlockQ8_K& y) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)), low4 = _mm_set1_epi8(0x0F);
    Q2Lanes out;
    out.mins = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), low4)), load32(y.bsums));
    const __m128i scales8 = _mm_and_si128(sc, low4);
    const __m256i three = _mm256_set1_epi8(3);
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
        const __m256i scales = both_lanes(_mm_cvtepu8_epi16(half ? _mm_unpackhi_epi64(scales8, scales8) : scales8));
        const __m256i bits = load32(x.qs + 32 * half);
        __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), three);
            s[k & 1] = _mm256_add_epi32(s[k & 1], dot_us8_scaled(q, load32(y.qs + 128 * half + 32 * k), scale_pair(scales, k)));
        }
        out.vals[half] = _mm256_add_epi32(s[0], s[1]);
    }
    return out;
}

float q2_K_dot(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ2_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const Q2Lanes l = q2_lanes(x[b], y[b]);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(-y[b].d * h2f(x[b].dmin)), _mm256_cvtepi32_ps(l.mins), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * h2f(x[b].d)), _mm256_cvtepi32_ps(_mm256_add_epi32(l.vals[0], l.vals[1])), acc);
    }
    return hsum_float_8(acc);
}

// llama.cpp's repacked Q2_K (AVX-512 builds): whole-block (GEMV) or half-block (GEMM) sums, see dot_q2_K_repacked_in.
template <int Parts>
float q2_K_repacked_dot(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ2_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    float acc = 0.f, acc_m = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const Q2Lanes l = q2_lanes(x[b], y[b]);
        const float dxy = h2f(x[b].d) * y[b].d, dmy = h2f(x[b].dmin) * y[b].d;
        if constexpr (Parts == 1) {
            acc = std::fma(static_cast<float>(hsum_lanes(_mm256_add_epi32(l.vals[0], l.vals[1]))), dxy, acc);
            acc_m = std::fma(static_cast<float>(hsum_lanes(l.mins)), dmy, acc_m);
        } else {
            const __m128i mins[2] = {_mm256_castsi256_si128(l.mins), _mm256_extracti128_si256(l.mins, 1)};
            for (int p = 0; p < 2; ++p) {
                acc = std::fma(static_cast<float>(hsum_lanes(l.vals[p])), dxy, acc);
                acc_m = std::fma(static_cast<float>(hsum4(mins[p])), dmy, acc_m);
            }
        }
    }
    return acc - acc_m;
}

// ---- Q3_K ----

// The sixteen 6-bit scales minus 32 (quant::q3k_scales), built in registers: going through memory would stall
// on store forwarding.
inline __m128i q3_scales(const uint8_t* s) {
    uint32_t u[3];
    std::memcpy(u, s, 12);
    constexpr uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const __m128i v = _mm_set_epi32(static_cast<int>(((u[1] >> 4) & m4) | (((u[2] >> 6) & m2) << 4)),
                                    static_cast<int>(((u[0] >> 4) & m4) | (((u[2] >> 4) & m2) << 4)),
                                    static_cast<int>((u[1] & m4) | (((u[2] >> 2) & m2) << 4)),
                                    static_cast<int>((u[0] & m4) | ((u[2] & m2) << 4)));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// q = low two bits - (high bit clear ? 4 : 0), times the signed 6-bit scale of each 16.
float q3_K_dot(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ3_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const __m128i scales8 = q3_scales(x[b].scales);
        const __m256i hmask = load32(x[b].hmask);
        __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
            const __m256i scales = both_lanes(_mm_cvtepi8_epi16(half ? _mm_unpackhi_epi64(scales8, scales8) : scales8));
            const __m256i bits = load32(x[b].qs + 32 * half);
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) {
                const int g = 4 * half + k;
                const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), three);
                // 4 where bit g of the element's hmask byte is clear
                const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << g));
                const __m256i minus4 = _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), bit), four);
                const __m256i yg = load32(y[b].qs + 32 * g);
                const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(low, yg), _mm256_maddubs_epi16(minus4, yg));
                s[k & 1] = _mm256_add_epi32(s[k & 1], _mm256_madd_epi16(p, scale_pair(scales, k)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * h2f(x[b].d)), _mm256_cvtepi32_ps(_mm256_add_epi32(s[0], s[1])), acc);
    }
    return hsum_float_8(acc);
}

// ---- the table ----

inline void add_simd_kquant_kernels(KernelTable& t) {
    auto set = [&](GgmlType type, DotFn f, DotRowsFn rows) {
        t.dot[static_cast<int>(type)] = f;
        t.dot_rows[static_cast<int>(type)] = rows;
    };
    constexpr auto q4 = q45_dot<BlockQ4_K, false, Q45Order::Q4Vec>;
    constexpr auto q4_rp = q45_dot<BlockQ4_K, false, Q45Order::Q4Repacked>;
    constexpr auto q4_rp_gemm = q45_dot<BlockQ4_K, false, Q45Order::Q4RepackedGemm>;
    constexpr auto q5 = q45_dot<BlockQ5_K, true, Q45Order::Q5Vec>;
    set(GgmlType::Q2_K, q2_K_dot, dot_rows_of<q2_K_dot>);
    set(GgmlType::Q3_K, q3_K_dot, dot_rows_of<q3_K_dot>);
    set(GgmlType::Q4_K, q4, dot_rows_of<q4>);
    set(GgmlType::Q5_K, q5, dot_rows_of<q5>);
    set(GgmlType::Q6_K, q6_K_dot, dot_rows_of<q6_K_dot>);
    const int q4k = static_cast<int>(GgmlType::Q4_K), q2k = static_cast<int>(GgmlType::Q2_K);
    t.dot_repacked[q4k] = q4_rp;
    t.dot_repacked_gemm[q4k] = q4_rp_gemm;
    t.dot_rows_repacked[q4k] = dot_rows_of<q4_rp>;
    if (t.flavor == Flavor::Avx512) {
        t.dot_repacked[q2k] = q2_K_repacked_dot<1>;
        t.dot_repacked_gemm[q2k] = q2_K_repacked_dot<2>;
        t.dot_rows_repacked[q2k] = dot_rows_of<q2_K_repacked_dot<1>>;
    }
}

}  // namespace
}  // namespace moe::kernels

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
#include "engine/kernels/tile_simd.h"

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

// A Q4_K/Q5_K block's weights unpacked once (nibbles with their fifth bit, scales as shuffle sources), so that
// a tile of several tokens can share the unpacking; q45_apply then does one token's part.
struct Q45Decoded {
    __m256i lo[4], hi[4];
    __m256i scales;  // the eight int16 scales in both 128-bit lanes
    __m128i mins16;  // the eight int16 mins
};

template <bool Five>
inline Q45Decoded q45_decode(const uint8_t* scales12, const uint8_t* qs, const uint8_t* qh) {
    const __m256i scales_mins = _mm256_cvtepu8_epi16(q45_scales_mins(scales12));
    Q45Decoded d;
    d.mins16 = _mm256_extracti128_si256(scales_mins, 1);
    d.scales = both_lanes(_mm256_castsi256_si128(scales_mins));
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i hbits = Five ? load32(qh) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        const __m256i bits = load32(qs + 32 * j);
        d.lo[j] = _mm256_and_si256(bits, low4);
        d.hi[j] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low4);
        if (Five) {
            d.lo[j] = _mm256_or_si256(d.lo[j], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one), 4));
            d.hi[j] = _mm256_or_si256(d.hi[j], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one), 4));
        }
    }
    return d;
}

// Lane k: min[2k] x (sub-block 2k's activation sum) + min[2k + 1] x (...).
inline __m128i q45_mins(__m128i mins16, const BlockQ8_K& y) {
    const __m128i bsums = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8)));
    return _mm_madd_epi16(mins16, bsums);
}

inline Q45Lanes q45_apply(const Q45Decoded& d, const BlockQ8_K& y) {
    Q45Lanes out;
    out.mins = q45_mins(d.mins16, y);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        const __m256i plo = dot_us8_scaled(d.lo[j], load32(y.qs + 64 * j), scale_word(d.scales, 2 * j));
        const __m256i phi = dot_us8_scaled(d.hi[j], load32(y.qs + 64 * j + 32), scale_word(d.scales, 2 * j + 1));
        out.pair[j] = _mm256_add_epi32(plo, phi);
    }
    return out;
}

template <bool Five>
inline Q45Lanes q45_lanes(const uint8_t* scales12, const uint8_t* qs, const uint8_t* qh, const BlockQ8_K& y) {
    return q45_apply(q45_decode<Five>(scales12, qs, qh), y);
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

// The float chains of llama.cpp's repacked Q4_K orders for eight rows by T tokens, lane i = row i: the per-row
// FMA chains of q45_dot<..., Q4Repacked / Q4RepackedGemm> run side by side in one register instead of reducing
// every block to a scalar (as llama.cpp's interleaved q4_Kx8 kernels do too).
template <Q45Order O, int T>
struct Q4RepackedRowChains {
    static_assert(O == Q45Order::Q4Repacked || O == Q45Order::Q4RepackedGemm);
    static constexpr int P = O == Q45Order::Q4Repacked ? 1 : 4;  // lane sums per block: the whole block, or per pair
    __m256 acc[T], acc_m[T];
    Q4RepackedRowChains() {
        for (int t = 0; t < T; ++t) acc[t] = acc_m[t] = _mm256_setzero_ps();
    }
    // Block b's scales of the eight rows (dx[i]: row i's) times token t's.
    static __m256 row_scales(const float* dx, const BlockQ8_K* const* y, int t, int64_t b) {
        return _mm256_mul_ps(_mm256_load_ps(dx), _mm256_set1_ps(y[t][b].d));
    }
    // Token t's block: parts[p] lane i = row i's integer sum of the block (P == 1) or of pair p; mins[p] alike.
    [[gnu::always_inline]] void add_rows(int t, const __m256i* parts, const __m256i* mins, __m256 dxy, __m256 dmy) {
        for (int p = 0; p < P; ++p) {
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(parts[p]), dxy, acc[t]);
            acc_m[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins[p]), dmy, acc_m[t]);
        }
    }
    // The eight rows' mins lanes (mins[i]: row i's four, zero above) as add_rows takes them.
    static void min_rows(const __m256i (&mins)[8], __m256i* out) {
        if constexpr (P == 1) {
            out[0] = row_sums8(mins);
        } else {
            __m256 m[8], mt[8];  // mt[p] lane i: row i's mins term of pair p
            for (int i = 0; i < 8; ++i) m[i] = _mm256_castsi256_ps(mins[i]);
            transpose8(m, mt);
            for (int p = 0; p < 4; ++p) out[p] = _mm256_castps_si256(mt[p]);
        }
    }
    // One block: sums[t][p][i] row i's lanes of the block (P == 1) or of pair p; mins[t][i] its mins' four lanes.
    [[gnu::always_inline]] void add(const __m256i (&sums)[T][P][8], const __m256i (&mins)[T][8], const float* dx, const float* dm,
                                    const BlockQ8_K* const* y, int64_t b) {
        for (int t = 0; t < T; ++t) {
            __m256i parts[P], min_parts[P];
            for (int p = 0; p < P; ++p) parts[p] = row_sums8(sums[t][p]);
            min_rows(mins[t], min_parts);
            add_rows(t, parts, min_parts, row_scales(dx, y, t, b), row_scales(dm, y, t, b));
        }
    }
    void store(float* const* out) const {
        for (int t = 0; t < T; ++t) _mm256_storeu_ps(out[t], _mm256_sub_ps(acc[t], acc_m[t]));
    }
};

// Eight rows by up to four tokens in the repacked orders, each block unpacked once for all the tokens. Same bits
// per (row, token) as the one-row kernel.
template <Q45Order O, int T>
void q4_K_repacked_8xT(int64_t nb, const uint8_t* w, size_t row_bytes, const BlockQ8_K* const* y, float* const* out) {
    using Chains = Q4RepackedRowChains<O, T>;
    Chains chains;
    for (int64_t b = 0; b < nb; ++b) {
        alignas(32) float dx[8], dm[8];
        __m256i sums[T][Chains::P][8], mins[T][8];
        for (int i = 0; i < 8; ++i) {
            const BlockQ4_K& x = reinterpret_cast<const BlockQ4_K*>(w + static_cast<size_t>(i) * row_bytes)[b];
            const Q45Decoded d = q45_decode<false>(x.scales, x.qs, nullptr);
            for (int t = 0; t < T; ++t) {
                const Q45Lanes l = q45_apply(d, y[t][b]);
                if constexpr (Chains::P == 1) sums[t][0][i] = l.lanes();
                else
                    for (int p = 0; p < 4; ++p) sums[t][p][i] = l.pair[p];
                mins[t][i] = _mm256_zextsi128_si256(l.mins);
            }
            dx[i] = h2f(x.d);
            dm[i] = h2f(x.dmin);
        }
        chains.add(sums, mins, dx, dm, y, b);
    }
    chains.store(out);
}

template <Q45Order O>
void q4_K_repacked_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                        int64_t out_stride) {
    const int64_t nb = n / QK_K;
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8) {
        const uint8_t* w8 = w + static_cast<size_t>(r) * row_bytes;
        for_token_tiles<BlockQ8_K>(n_tok, act, act_bytes, out, out_stride, r,
                                   [&]<int T>(const BlockQ8_K* const* y, float* const* o) { q4_K_repacked_8xT<O, T>(nb, w8, row_bytes, y, o); });
    }
    for (; r < rows; ++r)
        for (int t = 0; t < n_tok; ++t)
            out[t * out_stride + r] = q45_dot<BlockQ4_K, false, O>(n, w + static_cast<size_t>(r) * row_bytes,
                                                                   act + static_cast<size_t>(t) * act_bytes);
}

template <Q45Order O>
void q4_K_repacked_rows(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    q4_K_repacked_tile<O>(n, w, row_bytes, rows, static_cast<const uint8_t*>(a), 0, 1, out, 0);
}

// ---- Q6_K ----

// A Q6_K block's weights unpacked once (six-bit values, scales), shared by the tokens of a tile.
struct Q6Decoded {
    __m256i q[2][4];
    __m256i scales[2];  // each half's eight int16 scales in both 128-bit lanes
    __m128i sc8;
};

inline Q6Decoded q6_decode(const BlockQ6_K& x) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    Q6Decoded d;
    d.sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
        d.scales[half] = both_lanes(_mm_cvtepi8_epi16(half ? _mm_unpackhi_epi64(d.sc8, d.sc8) : d.sc8));
        const __m256i l0 = load32(x.ql + 64 * half), l1 = load32(x.ql + 64 * half + 32), h = load32(x.qh + 32 * half);
        // The high bit pairs moved to bits 4-5 by masking first, so that each takes one shift (or none).
        d.q[half][0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_slli_epi16(_mm256_and_si256(h, three), 4));
        d.q[half][1] = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(0x0C)), 2));
        d.q[half][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, _mm256_set1_epi8(0x30)));
        d.q[half][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                       _mm256_srli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(static_cast<char>(0xC0))), 2));
    }
    return d;
}

// Eight lanes of sum(scale * q * y) with q unsigned (0..63), minus 32 * (scale-weighted activation sums of
// sub-block pairs), in ggml's split (dot_q6_K_ref).
inline __m256i q6_apply(const Q6Decoded& d, const BlockQ8_K& y) {
    __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half)
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
            sum[k & 1] = _mm256_add_epi32(sum[k & 1],
                                          dot_us8_scaled(d.q[half][k], load32(y.qs + 128 * half + 32 * k), scale_pair(d.scales[half], k)));
    const __m256i bsum_scaled = _mm256_madd_epi16(load32(y.bsums), _mm256_cvtepi8_epi16(d.sc8));
    return _mm256_sub_epi32(_mm256_add_epi32(sum[0], sum[1]), _mm256_slli_epi32(bsum_scaled, 5));
}

inline __m256i q6_lanes(const BlockQ6_K& x, const BlockQ8_K& y) { return q6_apply(q6_decode(x), y); }

float q6_K_dot(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ6_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * h2f(x[b].d)), _mm256_cvtepi32_ps(q6_lanes(x[b], y[b])), acc);
    return hsum_float_8(acc);
}

// One row by T tokens: q6_K_dot's chain per token, each block unpacked once.
template <int T>
void q6_K_1xT(int64_t nb, const BlockQ6_K* x, const BlockQ8_K* const* y, float* const* out) {
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const Q6Decoded d = q6_decode(x[b]);
        const float dx = h2f(x[b].d);
        for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][b].d * dx), _mm256_cvtepi32_ps(q6_apply(d, y[t][b])), acc[t]);
    }
    for (int t = 0; t < T; ++t) *out[t] = hsum_float_8(acc[t]);
}

template <int T>
struct Q6Tile {
    static void run(int64_t nb, const BlockQ6_K* x, const BlockQ8_K* const* y, float* const* out) { q6_K_1xT<T>(nb, x, y, out); }
};

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

// One row's block as 256 scale x value bytes in element order (eight registers of 32).
inline void q2_scaled_values(const BlockQ2_K& x, __m256i out[8]) {
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
    for (int g = 0; g < 8; ++g) {
        const __m256i bits = load32(x.qs + 32 * (g / 4));
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (g % 4)), three);
        // elements 0..15 of the group: sub-block 2g's scale; 16..31: sub-block 2g + 1's
        const __m256i s = _mm256_set_m128i(_mm_set1_epi8(static_cast<char>(x.scales[2 * g + 1] & 0xF)),
                                           _mm_set1_epi8(static_cast<char>(x.scales[2 * g] & 0xF)));
        const __m256i s1 = _mm256_and_si256(s, _mm256_cmpeq_epi8(_mm256_and_si256(q, one), one));
        const __m256i s2 = _mm256_and_si256(_mm256_add_epi8(s, s), _mm256_cmpeq_epi8(_mm256_and_si256(q, two), two));
        out[g] = _mm256_add_epi8(s1, s2);  // q x s for q in 0..3
    }
}

// llama.cpp's repacked Q2_K (AVX-512 builds): whole-block (GEMV) or half-block (GEMM) sums, see dot_q2_K_repacked_in.
template <int Parts>
struct Q2KRepackedStep {
    using Block = BlockQ2_K;
    using Act = BlockQ8_K;
    static constexpr int64_t kBlockElems = QK_K;
    struct State {
        float acc, acc_m;
    };
    static State init() { return {0.f, 0.f}; }
    static void step(State& s, const BlockQ2_K& x, const BlockQ8_K& y) {
        const Q2Lanes l = q2_lanes(x, y);
        const float dxy = h2f(x.d) * y.d, dmy = h2f(x.dmin) * y.d;
        if constexpr (Parts == 1) {
            s.acc = std::fma(static_cast<float>(hsum_lanes(_mm256_add_epi32(l.vals[0], l.vals[1]))), dxy, s.acc);
            s.acc_m = std::fma(static_cast<float>(hsum_lanes(l.mins)), dmy, s.acc_m);
        } else {
            const __m128i mins[2] = {_mm256_castsi256_si128(l.mins), _mm256_extracti128_si256(l.mins, 1)};
            for (int p = 0; p < 2; ++p) {
                s.acc = std::fma(static_cast<float>(hsum_lanes(l.vals[p])), dxy, s.acc);
                s.acc_m = std::fma(static_cast<float>(hsum4(mins[p])), dmy, s.acc_m);
            }
        }
    }
    static float finish(const State& s) { return s.acc - s.acc_m; }
};
template <int Parts>
constexpr auto q2_K_repacked_dot = step_dot<Q2KRepackedStep<Parts>>;

// ---- Q3_K ----

// The sixteen 6-bit scales minus 32 (quant::q3k_scales), built in registers: going through memory would stall
// on store forwarding.
inline __m128i q3_scales(const uint8_t* s) {
    uint32_t u[3];
    std::memcpy(u, s, 12);
    constexpr uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const __m128i v = _mm_set_epi32(static_cast<int>(((u[1] >> 4) & m4) | (((u[2] >> 6) & m2) << 4)),
                                    static_cast<int>(((u[0] >> 4) & m4) | (((u[2] >> 4) & m2) << 4)),
                                    static_cast<int>((u[1] & m4) | (((u[2] >> 2) & m2) << 4)), static_cast<int>((u[0] & m4) | ((u[2] & m2) << 4)));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// q = low two bits - (high bit clear ? 4 : 0), times the signed 6-bit scale of each 16.
__attribute__((always_inline)) inline __m256i q3_lanes(const BlockQ3_K& x, const BlockQ8_K& y) {
    const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m128i scales8 = q3_scales(x.scales);
    const __m256i hmask = load32(x.hmask);
    __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
        const __m256i scales = both_lanes(_mm_cvtepi8_epi16(half ? _mm_unpackhi_epi64(scales8, scales8) : scales8));
        const __m256i bits = load32(x.qs + 32 * half);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const int g = 4 * half + k;
            const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), three);
            // 4 where bit g of the element's hmask byte is clear
            const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << g));
            const __m256i minus4 = _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), bit), four);
            const __m256i yg = load32(y.qs + 32 * g);
            const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(low, yg), _mm256_maddubs_epi16(minus4, yg));
            s[k & 1] = _mm256_add_epi32(s[k & 1], _mm256_madd_epi16(p, scale_pair(scales, k)));
        }
    }
    return _mm256_add_epi32(s[0], s[1]);
}

// K-quant step kernels (tile_simd.h): vec_dot's chains, one block at a time.
template <class B>
struct KQuantStep {
    using Block = B;
    using Act = BlockQ8_K;
    static constexpr int64_t kBlockElems = QK_K;
};

// Q3_K: acc += (y.d * x.d) * lanes.
struct Q3KStep : KQuantStep<BlockQ3_K> {
    using State = Acc8State;
    static State init() { return {_mm256_setzero_ps()}; }
    static void step(State& s, const BlockQ3_K& x, const BlockQ8_K& y) {
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(y.d * h2f(x.d)), _mm256_cvtepi32_ps(q3_lanes(x, y)), s.acc);
    }
    static float finish(const State& s) { return hsum_float_8(s.acc); }
};
// The one-row dot as a plain loop (through Q3KStep's State GCC schedules it 15-25% slower).
float q3_K_dot(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ3_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * h2f(x[b].d)), _mm256_cvtepi32_ps(q3_lanes(x[b], y[b])), acc);
    return hsum_float_8(acc);
}

// Q2_K: the mins' lanes, then the values' lanes, into one accumulator.
struct Q2KStep : KQuantStep<BlockQ2_K> {
    using State = Acc8State;
    static State init() { return {_mm256_setzero_ps()}; }
    static void step(State& s, const BlockQ2_K& x, const BlockQ8_K& y) {
        const Q2Lanes l = q2_lanes(x, y);
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(-y.d * h2f(x.dmin)), _mm256_cvtepi32_ps(l.mins), s.acc);
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(y.d * h2f(x.d)), _mm256_cvtepi32_ps(_mm256_add_epi32(l.vals[0], l.vals[1])), s.acc);
    }
    static float finish(const State& s) { return hsum_float_8(s.acc); }
};
constexpr auto q2_K_dot = step_dot<Q2KStep>;

// Q4_K and Q5_K in their vec_dot orders (q45_dot's Q4Vec and Q5Vec).
template <class B, bool Five>
struct Q45VecStep : KQuantStep<B> {
    struct State {
        __m256 acc;
        __m128 acc_m;  // Q4_K: four lanes of mins
        float acc1_m;  // Q5_K: one float of mins
    };
    static State init() { return {_mm256_setzero_ps(), _mm_setzero_ps(), 0.f}; }
    static void step(State& s, const B& x, const BlockQ8_K& y) {
        const uint8_t* qh = nullptr;
        if constexpr (Five) qh = x.qh;
        const Q45Lanes l = q45_lanes<Five>(x.scales, x.qs, qh, y);
        add_block(s, l.lanes(), l.mins, y.d * h2f(x.d), -y.d * h2f(x.dmin));
    }
    // A block's value lanes and mins' lanes into the chains, with d = y.d * x.d and dmin = -y.d * x.dmin.
    [[gnu::always_inline]] static void add_block(State& s, __m256i lanes, __m128i mins, float d, float dmin) {
        if constexpr (Five) s.acc1_m = std::fma(dmin, static_cast<float>(hsum4(mins)), s.acc1_m);
        else s.acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins), s.acc_m);
        s.acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), s.acc);
    }
    static float finish(const State& s) { return Five ? hsum_float_8(s.acc) + s.acc1_m : hsum_float_8(s.acc) + hsum_mins4(s.acc_m); }
};

// ---- the table ----

inline void add_simd_kquant_kernels(KernelTable& t) {
    constexpr auto q4 = q45_dot<BlockQ4_K, false, Q45Order::Q4Vec>;
    constexpr auto q4_rp = q45_dot<BlockQ4_K, false, Q45Order::Q4Repacked>;
    constexpr auto q4_rp_gemm = q45_dot<BlockQ4_K, false, Q45Order::Q4RepackedGemm>;
    constexpr auto q5 = q45_dot<BlockQ5_K, true, Q45Order::Q5Vec>;
    set_dot<q2_K_dot>(t, GgmlType::Q2_K);
    set_dot<q3_K_dot>(t, GgmlType::Q3_K);
    set_dot<q4>(t, GgmlType::Q4_K);
    set_dot<q5>(t, GgmlType::Q5_K);
    set_dot<q6_K_dot>(t, GgmlType::Q6_K);
    const int q4k = static_cast<int>(GgmlType::Q4_K), q2k = static_cast<int>(GgmlType::Q2_K);
    t.dot_repacked[q4k] = q4_rp;
    t.dot_repacked_gemm[q4k] = q4_rp_gemm;
    t.dot_rows_repacked[q4k] = q4_K_repacked_rows<Q45Order::Q4Repacked>;
    t.dot_rows_repacked_gemm[q4k] = q4_K_repacked_rows<Q45Order::Q4RepackedGemm>;
    t.tile[static_cast<int>(GgmlType::Q6_K)] = tile_rows_by_tokens<BlockQ6_K, BlockQ8_K, QK_K, Q6Tile>;
    t.tile[q4k] = step_tile<Q45VecStep<BlockQ4_K, false>>;
    t.tile[static_cast<int>(GgmlType::Q5_K)] = step_tile<Q45VecStep<BlockQ5_K, true>>;
    t.tile_repacked[q4k] = q4_K_repacked_tile<Q45Order::Q4Repacked>;
    t.tile_repacked_gemm[q4k] = q4_K_repacked_tile<Q45Order::Q4RepackedGemm>;
    if (t.flavor == Flavor::Avx512) {
        t.dot_repacked[q2k] = q2_K_repacked_dot<1>;
        t.dot_repacked_gemm[q2k] = q2_K_repacked_dot<2>;
        t.dot_rows_repacked[q2k] = dot_rows_of<q2_K_repacked_dot<1>>;
        t.tile_repacked[q2k] = step_tile<Q2KRepackedStep<1>>;
        t.tile_repacked_gemm[q2k] = step_tile<Q2KRepackedStep<2>>;
    }
}

}  // namespace
}  // namespace moe::kernels

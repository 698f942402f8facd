// AVX-512 row and tile kernels for IQ3_KS and IQ4_KS that take each group's second table (the first + 4) and their
// values' offset back through the token's sums of four, computed once per call, instead of per row and block:
// IQ3_KS needs no sign step, IQ4_KS no PMADDUBSW pairs. The integers of every lane are the 256-bit kernel's, so
// its bits. Included by ik_table_avx512.h.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/ik/ik_table_simd.h"

namespace moe::kernels {
namespace {
namespace ikt {

inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }
// Two rows' (or tokens') sixteen int32 lanes as one register: a's two halves added in lanes 0..7, b's in 8..15.
inline __m512i halves_of_two(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_permutex2var_epi64(a, _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11), b),
                            _mm512_permutex2var_epi64(a, _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15), b));
}
// The 256-bit kernel's horizontal sum of half h of a register holding two rows' (or tokens') eight lanes.
inline float hsum_half(__m512 acc, int h) {
    return hsum_float_8(h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)) : _mm512_castps512_ps256(acc));
}

// 128 bytes of nibbles (group g's low and high nibbles in bytes 16g..16g+15) as four group pairs laid out as
// nibble_pair lays them out: a whole block split at once, then the pairs' 128-bit lanes picked from both halves.
inline void block_nibble_pairs(const uint8_t* qs, __m512i out[4]) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    const __m512i even = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), odd = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for (int h = 0; h < 2; ++h) {
        const __m512i b = load64(qs + 64 * h);
        const __m512i lo = _mm512_and_si512(b, m), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), m);
        out[2 * h] = _mm512_permutex2var_epi64(lo, even, hi);
        out[2 * h + 1] = _mm512_permutex2var_epi64(lo, odd, hi);
    }
}

// IQ3_KS and IQ4_KS over many rows against one token. Both types pick per group of 32 one of two tables, the
// second the first + 4; here every group reads the first, and the + 4 e_g comes back per group through the token's
// sums of four, Q4[g][j] = q[32g + 4j] + ... + q[32g + 4j + 3] (once per call): lane j gets
// sum_g s_g sum v' q + sum_g s_g c_g Q4[g][j], the integers of the two-table kernel's lane exactly, so its float
// steps and bits. IQ3_KS also reads its values + 64 (|v + 64| <= 115: no PMADDUBSW pair sum saturates), so it needs
// no sign step either: c_g = 4 e_g - 64. IQ4_KS's values + 128 would saturate PMADDUBSW: its rows
// (dot_rows_iq4_ks) take VPDPBUSD's sums of four instead, c_g = 4 e_g - 128 their starting values.
// The token's quad sums for a block, as the correction's pairs: 256 bits per group pair (2p, 2p + 1) holding the
// int16 pairs (Q4[2p][j], Q4[2p + 1][j]) for j = 0..7; pairs 0 and 1 in the first register, 2 and 3 in the second.
constexpr bool second_table_is_first_plus(const int8_t* values, int half, int step) {
    for (int i = 0; i < half; ++i)
        if (values[half + i] != values[i] + step) return false;
    return true;
}
static_assert(second_table_is_first_plus(ik::kIq3nlValues, 8, 4) && second_table_is_first_plus(ik::kIq4kValues, 16, 4));
struct alignas(64) QuadSumPairs {
    int16_t v[64];
};
inline void quad_sum_pairs(const int8_t* qs, QuadSumPairs& out) {
    __m256i pair[4];
    for (int p = 0; p < 4; ++p) {
        const __m512i q4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), load64(qs + 64 * p));
        const __m256i w = _mm512_cvtepi32_epi16(q4);  // Q4[2p][0..7], then Q4[2p + 1][0..7]
        const __m128i a = _mm256_castsi256_si128(w), b = _mm256_extracti128_si256(w, 1);
        pair[p] = _mm256_setr_m128i(_mm_unpacklo_epi16(a, b), _mm_unpackhi_epi16(a, b));
    }
    _mm512_store_si512(out.v, _mm512_inserti64x4(_mm512_castsi256_si512(pair[0]), pair[1], 1));
    _mm512_store_si512(out.v + 32, _mm512_inserti64x4(_mm512_castsi256_si512(pair[2]), pair[3], 1));
}

// A token's block in the order a row's indices unpack into: the 16 bytes c of register p are the activations
// from K::kChunk[p][c] on (group kChunk / 32), laid out once per call so that no row needs a cross-lane permute.
struct alignas(64) UnpackOrderQuants {
    int8_t q[QK_K];
};
template <class K>
void unpack_order_activations(const int8_t* qs, UnpackOrderQuants& out) {
    for (int p = 0; p < 4; ++p)
        for (int c = 0; c < 4; ++c)
            _mm_store_si128(reinterpret_cast<__m128i*>(out.q + 64 * p + 16 * c),
                            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + K::kChunk[p][c])));
}

// The token side of the quad-corrected kernels, built once per call: per block its quad sums and its
// activations in unpack order.
struct QuadCorrectedTokens {
    std::vector<QuadSumPairs> quads;
    std::vector<UnpackOrderQuants> ordered;
    template <class K>
    void build(const ik::BlockQ8K* y, int64_t nb, int64_t at) {
        for (int64_t i = 0; i < nb; ++i) {
            quad_sum_pairs(y[i].qs, quads[static_cast<size_t>(at + i)]);
            unpack_order_activations<K>(y[i].qs, ordered[static_cast<size_t>(at + i)]);
        }
    }
    void resize(int64_t blocks) {
        quads.resize(static_cast<size_t>(blocks));
        ordered.resize(static_cast<size_t>(blocks));
    }
};

// One row's block, decoded once for any number of tokens: the values (unsigned, the correction covering the
// rest), each register's scales and the correction's scale pairs.
template <class K>
struct QuadCorrectedBlock {
    // register p's scales, each 128-bit lane c its group's int16 word
    struct Picks {
        __m512i pick[4];
        Picks() {
            for (int p = 0; p < 4; ++p) {
                alignas(64) int16_t words[32];
                for (int c = 0; c < 4; ++c)
                    for (int j = 0; j < 8; ++j) words[8 * c + j] = static_cast<int16_t>(0x0100 + 0x0202 * (K::kChunk[p][c] / 32));
                pick[p] = _mm512_load_si512(words);
            }
        }
    };
    __m512i values[4], scales[4], first, second;
    QuadCorrectedBlock(const K& kind, const Picks& picks, const typename K::Block& b) {
        __m128i s, c;  // the eight groups' scales and correction coefficients, int16
        K::scales(b, s, c);
        const __m512i sc = _mm512_castsi128_si512(_mm_mullo_epi16(s, c));
        first = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), sc);
        second = _mm512_permutexvar_epi32(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), sc);
        __m512i idx[4];
        K::indices(b, idx);
        const __m512i s4 = _mm512_broadcast_i32x4(s);
        for (int p = 0; p < 4; ++p) {
            values[p] = kind.values(idx[p]);
            scales[p] = _mm512_shuffle_epi8(s4, picks.pick[p]);
        }
    }
    // A token's sixteen int32 lanes before the halves are added: two chains, started by the correction.
    __m512i sums(const QuadSumPairs& quad, const UnpackOrderQuants& ordered) const {
        __m512i sum0 = _mm512_madd_epi16(_mm512_load_si512(quad.v), first);
        __m512i sum1 = _mm512_madd_epi16(_mm512_load_si512(quad.v + 32), second);
        for (int p = 0; p < 4; ++p) {
            const __m512i prod = _mm512_maddubs_epi16(values[p], _mm512_load_si512(ordered.q + 64 * p));
            if (p % 2) sum1 = _mm512_dpwssd_epi32(sum1, prod, scales[p]);
            else sum0 = _mm512_dpwssd_epi32(sum0, prod, scales[p]);
        }
        return _mm512_add_epi32(sum0, sum1);
    }
};

// Two rows per float register (row a's lanes in the first half, b's in the second; each half's steps are the
// 256-bit kernel's), so the conversions and FMAs take one instruction for both and the rows' chains overlap.
template <class K>
void dot_rows_quad_corrected(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const ik::BlockQ8K*>(a);
    const int64_t nb = n / QK_K;
    thread_local QuadCorrectedTokens tokens;
    tokens.resize(nb);
    tokens.build<K>(y, nb, 0);
    const K kind;
    const typename QuadCorrectedBlock<K>::Picks picks;
    for (int64_t r = 0; r < rows; r += 2) {
        const int64_t rb = std::min(r + 1, rows - 1);  // a lone last row pairs with itself
        const uint8_t* row_a = w + static_cast<size_t>(r) * row_bytes;
        const uint8_t* row_b = w + static_cast<size_t>(rb) * row_bytes;
        const auto* xa = reinterpret_cast<const typename K::Block*>(row_a + K::kMeta);
        const auto* xb = reinterpret_cast<const typename K::Block*>(row_b + K::kMeta);
        const __m512 d = _mm512_mask_broadcastss_ps(_mm512_set1_ps(K::row_scale(row_a)), 0xFF00, _mm_set_ss(K::row_scale(row_b)));
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const QuadSumPairs& quad = tokens.quads[static_cast<size_t>(i)];
            const UnpackOrderQuants& ordered = tokens.ordered[static_cast<size_t>(i)];
            const __m512i sa = QuadCorrectedBlock<K>(kind, picks, xa[i]).sums(quad, ordered);
            const __m512i sb = QuadCorrectedBlock<K>(kind, picks, xb[i]).sums(quad, ordered);
            const __m512i both = halves_of_two(sa, sb);
            acc = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(y[i].d)), _mm512_cvtepi32_ps(both), acc);
        }
        out[r] = hsum_half(acc, 0);
        if (rb != r) out[rb] = hsum_half(acc, 1);
    }
}

// The same over rows x tokens, two tokens per float register as tile_of_paired (the same float steps per token):
// each row's block decoded once for up to eight tokens, whose quad sums and ordered activations are built once
// per call. kPairs pairs of tokens per pass, unrolled (an odd count's last pair repeats its token).
template <class K, int kPairs>
void quad_corrected_pass(int64_t nb, const typename K::Block* x, float drow, const K& kind, const typename QuadCorrectedBlock<K>::Picks& picks,
                         const QuadCorrectedTokens& tokens, const float* const* token_d, const int* token, float* out, int64_t out_stride, int nt) {
    __m512 acc[kPairs];
    for (auto& v : acc) v = _mm512_setzero_ps();
    const __m512 d = _mm512_set1_ps(drow);
    for (int64_t i = 0; i < nb; ++i) {
        const QuadCorrectedBlock<K> blk(kind, picks, x[i]);
        for (int k = 0; k < kPairs; ++k) {
            const int ta = token[2 * k], tb = token[2 * k + 1];
            const size_t at = static_cast<size_t>(ta * nb + i), bt = static_cast<size_t>(tb * nb + i);
            const __m512 f = _mm512_mul_ps(d,
                                           _mm512_mask_broadcastss_ps(_mm512_set1_ps(token_d[2 * k][i]), 0xFF00, _mm_set_ss(token_d[2 * k + 1][i])));
            const __m512i sa = blk.sums(tokens.quads[at], tokens.ordered[at]), sb = blk.sums(tokens.quads[bt], tokens.ordered[bt]);
            const __m512i both = halves_of_two(sa, sb);
            acc[k] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(both), acc[k]);
        }
    }
    for (int k = 0; k < nt; ++k) out[k * out_stride] = hsum_half(acc[k / 2], k % 2);
}

template <class K>
void tile_quad_corrected(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                         int64_t out_stride) {
    constexpr int kTok = 8;
    const int64_t nb = n / QK_K;
    thread_local QuadCorrectedTokens tokens;
    thread_local std::vector<float> scales;  // each token's block scales y.d, contiguous
    tokens.resize(nb * n_tok);
    scales.resize(static_cast<size_t>(nb * n_tok));
    for (int t = 0; t < n_tok; ++t) {
        const auto* y = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes);
        tokens.build<K>(y, nb, t * nb);
        for (int64_t i = 0; i < nb; ++i) scales[static_cast<size_t>(t * nb + i)] = y[i].d;
    }
    const K kind;
    const typename QuadCorrectedBlock<K>::Picks picks;
    for (int t0 = 0; t0 < n_tok; t0 += kTok) {
        const int nt = std::min(kTok, n_tok - t0);
        int token[kTok];
        const float* token_d[kTok];
        for (int k = 0; k < kTok; ++k) {
            token[k] = t0 + std::min(k, nt - 1);
            token_d[k] = scales.data() + static_cast<size_t>(token[k] * nb);
        }
        for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* row = w + r * row_bytes;
            const auto* x = reinterpret_cast<const typename K::Block*>(row + K::kMeta);
            float* o = out + t0 * out_stride + r;
            const float drow = K::row_scale(row);
            switch ((nt + 1) / 2) {
                case 4: quad_corrected_pass<K, 4>(nb, x, drow, kind, picks, tokens, token_d, token, o, out_stride, nt); break;
                case 3: quad_corrected_pass<K, 3>(nb, x, drow, kind, picks, tokens, token_d, token, o, out_stride, nt); break;
                case 2: quad_corrected_pass<K, 2>(nb, x, drow, kind, picks, tokens, token_d, token, o, out_stride, nt); break;
                default: quad_corrected_pass<K, 1>(nb, x, drow, kind, picks, tokens, token_d, token, o, out_stride, nt); break;
            }
        }
    }
}

// A 16-byte table in every 128-bit lane, each entry kValues[i % period] + add.
template <const int8_t* kValues, int kPeriod, int kAdd, bool kAbs>
inline __m512i lane_table() {
    alignas(16) static constexpr auto kTable = [] {
        std::array<int8_t, 16> t{};
        for (int i = 0; i < 16; ++i) {
            const int v = kValues[i % kPeriod] + kAdd;
            t[i] = static_cast<int8_t>(kAbs && v < 0 ? -v : v);
        }
        return t;
    }();
    return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kTable.data())));
}

// IQ4_KS over many rows against one token, dot_rows_quad_corrected's integers with one step fewer per group: the
// correction c_g Q4[g][j] (c_g = 4 e_g - 128, the table bit and the + 128) is VPDPBUSD's starting value, so the
// one multiply by the group's scale covers both. Per call the token's -128 Q4 and 4 Q4 per register (groups 2p
// and 2p + 1, block_nibble_pairs's order); per row and block a masked add picks the start of each group.
struct alignas(64) QuadStarts {
    int32_t base[4][16], bit[4][16];
};
inline void quad_starts(const int8_t* qs, QuadStarts& out) {
    for (int p = 0; p < 4; ++p) {
        const __m512i q4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), load64(qs + 64 * p));
        _mm512_store_si512(out.base[p], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(q4, 7)));
        _mm512_store_si512(out.bit[p], _mm512_slli_epi32(q4, 2));
    }
}
// One row's block's sixteen int32 lanes before the halves are added.
inline __m512i iq4_ks_block_sums(const ik::BlockIQ4_KS& x, const QuadStarts& st, const int8_t* q, __m512i table, const __m512i pick32[4]) {
    uint64_t raw;
    std::memcpy(&raw, x.scales, 8);
    const uint64_t table_bits = (raw & 0x0101010101010101ull) * 0xFF;  // byte g all ones where group g reads the second table
    // scale g: (scales[g] & 254) - 127
    const __m128i bytes = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(raw)));
    const __m512i s32 = _mm512_castsi256_si512(_mm256_cvtepi16_epi32(_mm_sub_epi16(_mm_and_si128(bytes, _mm_set1_epi16(0xFE)), _mm_set1_epi16(127))));
    __m512i idx[4];
    block_nibble_pairs(x.qs, idx);
    __m512i sum = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
        const __m512i base = _mm512_load_si512(st.base[p]);
        const __m512i start = _mm512_mask_add_epi32(base, static_cast<__mmask16>(table_bits >> 16 * p), base, _mm512_load_si512(st.bit[p]));
        const __m512i quad4 = _mm512_dpbusd_epi32(start, _mm512_shuffle_epi8(table, idx[p]), load64(q + 64 * p));
        sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(quad4, _mm512_permutexvar_epi32(pick32[p], s32)));
    }
    return sum;
}
// Two rows per float register, as dot_rows_quad_corrected.
inline void dot_rows_iq4_ks(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    const auto* y = static_cast<const ik::BlockQ8K*>(a);
    const int64_t nb = n / QK_K;
    thread_local std::vector<QuadStarts> starts;
    starts.resize(static_cast<size_t>(nb));
    for (int64_t i = 0; i < nb; ++i) quad_starts(y[i].qs, starts[static_cast<size_t>(i)]);
    const __m512i table = lane_table<ik::kIq4kValues, 16, 128, false>();
    __m512i pick32[4];
    for (int p = 0; p < 4; ++p) pick32[p] = _mm512_inserti64x4(_mm512_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1), 1);
    for (int64_t r = 0; r < rows; r += 2) {
        const int64_t rb = std::min(r + 1, rows - 1);  // a lone last row pairs with itself
        const uint8_t* row_a = w + static_cast<size_t>(r) * row_bytes;
        const uint8_t* row_b = w + static_cast<size_t>(rb) * row_bytes;
        const auto* xa = reinterpret_cast<const ik::BlockIQ4_KS*>(row_a + 4);
        const auto* xb = reinterpret_cast<const ik::BlockIQ4_KS*>(row_b + 4);
        const __m512 d = _mm512_mask_broadcastss_ps(_mm512_set1_ps(read_f32(row_a)), 0xFF00, _mm_set_ss(read_f32(row_b)));
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < nb; ++i) {
            const QuadStarts& st = starts[static_cast<size_t>(i)];
            const __m512i sa = iq4_ks_block_sums(xa[i], st, y[i].qs, table, pick32), sb = iq4_ks_block_sums(xb[i], st, y[i].qs, table, pick32);
            const __m512i both = halves_of_two(sa, sb);
            acc = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(y[i].d)), _mm512_cvtepi32_ps(both), acc);
        }
        out[r] = hsum_half(acc, 0);
        if (rb != r) out[rb] = hsum_half(acc, 1);
    }
}

struct QuadIQ3KS {
    using Block = ik::BlockIQ3_KS;
    static constexpr int kMeta = 2;
    static float row_scale(const uint8_t* row) { return read_f16(row); }
    // scale g: nibble g (low nibbles of scales[0..3], then their high nibbles) | 16 (extra bit g) - 16; the table
    // bit e_g is bit 8 + g of extra
    static void scales(const Block& b, __m128i& s, __m128i& c) {
        const __m128i nib = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(load_u32(b.scales))), _mm_setr_epi32(0, 4, 0, 0)),
                                          _mm_set1_epi8(0x0F));
        s = _mm_cvtepu8_epi16(nib);
        s = _mm_sub_epi16(_mm_mask_add_epi16(s, static_cast<__mmask8>(b.extra), s, _mm_set1_epi16(16)), _mm_set1_epi16(16));
        c = _mm_mask_add_epi16(_mm_set1_epi16(-64), static_cast<__mmask8>(b.extra >> 8), _mm_set1_epi16(-64), _mm_set1_epi16(4));
    }
    // register k: bits 2k of qs[j] (group k) then of qs[32 + j] (group 4 + k), the third bit k (4 + k) of qh[j]
    static constexpr int kChunk[4][4] = {{0, 16, 128, 144}, {32, 48, 160, 176}, {64, 80, 192, 208}, {96, 112, 224, 240}};
    static void indices(const Block& b, __m512i idx[4]) {
        const __m512i q = load64(b.qs), m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
        const __m256i h = load32(b.qh);
        const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 4), 1);
        constexpr int kOrAnd = 0xF8;  // A | (B & C)
        idx[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(q, m3), _mm512_slli_epi16(hb, 2), m4, kOrAnd);
        idx[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(q, 2), m3), _mm512_slli_epi16(hb, 1), m4, kOrAnd);
        idx[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(q, 4), m3), hb, m4, kOrAnd);
        idx[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(q, 6), m3), _mm512_srli_epi16(hb, 1), m4, kOrAnd);
    }
    const __m512i table = lane_table<ik::kIq3nlValues, 8, 64, false>();
    __m512i values(__m512i idx) const { return _mm512_shuffle_epi8(table, idx); }
};

}  // namespace ikt
}  // namespace
}  // namespace moe::kernels

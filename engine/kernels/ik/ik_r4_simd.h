// AVX2 kernels for ik_llama.cpp's row-interleaved IQ1_S_R4, IQ4_KS_R4 and IQ5_KS_R4 (the others in ik_k_r4_simd.h,
// ik_low_k_r4_simd.h, ik_legacy_r4_simd.h), four rows at a time in ik's lanes (lane r:
// the first 16 of each 32 of row r, lane 4 + r: the second 16), with the bits of ik_ref_r4.cpp. Included by the
// AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/ik/ik_bitnet_simd.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_iquant_r4_simd.h"
#include "engine/kernels/ik/ik_k_r4_simd.h"
#include "engine/kernels/ik/ik_legacy_r4_simd.h"
#include "engine/kernels/ik/ik_low_k_r4_simd.h"
#include "engine/kernels/ik/ik_wide_simd.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/simd_common.h"
#include "engine/kernels/token_passes.h"

namespace moe::kernels {
namespace {
namespace ikr {

using ik::QK_K;

inline int u32_at(const int8_t* p) {
    int v;
    std::memcpy(&v, p, 4);
    return v;
}
// (lo + hi) per row, times the rows' scales: four outputs.
inline void store4(__m256 acc, __m128 d, float* out) {
    _mm_storeu_ps(out, _mm_mul_ps(d, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1))));
}

// NY tokens per pass over V::kGroups groups of four rows from group g: each block decoded once, every token's
// accumulator updated in the one-token order (ik's kernels use that order for every token count, so the bits are
// the same). IQ5_KS_R4 (Five) adds the fifth bits and shifts its odd scales' values by 2 instead of 4.
template <class V, bool Five, int NY>
void ks_r4_groups(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, const int32_t* neg_offsets,
                  float* out, int64_t out_stride) {
    using I = typename V::I;
    using F = typename V::F;
    const ik::BlockQ8K32* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K32*>(act + t * act_bytes);
    // the value tables, + 128 where the products run unsigned (V::kUnsignedDot)
    alignas(16) static constexpr auto kTables = [] {
        std::array<std::array<int8_t, 16>, 2> t{};
        for (int i = 0; i < 16; ++i) {
            t[0][i] = static_cast<int8_t>((Five ? ik::kIq5nlValues[i] : ik::kIq4kValues[i]) + (V::kUnsignedDot ? 128 : 0));
            t[1][i] = static_cast<int8_t>(ik::kIq5nlValues[16 + i] + (V::kUnsignedDot ? 128 : 0));
        }
        return t;
    }();
    const I values = V::table16(kTables[0].data()), values_hi = V::table16(kTables[1].data());
    constexpr size_t kBlock = Five ? sizeof(ik::BlockIQ5_KS_R4) : sizeof(ik::BlockIQ4_KS_R4);
    constexpr size_t kQs = offsetof(ik::BlockIQ4_KS_R4, qs), kQh = sizeof(ik::BlockIQ4_KS_R4);  // (IQ5: the fifth bits after)
    const uint8_t* group[2] = {w + 4 * g * row_bytes, w + 4 * (g + V::kGroups - 1) * row_bytes};
    const int q1 = V::kGroups - 1;
    F acc[NY];
    for (auto& a : acc) a = V::set1(0.f);
    for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
        const uint8_t* b0 = group[0] + 16 + ibl * kBlock;
        const uint8_t* b1 = group[1] + 16 + ibl * kBlock;
        alignas(32) int8_t ls[2][32], sh[2][32];  // per group: each code's scale (even part - 127) and odd shift
        for (int q = 0; q < V::kGroups; ++q) {
            const __m256i sc = load32(q ? b1 : b0);
            _mm256_store_si256(reinterpret_cast<__m256i*>(ls[q]),
                               _mm256_sub_epi8(_mm256_and_si256(sc, _mm256_set1_epi8(static_cast<char>(0xFE))), _mm256_set1_epi8(127)));
            _mm256_store_si256(reinterpret_cast<__m256i*>(sh[q]), _mm256_slli_epi16(_mm256_and_si256(sc, _mm256_set1_epi8(1)), Five ? 1 : 2));
        }
        // the odd scales' shifts: lanes r (sub-blocks 0..3) and 4 + r (4..7), one FMA per sub-block pair
        F P[4];
        V::byte_products_ps(ls, sh, q1, P);
        for (int t = 0; t < NY; ++t)
            for (int ib = 0; ib < 4; ++ib) acc[t] = V::fma(P[ib], V::halves_ps(y[t][ibl].bsums[ib], y[t][ibl].bsums[ib + 4]), acc[t]);
        I isum[NY];
        for (auto& v : isum) v = V::zero();
        for (int ib = 0; ib < 8; ++ib) {
            I q4[4], qx[4], ux[4];
            nibble_fields_v<V>(b0, b1, kQs, ib, q4);
            for (int f = 0; f < 4; ++f) qx[f] = V::lookup(values, q4[f]);
            if constexpr (Five) {
                const I hb = V::bytes16(b0 + kQh + 16 * ib, b1 + kQh + 16 * ib);
                constexpr int kLo[4] = {0, 4, 1, 5}, kHi[4] = {2, 6, 3, 7};
                for (int f = 0; f < 4; ++f) qx[f] = V::select(V::bit_of(hb, kLo[f], kHi[f]), qx[f], V::lookup(values_hi, q4[f]));
            }
            if constexpr (V::kUnsignedDot) {  // qx holds the values + 128; row k's scale in lanes k and 4 + k
                const I scales = V::scales32(ls[0] + 4 * ib, ls[q1] + 4 * ib);
                for (int t = 0; t < NY; ++t)
                    isum[t] = V::add32(isum[t], V::unsigned_scaled_dot4(qx, V::activations(y[t][ibl].qs + 32 * ib),
                                                                        V::neg_offsets(neg_offsets + (t * (n / 32) + 8 * ibl + ib) * 8), scales));
            } else {
                // row k's scale of this sub-block in int16 lanes 2k, 2k + 1 of both halves
                const I iscales = V::pairs4_s8(reinterpret_cast<const uint8_t*>(ls[0] + 4 * ib), reinterpret_cast<const uint8_t*>(ls[q1] + 4 * ib));
                for (int f = 0; f < 4; ++f) ux[f] = V::abs8(qx[f]);
                for (int t = 0; t < NY; ++t)
                    isum[t] = V::add32(isum[t], V::signed_scaled_dot4(ux, qx, V::activations(y[t][ibl].qs + 32 * ib), iscales));
            }
        }
        for (int t = 0; t < NY; ++t) acc[t] = V::fma(V::set1(y[t][ibl].d), V::cvt(isum[t]), acc[t]);
    }
    // the rows' f32 scales in front of each group
    for (int t = 0; t < NY; ++t)
        V::store_scaled(acc[t], reinterpret_cast<const float*>(group[0]), reinterpret_cast<const float*>(group[1]), out + t * out_stride + 4 * g);
}
template <int NY, bool Five>
void ks_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    thread_local std::vector<int32_t> neg_offsets;
    if constexpr (Lanes4::kUnsignedDot) neg_offsets128<ik::BlockQ8K32>(n, act, act_bytes, NY, neg_offsets);
    each_group_pair<4>(
        rows, [&]<class V>(int64_t g) { ks_r4_groups<V, Five, NY>(n, w, row_bytes, g, act, act_bytes, neg_offsets.data(), out, out_stride); });
}

// An IQ1_S_R4 32-weight block's four row scales 2 s + 1 (int16 words 0..3) and deltas (-8 -+ 1) times the scale / 16.
struct Iq1SR4Scales {
    __m128i sc4;
    __m128 delta4;
};
inline Iq1SR4Scales iq1_s_r4_scales(const ik::BlockIQ1_S_R4& b) {
    const __m128i qh = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qh));
    const __m128i sc4 = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7)), 1), _mm_set1_epi16(1));
    const __m128i minus = _mm_cmpeq_epi16(_mm_and_si128(qh, _mm_set1_epi16(-32768)), _mm_set1_epi16(-32768));
    const __m128i delta_i = _mm_mullo_epi16(_mm_add_epi16(_mm_set1_epi16(-8), _mm_or_si128(minus, _mm_set1_epi16(1))), sc4);
    return {sc4, _mm_mul_ps(_mm_set1_ps(0.0625f), _mm_cvtepi32_ps(_mm_cvtepi16_epi32(delta_i)))};
}

// IQ1_S_R4 in ik's arrangement: per 32 weights the grid values + 1 of rows 0 and 1 (then 2 and 3) side by side
// against the token's 8-weight groups in both halves of a 128-bit lane, so that each row and half's sum lands in two
// int32 lanes (|sum| <= 8 * 2 * 127: exact in int16), and one VPACKSSDW and one VPMADDWD by the rows' scales put
// the scaled sums in ik's lanes (k: row k's first 16, 4 + k: its second). The grid indices come from the block's
// bytes by scalar code (a vector store read back by 16-bit loads stalls Zen 3).
template <int NY>
void iq1_s_r4_tokens_avx2(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                          int64_t out_stride) {
    const ik::BlockQ8K128* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K128*>(act + t * act_bytes);
    const __m256i one = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        const auto* blocks = reinterpret_cast<const ik::BlockIQ1_S_R4*>(group + 8);
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ib = 0; ib < n / 128; ++ib) {
            for (int j = 0; j < 4; ++j) {
                const ik::BlockIQ1_S_R4& b = blocks[4 * ib + j];
                // row r's group i of 8
                auto grid = [&](int i, int r) { return static_cast<long long>(iq::kIq1sGrid[b.qs[4 * i + r] | ((b.qh[r] >> (3 * i)) & 7) << 8]); };
                const __m256i x0 = _mm256_add_epi8(_mm256_setr_epi64x(grid(0, 0), grid(0, 1), grid(2, 0), grid(2, 1)), one);
                const __m256i x1 = _mm256_add_epi8(_mm256_setr_epi64x(grid(1, 0), grid(1, 1), grid(3, 0), grid(3, 1)), one);
                const __m256i x2 = _mm256_add_epi8(_mm256_setr_epi64x(grid(0, 2), grid(0, 3), grid(2, 2), grid(2, 3)), one);
                const __m256i x3 = _mm256_add_epi8(_mm256_setr_epi64x(grid(1, 2), grid(1, 3), grid(3, 2), grid(3, 3)), one);
                const Iq1SR4Scales rs = iq1_s_r4_scales(b);
                const __m256i sc = _mm256_broadcastsi128_si256(_mm_unpacklo_epi16(rs.sc4, rs.sc4));  // words r, r per row
                const __m256 delta8 = _mm256_set_m128(rs.delta4, rs.delta4);
                for (int t = 0; t < NY; ++t) {
                    const float dy = y[t][ib].d;
                    const __m256i yv = load32(y[t][ib].qs + 32 * j);
                    const __m256i even = _mm256_shuffle_epi32(yv, 0x44), odd = _mm256_shuffle_epi32(yv, 0xEE);
                    const __m256i s01 = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(x0, even), _mm256_maddubs_epi16(x1, odd)), ones16);
                    const __m256i s23 = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(x2, even), _mm256_maddubs_epi16(x3, odd)), ones16);
                    const __m256i h = _mm256_madd_epi16(_mm256_packs_epi32(s01, s23), sc);
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dy), _mm256_cvtepi32_ps(h), acc[t]);
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dy * static_cast<float>(y[t][ib].bsums[j])), delta8, acc[t]);
                }
            }
        }
        const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group)));
        for (int t = 0; t < NY; ++t) store4(acc[t], d4, out + t * out_stride + 4 * g);
    }
}
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
// The same on VNNI CPUs: two VPDPBUSD per pair of rows where AVX2 takes PMADDUBSW pairs and a PMADDWD by ones, and
// in a 16-token pass token pairs in 512-bit registers. The integers are the AVX2 form's, and so are the float steps.
template <int NY>
void iq1_s_r4_tokens_vnni(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                          int64_t out_stride) {
    constexpr int kPaired = NY >= 16 ? NY - NY % 2 : 0;  // the tokens taken in pairs
    const ik::BlockQ8K128* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K128*>(act + t * act_bytes);
    // word r of 64-bit lane i: row r's three high index bits of group i moved to bits 8..10
    const __m256i shift_left = _mm256_setr_epi64x(8, 5, 2, 0), shift_right = _mm256_setr_epi64x(0, 0, 0, 1);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        const auto* blocks = reinterpret_cast<const ik::BlockIQ1_S_R4*>(group + 8);
        __m256 acc[NY];  // (the tokens past the pairs)
        __m512 acc2[NY / 2 > 0 ? NY / 2 : 1];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (auto& a : acc2) a = _mm512_setzero_ps();
        for (int64_t ib = 0; ib < n / 128; ++ib) {
            alignas(16) float dsum[NY][4];  // each token's d times its sums of 32, as the scalar products
            for (int t = 0; t < NY; ++t)
                _mm_store_ps(dsum[t],
                             _mm_mul_ps(_mm_set1_ps(y[t][ib].d),
                                        _mm_cvtepi32_ps(_mm_cvtepi16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(y[t][ib].bsums))))));
            for (int j = 0; j < 4; ++j) {
                const ik::BlockIQ1_S_R4& b = blocks[4 * ib + j];
                uint64_t qh64;
                std::memcpy(&qh64, b.qh, 8);
                const Iq1SR4Scales rs = iq1_s_r4_scales(b);
                const __m128i sc4 = rs.sc4;
                const __m256 delta8 = _mm256_set_m128(rs.delta4, rs.delta4);
                const __m256i high = _mm256_srlv_epi64(_mm256_sllv_epi64(_mm256_set1_epi64x(static_cast<long long>(qh64)), shift_left), shift_right);
                alignas(32) uint16_t idx[16];  // 4 i + r: row r's group i
                _mm256_store_si256(reinterpret_cast<__m256i*>(idx),
                                   _mm256_or_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs))),
                                                   _mm256_and_si256(high, _mm256_set1_epi16(0x0700))));
                __asm__("" : "+m"(idx));  // (read back by loads, not by two-uop VPEXTRW)
                auto grid = [&](int i) { return static_cast<long long>(iq::kIq1sGrid[idx[i]]); };
                // each row's scale twice (words r, r: its two sums of 8 of a half), per 128-bit lane
                const __m256i sc = _mm256_broadcastsi128_si256(_mm_unpacklo_epi16(sc4, sc4));
                const __m256i one = _mm256_set1_epi8(1);
                // rows 0, 1 (2, 3) of groups 0 and 2, then of groups 1 and 3: the grid values + 1, unscaled
                const __m256i x0 = _mm256_add_epi8(_mm256_setr_epi64x(grid(0), grid(1), grid(8), grid(9)), one);
                const __m256i x1 = _mm256_add_epi8(_mm256_setr_epi64x(grid(4), grid(5), grid(12), grid(13)), one);
                const __m256i x2 = _mm256_add_epi8(_mm256_setr_epi64x(grid(2), grid(3), grid(10), grid(11)), one);
                const __m256i x3 = _mm256_add_epi8(_mm256_setr_epi64x(grid(6), grid(7), grid(14), grid(15)), one);
                // in a 16-token pass token pairs in 512-bit registers (t's lanes in the low half, t + 1's in the high),
                // each half's steps the 256-bit form's (fewer tokens keep 256 bits: the grid loads need port 1, which
                // 512-bit instructions close on Intel)
                const __m512i w0 = _mm512_broadcast_i64x4(x0), w1 = _mm512_broadcast_i64x4(x1);
                const __m512i w2 = _mm512_broadcast_i64x4(x2), w3 = _mm512_broadcast_i64x4(x3);
                const __m512i sc16 = _mm512_broadcast_i64x4(sc);
                const __m512 delta16 = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(delta8)));
                for (int t = 0; t + 1 < kPaired; t += 2) {
                    const __m512i yv = _mm512_inserti64x4(_mm512_castsi256_si512(load32(y[t][ib].qs + 32 * j)), load32(y[t + 1][ib].qs + 32 * j), 1);
                    const __m512i even = _mm512_shuffle_epi32(yv, _MM_PERM_BABA), odd = _mm512_shuffle_epi32(yv, _MM_PERM_DCDC);
                    const __m512i s01 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, even), w1, odd);
                    const __m512i s23 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w2, even), w3, odd);
                    const __m512i h = _mm512_madd_epi16(_mm512_packs_epi32(s01, s23), sc16);
                    const __m512 dy = _mm512_mask_broadcastss_ps(_mm512_set1_ps(y[t][ib].d), 0xFF00, _mm_set_ss(y[t + 1][ib].d));
                    const __m512 ds = _mm512_mask_broadcastss_ps(_mm512_set1_ps(dsum[t][j]), 0xFF00, _mm_set_ss(dsum[t + 1][j]));
                    acc2[t / 2] = _mm512_fmadd_ps(dy, _mm512_cvtepi32_ps(h), acc2[t / 2]);
                    acc2[t / 2] = _mm512_fmadd_ps(ds, delta16, acc2[t / 2]);
                }
                for (int t = kPaired; t < NY; ++t) {
                    const float dy = y[t][ib].d;
                    const __m256i yv = load32(y[t][ib].qs + 32 * j);
                    const __m256i even = _mm256_shuffle_epi32(yv, 0x44), odd = _mm256_shuffle_epi32(yv, 0xEE);
                    const __m256i s01 = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), x0, even), x1, odd);
                    const __m256i s23 = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), x2, even), x3, odd);
                    const __m256i h = _mm256_madd_epi16(_mm256_packs_epi32(s01, s23), sc);
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dy), _mm256_cvtepi32_ps(h), acc[t]);
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dsum[t][j]), delta8, acc[t]);
                }
            }
        }
        const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group)));
        for (int t = 0; t + 1 < kPaired; t += 2) {
            store4(_mm512_castps512_ps256(acc2[t / 2]), d4, out + t * out_stride + 4 * g);
            store4(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc2[t / 2]), 1)), d4, out + (t + 1) * out_stride + 4 * g);
        }
        for (int t = kPaired; t < NY; ++t) store4(acc[t], d4, out + t * out_stride + 4 * g);
    }
}
// IQ1_M_R4 for several tokens on VNNI CPUs in the same arrangement (ik's AVX-512 kernel): per 32 weights the values
// 8 e + the delta's sign (|v| <= 9) of rows 0 and 1 (then 2 and 3) side by side, their magnitudes against the
// activations signed by them; each row half's two sums of four are at most 8 * 9 * 127, so VPACKSSDW keeps them
// exact, and VPMADDWD by the rows' scales of the first (second) 16 puts them in ik's lanes (k: row k's first 16,
// 4 + k: its second). The integers are the AVX2 form's (iquant_r4_tokens), and so are the float steps.
template <int NY>
__attribute__((noinline)) void iq1_m_r4_tokens_vnni(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes,
                                                    float* out, int64_t out_stride) {
    // byte i = 4 g + r of a sub-block's signs, spread over the 8 bytes of register lane (r, g): groups 0 and 2
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0808080808080808ll, 0x0909090909090909ll);
    const __m256i one = _mm256_set1_epi8(1);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        alignas(32) float acc[NY][8] = {};  // in memory: sixteen tokens' integer sums take the registers
        for (int64_t jb = 0; jb < n / 128; ++jb) {
            const ik::BlockQ8K128* y[NY];
            for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K128*>(act + t * act_bytes) + jb;
            __m256i isum[NY];
            for (auto& v : isum) v = _mm256_setzero_si256();
            for (int k = 0; k < 4; ++k) {
                const uint8_t* blk = group + 8 + 28 * (4 * jb + k);
                alignas(32) uint16_t idx[16];
                const __m128i nib = iq1_m_r4_indices(blk, idx);
                __asm__("" : "+m"(idx));  // (read back by loads, not by two-uop VPEXTRW)
                auto grid = [&](int i) { return static_cast<long long>(iq::kIq1sGrid[idx[i]]); };
                // -8 plus the delta's sign (-1 where bit 3 of the nibble is set, else +1), to go with 8 (e + 1)
                const __m128i eight = _mm_set1_epi8(8);
                const __m256i sgn = _mm256_broadcastsi128_si256(
                    _mm_add_epi8(_mm_set1_epi8(-8), _mm_or_si128(_mm_cmpeq_epi8(_mm_and_si128(nib, eight), eight), _mm_set1_epi8(1))));
                auto values = [&](int i0, int i1, int i2, int i3) {
                    const __m256i e1 = _mm256_add_epi8(_mm256_setr_epi64x(grid(i0), grid(i1), grid(i2), grid(i3)), one);  // 0..2
                    return _mm256_add_epi8(_mm256_slli_epi16(e1, 3),
                                           _mm256_shuffle_epi8(sgn, _mm256_add_epi8(spread, _mm256_set1_epi8(static_cast<char>(i0)))));
                };
                const __m256i x0 = values(0, 1, 8, 9), x1 = values(4, 5, 12, 13), x2 = values(2, 3, 10, 11), x3 = values(6, 7, 14, 15);
                const __m256i a0 = _mm256_abs_epi8(x0), a1 = _mm256_abs_epi8(x1), a2 = _mm256_abs_epi8(x2), a3 = _mm256_abs_epi8(x3);
                // the rows' scales: words r, r of the first 16's in the low 128 bits, of the second 16's in the high
                const __m128i sc = _mm_cvtepu8_epi16(_mm_and_si128(
                    _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(u32_of(blk + 24))), _mm_setr_epi32(0, 4, 0, 4)), _mm_set1_epi8(0x0F)));
                const __m256i scales = _mm256_set_m128i(_mm_unpackhi_epi16(sc, sc), _mm_unpacklo_epi16(sc, sc));
                for (int t = 0; t < NY; ++t) {
                    const __m256i yv = load32(y[t]->qs + 32 * k);
                    const __m256i even = _mm256_shuffle_epi32(yv, 0x44), odd = _mm256_shuffle_epi32(yv, 0xEE);
                    const __m256i s01 = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), a0, _mm256_sign_epi8(even, x0)), a1,
                                                            _mm256_sign_epi8(odd, x1));
                    const __m256i s23 = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), a2, _mm256_sign_epi8(even, x2)), a3,
                                                            _mm256_sign_epi8(odd, x3));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_packs_epi32(s01, s23), scales));
                }
            }
            for (int t = 0; t < NY; ++t)
                _mm256_store_ps(acc[t], _mm256_fmadd_ps(_mm256_set1_ps(y[t]->d), _mm256_cvtepi32_ps(isum[t]), _mm256_load_ps(acc[t])));
        }
        const __m128 scale = _mm_mul_ps(_mm_set1_ps(0.125f), _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group))));
        for (int t = 0; t < NY; ++t)
            _mm_storeu_ps(out + t * out_stride + 4 * g, _mm_mul_ps(scale, _mm_add_ps(_mm_load_ps(acc[t]), _mm_load_ps(acc[t] + 4))));
    }
}
#endif
template <int NY>
void iq1_s_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    iq1_s_r4_tokens_vnni<NY>(n, w, row_bytes, rows, act, act_bytes, out, out_stride);
#else
    iq1_s_r4_tokens_avx2<NY>(n, w, row_bytes, rows, act, act_bytes, out, out_stride);
#endif
}

template <template <int> class K>
void rows_one(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    K<1>::run(n, w, row_bytes, rows, static_cast<const uint8_t*>(a), 0, out, 0);
}

// Tokens in passes of eight (the remainder in one narrower pass): the weights are read once per pass.
template <template <int> class K>
void tokens_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                 int64_t out_stride) {
    token_passes(n_tok, [&](auto nt, int t) {
        K<decltype(nt)::value>::run(n, w, row_bytes, rows, act + t * act_bytes, act_bytes, out + t * out_stride, out_stride);
    });
}

// The same with passes of sixteen tokens first, for kernels whose per-token state fits the registers that many
// times (a wider pass decodes each block for twice the tokens).
template <template <int> class K>
void tokens_tile16(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                   int64_t out_stride) {
    int t = 0;
    for (; t + 16 <= n_tok; t += 16) K<16>::run(n, w, row_bytes, rows, act + t * act_bytes, act_bytes, out + t * out_stride, out_stride);
    if (t < n_tok) tokens_tile<K>(n, w, row_bytes, rows, act + t * act_bytes, act_bytes, n_tok - t, out + t * out_stride, out_stride);
}

// Passes of sixteen where the table has 32 vector registers, else of eight (IQ1_S_R4: sixteen tokens' accumulators
// spill AVX2's sixteen registers; Zen 3, 64 tokens: 0.72x ik in sixteens against 0.88x in eights).
template <template <int> class K>
void tokens_tile_wide(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                      int64_t out_stride) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    tokens_tile16<K>(n, w, row_bytes, rows, act, act_bytes, n_tok, out, out_stride);
#else
    tokens_tile<K>(n, w, row_bytes, rows, act, act_bytes, n_tok, out, out_stride);
#endif
}

template <int NY>
struct Iq4KsR4 {
    static constexpr auto run = ks_r4_tokens<NY, false>;
};
template <int NY>
struct Iq5KsR4 {
    static constexpr auto run = ks_r4_tokens<NY, true>;
};
template <GgmlType T>
struct KR4 {
    template <int NY>
    struct Of {
        static constexpr auto run = k_r4_tokens<T, NY>;
    };
};
template <bool Lone>
struct Q4KR4 {
    template <int NY>
    struct Of {
        static constexpr auto run = q4_k_r4_tokens<Lone, NY>;
    };
};
template <bool Lone>
struct Q5KR4 {
    template <int NY>
    struct Of {
        static constexpr auto run = q4_k_r4_tokens<Lone, NY, true>;
    };
};
template <bool Lone>
struct Q6KR4 {
    template <int NY>
    struct Of {
        static constexpr auto run = q6_k_r4_tokens<Lone, NY>;
    };
};
template <bool Three, bool Lone>
struct LowKR4 {
    template <int NY>
    struct Of {
        static constexpr auto run = low_k_r4_tokens<Three, Lone, NY>;
    };
};
template <int NY>
struct Q80R8 {
    static constexpr auto run = q8_0_r8_tokens<NY>;
};
template <bool Lone>
struct Q40R8 {
    template <int NY>
    struct Of {
        static constexpr auto run = q4_0_r8_tokens<Lone, NY>;
    };
};
template <GgmlType T>
struct LegacyR4 {
    template <int NY>
    struct Of {
        static constexpr auto run = legacy_r4_tokens<T, NY>;
    };
};
template <GgmlType T>
void add_legacy_r4(KernelTable& t) {
    t.dot_rows[type_slot(T)] = rows_one<LegacyR4<T>::template Of>;
    t.tile[type_slot(T)] = tokens_tile<LegacyR4<T>::template Of>;
}
template <int NY>
struct Iq4XsR8 {
    static constexpr auto run = iq4_xs_r8_tokens<NY>;
};
template <int NY>
struct Iq1SR4 {
    static constexpr auto run = iq1_s_r4_tokens<NY>;
};
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
template <int NY>
struct Iq1MR4 {  // below eight tokens iquant_r4_tokens_vnni's decode costs less per token (2 tokens: 0.85 there, 0.74 here)
    static constexpr auto run = NY < 8 ? iquant_r4_tokens_vnni<GgmlType::IQ1_M_R4, false, NY> : iq1_m_r4_tokens_vnni<NY>;
};
#endif

}  // namespace ikr

inline void add_ik_r4_kernels(KernelTable& t) {
    using ikr::IquantR4;
    // the i-quants in passes of sixteen tokens on every x86 table, as ik's 16-column kernels for them (Zen 3, 64
    // tokens: 1.0-1.1x ik against 0.7-0.9x in passes of eight)
    t.dot_rows[type_slot(GgmlType::IQ2_XXS_R4)] = ikr::rows_one<IquantR4<GgmlType::IQ2_XXS_R4, false>::Of>;
    t.tile[type_slot(GgmlType::IQ2_XXS_R4)] = ikr::tokens_tile16<IquantR4<GgmlType::IQ2_XXS_R4, false>::Of>;
    t.dot_rows[type_slot(GgmlType::IQ3_XXS_R4)] = ikr::rows_one<IquantR4<GgmlType::IQ3_XXS_R4, false>::Of>;
    t.tile[type_slot(GgmlType::IQ3_XXS_R4)] = ikr::tokens_tile16<IquantR4<GgmlType::IQ3_XXS_R4, false>::Of>;
    t.dot_rows[type_slot(GgmlType::IQ3_S_R4)] = ikr::rows_one<ikr::Iq3SR4>;
    t.tile[type_slot(GgmlType::IQ3_S_R4)] = ikr::tokens_tile16<ikr::Iq3SR4>;
    t.dot_rows[type_slot(GgmlType::IQ1_M_R4)] = ikr::rows_one<IquantR4<GgmlType::IQ1_M_R4, false>::Of>;
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    t.tile[type_slot(GgmlType::IQ1_M_R4)] = ikr::tokens_tile16<ikr::Iq1MR4>;
#else
    t.tile[type_slot(GgmlType::IQ1_M_R4)] = ikr::tokens_tile16<IquantR4<GgmlType::IQ1_M_R4, false>::Of>;
#endif
    for (GgmlType ty : {GgmlType::IQ2_XS_R4, GgmlType::IQ2_S_R4}) t.batch_chunk[type_slot(ty)] = 16;
    t.dot_rows[type_slot(GgmlType::IQ2_XS_R4)] = ikr::rows_one<IquantR4<GgmlType::IQ2_XS_R4, false>::Of>;
    t.tile[type_slot(GgmlType::IQ2_XS_R4)] = ikr::tokens_tile16<IquantR4<GgmlType::IQ2_XS_R4, false>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::IQ2_XS_R4)] = ikr::rows_one<IquantR4<GgmlType::IQ2_XS_R4, true>::Of>;
    t.tile_batch[type_slot(GgmlType::IQ2_XS_R4)] = ikr::tokens_tile16<IquantR4<GgmlType::IQ2_XS_R4, true>::Of>;
    t.dot_rows[type_slot(GgmlType::IQ2_S_R4)] = ikr::rows_one<IquantR4<GgmlType::IQ2_S_R4, false>::Of>;
    t.tile[type_slot(GgmlType::IQ2_S_R4)] = ikr::tokens_tile16<IquantR4<GgmlType::IQ2_S_R4, false>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::IQ2_S_R4)] = ikr::rows_one<IquantR4<GgmlType::IQ2_S_R4, true>::Of>;
    t.tile_batch[type_slot(GgmlType::IQ2_S_R4)] = ikr::tokens_tile16<IquantR4<GgmlType::IQ2_S_R4, true>::Of>;
    t.dot_rows[type_slot(GgmlType::IQ4_KS_R4)] = ikr::rows_one<ikr::Iq4KsR4>;
    t.tile[type_slot(GgmlType::IQ4_KS_R4)] = ikr::tokens_tile<ikr::Iq4KsR4>;
    t.dot_rows[type_slot(GgmlType::IQ1_S_R4)] = ikr::rows_one<ikr::Iq1SR4>;
    t.tile[type_slot(GgmlType::IQ1_S_R4)] = ikr::tokens_tile_wide<ikr::Iq1SR4>;
    t.dot_rows[type_slot(GgmlType::IQ5_KS_R4)] = ikr::rows_one<ikr::Iq5KsR4>;
    t.tile[type_slot(GgmlType::IQ5_KS_R4)] = ikr::tokens_tile<ikr::Iq5KsR4>;
    t.dot_rows[type_slot(GgmlType::IQ2_K_R4)] = ikr::rows_one<ikr::KR4<GgmlType::IQ2_K_R4>::Of>;
    t.tile[type_slot(GgmlType::IQ2_K_R4)] = ikr::tokens_tile<ikr::KR4<GgmlType::IQ2_K_R4>::Of>;
    t.dot_rows[type_slot(GgmlType::IQ3_K_R4)] = ikr::rows_one<ikr::KR4<GgmlType::IQ3_K_R4>::Of>;
    t.tile[type_slot(GgmlType::IQ3_K_R4)] = ikr::tokens_tile<ikr::KR4<GgmlType::IQ3_K_R4>::Of>;
    t.dot_rows[type_slot(GgmlType::IQ4_K_R4)] = ikr::rows_one<ikr::KR4<GgmlType::IQ4_K_R4>::Of>;
    t.tile[type_slot(GgmlType::IQ4_K_R4)] = ikr::tokens_tile<ikr::KR4<GgmlType::IQ4_K_R4>::Of>;
    t.dot_rows[type_slot(GgmlType::IQ5_K_R4)] = ikr::rows_one<ikr::KR4<GgmlType::IQ5_K_R4>::Of>;
    t.tile[type_slot(GgmlType::IQ5_K_R4)] = ikr::tokens_tile<ikr::KR4<GgmlType::IQ5_K_R4>::Of>;
    t.dot[type_slot(GgmlType::Q8_KV)] = ikw::dot_q8_kv;
    t.dot_rows[type_slot(GgmlType::Q8_KV)] = ikr::rows_one<ikw::Q8Kv>;
    t.tile[type_slot(GgmlType::Q8_KV)] = ikr::tokens_tile<ikw::Q8Kv>;
    t.dot_rows[type_slot(GgmlType::Q8_KV_R8)] = ikr::rows_one<ikw::Q8KvR8>;
    t.tile[type_slot(GgmlType::Q8_KV_R8)] = ikr::tokens_tile<ikw::Q8KvR8>;
    t.dot_rows[type_slot(GgmlType::Q8_K_R8)] = ikr::rows_one<ikw::Q8KR8>;
    t.tile[type_slot(GgmlType::Q8_K_R8)] = ikr::tokens_tile<ikw::Q8KR8>;
    t.dot_rows[type_slot(GgmlType::MXFP4_R8)] = ikr::rows_one<ikw::Mxfp4R8<true>::Of>;
    t.tile[type_slot(GgmlType::MXFP4_R8)] = ikr::tokens_tile<ikw::Mxfp4R8<true>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::MXFP4_R8)] = ikr::rows_one<ikw::Mxfp4R8<false>::Of>;
    t.tile_batch[type_slot(GgmlType::MXFP4_R8)] = ikr::tokens_tile<ikw::Mxfp4R8<false>::Of>;
    t.dot_rows[type_slot(GgmlType::BF16_R16)] = ikr::rows_one<ikw::Bf16R16>;
    t.tile[type_slot(GgmlType::BF16_R16)] = ikr::tokens_tile<ikw::Bf16R16>;
#if defined(__AVX512F__)
    if (__builtin_cpu_supports("avx512bf16")) {
        t.dot_rows[type_slot(GgmlType::BF16_R16)] = ikr::rows_one<ikw::Bf16R16Native>;
        t.tile[type_slot(GgmlType::BF16_R16)] = ikr::tokens_tile<ikw::Bf16R16Native>;
    }
#endif
    t.dot[type_slot(GgmlType::IQ1_BN)] = ikb::dot_bn<GgmlType::IQ1_BN>;
    t.dot_rows[type_slot(GgmlType::IQ1_BN)] = ikr::rows_one<ikb::Bn<GgmlType::IQ1_BN>::Of>;
    t.tile[type_slot(GgmlType::IQ1_BN)] = ikr::tokens_tile<ikb::Bn<GgmlType::IQ1_BN>::Of>;
    t.dot[type_slot(GgmlType::IQ2_BN)] = ikb::dot_bn<GgmlType::IQ2_BN>;
    t.dot_rows[type_slot(GgmlType::IQ2_BN)] = ikr::rows_one<ikb::Bn<GgmlType::IQ2_BN>::Of>;
    t.tile[type_slot(GgmlType::IQ2_BN)] = ikr::tokens_tile<ikb::Bn<GgmlType::IQ2_BN>::Of>;
    t.dot_rows[type_slot(GgmlType::IQ2_BN_R4)] = ikr::rows_one<ikb::Iq2BnR4>;
    t.tile[type_slot(GgmlType::IQ2_BN_R4)] = ikr::tokens_tile<ikb::Iq2BnR4>;
    t.dot_rows[type_slot(GgmlType::Q8_0_R8)] = ikr::rows_one<ikr::Q80R8>;
    t.tile[type_slot(GgmlType::Q8_0_R8)] = ikr::tokens_tile<ikr::Q80R8>;
    // Q4_K_R4 / Q6_K_R4: a lone activation column's order (rows, and tiles of tokens each given it) and a batch's
    t.dot_rows[type_slot(GgmlType::Q4_K_R4)] = ikr::rows_one<ikr::Q4KR4<true>::Of>;
    t.tile[type_slot(GgmlType::Q4_K_R4)] = ikr::tokens_tile<ikr::Q4KR4<true>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::Q4_K_R4)] = ikr::rows_one<ikr::Q4KR4<false>::Of>;
    t.tile_batch[type_slot(GgmlType::Q4_K_R4)] = ikr::tokens_tile<ikr::Q4KR4<false>::Of>;
    t.dot_rows[type_slot(GgmlType::Q5_K_R4)] = ikr::rows_one<ikr::Q5KR4<true>::Of>;
    t.tile[type_slot(GgmlType::Q5_K_R4)] = ikr::tokens_tile<ikr::Q5KR4<true>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::Q5_K_R4)] = ikr::rows_one<ikr::Q5KR4<false>::Of>;
    t.tile_batch[type_slot(GgmlType::Q5_K_R4)] = ikr::tokens_tile<ikr::Q5KR4<false>::Of>;
    t.dot_rows[type_slot(GgmlType::Q2_K_R4)] = ikr::rows_one<ikr::LowKR4<false, true>::Of>;
    t.tile[type_slot(GgmlType::Q2_K_R4)] = ikr::tokens_tile<ikr::LowKR4<false, true>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::Q2_K_R4)] = ikr::rows_one<ikr::LowKR4<false, false>::Of>;
    t.tile_batch[type_slot(GgmlType::Q2_K_R4)] = ikr::tokens_tile<ikr::LowKR4<false, false>::Of>;
    t.dot_rows[type_slot(GgmlType::Q3_K_R4)] = ikr::rows_one<ikr::LowKR4<true, true>::Of>;
    t.tile[type_slot(GgmlType::Q3_K_R4)] = ikr::tokens_tile<ikr::LowKR4<true, true>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::Q3_K_R4)] = ikr::rows_one<ikr::LowKR4<true, false>::Of>;
    t.tile_batch[type_slot(GgmlType::Q3_K_R4)] = ikr::tokens_tile<ikr::LowKR4<true, false>::Of>;
    t.dot_rows[type_slot(GgmlType::Q6_K_R4)] = ikr::rows_one<ikr::Q6KR4<true>::Of>;
    t.tile[type_slot(GgmlType::Q6_K_R4)] = ikr::tokens_tile<ikr::Q6KR4<true>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::Q6_K_R4)] = ikr::rows_one<ikr::Q6KR4<false>::Of>;
    t.tile_batch[type_slot(GgmlType::Q6_K_R4)] = ikr::tokens_tile<ikr::Q6KR4<false>::Of>;
    t.dot_rows[type_slot(GgmlType::Q4_0_R8)] = ikr::rows_one<ikr::Q40R8<true>::Of>;
    t.tile[type_slot(GgmlType::Q4_0_R8)] = ikr::tokens_tile<ikr::Q40R8<true>::Of>;
    t.dot_rows_batch[type_slot(GgmlType::Q4_0_R8)] = ikr::rows_one<ikr::Q40R8<false>::Of>;
    t.tile_batch[type_slot(GgmlType::Q4_0_R8)] = ikr::tokens_tile<ikr::Q40R8<false>::Of>;
    ikr::add_legacy_r4<GgmlType::Q5_0_R4>(t);
    ikr::add_legacy_r4<GgmlType::Q6_0_R4>(t);
    ikr::add_legacy_r4<GgmlType::IQ4_NL_R4>(t);
    t.dot_rows[type_slot(GgmlType::IQ4_XS_R8)] = ikr::rows_one<ikr::Iq4XsR8>;
    t.tile[type_slot(GgmlType::IQ4_XS_R8)] = ikr::tokens_tile<ikr::Iq4XsR8>;
}

}  // namespace
}  // namespace moe::kernels

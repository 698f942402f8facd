// AVX2 kernels for the formats ik_llama.cpp multiplies with Q8_2_X4 activations (its trellis types, Q6_0, and
// llama.cpp's Q8_0 in an ik file), with the bits of ik_ref_x4.cpp: a group of four 32-weight blocks gives eight
// int32 lanes (lane 4h + k: half h of block k) by two rounds of PHADDD over the blocks' lane sums, FMA'd with
// (weight scale * activation scale) of the lane's block. Included by the AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikx {

using ik::QK_K;

// Eight lanes of four consecutive products of signed x and y.
inline __m256i lanes_ss(__m256i x, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)), _mm256_set1_epi16(1));
}
inline __m256i lanes_us(__m256i u, __m256i y) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1)); }
// Four blocks' lane sums to [lo(0..3), hi(0..3)]: lane 4h + k = sum of half h of block k.
inline __m256i halves4(__m256i d0, __m256i d1, __m256i d2, __m256i d3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_hadd_epi32(d2, d3));
}
inline __m128 bf16x4(const uint16_t* d) {
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(d))), 16));
}
inline float bf16_1(uint16_t d) { return bf16_to_fp32(d); }
inline __m256 dup4(__m128 v) { return _mm256_set_m128(v, v); }

// A Q8_2_X4 row: groups of four blocks, then single 36-byte blocks.
struct X4Row {
    const uint8_t* p;
    const ik::BlockQ8_2x4& group(int64_t g) const { return reinterpret_cast<const ik::BlockQ8_2x4*>(p)[g]; }
    void tail(int64_t b, float& d, int16_t& s, const int8_t*& qs) const {
        const uint8_t* blk = p + 36 * b;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        std::memcpy(&s, blk + 2, 2);
        d = bf16_1(h);
        qs = reinterpret_cast<const int8_t*>(blk + 4);
    }
};

// ---- Q8_0 (ik's order) and Q6_0 ----

inline __m256i q6_0_values(const ik::BlockQ6_0& x) {  // the unsigned 6-bit values, element order
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs));
    uint64_t qh;
    std::memcpy(&qh, x.qh, 8);
    const __m128i h = _mm_set_epi64x(static_cast<long long>(qh >> 2), static_cast<long long>(qh));
    // element j < 16: qh[j % 8] bits (0,1) for j < 8, (4,5) for j >= 8; element 16 + j: bits (2,3) / (6,7)
    const __m128i hl = _mm_unpacklo_epi64(h, _mm_srli_epi64(h, 4)), hh = _mm_unpackhi_epi64(h, _mm_srli_epi64(_mm_unpackhi_epi64(h, h), 4));
    const __m128i m3 = _mm_set1_epi8(3), m15 = _mm_set1_epi8(15);
    const __m128i lo = _mm_or_si128(_mm_and_si128(qs, m15), _mm_slli_epi16(_mm_and_si128(hl, m3), 4));
    const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(qs, 4), m15), _mm_slli_epi16(_mm_and_si128(hh, m3), 4));
    return _mm256_set_m128i(hi, lo);
}

template <bool Q6>
float dot_legacy(int64_t n, const void* w, const void* a) {
    const X4Row y{static_cast<const uint8_t*>(a)};
    const int64_t nb = n / 32, ng = nb / 4;
    __m256 acc = _mm256_setzero_ps();
    __m128 m = _mm_setzero_ps();
    auto values = [&](int64_t b) {
        if constexpr (Q6) return q6_0_values(static_cast<const ik::BlockQ6_0*>(w)[b]);
        else return load32(static_cast<const BlockQ8_0*>(w)[b].qs);
    };
    auto wd = [&](int64_t b) { return Q6 ? h2f(static_cast<const ik::BlockQ6_0*>(w)[b].d) : h2f(static_cast<const BlockQ8_0*>(w)[b].d); };
    auto lanes = [&](__m256i x, __m256i q) { return Q6 ? lanes_us(x, q) : lanes_ss(x, q); };
    for (int64_t g = 0; g < ng; ++g) {
        const ik::BlockQ8_2x4& yg = y.group(g);
        __m256i d[4];
        for (int k = 0; k < 4; ++k) d[k] = lanes(values(4 * g + k), load32(yg.qs + 32 * k));
        const __m128 dw = _mm_set_ps(wd(4 * g + 3), wd(4 * g + 2), wd(4 * g + 1), wd(4 * g));
        const __m128 dy = bf16x4(yg.d);
        acc = _mm256_fmadd_ps(dup4(_mm_mul_ps(dw, dy)), _mm256_cvtepi32_ps(halves4(d[0], d[1], d[2], d[3])), acc);
        if constexpr (Q6) {
            const __m128 s = _mm_cvtepi32_ps(_mm_cvtepi16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(yg.s))));
            m = _mm_add_ps(m, _mm_mul_ps(_mm_mul_ps(dw, _mm_set1_ps(-32.f)), _mm_mul_ps(dy, s)));
        }
    }
    for (int64_t b = 4 * ng; b < nb; ++b) {
        float dy;
        int16_t s;
        const int8_t* qs;
        y.tail(b, dy, s, qs);
        const float dw = wd(b);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * dy), _mm256_cvtepi32_ps(lanes(values(b), load32(qs))), acc);
        if constexpr (Q6) m = _mm_add_ps(m, _mm_set1_ps(((-dw) * 32.f) * (dy * static_cast<float>(s)) * 0.25f));
    }
    if constexpr (!Q6) return hsum_float_8(acc);
    // (acc[l] + acc[l + 4]) + m[l], then (0 + 2) + (1 + 3)
    const __m128 v = _mm_add_ps(_mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)), m);
    const __m128 t = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// ---- the trellis types ----

// 8 (IQ4_KT: 4) trellis values of each of the indices in idx[4] (uint32 each) as 32 int8 in element order.
template <int G>
inline __m256i trellis32(const uint32_t* idx, const uint32_t* offset) {
    // lane j of a group: the index times ka^(j+1), its four 6-bit bytes summed, minus 126
    // (groups of four: lanes 4..7 are the second group's, again ka^1..ka^4)
    static const __m256i ka = [] {
        uint32_t p[8], x = 1;
        for (int j = 0; j < 8; ++j) p[j] = x *= 0xCBAC1FEDu;
        if (G == 4)
            for (int j = 4; j < 8; ++j) p[j] = p[j - 4];
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    }();
    const __m256i ones = _mm256_set1_epi8(1), mask = _mm256_set1_epi32(0x3f3f3f3f), m126 = _mm256_set1_epi32(126);
    auto gen = [&](__m256i x) {
        const __m256i v = _mm256_and_si256(_mm256_mullo_epi32(x, ka), mask);
        return _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(v, ones), _mm256_set1_epi16(1)), m126);
    };
    __m256i r[4];
    if constexpr (G == 8) {
        for (int k = 0; k < 4; ++k) r[k] = gen(_mm256_set1_epi32(static_cast<int>(idx[k] + offset[k])));
    } else {  // two groups of four per register
        for (int k = 0; k < 4; ++k)
            r[k] = gen(_mm256_set_m128i(_mm_set1_epi32(static_cast<int>(idx[2 * k + 1] + offset[2 * k + 1])), _mm_set1_epi32(static_cast<int>(idx[2 * k] + offset[2 * k]))));
    }
    // int32 -> int8 keeping order: packs interleave 128-bit halves, a dword permute restores it
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One superblock of a trellis row: the 256 signed values (8 registers) and the 8 block scales.
template <GgmlType T>
struct TrellisDec {
    __m256i v[8];
    int scale[8];
    void decode(const uint8_t* blk) {
        uint32_t idx[8], off[8];
        if constexpr (T == GgmlType::IQ1_KT) {
            const auto& x = *reinterpret_cast<const ik::BlockIQ1_KT*>(blk);
            for (int ib = 0; ib < 8; ++ib) {
                scale[ib] = ik::kIq4kValues[x.sh[ib] & 0xF];
                for (int k = 0; k < 4; ++k) {
                    const int g = 4 * ib + k;
                    const uint32_t hi = g < 16 ? x.qh[g] & 0xF : x.qh[g - 16] >> 4;
                    idx[k] = x.ql[g] | (hi << 8) | (((x.sh[ib] >> (4 + k)) & 1u) << 12), off[k] = 4096;
                }
                v[ib] = trellis32<8>(idx, off);
            }
        } else if constexpr (T == GgmlType::IQ2_KT || T == GgmlType::IQ3_KT) {
            const bool iq3 = T == GgmlType::IQ3_KT;
            const uint8_t* scales = blk;
            const uint8_t* ql = blk + 4;
            for (int ib = 0; ib < 8; ++ib) {
                const int nib = ib < 4 ? scales[ib] & 0xF : scales[ib - 4] >> 4;
                scale[ib] = iq3 ? nib : ik::kIq4kValues[nib];
                for (int k = 0; k < 4; ++k) {
                    uint16_t i16;
                    std::memcpy(&i16, ql + 2 * (4 * ib + k), 2);
                    idx[k] = i16, off[k] = 4096;
                }
                v[ib] = trellis32<8>(idx, off);
                if constexpr (iq3) {  // |value|, negated where the block's bit in qh[j] is set
                    const auto& x = *reinterpret_cast<const ik::BlockIQ3_KT*>(blk);
                    const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << ib));
                    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(load32(x.qh), m), m);
                    const __m256i a = _mm256_abs_epi8(v[ib]);
                    v[ib] = _mm256_sub_epi8(_mm256_xor_si256(a, neg), neg);
                }
            }
        } else {
            const auto& x = *reinterpret_cast<const ik::BlockIQ4_KT*>(blk);
            const auto* ql = reinterpret_cast<const uint8_t*>(x.qs + 8);
            const uint8_t* qh = ql + 64;
            for (int ib = 0; ib < 8; ++ib) {
                scale[ib] = static_cast<int>((x.qs[ib] & 0xff) >> 1) - 64;
                for (int ig = 0; ig < 8; ++ig) {
                    const int g = 8 * ib + ig;
                    const uint32_t hi = g < 32 ? qh[g] & 0xF : qh[g - 32] >> 4;
                    idx[ig] = ql[g] | (hi << 8) | (((x.qs[ib] >> (8 + 3 * ig)) & 7u) << 12);
                    off[ig] = x.qs[ib] & 1 ? 4096 + 32768 : 4096;
                }
                v[ib] = trellis32<4>(idx, off);
            }
        }
    }
};

// Per superblock: scales d * scale[b]; per 128 (two groups of four blocks) P = those times the activations' bf16
// scales, FMA'd with the lanes of block halves.
template <GgmlType T>
float dot_trellis(int64_t n, const void* w, const void* a) {
    float d;
    std::memcpy(&d, w, 4);
    d = ik::trellis_matmul_scale(T, d);
    const auto* blocks = static_cast<const uint8_t*>(w) + 4;
    const X4Row y{static_cast<const uint8_t*>(a)};
    __m256 acc = _mm256_setzero_ps();
    TrellisDec<T> dec;
    const size_t block_bytes = type_info(T).block_bytes;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        dec.decode(blocks + i * block_bytes);
        const __m256 S = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dec.scale))));
        for (int c = 0; c < 2; ++c) {
            const ik::BlockQ8_2x4& yg = y.group(2 * i + c);
            __m256i l[4];
            for (int k = 0; k < 4; ++k) l[k] = lanes_ss(dec.v[4 * c + k], load32(yg.qs + 32 * k));
            const __m128 s4 = c == 0 ? _mm256_castps256_ps128(S) : _mm256_extractf128_ps(S, 1);
            acc = _mm256_fmadd_ps(dup4(_mm_mul_ps(s4, bf16x4(yg.d))), _mm256_cvtepi32_ps(halves4(l[0], l[1], l[2], l[3])), acc);
        }
    }
    return hsum_float_8(acc);
}

// Rows x tokens for the small batch: each group of four blocks (a trellis superblock) decoded once for up to four
// tokens, every (row, token) in dot_legacy's / dot_trellis's order.
template <bool Q6>
void tile_legacy(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                 int64_t out_stride) {
    const int64_t nb = n / 32, ng = nb / 4;
    if (nb % 4) {  // blocks after the last group take the single-block lanes: the one-token kernel per pair
        for (int64_t r = 0; r < rows; ++r)
            for (int t = 0; t < n_tok; ++t) out[t * out_stride + r] = dot_legacy<Q6>(n, w + r * row_bytes, act + t * act_bytes);
        return;
    }
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + r * row_bytes;
        for (int t0 = 0; t0 < n_tok; t0 += 4) {
            const int nt = std::min(4, n_tok - t0);
            __m256 acc[4];
            __m128 m[4];
            for (int j = 0; j < 4; ++j) acc[j] = _mm256_setzero_ps(), m[j] = _mm_setzero_ps();
            for (int64_t g = 0; g < ng; ++g) {
                __m256i v[4];
                float dwf[4];
                for (int k = 0; k < 4; ++k) {
                    if constexpr (Q6) {
                        const auto& x = reinterpret_cast<const ik::BlockQ6_0*>(row)[4 * g + k];
                        v[k] = q6_0_values(x), dwf[k] = h2f(x.d);
                    } else {
                        const auto& x = reinterpret_cast<const BlockQ8_0*>(row)[4 * g + k];
                        v[k] = load32(x.qs), dwf[k] = h2f(x.d);
                    }
                }
                const __m128 dw = _mm_loadu_ps(dwf);
                for (int j = 0; j < nt; ++j) {
                    const ik::BlockQ8_2x4& yg = X4Row{act + (t0 + j) * act_bytes}.group(g);
                    __m256i d[4];
                    for (int k = 0; k < 4; ++k) d[k] = Q6 ? lanes_us(v[k], load32(yg.qs + 32 * k)) : lanes_ss(v[k], load32(yg.qs + 32 * k));
                    const __m128 dy = bf16x4(yg.d);
                    acc[j] = _mm256_fmadd_ps(dup4(_mm_mul_ps(dw, dy)), _mm256_cvtepi32_ps(halves4(d[0], d[1], d[2], d[3])), acc[j]);
                    if constexpr (Q6) {
                        const __m128 s = _mm_cvtepi32_ps(_mm_cvtepi16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(yg.s))));
                        m[j] = _mm_add_ps(m[j], _mm_mul_ps(_mm_mul_ps(dw, _mm_set1_ps(-32.f)), _mm_mul_ps(dy, s)));
                    }
                }
            }
            for (int j = 0; j < nt; ++j) {
                float res;
                if constexpr (Q6) {
                    const __m128 vv = _mm_add_ps(_mm_add_ps(_mm256_castps256_ps128(acc[j]), _mm256_extractf128_ps(acc[j], 1)), m[j]);
                    const __m128 tt = _mm_add_ps(vv, _mm_movehl_ps(vv, vv));
                    res = _mm_cvtss_f32(_mm_add_ss(tt, _mm_movehdup_ps(tt)));
                } else {
                    res = hsum_float_8(acc[j]);
                }
                out[(t0 + j) * out_stride + r] = res;
            }
        }
    }
}

template <GgmlType T>
void tile_trellis(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                  int64_t out_stride) {
    const size_t block_bytes = type_info(T).block_bytes;
    TrellisDec<T> dec;
    constexpr int kTok = 4;
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + r * row_bytes;
        float d;
        std::memcpy(&d, row, 4);
        d = ik::trellis_matmul_scale(T, d);
        for (int t0 = 0; t0 < n_tok; t0 += kTok) {
            const int nt = std::min(kTok, n_tok - t0);
            __m256 acc[kTok];
            for (auto& a : acc) a = _mm256_setzero_ps();
            for (int64_t i = 0; i < n / QK_K; ++i) {
                dec.decode(row + 4 + i * block_bytes);
                const __m256 S = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dec.scale))));
                for (int j = 0; j < nt; ++j) {
                    const X4Row y{act + (t0 + j) * act_bytes};
                    for (int c = 0; c < 2; ++c) {
                        const ik::BlockQ8_2x4& yg = y.group(2 * i + c);
                        __m256i l[4];
                        for (int k = 0; k < 4; ++k) l[k] = lanes_ss(dec.v[4 * c + k], load32(yg.qs + 32 * k));
                        const __m128 s4 = c == 0 ? _mm256_castps256_ps128(S) : _mm256_extractf128_ps(S, 1);
                        acc[j] = _mm256_fmadd_ps(dup4(_mm_mul_ps(s4, bf16x4(yg.d))), _mm256_cvtepi32_ps(halves4(l[0], l[1], l[2], l[3])), acc[j]);
                    }
                }
            }
            for (int j = 0; j < nt; ++j) out[(t0 + j) * out_stride + r] = hsum_float_8(acc[j]);
        }
    }
}

}  // namespace ikx

inline void add_ik_x4_kernels(KernelTable& t) {
    t.tile[type_slot(GgmlType::IK_Q8_0)] = ikx::tile_legacy<false>;
    t.tile[type_slot(GgmlType::Q6_0)] = ikx::tile_legacy<true>;
    t.tile[type_slot(GgmlType::IQ1_KT)] = ikx::tile_trellis<GgmlType::IQ1_KT>;
    t.tile[type_slot(GgmlType::IQ2_KT)] = ikx::tile_trellis<GgmlType::IQ2_KT>;
    t.tile[type_slot(GgmlType::IQ3_KT)] = ikx::tile_trellis<GgmlType::IQ3_KT>;
    t.tile[type_slot(GgmlType::IQ4_KT)] = ikx::tile_trellis<GgmlType::IQ4_KT>;
    set_dot<ikx::dot_legacy<false>>(t, GgmlType::IK_Q8_0);
    set_dot<ikx::dot_legacy<true>>(t, GgmlType::Q6_0);
    set_dot<ikx::dot_trellis<GgmlType::IQ1_KT>>(t, GgmlType::IQ1_KT);
    set_dot<ikx::dot_trellis<GgmlType::IQ2_KT>>(t, GgmlType::IQ2_KT);
    set_dot<ikx::dot_trellis<GgmlType::IQ3_KT>>(t, GgmlType::IQ3_KT);
    set_dot<ikx::dot_trellis<GgmlType::IQ4_KT>>(t, GgmlType::IQ4_KT);
}

}  // namespace
}  // namespace moe::kernels

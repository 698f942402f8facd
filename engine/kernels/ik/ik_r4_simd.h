// AVX2 kernels for ik_llama.cpp's row-interleaved IQ1_S_R4, IQ4_KS_R4 and IQ5_KS_R4 (the others in ik_k_r4_simd.h,
// ik_low_k_r4_simd.h, ik_legacy_r4_simd.h), four rows at a time in ik's lanes (lane r:
// the first 16 of each 32 of row r, lane 4 + r: the second 16), with the bits of ik_ref_r4.cpp. Included by the
// AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_k_r4_simd.h"
#include "engine/kernels/ik/ik_legacy_r4_simd.h"
#include "engine/kernels/ik/ik_low_k_r4_simd.h"
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
inline __m256i halves4(__m256i d0, __m256i d1, __m256i d2, __m256i d3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_hadd_epi32(d2, d3));
}
// (lo + hi) per row, times the rows' scales: four outputs.
inline void store4(__m256 acc, __m128 d, float* out) {
    _mm_storeu_ps(out, _mm_mul_ps(d, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1))));
}

// NY tokens per pass over a group of four rows: each block decoded once, every token's accumulator updated in
// the one-token order (ik's kernels use that order for every token count, so the bits are the same). IQ5_KS_R4
// (Five) adds the fifth bits and shifts its odd scales' values by 2 instead of 4.
template <int NY, bool Five>
void ks_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    const ik::BlockQ8K32* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K32*>(act + t * act_bytes);
    const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Five ? ik::kIq5nlValues : ik::kIq4kValues)));
    const __m256i values_hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq5nlValues + 16)));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    constexpr size_t kBlock = Five ? sizeof(ik::BlockIQ5_KS_R4) : sizeof(ik::BlockIQ4_KS_R4);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
            const ik::BlockIQ4_KS_R4& b = *reinterpret_cast<const ik::BlockIQ4_KS_R4*>(group + 16 + ibl * kBlock);  // (IQ5: then qh)
            const uint8_t* qh = reinterpret_cast<const uint8_t*>(&b) + sizeof(ik::BlockIQ4_KS_R4);
            const __m256i sc = load32(b.scales);
            const __m256i ls8 = _mm256_sub_epi8(_mm256_and_si256(sc, _mm256_set1_epi8(static_cast<char>(0xFE))), _mm256_set1_epi8(127));
            const __m256i sh8 = _mm256_slli_epi16(_mm256_and_si256(sc, _mm256_set1_epi8(1)), Five ? 1 : 2);
            alignas(32) int8_t ls[32], sh[32];
            _mm256_store_si256(reinterpret_cast<__m256i*>(ls), ls8);
            _mm256_store_si256(reinterpret_cast<__m256i*>(sh), sh8);
            // the odd scales' shifts: lanes r (sub-blocks 0..3) and 4 + r (4..7), one FMA per sub-block pair
            __m256 P[4];
            for (int ib = 0; ib < 4; ++ib) {
                const __m256i l = _mm256_cvtepi8_epi32(_mm_set_epi32(0, 0, u32_at(ls + 16 + 4 * ib), u32_at(ls + 4 * ib)));
                const __m256i s = _mm256_cvtepi8_epi32(_mm_set_epi32(0, 0, u32_at(sh + 16 + 4 * ib), u32_at(sh + 4 * ib)));
                P[ib] = _mm256_mul_ps(_mm256_cvtepi32_ps(l), _mm256_cvtepi32_ps(s));
            }
            for (int t = 0; t < NY; ++t) {
                const __m256 m8 = _mm256_loadu_ps(y[t][ibl].bsums);
                for (int ib = 0; ib < 4; ++ib) {
                    const __m256 mb = _mm256_permutevar8x32_ps(m8, _mm256_setr_epi32(ib, ib, ib, ib, ib + 4, ib + 4, ib + 4, ib + 4));
                    acc[t] = _mm256_fmadd_ps(P[ib], mb, acc[t]);
                }
            }
            __m256i isum[NY];
            for (auto& v : isum) v = _mm256_setzero_si256();
            for (int ib = 0; ib < 8; ++ib) {
                const __m256i bits1 = load32(b.qs + 64 * ib), bits2 = load32(b.qs + 64 * ib + 32);
                const __m256i q4[4] = {_mm256_and_si256(bits1, m4), _mm256_and_si256(bits2, m4), _mm256_and_si256(_mm256_srli_epi16(bits1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(bits2, 4), m4)};
                __m256i qx[4];
                for (int f = 0; f < 4; ++f) qx[f] = _mm256_shuffle_epi8(values, q4[f]);
                if constexpr (Five) {
                    const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 16 * ib)));
                    constexpr int kLo[4] = {0, 4, 1, 5}, kHi[4] = {2, 6, 3, 7};
                    for (int f = 0; f < 4; ++f)
                        qx[f] = _mm256_blendv_epi8(qx[f], _mm256_shuffle_epi8(values_hi, q4[f]),
                                                   _mm256_cmpeq_epi8(bit_of_bytes(hb, kLo[f], kHi[f]), _mm256_set1_epi8(1)));
                }
                const __m256i ux[4] = {_mm256_sign_epi8(qx[0], qx[0]), _mm256_sign_epi8(qx[1], qx[1]), _mm256_sign_epi8(qx[2], qx[2]),
                                       _mm256_sign_epi8(qx[3], qx[3])};
                // row k's scale of this sub-block in int16 lanes 2k, 2k + 1 of both halves
                const __m128i l4 = _mm_cvtsi32_si128(u32_at(ls + 4 * ib));
                const __m256i iscales = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_unpacklo_epi8(l4, l4)));
                for (int t = 0; t < NY; ++t) {
                    const __m256i yv = load32(y[t][ibl].qs + 32 * ib);
                    const __m256i ys[4] = {_mm256_shuffle_epi32(yv, 0x00), _mm256_shuffle_epi32(yv, 0x55), _mm256_shuffle_epi32(yv, 0xaa),
                                           _mm256_shuffle_epi32(yv, 0xff)};
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                    // the same exact lane sums, four products per VPDPBUSD, then the lane's scale
                    __m256i dp = _mm256_setzero_si256();
                    for (int k = 0; k < 4; ++k) dp = _mm256_dpbusd_epi32(dp, ux[k], _mm256_sign_epi8(ys[k], qx[k]));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dp, _mm256_srai_epi32(_mm256_slli_epi32(iscales, 16), 16)));
#else
                    for (int k = 0; k < 4; ++k) {
                        const __m256i p = _mm256_maddubs_epi16(ux[k], _mm256_sign_epi8(ys[k], qx[k]));
                        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(iscales, p));
                    }
#endif
                }
            }
            for (int t = 0; t < NY; ++t) acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][ibl].d), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
        const __m128 d = _mm_loadu_ps(reinterpret_cast<const float*>(group));
        for (int t = 0; t < NY; ++t) store4(acc[t], d, out + t * out_stride + 4 * g);
    }
}

template <int NY>
void iq1_s_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    const ik::BlockQ8K128* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K128*>(act + t * act_bytes);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        const auto* blocks = reinterpret_cast<const ik::BlockIQ1_S_R4*>(group + 8);
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ib = 0; ib < n / 128; ++ib) {
            for (int j = 0; j < 4; ++j) {
                const ik::BlockIQ1_S_R4& b = blocks[4 * ib + j];
                __m256i u[4];
                alignas(16) int sc[4], delta_i[4];
                for (int r = 0; r < 4; ++r) {
                    const int qh = b.qh[r];
                    uint64_t e[4];
                    for (int i = 0; i < 4; ++i) e[i] = iq::kIq1sGrid[b.qs[4 * i + r] | (((qh >> (3 * i)) & 7) << 8)];
                    u[r] = _mm256_add_epi8(_mm256_setr_epi64x(static_cast<long long>(e[0]), static_cast<long long>(e[1]),
                                                              static_cast<long long>(e[2]), static_cast<long long>(e[3])),
                                           _mm256_set1_epi8(1));
                    sc[r] = 2 * ((qh >> 12) & 7) + 1;
                    delta_i[r] = (qh & 0x8000 ? -9 : -7) * sc[r];
                }
                const __m128i sc4 = _mm_load_si128(reinterpret_cast<const __m128i*>(sc));
                const __m256i sc8 = _mm256_set_m128i(sc4, sc4);
                const __m128 delta4 = _mm_mul_ps(_mm_set1_ps(0.0625f), _mm_cvtepi32_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(delta_i))));
                const __m256 delta8 = _mm256_set_m128(delta4, delta4);
                for (int t = 0; t < NY; ++t) {
                    const float dy = y[t][ib].d;
                    const __m256i yv = load32(y[t][ib].qs + 32 * j);
                    __m256i d[4];
                    for (int r = 0; r < 4; ++r) d[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], yv), _mm256_set1_epi16(1));
                    const __m256i s = _mm256_mullo_epi32(halves4(d[0], d[1], d[2], d[3]), sc8);
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dy), _mm256_cvtepi32_ps(s), acc[t]);
                    acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dy * static_cast<float>(y[t][ib].bsums[j])), delta8, acc[t]);
                }
            }
        }
        const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group)));
        for (int t = 0; t < NY; ++t) store4(acc[t], d4, out + t * out_stride + 4 * g);
    }
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

}  // namespace ikr

inline void add_ik_r4_kernels(KernelTable& t) {
    t.dot_rows[type_slot(GgmlType::IQ4_KS_R4)] = ikr::rows_one<ikr::Iq4KsR4>;
    t.tile[type_slot(GgmlType::IQ4_KS_R4)] = ikr::tokens_tile<ikr::Iq4KsR4>;
    t.dot_rows[type_slot(GgmlType::IQ1_S_R4)] = ikr::rows_one<ikr::Iq1SR4>;
    t.tile[type_slot(GgmlType::IQ1_S_R4)] = ikr::tokens_tile<ikr::Iq1SR4>;
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

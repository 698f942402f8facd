// ik_llama.cpp's trellis types (IQ1_KT ... IQ4_KT) for one token and small batches on AVX-512 CPUs with VNNI,
// compiled with AVX-512 flags and installed by fill_avx512_table.
//
// Decoding dominates these types: every weight is generated from its group's index by an integer LCG step and a
// sum of four 6-bit bytes (ik_trellis.h). One token (IQ1_KT, IQ2_KT, IQ4_KT) takes the group-major products of
// ik_x4_simd.h, sixteen groups per register. Several tokens, and IQ3_KT, decode each superblock once: the AVX2
// decoder (ik_x4_simd.h: TrellisDec) generates eight weights per register, this one sixteen, a group's index
// spread to its lanes by one VPERMD, the byte sum by one VPDPBUSD. The weights stay unsigned (the byte sums,
// 0..252, i.e. the weight + 126), so the products are one VPDPBUSD per 64 weights with no sign step, and 126 times
// each half block's activation sum, taken once per token, comes off the integer lanes; IQ3_KT (|weight| with a
// stored sign) moves its signs onto the activations instead. Every half block's integer sum is exact, and the
// float steps are the AVX2 kernel's (ik's AVX2 and AVX-512 builds compute these types with the same bits), so the
// results are dot_trellis' bits.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_converted_simd.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/ik/ik_trellis_avx512.h"
#include "engine/kernels/ik/ik_x4_simd.h"
#include "engine/kernels/kernels_internal.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikc {

// ik's large-batch conversion of trellis rows to Q8_0_R8 through the 512-bit decoder (ik_converted_simd.h).
template <>
struct TrellisRowDecoder<GgmlType::IQ1_KT> {
    using type = ikx::TrellisSigned512<GgmlType::IQ1_KT>;
};
template <>
struct TrellisRowDecoder<GgmlType::IQ2_KT> {
    using type = ikx::TrellisSigned512<GgmlType::IQ2_KT>;
};
template <>
struct TrellisRowDecoder<GgmlType::IQ3_KT> {
    using type = ikx::TrellisSigned512<GgmlType::IQ3_KT>;
};
template <>
struct TrellisRowDecoder<GgmlType::IQ4_KT> {
    using type = ikx::TrellisSigned512<GgmlType::IQ4_KT>;
};

}  // namespace ikc
namespace ikx {

// Two registers' 128-bit lanes summed (p0: blocks 0 and 1 of a group of four, p1: blocks 2 and 3) into eight lanes
// as halves4 orders them: lane 4h + k = half h of block k.
inline __m256i block_halves(__m512i p0, __m512i p1) {
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
    const __m512i t = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));  // per lane: p0's sum, p1's sum (twice)
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 8, 1, 9, 4, 12, 5, 13, 0, 0, 0, 0, 0, 0, 0, 0), t));
}

// 126 times each half block's activation sum, eight lanes per 128 activations, for the unsigned weights.
inline void weight_offsets(int64_t n, const uint8_t* act, size_t act_bytes, int n_tok, int32_t* out) {
    const __m512i c126 = _mm512_set1_epi8(126);
    for (int t = 0; t < n_tok; ++t) {
        const X4Row y{act + t * act_bytes};
        for (int64_t g = 0; g < n / 128; ++g) {
            const ik::BlockQ8_2x4& yg = y.group(g);
            const __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c126, _mm512_loadu_si512(yg.qs));
            const __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c126, _mm512_loadu_si512(yg.qs + 64));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (t * (n / 128) + g) * 8), block_halves(s0, s1));
        }
    }
}

// ---- one token: products group-major (ik_x4_simd.h says how), sixteen groups per register ----

// Lane g: the sum over the group's G weights (+ 126) times their activations.
template <int G>
inline __m512i group_sums(__m512i idx, const uint32_t* planes) {
    const __m512i mask = _mm512_set1_epi32(0x3f3f3f3f);
    __m512i acc = _mm512_setzero_si512();
    for (int p = 0; p < G; ++p)
        acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_mullo_epi32(idx, _mm512_set1_epi32(static_cast<int>(kKaPowers[p]))), mask),
                                  _mm512_loadu_si512(planes + 16 * p));
    return acc;
}

template <GgmlType T>
void trellis_rows_group_major(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, const int32_t* offsets,
                              const uint32_t* planes, float* out) {
    using Ind = TrellisIndices<T>;
    constexpr int G = Ind::kGroup;
    const size_t block_bytes = type_info(T).block_bytes;
    const X4Row y{act};
    Ind ind;
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + r * row_bytes;
        const float d = trellis_row_scale<T>(row);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < n / QK_K; ++i) {
            ind.load(row + 4 + i * block_bytes);
            const __m256 S = trellis_scales_ps(d, ind.scale);
            const uint32_t* sb = planes + i * QK_K;
            for (int c = 0; c < 2; ++c) {
                __m256i h;
                if constexpr (G == 8) {  // one register: lanes 2j, 2j + 1 are half block j; lane 4h + k takes j = 2k + h
                    const __m512i s = group_sums<8>(ind.idx[c], sb + 128 * c);
                    const __m512i t = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_CDAB));
                    h = _mm512_castsi512_si256(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0), t));
                } else {  // two registers, a half block per 128-bit lane as the packed weights
                    h = block_halves(group_sums<4>(ind.idx[2 * c], sb + 128 * c), group_sums<4>(ind.idx[2 * c + 1], sb + 128 * c + 64));
                }
                h = _mm256_sub_epi32(h, load32(offsets + (2 * i + c) * 8));
                const __m128 s4 = c == 0 ? _mm256_castps256_ps128(S) : _mm256_extractf128_ps(S, 1);
                acc = _mm256_fmadd_ps(dup4(_mm_mul_ps(s4, bf16x4(y.group(2 * i + c).d))), _mm256_cvtepi32_ps(h), acc);
            }
        }
        out[r] = hsum_float_8(acc);
    }
}

// Rows x NT tokens (NT = 0: nt of at most kMaxTokens, the accumulators then in memory): per superblock one
// decode, then each token's eight half-block sums per 128 weights and dot_trellis' FMA with
// (row scale * block scale) * activation scale.
constexpr int kMaxTokens = 32;  // the converted path takes over from 16 or 24 tokens
template <GgmlType T, int NT>
void trellis_rows(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int nt, const int32_t* offsets,
                  float* out, int64_t out_stride) {
    constexpr int kAcc = NT ? NT : kMaxTokens;
    const int tokens = NT ? NT : nt;
    using Dec = TrellisDec512<T>;
    const size_t block_bytes = type_info(T).block_bytes;
    const int64_t ng = n / 128;
    Dec dec;
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + r * row_bytes;
        const float d = trellis_row_scale<T>(row);
        __m256 acc[kAcc];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t i = 0; i < n / QK_K; ++i) {
            dec.decode(row + 4 + i * block_bytes);
            const __m256 S = trellis_scales_ps(d, dec.scale);
            for (int c = 0; c < 2; ++c) {
                const __m128 s4 = c == 0 ? _mm256_castps256_ps128(S) : _mm256_extractf128_ps(S, 1);
                for (int j = 0; j < tokens; ++j) {
                    const ik::BlockQ8_2x4& yg = X4Row{act + j * act_bytes}.group(2 * i + c);
                    __m512i y0 = _mm512_loadu_si512(yg.qs), y1 = _mm512_loadu_si512(yg.qs + 64);
                    if constexpr (Dec::kSigned) {
                        y0 = _mm512_mask_sub_epi8(y0, dec.neg[2 * c], _mm512_setzero_si512(), y0);
                        y1 = _mm512_mask_sub_epi8(y1, dec.neg[2 * c + 1], _mm512_setzero_si512(), y1);
                    }
                    __m256i h = block_halves(_mm512_dpbusd_epi32(_mm512_setzero_si512(), dec.w[2 * c], y0),
                                             _mm512_dpbusd_epi32(_mm512_setzero_si512(), dec.w[2 * c + 1], y1));
                    if constexpr (!Dec::kSigned) h = _mm256_sub_epi32(h, load32(offsets + (j * ng + 2 * i + c) * 8));
                    acc[j] = _mm256_fmadd_ps(dup4(_mm_mul_ps(s4, bf16x4(yg.d))), _mm256_cvtepi32_ps(h), acc[j]);
                }
            }
        }
        for (int j = 0; j < tokens; ++j) out[j * out_stride + r] = hsum_float_8(acc[j]);
    }
}

template <GgmlType T>
void tile_trellis512(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                     int64_t out_stride) {
    thread_local std::vector<int32_t> offsets;
    offsets.resize(static_cast<size_t>(n_tok * (n / 16)));
    if (T != GgmlType::IQ3_KT) weight_offsets(n, act, act_bytes, n_tok, offsets.data());
    if (n_tok == 1 && rows > 1 && T != GgmlType::IQ3_KT) {  // (a lone row: its layout would cost as much as the row)
        thread_local std::vector<uint32_t> planes;
        group_major_activations<TrellisIndices<T>::kGroup, 16>(n, act, planes);
        return trellis_rows_group_major<T>(n, w, row_bytes, rows, act, offsets.data(), planes.data(), out);
    }
    if (n_tok <= 8)  // one pass, its accumulators in registers
        return token_passes(n_tok, [&](auto nt, int) {
            trellis_rows<T, decltype(nt)::value>(n, w, row_bytes, rows, act, act_bytes, n_tok, offsets.data(), out, out_stride);
        });
    for (int t0 = 0; t0 < n_tok; t0 += kMaxTokens)  // one decode for them all
        trellis_rows<T, 0>(n, w, row_bytes, rows, act + t0 * act_bytes, act_bytes, std::min(kMaxTokens, n_tok - t0), offsets.data() + t0 * (n / 16),
                           out + t0 * out_stride, out_stride);
}

template <GgmlType T>
void rows_trellis512(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* act, float* out) {
    tile_trellis512<T>(n, w, row_bytes, rows, static_cast<const uint8_t*>(act), 0, 1, out, 0);
}

template <GgmlType T>
float dot_trellis512(int64_t n, const void* w, const void* act) {
    float out;
    rows_trellis512<T>(n, static_cast<const uint8_t*>(w), 0, 1, act, &out);
    return out;
}

template <GgmlType T>
void install(KernelTable& t) {
    t.dot[type_slot(T)] = dot_trellis512<T>;
    t.dot_rows[type_slot(T)] = rows_trellis512<T>;
    t.tile[type_slot(T)] = tile_trellis512<T>;
    t.tile_converted[type_slot(T)] = ikc::tile_converted<T>;
}

}  // namespace ikx
}  // namespace

void add_ik_trellis_kernels_avx512(KernelTable& t) {
    ikx::install<GgmlType::IQ1_KT>(t);
    ikx::install<GgmlType::IQ2_KT>(t);
    ikx::install<GgmlType::IQ3_KT>(t);
    ikx::install<GgmlType::IQ4_KT>(t);
}

}  // namespace moe::kernels

// ik_llama.cpp's large-batch path (ik_ref.h: convert_row) over rows x tokens: each weight row converted to 8-bit
// values once, then every token's exact integer dots per block and one FMA each, in ik's order. Included by the
// AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/ik/ik_table_simd.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/ik/ik_x4_simd.h"
#include "engine/kernels/simd_common.h"
#include "engine/kernels/token_passes.h"

namespace moe::kernels {
namespace {
namespace ikc {

using ik::QK_K;

// Four tokens' lane sums to their four totals (exact).
inline __m128i totals4(__m256i d0, __m256i d1, __m256i d2, __m256i d3) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_hadd_epi32(d2, d3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Block b of a token's activations: values and scale (ik's Q8_K per 256 for the table types, Q8_2_X4 per 32).
inline int32_t load_dword(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline __m256i broadcast_dword256(const int8_t* p) { return _mm256_set1_epi32(load_dword(p)); }

template <GgmlType T>
inline const int8_t* act_block(const uint8_t* a, int64_t n, int64_t b, float& d) {
    if constexpr (ik::is_table_type(T)) {
        const auto& y = reinterpret_cast<const ik::BlockQ8K*>(a)[b];
        d = y.d;
        return y.qs;
    } else {
        const int64_t grouped = 4 * (n / 128);
        uint16_t h;
        if (b < grouped) {
            const auto& g = reinterpret_cast<const ik::BlockQ8_2x4*>(a)[b / 4];
            d = bf16_to_fp32(g.d[b % 4]);
            return g.qs + 32 * (b % 4);
        }
        std::memcpy(&h, a + 36 * b, 2);
        d = bf16_to_fp32(h);
        return reinterpret_cast<const int8_t*>(a + 36 * b + 4);
    }
}

// The 32-weight formats' converted rows (Q8_0_R8) eight at a time, in the lanes as ik lays them out: per block the
// eight rows' values interleaved four at a time, so a token's four values broadcast against a register give each
// row's partial sum in its own lane; one FMA per block and token with the eight rows' scales. Returns the rows
// done (whole groups of eight).
// The decoder of a trellis row's superblocks into int8 weights (decode_to) and block scales: the AVX2 one, unless
// a translation unit specializes this before its first use (ik_trellis_avx512.cpp: the 512-bit one).
template <GgmlType T>
struct TrellisRowDecoder {
    using type = ikx::TrellisDec<T>;
};

// One row of a 32-weight format converted to 8-bit values and fp16-rounded scales (ik_ref: convert_q8_0_r8_row),
// from the SIMD decoders.
template <GgmlType T>
inline void convert_q8_0_row(int64_t n, const uint8_t* w, int8_t* q, float* scales) {
    if constexpr (ik::is_trellis_type(T)) {
        float d;
        std::memcpy(&d, w, 4);
        d = ik::trellis_matmul_scale(T, d);
        typename TrellisRowDecoder<T>::type dec;
        const size_t block_bytes = type_info(T).block_bytes;
        for (int64_t i = 0; i < n / QK_K; ++i) {
            dec.decode_to(w + 4 + i * block_bytes, q + QK_K * i);
            const __m256 s = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dec.scale))));
            _mm256_storeu_ps(scales + 8 * i, _mm256_cvtph_ps(_mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT)));  // fp16-rounded, as ik stores them
        }
    } else if constexpr (T == GgmlType::Q6_0) {
        const auto* x = reinterpret_cast<const ik::BlockQ6_0*>(w);
        for (int64_t b = 0; b < n / 32; ++b) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), _mm256_sub_epi8(ikx::q6_0_values(x[b]), _mm256_set1_epi8(32)));
            scales[b] = h2f(x[b].d);
        }
    } else {
        const auto* x = reinterpret_cast<const BlockQ8_0*>(w);
        for (int64_t b = 0; b < n / 32; ++b) {
            std::memcpy(q + 32 * b, x[b].qs, 32);
            scales[b] = h2f(x[b].d);
        }
    }
}

// One converted row (8-bit values, a scale per block) from the SIMD decoders.
template <GgmlType T>
inline void convert_one_row(int64_t n, const uint8_t* w, int8_t* q, float* scales) {
    if constexpr (ik::is_table_type(T)) ikt::convert_row<T>(n, w, q, scales);
    else convert_q8_0_row<T>(n, w, q, scales);
}

// R (8, or 16 in 512-bit registers) converted rows as ik lays them out (Q8_K_R8 / Q8_0_R8): per 32 weights,
// register m holds values 4m..4m+3 of rows 0..R-1 (8x8 dword transposes), so a token's four values broadcast against
// it give each row's partial sum in its own lane; scales[R b + k] is row k's scale of block b.
template <GgmlType T, int R>
struct RowGroup {
    static constexpr int kBlock = ik::is_table_type(T) ? 256 : 32;
    std::vector<int8_t> q, inter;
    std::vector<float> row_scales, scales;
    void convert(int64_t n, const uint8_t* w, size_t row_bytes) {
        const int64_t nb = n / kBlock;
        q.resize(static_cast<size_t>(n) * R), inter.resize(static_cast<size_t>(n) * R);
        row_scales.resize(static_cast<size_t>(nb) * R), scales.resize(static_cast<size_t>(nb) * R);
        for (int k = 0; k < R; ++k) convert_one_row<T>(n, w + k * row_bytes, q.data() + k * n, row_scales.data() + k * nb);
        for (int64_t b = 0; b < nb; ++b)
            for (int k = 0; k < R; ++k) scales[static_cast<size_t>(b * R + k)] = row_scales[static_cast<size_t>(k * nb + b)];
        for (int64_t c = 0; c < n / 32; ++c)
            for (int g = 0; g < R / 8; ++g) {
                __m256 v[8], t[8];
                for (int k = 0; k < 8; ++k) v[k] = _mm256_castsi256_ps(load32(q.data() + (8 * g + k) * n + 32 * c));
                transpose8(v, t);
                for (int m = 0; m < 8; ++m)
                    _mm256_storeu_ps(reinterpret_cast<float*>(&inter[static_cast<size_t>(c) * 32 * R + 4 * R * m + 32 * g]), t[m]);
            }
        // gemm512 multiplies the values + 128 (unsigned) and takes 128 times the activations' sum back
        if constexpr (R == 16)
            for (auto& v : inter) v = static_cast<int8_t>(static_cast<uint8_t>(v) ^ 0x80);
    }
    // NT tokens: per block each token's exact integer dots with the R rows (lanes), then
    // acc = fma(row scale * y.d, dot, acc): per (row, token) the bits of dot_converted.
    template <int NT>
    void gemm(int64_t n, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) const {
        static_assert(R == 8);
        __m256 acc[NT];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t b = 0; b < n / kBlock; ++b) {
            const int8_t* y[NT];
            float dy[NT];
            for (int j = 0; j < NT; ++j) y[j] = act_block<T>(act + j * act_bytes, n, b, dy[j]);
            __m256i isum[NT];
            for (auto& v : isum) v = _mm256_setzero_si256();
            for (int h = 0; h < kBlock / 16; ++h) {  // 16 weights of eight rows: four registers
                const int8_t* xb = &inter[static_cast<size_t>(b) * kBlock * 8 + 128 * h];
                __m256i x[4], ax[4];
                for (int k = 0; k < 4; ++k) x[k] = load32(xb + 32 * k), ax[k] = _mm256_sign_epi8(x[k], x[k]);
                for (int j = 0; j < NT; ++j) {
                    // each four activations broadcast straight from memory (a load, no shuffle)
                    const int8_t* yh = y[j] + 16 * h;
                    const __m256i y0 = broadcast_dword256(yh), y1 = broadcast_dword256(yh + 4), y2 = broadcast_dword256(yh + 8),
                                  y3 = broadcast_dword256(yh + 12);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                    // the same exact lane sums, four products per VPDPBUSD (no pair ever saturated PMADDUBSW: |x|, |y| <= 128, 127)
                    isum[j] = _mm256_dpbusd_epi32(isum[j], ax[0], _mm256_sign_epi8(y0, x[0]));
                    isum[j] = _mm256_dpbusd_epi32(isum[j], ax[1], _mm256_sign_epi8(y1, x[1]));
                    isum[j] = _mm256_dpbusd_epi32(isum[j], ax[2], _mm256_sign_epi8(y2, x[2]));
                    isum[j] = _mm256_dpbusd_epi32(isum[j], ax[3], _mm256_sign_epi8(y3, x[3]));
#else
                    const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax[0], _mm256_sign_epi8(y0, x[0])), _mm256_set1_epi16(1));
                    const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax[1], _mm256_sign_epi8(y1, x[1])), _mm256_set1_epi16(1));
                    const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax[2], _mm256_sign_epi8(y2, x[2])), _mm256_set1_epi16(1));
                    const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax[3], _mm256_sign_epi8(y3, x[3])), _mm256_set1_epi16(1));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
#endif
                }
            }
            const __m256 ds = _mm256_loadu_ps(&scales[static_cast<size_t>(b) * 8]);
            for (int j = 0; j < NT; ++j) acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(ds, _mm256_set1_ps(dy[j])), _mm256_cvtepi32_ps(isum[j]), acc[j]);
        }
        for (int j = 0; j < NT; ++j) _mm256_storeu_ps(out + j * out_stride, acc[j]);
    }
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    // Sixteen rows per 512-bit register: the same lane sums and the same fma per (row, token). Each lane is one
    // row's whole-block sum, so the values are stored + 128 (unsigned, VPDPBUSD's first operand) and 128 times
    // the token's block sum of activations comes off every lane: the same exact integers.
    template <int NT>
    void gemm512(int64_t n, const uint8_t* act, size_t act_bytes, const int32_t* offsets, float* out, int64_t out_stride) const {
        static_assert(R == 16);
        const int64_t nb = n / kBlock;
        __m512 acc[NT];
        for (auto& a : acc) a = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const int8_t* y[NT];
            float dy[NT];
            for (int j = 0; j < NT; ++j) y[j] = act_block<T>(act + j * act_bytes, n, b, dy[j]);
            __m512i isum[NT];
            for (int j = 0; j < NT; ++j) isum[j] = _mm512_set1_epi32(offsets[j * nb + b]);  // -128 times the block's activation sum
            for (int h = 0; h < kBlock / 16; ++h) {
                const int8_t* xb = &inter[static_cast<size_t>(b) * kBlock * 16 + 256 * h];
                __m512i ux[4];
                for (int k = 0; k < 4; ++k) ux[k] = _mm512_loadu_si512(xb + 64 * k);
                for (int j = 0; j < NT; ++j) {  // each four activations broadcast straight from memory
                    const int8_t* yh = y[j] + 16 * h;
                    isum[j] = _mm512_dpbusd_epi32(isum[j], ux[0], _mm512_set1_epi32(load_dword(yh)));
                    isum[j] = _mm512_dpbusd_epi32(isum[j], ux[1], _mm512_set1_epi32(load_dword(yh + 4)));
                    isum[j] = _mm512_dpbusd_epi32(isum[j], ux[2], _mm512_set1_epi32(load_dword(yh + 8)));
                    isum[j] = _mm512_dpbusd_epi32(isum[j], ux[3], _mm512_set1_epi32(load_dword(yh + 12)));
                }
            }
            const __m512 ds = _mm512_loadu_ps(&scales[static_cast<size_t>(b) * 16]);
            for (int j = 0; j < NT; ++j) acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(ds, _mm512_set1_ps(dy[j])), _mm512_cvtepi32_ps(isum[j]), acc[j]);
        }
        for (int j = 0; j < NT; ++j) _mm512_storeu_ps(out + j * out_stride, acc[j]);
    }
#endif
};

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// -128 times each block's activation sum, per token and block: what gemm512's values + 128 add, taken back once per
// call rather than once per group of sixteen rows.
template <GgmlType T>
void unsigned_offsets(int64_t n, const uint8_t* act, size_t act_bytes, int n_tok, std::vector<int32_t>& out) {
    constexpr int kBlock = RowGroup<T, 16>::kBlock;
    const int64_t nb = n / kBlock;
    out.resize(static_cast<size_t>(n_tok * nb));
    for (int t = 0; t < n_tok; ++t)
        for (int64_t b = 0; b < nb; ++b) {
            float d;
            const int8_t* y = act_block<T>(act + t * act_bytes, n, b, d);
            int32_t sum;
            if constexpr (ik::is_table_type(T)) {  // Q8_K: its sums of 16 follow the values
                const __m256i s16 = _mm256_madd_epi16(load32(y + offsetof(ik::BlockQ8K, bsums) - offsetof(ik::BlockQ8K, qs)), _mm256_set1_epi16(1));
                sum = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(s16));
            } else {  // (y + 128) summed by PSADBW, less 128 per value
                const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(load32(y), _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_setzero_si256());
                sum = static_cast<int32_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) + _mm256_extract_epi64(s, 2) +
                                           _mm256_extract_epi64(s, 3)) -
                      128 * 32;
            }
            out[static_cast<size_t>(t * nb + b)] = -128 * sum;
        }
}
#endif

// Each group of eight rows converted once, then its GEMM over the tokens in passes of eight (the remainder in one
// narrower pass); rows past the last whole group one at a time.
template <GgmlType T>
void tile_converted(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                    int64_t out_stride) {
    int64_t r = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    thread_local RowGroup<T, 16> r16;
    thread_local std::vector<int32_t> offsets;
    if (rows >= 16) unsigned_offsets<T>(n, act, act_bytes, n_tok, offsets);
    const int64_t nb16 = n / RowGroup<T, 16>::kBlock;
    for (; r + 16 <= rows; r += 16) {
        r16.convert(n, w + r * row_bytes, row_bytes);
        token_passes(n_tok, [&](auto nt, int t) {
            r16.template gemm512<decltype(nt)::value>(n, act + t * act_bytes, act_bytes, offsets.data() + t * nb16, out + t * out_stride + r,
                                                      out_stride);
        });
    }
#endif
    thread_local RowGroup<T, 8> r8;
    for (; r + 8 <= rows; r += 8) {
        r8.convert(n, w + r * row_bytes, row_bytes);
        token_passes(n_tok, [&](auto nt, int t) {
            r8.template gemm<decltype(nt)::value>(n, act + t * act_bytes, act_bytes, out + t * out_stride + r, out_stride);
        });
    }
    if (r == rows) return;
    constexpr int kBlock = RowGroup<T, 8>::kBlock;
    const int64_t nb = n / kBlock;
    thread_local std::vector<int8_t> q;
    thread_local std::vector<float> scales;
    q.resize(static_cast<size_t>(n));
    scales.resize(static_cast<size_t>(nb));
    for (; r < rows; ++r) {
        convert_one_row<T>(n, w + r * row_bytes, q.data(), scales.data());
        for (int t0 = 0; t0 < n_tok; t0 += 4) {
            const int nt = std::min(4, n_tok - t0);
            __m128 acc = _mm_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                __m256i x[kBlock / 32], ax[kBlock / 32];
                for (int k = 0; k < kBlock / 32; ++k) x[k] = load32(q.data() + b * kBlock + 32 * k), ax[k] = _mm256_sign_epi8(x[k], x[k]);
                __m256i lanes[4];
                alignas(16) float dy[4] = {};
                for (int j = 0; j < 4; ++j) {
                    lanes[j] = _mm256_setzero_si256();
                    if (j >= nt) continue;
                    const int8_t* y = act_block<T>(act + (t0 + j) * act_bytes, n, b, dy[j]);
                    for (int k = 0; k < kBlock / 32; ++k)
                        lanes[j] = _mm256_add_epi32(
                            lanes[j],
                            _mm256_madd_epi16(_mm256_maddubs_epi16(ax[k], _mm256_sign_epi8(load32(y + 32 * k), x[k])), _mm256_set1_epi16(1)));
                }
                acc = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(scales[b]), _mm_load_ps(dy)),
                                   _mm_cvtepi32_ps(totals4(lanes[0], lanes[1], lanes[2], lanes[3])), acc);
            }
            alignas(16) float res[4];
            _mm_store_ps(res, acc);
            for (int j = 0; j < nt; ++j) out[(t0 + j) * out_stride + r] = res[j];
        }
    }
}

}  // namespace ikc

inline void add_ik_converted_tiles(KernelTable& t) {
    auto set = [&](GgmlType type, DotTileFn f) { t.tile_converted[type_slot(type)] = f; };
    set(GgmlType::IQ2_K, ikc::tile_converted<GgmlType::IQ2_K>);
    set(GgmlType::IQ3_K, ikc::tile_converted<GgmlType::IQ3_K>);
    set(GgmlType::IQ4_K, ikc::tile_converted<GgmlType::IQ4_K>);
    set(GgmlType::IQ5_K, ikc::tile_converted<GgmlType::IQ5_K>);
    set(GgmlType::IQ6_K, ikc::tile_converted<GgmlType::IQ6_K>);
    set(GgmlType::IQ2_KS, ikc::tile_converted<GgmlType::IQ2_KS>);
    set(GgmlType::IQ3_KS, ikc::tile_converted<GgmlType::IQ3_KS>);
    set(GgmlType::IQ4_KS, ikc::tile_converted<GgmlType::IQ4_KS>);
    set(GgmlType::IQ5_KS, ikc::tile_converted<GgmlType::IQ5_KS>);
    set(GgmlType::IQ4_KSS, ikc::tile_converted<GgmlType::IQ4_KSS>);
    set(GgmlType::IQ2_KL, ikc::tile_converted<GgmlType::IQ2_KL>);
    set(GgmlType::IK_Q8_0, ikc::tile_converted<GgmlType::IK_Q8_0>);
    set(GgmlType::Q6_0, ikc::tile_converted<GgmlType::Q6_0>);
    set(GgmlType::IQ1_KT, ikc::tile_converted<GgmlType::IQ1_KT>);
    set(GgmlType::IQ2_KT, ikc::tile_converted<GgmlType::IQ2_KT>);
    set(GgmlType::IQ3_KT, ikc::tile_converted<GgmlType::IQ3_KT>);
    set(GgmlType::IQ4_KT, ikc::tile_converted<GgmlType::IQ4_KT>);
}

}  // namespace
}  // namespace moe::kernels

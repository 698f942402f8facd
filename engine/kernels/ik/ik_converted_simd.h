// ik_llama.cpp's large-batch path (ik_ref.h: convert_row) over rows x tokens: each weight row converted to 8-bit
// values once, then every token's exact integer dots per block and one FMA each, in ik's order. Included by the
// AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/ik/ik_table_simd.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikc {

// Eight int32 lanes of four signed products each (|values| <= 127, so no pair saturates).
inline __m256i lanes32(__m256i x, const int8_t* y) {
    const __m256i v = load32(y);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(v, x)), _mm256_set1_epi16(1));
}
// Four tokens' lane sums to their four totals (exact).
inline __m128i totals4(__m256i d0, __m256i d1, __m256i d2, __m256i d3) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_hadd_epi32(d2, d3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Block b of a token's activations: values and scale (ik's Q8_K per 256 for the table types, Q8_2_X4 per 32).
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

// Each row converted once; then per block the exact dots of up to four tokens at once (the row's values loaded
// once for them), their totals side by side, and acc = fma(scale * y.d, total, acc) per token in block order.
template <GgmlType T>
void tile_converted(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                    int64_t out_stride) {
    constexpr int kBlock = ik::is_table_type(T) ? 256 : 32;
    const int64_t nb = n / kBlock;
    thread_local std::vector<int8_t> q;
    thread_local std::vector<float> scales;
    q.resize(static_cast<size_t>(n));
    scales.resize(static_cast<size_t>(nb));
    for (int64_t r = 0; r < rows; ++r) {
        if constexpr (ik::is_table_type(T)) ikt::convert_row<T>(n, w + r * row_bytes, q.data(), scales.data());
        else ik::convert_row(T, n, w + r * row_bytes, q.data(), scales.data());
        for (int t0 = 0; t0 < n_tok; t0 += 4) {
            const int nt = std::min(4, n_tok - t0);
            __m128 acc = _mm_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                __m256i x[kBlock / 32];
                for (int k = 0; k < kBlock / 32; ++k) x[k] = load32(q.data() + b * kBlock + 32 * k);
                __m256i lanes[4];
                alignas(16) float dy[4] = {0.f, 0.f, 0.f, 0.f};
                for (int j = 0; j < 4; ++j) {
                    if (j >= nt) {
                        lanes[j] = _mm256_setzero_si256();
                        continue;
                    }
                    const int8_t* y = act_block<T>(act + (t0 + j) * act_bytes, n, b, dy[j]);
                    lanes[j] = lanes32(x[0], y);
                    for (int k = 1; k < kBlock / 32; ++k) lanes[j] = _mm256_add_epi32(lanes[j], lanes32(x[k], y + 32 * k));
                }
                const __m128 f = _mm_mul_ps(_mm_set1_ps(scales[b]), _mm_load_ps(dy));
                acc = _mm_fmadd_ps(f, _mm_cvtepi32_ps(totals4(lanes[0], lanes[1], lanes[2], lanes[3])), acc);
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

// ik_llama.cpp's large-batch path (ik_ref.h: convert_row) over rows x tokens: each weight row converted to 8-bit
// values once, then every token's exact integer dots per block and one FMA each, in ik's order. Included by the
// AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/ik/ik_table_simd.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikc {

// Sum of 32 signed products (|values| <= 127, so no pair saturates).
inline __m256i dot32(const int8_t* q, const int8_t* y) {
    const __m256i x = load32(q), v = load32(y);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(v, x)), _mm256_set1_epi16(1));
}

template <GgmlType T>
void tile_converted(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                    int64_t out_stride) {
    const int block = ik::converted_block(T);
    const int64_t nb = n / block;
    thread_local std::vector<int8_t> q;
    thread_local std::vector<float> scales;
    q.resize(static_cast<size_t>(n));
    scales.resize(static_cast<size_t>(nb));
    for (int64_t r = 0; r < rows; ++r) {
        if constexpr (T == GgmlType::IK_Q8_0 || T == GgmlType::Q6_0 || ik::is_trellis_type(T)) ik::convert_row(T, n, w + r * row_bytes, q.data(), scales.data());
        else ikt::convert_row<T>(n, w + r * row_bytes, q.data(), scales.data());
        for (int t = 0; t < n_tok; ++t) {
            const uint8_t* a = act + t * act_bytes;
            float acc = 0.f;
            for (int64_t b = 0; b < nb; ++b) {
                const int8_t* y;
                float dy;
                ik::activation_block(T, a, n, b, y, dy);
                __m256i s = dot32(q.data() + b * block, y);
                for (int k = 32; k < block; k += 32) s = _mm256_add_epi32(s, dot32(q.data() + b * block + k, y + k));
                acc = std::fma(scales[b] * dy, static_cast<float>(hsum_lanes(s)), acc);
            }
            out[t * out_stride + r] = acc;
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

// AVX2 kernels for ik_llama.cpp's ternary forms (ik_ref_bitnet.cpp has their layouts and reference): IQ1_BN and
// IQ2_BN a row at a time against Q8_K64, IQ2_BN_R4 four rows per register against Q8_K16. The values t (0..2)
// times the int8 activations are exact int32 sums per activation stream; the float steps are the reference's.
// Included by the AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikb {

// IQ1_BN: per output byte its source byte (per 16 values three bytes of five, the sixteenth from the extra byte)
// and multiplier 3^(4 - j); the value is the top base-3 digit of (byte x multiplier) mod 256, (3 v) >> 8. The
// products run in 16-bit lanes, even and odd bytes apart.
struct Iq1BnPlan {
    alignas(32) int8_t src[2][32];
    alignas(32) int16_t mult_even[2][16], mult_odd[2][16];
};
inline const Iq1BnPlan& iq1_bn_plan() {
    static const Iq1BnPlan plan = [] {
        constexpr int kMult[5] = {81, 27, 9, 3, 1};
        Iq1BnPlan p{};
        for (int e = 0; e < 64; ++e) {
            const int i16 = e / 16, r = e % 16;
            const int byte = r < 15 ? 3 * i16 + r / 5 : 12, mult = r < 15 ? kMult[r % 5] : kMult[i16];
            p.src[e / 32][e % 32] = static_cast<int8_t>(byte < 8 ? byte : byte + 3);  // (bytes 8..12 sit at 11..15 of the load)
            (e % 2 ? p.mult_odd : p.mult_even)[e / 32][(e % 32) / 2] = static_cast<int16_t>(mult);
        }
        return p;
    }();
    return plan;
}
inline __m256i iq1_bn_half(__m256i bytes, const Iq1BnPlan& plan, int h) {
    const __m256i b = _mm256_shuffle_epi8(bytes, _mm256_load_si256(reinterpret_cast<const __m256i*>(plan.src[h])));
    const __m256i low = _mm256_set1_epi16(0xFF), three = _mm256_set1_epi16(3);
    const __m256i even = _mm256_and_si256(_mm256_mullo_epi16(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(plan.mult_even[h]))), low);
    const __m256i odd = _mm256_and_si256(
        _mm256_mullo_epi16(_mm256_srli_epi16(b, 8), _mm256_load_si256(reinterpret_cast<const __m256i*>(plan.mult_odd[h]))), low);
    return _mm256_or_si256(_mm256_srli_epi16(_mm256_mullo_epi16(even, three), 8),
                           _mm256_slli_epi16(_mm256_srli_epi16(_mm256_mullo_epi16(odd, three), 8), 8));
}
inline void iq1_bn_values(const uint8_t* block, const Iq1BnPlan& plan, __m256i& v0, __m256i& v1) {
    // the block's 13 bytes without reading past them: bytes 0..7 and 5..12
    const __m128i q = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(block)),
                                         _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 5)));
    const __m256i bytes = _mm256_broadcastsi128_si256(q);
    v0 = iq1_bn_half(bytes, plan, 0), v1 = iq1_bn_half(bytes, plan, 1);
}

// IQ1_BN / IQ2_BN: one row against NY tokens. int32 lane L of the sums holds activation stream L % 4.
template <GgmlType T, int NY>
void bn_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    constexpr bool kOne = T == GgmlType::IQ1_BN;
    constexpr size_t kMeta = kOne ? 2 : 4, kBlock = kOne ? 13 : 16;
    const Iq1BnPlan& plan = iq1_bn_plan();
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
        __m256i acc[NY];
        for (auto& a : acc) a = _mm256_setzero_si256();
        for (int64_t b = 0; b < n / 64; ++b) {
            const uint8_t* block = row + kMeta + b * kBlock;
            __m256i v0, v1;
            if constexpr (kOne) {
                iq1_bn_values(block, plan, v0, v1);
            } else {  // a 64-bit shift by 2 m leaves each byte's bits 2 m, 2 m + 1 at its bottom
                const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block)));
                v0 = _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 2, 2)), m3);
                v1 = _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(4, 4, 6, 6)), m3);
            }
            for (int t = 0; t < NY; ++t) {
                const auto* q = act + t * act_bytes + 32 + 64 * b;
                if constexpr (NY == 1)  // independent products: one token would wait on VPDPBUSD's latency
                    acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(dot_us8(v0, load32(q)), dot_us8(v1, load32(q + 32))));
                else acc[t] = dot_us8_add(dot_us8_add(acc[t], v0, load32(q)), v1, load32(q + 32));
            }
        }
        float scale;
        if constexpr (kOne) {
            uint16_t h;
            std::memcpy(&h, row, 2);
            scale = fp16_to_fp32(h);
        } else {
            std::memcpy(&scale, row, 4);
        }
        for (int t = 0; t < NY; ++t) {
            const auto* y = reinterpret_cast<const float*>(act + t * act_bytes);
            const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc[t]), _mm256_extracti128_si256(acc[t], 1));
            __m128 l = _mm_fmsub_ps(_mm_loadu_ps(y), _mm_cvtepi32_ps(s), _mm_loadu_ps(y + 4));
            l = _mm_add_ps(l, _mm_movehl_ps(l, l));  // (0 + 2), (1 + 3)
            out[t * out_stride + r] = scale * _mm_cvtss_f32(_mm_add_ss(l, _mm_movehdup_ps(l)));
        }
    }
}
template <GgmlType T>
float dot_bn(int64_t n, const void* w, const void* a) {
    float out;
    bn_tokens<T, 1>(n, static_cast<const uint8_t*>(w), 0, 1, static_cast<const uint8_t*>(a), 0, &out, 0);
    return out;
}

// IQ2_BN_R4: per 64 values two registers of the group's bits (streams 0 and 1, then 2 and 3; lane k + 4 h row k of
// stream 2 s + h), each value pair's bits 2 m against the token's dword m of each stream.
template <int NY>
void iq2_bn_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t g = 0; g < rows / 4; ++g) {
        const uint8_t* group = w + 4 * g * row_bytes;
        __m256i acc[NY][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_si256();
        for (int64_t ib = 0; ib < n / 64; ++ib)
            for (int s = 0; s < 2; ++s) {
                const __m256i bits = load32(group + 16 + 64 * ib + 32 * s);
                __m256i qx[4];
                for (int m = 0; m < 4; ++m) qx[m] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * m), m3);
                for (int t = 0; t < NY; ++t) {
                    const __m256i y = load32(act + t * act_bytes + 20 + 64 * ib + 32 * s);
                    if constexpr (NY == 1) {  // (as above)
                        const __m256i a = _mm256_add_epi32(dot_us8(qx[0], _mm256_shuffle_epi32(y, 0x00)),
                                                           dot_us8(qx[1], _mm256_shuffle_epi32(y, 0x55)));
                        const __m256i b = _mm256_add_epi32(dot_us8(qx[2], _mm256_shuffle_epi32(y, 0xaa)),
                                                           dot_us8(qx[3], _mm256_shuffle_epi32(y, 0xff)));
                        acc[t][s] = _mm256_add_epi32(acc[t][s], _mm256_add_epi32(a, b));
                    } else {
                        __m256i a = acc[t][s];
                        a = dot_us8_add(a, qx[0], _mm256_shuffle_epi32(y, 0x00));
                        a = dot_us8_add(a, qx[1], _mm256_shuffle_epi32(y, 0x55));
                        a = dot_us8_add(a, qx[2], _mm256_shuffle_epi32(y, 0xaa));
                        acc[t][s] = dot_us8_add(a, qx[3], _mm256_shuffle_epi32(y, 0xff));
                    }
                }
            }
        const __m128 dl = _mm_loadu_ps(reinterpret_cast<const float*>(group));
        for (int t = 0; t < NY; ++t) {
            const auto* y = reinterpret_cast<const float*>(act + t * act_bytes);
            const __m256 f0 = _mm256_cvtepi32_ps(acc[t][0]), f1 = _mm256_cvtepi32_ps(acc[t][1]);
            __m128 s4 = _mm_mul_ps(_mm256_castps256_ps128(f0), _mm_mul_ps(dl, _mm_set1_ps(y[0])));
            s4 = _mm_fmadd_ps(_mm256_extractf128_ps(f0, 1), _mm_mul_ps(dl, _mm_set1_ps(y[1])), s4);
            s4 = _mm_fmadd_ps(_mm256_castps256_ps128(f1), _mm_mul_ps(dl, _mm_set1_ps(y[2])), s4);
            s4 = _mm_fmadd_ps(_mm256_extractf128_ps(f1, 1), _mm_mul_ps(dl, _mm_set1_ps(y[3])), s4);
            _mm_storeu_ps(out + t * out_stride + 4 * g, _mm_fmadd_ps(dl, _mm_set1_ps(-y[4]), s4));
        }
    }
}

// Kernels by token count, as ik_r4_simd.h's rows_one / tokens_tile take them.
template <GgmlType T>
struct Bn {
    template <int NY>
    struct Of {
        static constexpr auto run = bn_tokens<T, NY>;
    };
};
template <int NY>
struct Iq2BnR4 {
    static constexpr auto run = iq2_bn_r4_tokens<NY>;
};

}  // namespace ikb
}  // namespace
}  // namespace moe::kernels

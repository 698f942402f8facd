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

// IQ1_BN: value e of a block is the top base-3 digit of (byte x 3^(4 - j)) mod 256, (3 v) >> 8 (per 16 values
// three bytes of five, the sixteenth from the extra byte). In 16-bit lanes that is three instructions: the byte
// shuffled into a lane's low half, VPMULLW by the multiplier << 8 leaves (byte x multiplier) mod 256 in the high
// half, VPMULHUW by 3 keeps the digit. PACKUSWB then joins two such registers, per 128-bit lane L eight words of
// the first (values 16 L .. 16 L + 7) and eight of the second (16 L + 8 ..): the plan lays the words out so.
struct Iq1BnPlan {
    alignas(64) int8_t shuffle[2][64];  // [part] per word: its source byte, then -1 (a zero high half)
    alignas(64) int16_t mult[2][32];    // [part] per word: the multiplier << 8
};
// `split_load`: the block's bytes as read by iq1_bn_bytes (0..7, then 5..12), else as they lie.
template <bool split_load>
const Iq1BnPlan& iq1_bn_plan() {
    static const Iq1BnPlan plan = [] {
        constexpr int kMult[5] = {81, 27, 9, 3, 1};
        Iq1BnPlan p{};
        for (int e = 0; e < 64; ++e) {
            const int i16 = e / 16, r = e % 16;
            const int byte = r < 15 ? 3 * i16 + r / 5 : 12, mult = r < 15 ? kMult[r % 5] : kMult[i16];
            const int part = r / 8, word = 8 * i16 + r % 8;
            p.shuffle[part][2 * word] = static_cast<int8_t>(split_load && byte >= 8 ? byte + 3 : byte);
            p.shuffle[part][2 * word + 1] = -1;
            p.mult[part][word] = static_cast<int16_t>(mult << 8);
        }
        return p;
    }();
    return plan;
}
// The block's 13 bytes without reading past them: bytes 0..7 and 5..12, in both 128-bit lanes.
inline __m256i iq1_bn_bytes(const uint8_t* block) {
    return _mm256_broadcastsi128_si256(
        _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(block)), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 5))));
}
inline __m256i iq1_bn_digits(__m256i bytes, const int8_t* shuffle, const int16_t* mult) {
    const __m256i b = _mm256_shuffle_epi8(bytes, _mm256_load_si256(reinterpret_cast<const __m256i*>(shuffle)));
    return _mm256_mulhi_epu16(_mm256_mullo_epi16(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(mult))), _mm256_set1_epi16(3));
}
inline void iq1_bn_values(const uint8_t* block, const Iq1BnPlan& plan, __m256i& v0, __m256i& v1) {
    const __m256i bytes = iq1_bn_bytes(block);
    for (int h = 0; h < 2; ++h)  // values 32 h .. 32 h + 31: words 16 h .. of both parts
        (h ? v1 : v0) = _mm256_packus_epi16(iq1_bn_digits(bytes, plan.shuffle[0] + 32 * h, plan.mult[0] + 16 * h),
                                            iq1_bn_digits(bytes, plan.shuffle[1] + 32 * h, plan.mult[1] + 16 * h));
}

// The row scale (IQ1_BN fp16, IQ2_BN f32) and where the blocks start.
template <GgmlType T>
struct BnRow {
    static constexpr bool kOne = T == GgmlType::IQ1_BN;
    static constexpr size_t kMeta = kOne ? 2 : 4, kBlock = kOne ? 13 : 16;
    static float scale(const uint8_t* row) {
        if constexpr (kOne) {
            uint16_t h;
            std::memcpy(&h, row, 2);
            return fp16_to_fp32(h);
        } else {
            float s;
            std::memcpy(&s, row, 4);
            return s;
        }
    }
};
// A token's int32 lane sums (lane L: activation stream L % 4) to the row's result, the reference's float steps.
inline float bn_result(__m256i acc, const uint8_t* token, float scale) {
    const auto* y = reinterpret_cast<const float*>(token);
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    __m128 l = _mm_fmsub_ps(_mm_loadu_ps(y), _mm_cvtepi32_ps(s), _mm_loadu_ps(y + 4));
    l = _mm_add_ps(l, _mm_movehl_ps(l, l));  // (0 + 2), (1 + 3)
    return scale * _mm_cvtss_f32(_mm_add_ss(l, _mm_movehdup_ps(l)));
}

// IQ1_BN / IQ2_BN: one row against NY tokens.
template <GgmlType T, int NY>
void bn_tokens256(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    using Row = BnRow<T>;
    const Iq1BnPlan& plan = iq1_bn_plan<true>();
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
        __m256i acc[NY];
        for (auto& a : acc) a = _mm256_setzero_si256();
        for (int64_t b = 0; b < n / 64; ++b) {
            const uint8_t* block = row + Row::kMeta + b * Row::kBlock;
            __m256i v0, v1;
            if constexpr (Row::kOne) {
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
        const float scale = Row::scale(row);
        for (int t = 0; t < NY; ++t) out[t * out_stride + r] = bn_result(acc[t], act + t * act_bytes, scale);
    }
}

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// A block's 64 values in one 512-bit register: IQ1_BN's 13 bytes by a masked load (no read past them) in every
// 128-bit lane, both parts' digits and one PACKUSWB; IQ2_BN's lane j the bytes' bits 2 j, 2 j + 1.
template <GgmlType T>
inline __m512i bn_values512(const uint8_t* block, const Iq1BnPlan& plan) {
    if constexpr (T == GgmlType::IQ1_BN) {
        const __m512i bytes = _mm512_broadcast_i32x4(_mm_maskz_loadu_epi8(0x1FFF, block)), three = _mm512_set1_epi16(3);
        const auto digits = [&](int part) {
            const __m512i b = _mm512_shuffle_epi8(bytes, _mm512_load_si512(plan.shuffle[part]));
            return _mm512_mulhi_epu16(_mm512_mullo_epi16(b, _mm512_load_si512(plan.mult[part])), three);
        };
        return _mm512_packus_epi16(digits(0), digits(1));
    } else {
        const __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block)));
        return _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 2, 2, 4, 4, 6, 6)), _mm512_set1_epi8(3));
    }
}
// One VPDPBUSD per block and token; lanes L and L + 8 hold the same stream, so the halves' sum is the 256-bit form's.
// Out of line: inlined into tokens_tile's passes, GCC kept the token pointers in vector registers (a VMOVQ to a
// general register per token and block; IQ2_BN at 8 tokens 0.85 of ik, 0.97 out of line).
template <GgmlType T, int NY>
__attribute__((noinline)) void bn_tokens512(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes,
                                            float* out, int64_t out_stride) {
    using Row = BnRow<T>;
    const Iq1BnPlan& plan = iq1_bn_plan<false>();
    const int64_t nb = n / 64;
    const uint8_t* ys[NY];
    for (int t = 0; t < NY; ++t) ys[t] = act + t * act_bytes + 32;
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* blocks = w + static_cast<size_t>(r) * row_bytes + Row::kMeta;
        __m512i acc[NY];
        for (auto& a : acc) a = _mm512_setzero_si512();
        if constexpr (NY == 1) {  // two chains: one token would wait on VPDPBUSD's latency
            __m512i odd = _mm512_setzero_si512();
            for (int64_t b = 0; b + 2 <= nb; b += 2) {
                acc[0] = _mm512_dpbusd_epi32(acc[0], bn_values512<T>(blocks + b * Row::kBlock, plan), _mm512_loadu_si512(ys[0] + 64 * b));
                odd = _mm512_dpbusd_epi32(odd, bn_values512<T>(blocks + (b + 1) * Row::kBlock, plan), _mm512_loadu_si512(ys[0] + 64 * b + 64));
            }
            if (nb % 2)
                acc[0] = _mm512_dpbusd_epi32(acc[0], bn_values512<T>(blocks + (nb - 1) * Row::kBlock, plan),
                                             _mm512_loadu_si512(ys[0] + 64 * (nb - 1)));
            acc[0] = _mm512_add_epi32(acc[0], odd);
        } else {
            for (int64_t b = 0; b < nb; ++b) {
                const __m512i v = bn_values512<T>(blocks + b * Row::kBlock, plan);
                for (int t = 0; t < NY; ++t) acc[t] = _mm512_dpbusd_epi32(acc[t], v, _mm512_loadu_si512(ys[t] + 64 * b));
            }
        }
        const float scale = Row::scale(blocks - Row::kMeta);
        for (int t = 0; t < NY; ++t) {
            const __m256i a = _mm256_add_epi32(_mm512_castsi512_si256(acc[t]), _mm512_extracti64x4_epi64(acc[t], 1));
            out[t * out_stride + r] = bn_result(a, act + t * act_bytes, scale);
        }
    }
}
#endif

template <GgmlType T, int NY>
void bn_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    bn_tokens512<T, NY>(n, w, row_bytes, rows, act, act_bytes, out, out_stride);
#else
    bn_tokens256<T, NY>(n, w, row_bytes, rows, act, act_bytes, out, out_stride);
#endif
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

#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
// IQ2_BN_R4 for several tokens (ik's AVX-512 kernel's shape): a group's 64 bytes per 64 values in one register (lane
// j + 4 m: stream j's pair bits 2 m, row k in dword k of each lane), two groups at once so each token's four dword
// broadcasts serve eight rows. Lane 4 j + k of the sums is stream j, row k: the 256-bit kernel's float steps.
template <int NY>
__attribute__((noinline)) void iq2_bn_r4_tokens512(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes,
                                                   float* out, int64_t out_stride) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const uint8_t* ys[NY];
    for (int t = 0; t < NY; ++t) ys[t] = act + t * act_bytes + 20;
    const auto store = [&](__m512i acc, const uint8_t* group, int t, int64_t row) {
        const __m128 dl = _mm_loadu_ps(reinterpret_cast<const float*>(group));
        const auto* y = reinterpret_cast<const float*>(act + t * act_bytes);
        const __m512 f = _mm512_cvtepi32_ps(acc);
        __m128 s4 = _mm_mul_ps(_mm512_castps512_ps128(f), _mm_mul_ps(dl, _mm_set1_ps(y[0])));
        s4 = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 1), _mm_mul_ps(dl, _mm_set1_ps(y[1])), s4);
        s4 = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 2), _mm_mul_ps(dl, _mm_set1_ps(y[2])), s4);
        s4 = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 3), _mm_mul_ps(dl, _mm_set1_ps(y[3])), s4);
        _mm_storeu_ps(out + t * out_stride + row, _mm_fmadd_ps(dl, _mm_set1_ps(-y[4]), s4));
    };
    int64_t g = 0;
    for (; g + 2 <= rows / 4; g += 2) {
        const uint8_t* group0 = w + 4 * g * row_bytes;
        const uint8_t* group1 = group0 + 4 * row_bytes;
        __m512i acc[NY][2];
        for (auto& a : acc) a[0] = a[1] = _mm512_setzero_si512();
        for (int64_t ib = 0; ib < n / 64; ++ib) {
            const __m512i bits0 = _mm512_loadu_si512(group0 + 16 + 64 * ib), bits1 = _mm512_loadu_si512(group1 + 16 + 64 * ib);
            __m512i qx[2][4];
            for (int m = 0; m < 4; ++m) {
                qx[0][m] = _mm512_and_si512(_mm512_srli_epi16(bits0, 2 * m), m3);
                qx[1][m] = _mm512_and_si512(_mm512_srli_epi16(bits1, 2 * m), m3);
            }
            for (int t = 0; t < NY; ++t) {
                const __m512i y = _mm512_loadu_si512(ys[t] + 64 * ib);
                for (int m = 0; m < 4; ++m) {
                    const __m512i ym = _mm512_shuffle_epi32(y, static_cast<_MM_PERM_ENUM>(0x55 * m));
                    acc[t][0] = _mm512_dpbusd_epi32(acc[t][0], qx[0][m], ym);
                    acc[t][1] = _mm512_dpbusd_epi32(acc[t][1], qx[1][m], ym);
                }
            }
        }
        for (int t = 0; t < NY; ++t) store(acc[t][0], group0, t, 4 * g), store(acc[t][1], group1, t, 4 * g + 4);
    }
    if (g < rows / 4) {  // a last lone group
        const uint8_t* group = w + 4 * g * row_bytes;
        __m512i acc[NY];
        for (auto& a : acc) a = _mm512_setzero_si512();
        for (int64_t ib = 0; ib < n / 64; ++ib) {
            const __m512i bits = _mm512_loadu_si512(group + 16 + 64 * ib);
            for (int t = 0; t < NY; ++t) {
                const __m512i y = _mm512_loadu_si512(ys[t] + 64 * ib);
                for (int m = 0; m < 4; ++m)
                    acc[t] = _mm512_dpbusd_epi32(acc[t], _mm512_and_si512(_mm512_srli_epi16(bits, 2 * m), m3),
                                                 _mm512_shuffle_epi32(y, static_cast<_MM_PERM_ENUM>(0x55 * m)));
            }
        }
        for (int t = 0; t < NY; ++t) store(acc[t], group, t, 4 * g);
    }
}
#endif

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
#if defined(__AVX512BW__) && defined(__AVX512VNNI__)
    // one token keeps the 256-bit kernel's independent products (as ik does)
    static constexpr auto run = NY == 1 ? iq2_bn_r4_tokens<NY> : iq2_bn_r4_tokens512<NY>;
#else
    static constexpr auto run = iq2_bn_r4_tokens<NY>;
#endif
};

}  // namespace ikb
}  // namespace
}  // namespace moe::kernels

// AVX2 kernels for ik_llama.cpp's interleaved legacy forms and IQ4_XS_R8, with the bits of ik_ref_r4_legacy.cpp:
// Q4_0_R8 and IQ4_XS_R8 eight rows in the lanes (lane k = row k); Q5_0_R4, Q6_0_R4 and IQ4_NL_R4 four rows in
// ik's two lanes per row (lane k: row k's first 16 of each 32 weights, lane 4 + k: its second 16). Integer sums
// are exact (maddubs pairs stay within int16 for these value ranges; VPDPBUSD where the CPU has AVX512-VNNI), so
// only the float steps, which follow the reference, decide the bits. Included by ik_r4_simd.h.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_k_r4_simd.h"
#include "engine/kernels/ik/ik_r4_lanes.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

// Lane sums of u (unsigned bytes) times y (signed bytes), four products per int32 lane; signed v with its sign
// moved onto y (simd_common.h).
inline __m256i dot_u8_i8(__m256i acc, __m256i u, __m256i y) { return _mm256_add_epi32(acc, dot_us8(u, y)); }
inline __m256i dot_i8_i8(__m256i acc, __m256i v, __m256i y) { return _mm256_add_epi32(acc, dot_ss8(v, y)); }

inline __m256i iq4nl_table() { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq4kValues))); }

// Q4_0_R8: per block the eight rows' exact sums of index x value; Lone: acc1 += d y.d S, acc2 += d m, then
// acc1 - 8 acc2; a batch takes -8 (the four blocks' d m summed) per group of four first, and per tail block after
// its sum. V is the register: eight rows (one group, __m256) or, in the AVX-512 translation unit, sixteen (two
// groups, __m512) with each lane's float steps unchanged.
struct Q40R8x8 {
    using F = __m256;
    struct Bits {
        __m256i lo[4], hi[4];  // weights 4l + i and 16 + 4l + i of each row's dword
    };
    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float x) { return _mm256_set1_ps(x); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
    static F scales(const ik::BlockQ4_0_R8* g0, const ik::BlockQ4_0_R8*, int64_t b) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g0[b].d)));
    }
    static void load(const ik::BlockQ4_0_R8* g0, const ik::BlockQ4_0_R8*, int64_t b, Bits& q) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int l = 0; l < 4; ++l) {
            const __m256i bits = load32(g0[b].qs + 32 * l);
            q.lo[l] = _mm256_and_si256(bits, m4), q.hi[l] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        }
    }
    static F sums(const Bits& q, const int8_t* qy) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
        __m256i s = _mm256_setzero_si256();
        for (int l = 0; l < 4; ++l) {
            int lo, hi;
            std::memcpy(&lo, qy + 4 * l, 4);
            std::memcpy(&hi, qy + 16 + 4 * l, 4);
            s = _mm256_add_epi32(s, dot_us8(q.lo[l], _mm256_set1_epi32(lo)));
            s = _mm256_add_epi32(s, dot_us8(q.hi[l], _mm256_set1_epi32(hi)));
        }
        return _mm256_cvtepi32_ps(s);
#else
        // indices at most 15: all eight PMADDUBSW pair sums add in int16 (within 8 * 2 * 15 * 127), one PMADDWD
        const __m256i yl = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qy)));
        const __m256i yh = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qy + 16)));
        const __m256i a = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(q.lo[0], _mm256_shuffle_epi32(yl, 0x00)),
                                                            _mm256_maddubs_epi16(q.lo[1], _mm256_shuffle_epi32(yl, 0x55))),
                                           _mm256_add_epi16(_mm256_maddubs_epi16(q.lo[2], _mm256_shuffle_epi32(yl, 0xaa)),
                                                            _mm256_maddubs_epi16(q.lo[3], _mm256_shuffle_epi32(yl, 0xff))));
        const __m256i b = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(q.hi[0], _mm256_shuffle_epi32(yh, 0x00)),
                                                            _mm256_maddubs_epi16(q.hi[1], _mm256_shuffle_epi32(yh, 0x55))),
                                           _mm256_add_epi16(_mm256_maddubs_epi16(q.hi[2], _mm256_shuffle_epi32(yh, 0xaa)),
                                                            _mm256_maddubs_epi16(q.hi[3], _mm256_shuffle_epi32(yh, 0xff))));
        return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_add_epi16(a, b), _mm256_set1_epi16(1)));
#endif
    }
};
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
struct Q40R8x16 {  // two groups: rows 0..7 from g0, 8..15 from g1
    using F = __m512;
    struct Bits {
        __m512i lo[4], hi[4];
    };
    static F zero() { return _mm512_setzero_ps(); }
    static F set1(float x) { return _mm512_set1_ps(x); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
    static F scales(const ik::BlockQ4_0_R8* g0, const ik::BlockQ4_0_R8* g1, int64_t b) {
        return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g0[b].d))),
                                                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(g1[b].d)), 1));
    }
    static void load(const ik::BlockQ4_0_R8* g0, const ik::BlockQ4_0_R8* g1, int64_t b, Bits& q) {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        for (int l = 0; l < 4; ++l) {
            const __m512i bits = _mm512_inserti64x4(_mm512_castsi256_si512(load32(g0[b].qs + 32 * l)), load32(g1[b].qs + 32 * l), 1);
            q.lo[l] = _mm512_and_si512(bits, m4), q.hi[l] = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
        }
    }
    static F sums(const Bits& q, const int8_t* qy) {
        __m512i s = _mm512_setzero_si512();
        for (int l = 0; l < 4; ++l) {
            int lo, hi;
            std::memcpy(&lo, qy + 4 * l, 4);
            std::memcpy(&hi, qy + 16 + 4 * l, 4);
            s = _mm512_dpbusd_epi32(s, q.lo[l], _mm512_set1_epi32(lo));
            s = _mm512_dpbusd_epi32(s, q.hi[l], _mm512_set1_epi32(hi));
        }
        return _mm512_cvtepi32_ps(s);
    }
};
#endif

// A block's weights unpacked once for all NY tokens; each token's accumulator takes the one-token steps.
template <class V, bool Lone, int NY>
void q4_0_r8_rows(int64_t n, const ik::BlockQ4_0_R8* g0, const ik::BlockQ4_0_R8* g1, const uint8_t* act, size_t act_bytes, float* out,
                  int64_t out_stride) {
    using F = typename V::F;
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    F acc[NY], acc2[NY];
    for (int t = 0; t < NY; ++t) acc[t] = acc2[t] = V::zero();
    typename V::Bits q;
    // block b for every token: its sums, y.d and m = y.d * (its activation sum)
    auto block = [&](int64_t b, F S[NY], float dy[NY], float m[NY]) {
        V::load(g0, g1, b, q);
        for (int t = 0; t < NY; ++t) {
            int ysum;
            const int8_t* qy = x4_block(act + t * act_bytes, b, grouped, dy[t], ysum);
            m[t] = dy[t] * static_cast<float>(ysum);
            S[t] = V::sums(q, qy);
        }
    };
    F S[4][NY];
    float dy[4][NY], m[4][NY];
    alignas(16) float dys[NY][8];  // per token and group of four blocks: the four y.d, then the four m
    for (int64_t b0 = 0; b0 < grouped; b0 += 4) {
        for (int t = 0; t < NY; ++t) {
            const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(act + t * act_bytes)[b0 / 4];
            const __m128 d4 = x4_scales(yg);
            _mm_store_ps(dys[t], d4);
            _mm_store_ps(dys[t] + 4, _mm_mul_ps(d4, x4_sums(yg)));
        }
        F d[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            d[j] = V::scales(g0, g1, b0 + j);
            V::load(g0, g1, b0 + j, q);
            for (int t = 0; t < NY; ++t) {
                S[j][t] = V::sums(q, reinterpret_cast<const ik::BlockQ8_2x4*>(act + t * act_bytes)[b0 / 4].qs + 32 * j);
                if (Lone) {
                    acc[t] = V::fma(V::mul(d[j], V::set1(dys[t][j])), S[j][t], acc[t]);
                    acc2[t] = V::fma(d[j], V::set1(dys[t][4 + j]), acc2[t]);
                }
            }
        }
        if (!Lone)
            for (int t = 0; t < NY; ++t) {
                F sumf = V::mul(d[0], V::set1(dys[t][4]));
                for (int j = 1; j < 4; ++j) sumf = V::fma(d[j], V::set1(dys[t][4 + j]), sumf);
                acc[t] = V::fma(sumf, V::set1(-8.f), acc[t]);
                for (int j = 0; j < 4; ++j) acc[t] = V::fma(V::mul(d[j], V::set1(dys[t][j])), S[j][t], acc[t]);
            }
    }
    if (Lone) {
        for (int64_t b = grouped; b < nb; ++b) {
            const F d = V::scales(g0, g1, b);
            block(b, S[0], dy[0], m[0]);
            for (int t = 0; t < NY; ++t) {
                acc[t] = V::fma(V::mul(d, V::set1(dy[0][t])), S[0][t], acc[t]);
                acc2[t] = V::fma(d, V::set1(m[0][t]), acc2[t]);
            }
        }
        for (int t = 0; t < NY; ++t) V::store(out + t * out_stride, V::fma(acc2[t], V::set1(-8.f), acc[t]));
        return;
    }
    for (int64_t b = grouped; b < nb; ++b) {
        const F d = V::scales(g0, g1, b);
        block(b, S[0], dy[0], m[0]);
        for (int t = 0; t < NY; ++t) {
            acc[t] = V::fma(V::mul(d, V::set1(dy[0][t])), S[0][t], acc[t]);
            acc[t] = V::fma(V::mul(d, V::set1(-8.f)), V::set1(m[0][t]), acc[t]);
        }
    }
    for (int t = 0; t < NY; ++t) V::store(out + t * out_stride, acc[t]);
}

template <bool Lone, int NY>
void q4_0_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    int64_t g = 0;
    auto group = [&](int64_t at) { return reinterpret_cast<const ik::BlockQ4_0_R8*>(w + 8 * at * row_bytes); };
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (; g + 2 <= rows / 8; g += 2) q4_0_r8_rows<Q40R8x16, Lone, NY>(n, group(g), group(g + 1), act, act_bytes, out + 8 * g, out_stride);
#endif
    for (; g < rows / 8; ++g) q4_0_r8_rows<Q40R8x8, Lone, NY>(n, group(g), nullptr, act, act_bytes, out + 8 * g, out_stride);
}

// Q5_0_R4 / Q6_0_R4 / IQ4_NL_R4: per block the four fields' values (ik_r4_layout.h: field f holds weights 4f + i
// in lane k, 16 + 4f + i in lane 4 + k), the lanes' exact sums, fma(d y.d, sum) and, for the unsigned indices,
// fma(d, -8 m or -16 m) in each lane.
template <GgmlType T>
struct LegacyR4Block {
    static constexpr size_t kBytes = T == GgmlType::Q5_0_R4   ? sizeof(ik::BlockQ5_0_R4)
                                     : T == GgmlType::Q6_0_R4 ? sizeof(ik::BlockQ6_0_R4)
                                                              : sizeof(ik::BlockIQ4_NL_R4);
    static constexpr float kOffset = T == GgmlType::Q5_0_R4 ? -8.f : -16.f;
    // The block's four fields (unsigned indices, or IQ4_NL_R4's signed values) and the rows' d in both lanes.
    static void decode(const uint8_t* blk, __m256i q[4], __m256& d8) {
        const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk)));
        d8 = _mm256_set_m128(d4, d4);
        nibble_fields(blk + kBytes - 64, 0, q);  // the quants' low nibbles come last
        if constexpr (T == GgmlType::Q5_0_R4) {
            const __m256i hb = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8)));
            for (int f = 0; f < 4; ++f) q[f] = _mm256_or_si256(q[f], _mm256_slli_epi16(bit_of_bytes(hb, 2 * f, 2 * f + 1), 4));
        } else if constexpr (T == GgmlType::Q6_0_R4) {
            const __m256i hb = load32(blk + 8);
            for (int f = 0; f < 4; ++f)
                q[f] = _mm256_or_si256(q[f], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * f), _mm256_set1_epi8(3)), 4));
        } else {
            for (int f = 0; f < 4; ++f) q[f] = _mm256_shuffle_epi8(iq4nl_table(), q[f]);
        }
    }
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    // decode() of two groups' blocks at once, group a's in the low 256 bits and b's in the high: every step on
    // both (the same values), and IQ4_NL_R4's values + 128 (unsigned) for legacy_r4_groups2.
    static void decode2(const uint8_t* a, const uint8_t* b, __m512i q[4], __m512& d16) {
        const auto join = [](__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); };
        const __m128 da = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)));
        const __m128 db = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
        d16 = _mm512_castpd_ps(
            _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_set_m128(da, da))), _mm256_castps_pd(_mm256_set_m128(db, db)), 1));
        const uint8_t *qa = a + kBytes - 64, *qb = b + kBytes - 64;  // the quants' low nibbles come last
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        const __m512i b1 = join(load32(qa), load32(qb)), b2 = join(load32(qa + 32), load32(qb + 32));
        q[0] = _mm512_and_si512(b1, m4), q[1] = _mm512_and_si512(b2, m4);
        q[2] = _mm512_and_si512(_mm512_srli_epi16(b1, 4), m4), q[3] = _mm512_and_si512(_mm512_srli_epi16(b2, 4), m4);
        if constexpr (T == GgmlType::Q5_0_R4) {
            const auto h16 = [](const uint8_t* p) { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); };
            const __m512i hb = join(h16(a + 8), h16(b + 8));
            for (int f = 0; f < 4; ++f) {  // bit 2f of each byte for the first 128 bits of a group, 2f + 1 for the second
                const __m512i sh = _mm512_setr_epi32(2 * f, 2 * f, 2 * f, 2 * f, 2 * f + 1, 2 * f + 1, 2 * f + 1, 2 * f + 1, 2 * f, 2 * f, 2 * f,
                                                     2 * f, 2 * f + 1, 2 * f + 1, 2 * f + 1, 2 * f + 1);
                q[f] = _mm512_or_si512(q[f], _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi32(hb, sh), _mm512_set1_epi8(1)), 4));
            }
        } else if constexpr (T == GgmlType::Q6_0_R4) {
            const __m512i hb = join(load32(a + 8), load32(b + 8));
            for (int f = 0; f < 4; ++f)
                q[f] = _mm512_or_si512(q[f], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2 * f), _mm512_set1_epi8(3)), 4));
        } else {
            alignas(16) static constexpr auto kShiftedValues = [] {
                std::array<int8_t, 16> t{};
                for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(ik::kIq4kValues[i] + 128);
                return t;
            }();
            const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kShiftedValues.data())));
            for (int f = 0; f < 4; ++f) q[f] = _mm512_shuffle_epi8(table, q[f]);
        }
    }
#endif
    // Activation block b's values as the four fields meet them (dword f of each 128-bit half), y.d and sum.
    static void activations(const uint8_t* row, int64_t b, int64_t grouped, __m256i ys[4], float& dy, int& ysum) {
        const __m256i yv = load32(x4_block(row, b, grouped, dy, ysum));
        ys[0] = _mm256_shuffle_epi32(yv, 0x00), ys[1] = _mm256_shuffle_epi32(yv, 0x55);
        ys[2] = _mm256_shuffle_epi32(yv, 0xaa), ys[3] = _mm256_shuffle_epi32(yv, 0xff);
    }
};

// A block's four fields against a token's 32 activations: the rows' exact sums in the lanes. The unsigned indices
// add their PMADDUBSW pair sums in int16 before the one PMADDWD where they fit (Q5_0_R4: four, each within
// 2 * 31 * 127; Q6_0_R4: two, within 2 * 63 * 127), as ik's AVX2 kernels do; IQ4_NL_R4's signed values take the
// sign step and a PMADDWD each.
template <GgmlType T>
inline __m256i legacy_r4_sums(const __m256i q[4], __m256i y) {
    const __m256i ys[4] = {_mm256_shuffle_epi32(y, 0x00), _mm256_shuffle_epi32(y, 0x55), _mm256_shuffle_epi32(y, 0xaa),
                           _mm256_shuffle_epi32(y, 0xff)};
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (T == GgmlType::Q5_0_R4) {
        const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], ys[0]), _mm256_maddubs_epi16(q[1], ys[1]));
        const __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], ys[2]), _mm256_maddubs_epi16(q[3], ys[3]));
        return _mm256_madd_epi16(ones, _mm256_add_epi16(a, b));
    } else if constexpr (T == GgmlType::Q6_0_R4) {
        const __m256i a = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], ys[0]), _mm256_maddubs_epi16(q[1], ys[1]));
        const __m256i b = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], ys[2]), _mm256_maddubs_epi16(q[3], ys[3]));
        return _mm256_add_epi32(_mm256_madd_epi16(ones, a), _mm256_madd_epi16(ones, b));
    } else {
        return _mm256_add_epi32(_mm256_add_epi32(dot_ss8(q[0], ys[0]), dot_ss8(q[1], ys[1])),
                                _mm256_add_epi32(dot_ss8(q[2], ys[2]), dot_ss8(q[3], ys[3])));
    }
}

// One group of four rows against NY tokens: per four activation blocks each token's four y.d and four offsets
// (kOffset * y.d * sum) as floats once, then per block and token the sums, fma(d y.d, sum) and fma(d, offset).
template <GgmlType T, int NY>
void legacy_r4_group(int64_t n, const uint8_t* group, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    using B = LegacyR4Block<T>;
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    __m256 acc[NY];
    for (auto& a : acc) a = _mm256_setzero_ps();
    alignas(32) float dys[NY][8];  // per token: y.d of the four blocks, then their offsets
    for (int64_t g4 = 0; g4 < grouped / 4; ++g4) {
        for (int t = 0; t < NY; ++t) {
            const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(act + t * act_bytes)[g4];
            const __m128 dy = x4_scales(yg);
            _mm_store_ps(dys[t], dy);
            if constexpr (T != GgmlType::IQ4_NL_R4) {
                const __m128 sum = x4_sums(yg);
                _mm_store_ps(dys[t] + 4, _mm_mul_ps(_mm_set1_ps(B::kOffset), _mm_mul_ps(dy, sum)));
            }
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            __m256i q[4];
            __m256 d8;
            B::decode(group + (4 * g4 + k) * B::kBytes, q, d8);
            for (int t = 0; t < NY; ++t) {
                const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(act + t * act_bytes)[g4];
                const __m256i s = legacy_r4_sums<T>(q, load32(yg.qs + 32 * k));
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_broadcast_ss(&dys[t][k])), _mm256_cvtepi32_ps(s), acc[t]);
                if constexpr (T != GgmlType::IQ4_NL_R4) acc[t] = _mm256_fmadd_ps(d8, _mm256_broadcast_ss(&dys[t][4 + k]), acc[t]);
            }
        }
    }
    for (int64_t b = grouped; b < nb; ++b) {  // blocks after the last group of four
        __m256i q[4];
        __m256 d8;
        B::decode(group + b * B::kBytes, q, d8);
        for (int t = 0; t < NY; ++t) {
            float dy;
            int ysum;
            const __m256i s = legacy_r4_sums<T>(q, load32(x4_block(act + t * act_bytes, b, grouped, dy, ysum)));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(dy)), _mm256_cvtepi32_ps(s), acc[t]);
            if constexpr (T != GgmlType::IQ4_NL_R4)
                acc[t] = _mm256_fmadd_ps(d8, _mm256_set1_ps(B::kOffset * (dy * static_cast<float>(ysum))), acc[t]);
        }
    }
    for (int t = 0; t < NY; ++t) store_row_sums(acc[t], out + t * out_stride);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// IQ4_NL_R4's signed values read + 128 (unsigned, so no sign step per token), and -128 times the sum of the
// activations each lane meets (its 16: the block's first or second half) as VPDPBUSD's start: the same exact
// integers. The starts, per token and block, are built once per call: lanes 0..3 the first half's, 4..7 the second's.
struct alignas(32) ShiftedStarts {
    int32_t v[8];
};
inline void shifted_starts(int64_t n, const uint8_t* act, size_t act_bytes, int n_tok, std::vector<ShiftedStarts>& out) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    out.resize(static_cast<size_t>(nb * n_tok));
    for (int t = 0; t < n_tok; ++t)
        for (int64_t b = 0; b < nb; ++b) {
            float dy;
            int ysum;
            const __m256i m128 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(0x80)),
                                                     load32(x4_block(act + t * act_bytes, b, grouped, dy, ysum)));
            __m256i h = _mm256_add_epi32(m128, _mm256_shuffle_epi32(m128, 0x4E));
            h = _mm256_add_epi32(h, _mm256_shuffle_epi32(h, 0xB1));
            _mm256_store_si256(reinterpret_cast<__m256i*>(out[static_cast<size_t>(t * nb + b)].v), _mm256_sub_epi32(_mm256_setzero_si256(), h));
        }
}

// Two groups in a 512-bit register (lanes 0..7 the first group's, 8..15 the second's), each lane's steps as above;
// P such registers (2P groups) per pass, so each token's activation block is unpacked once for all of them.
template <GgmlType T, int NY, int P>
void legacy_r4_groups2(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, const ShiftedStarts* starts,
                       float* out, int64_t out_stride) {
    using B = LegacyR4Block<T>;
    constexpr bool kShifted = T == GgmlType::IQ4_NL_R4;
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    __m512 acc[P][NY];
    for (auto& r : acc)
        for (auto& a : r) a = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m512i q[P][4];
        __m512 d16[P];
        for (int p = 0; p < P; ++p)
            B::decode2(w + 4 * (g + 2 * p) * row_bytes + b * B::kBytes, w + 4 * (g + 2 * p + 1) * row_bytes + b * B::kBytes, q[p], d16[p]);
        for (int t = 0; t < NY; ++t) {
            __m256i ys[4];
            float dy;
            int ysum;
            B::activations(act + t * act_bytes, b, grouped, ys, dy, ysum);
            __m512i y[4];
            for (int f = 0; f < 4; ++f) y[f] = _mm512_broadcast_i64x4(ys[f]);
            const __m512i start = kShifted ? _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(starts[t * nb + b].v)))
                                           : _mm512_setzero_si512();
            const __m512 vdy = _mm512_set1_ps(dy), off = _mm512_set1_ps(B::kOffset * (dy * static_cast<float>(ysum)));
            for (int p = 0; p < P; ++p) {
                __m512i s = start;
                for (int f = 0; f < 4; ++f) s = _mm512_dpbusd_epi32(s, q[p][f], y[f]);
                acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(d16[p], vdy), _mm512_cvtepi32_ps(s), acc[p][t]);
                if constexpr (T != GgmlType::IQ4_NL_R4) acc[p][t] = _mm512_fmadd_ps(d16[p], off, acc[p][t]);
            }
        }
    }
    for (int p = 0; p < P; ++p)
        for (int t = 0; t < NY; ++t) {
            float* o = out + t * out_stride + 4 * (g + 2 * p);
            store_row_sums(_mm512_castps512_ps256(acc[p][t]), o);
            store_row_sums(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][t]), 1)), o + 4);
        }
}
#endif

template <GgmlType T, int NY>
void legacy_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    int64_t g = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    thread_local std::vector<ShiftedStarts> starts;
    if (T == GgmlType::IQ4_NL_R4 && rows >= 8) shifted_starts(n, act, act_bytes, NY, starts);
    for (; g + 4 <= rows / 4; g += 4) legacy_r4_groups2<T, NY, 2>(n, w, row_bytes, g, act, act_bytes, starts.data(), out, out_stride);
    for (; g + 2 <= rows / 4; g += 2) legacy_r4_groups2<T, NY, 1>(n, w, row_bytes, g, act, act_bytes, starts.data(), out, out_stride);
#endif
    for (; g < rows / 4; ++g) legacy_r4_group<T, NY>(n, w + 4 * g * row_bytes, act, act_bytes, out + 4 * g, out_stride);
}

// IQ4_XS_R8 against Q8_K32: eight rows in the lanes (lane k = row k; V = Lanes8: two groups, sixteen rows); per
// sub-block the rows' exact dots times (scale - 32), summed over the 256, then fma(d y.d, sum, acc).
// With VNNI the values read + 128 (unsigned, no sign step per token) and each sub-block's sums start at -128 times
// its 32 activations (neg_offsets, per token and sub-block, built once per call): the same exact integers.
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
constexpr bool kIq4XsR8Shifted = true;
#else
constexpr bool kIq4XsR8Shifted = false;
#endif
inline void neg_offsets32(int64_t n, const uint8_t* act, size_t act_bytes, int n_tok, std::vector<int32_t>& out) {
    out.resize(static_cast<size_t>(n_tok * (n / 32)));
    for (int t = 0; t < n_tok; ++t) {
        const auto* y = reinterpret_cast<const ik::BlockQ8K32*>(act + t * act_bytes);
        for (int64_t b = 0; b < n / 32; ++b) {
            // the bytes + 128 summed by SAD against zero, less 32 * 128
            const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(load32(y[b / 8].qs + 32 * (b % 8)), _mm256_set1_epi8(static_cast<char>(0x80))),
                                                _mm256_setzero_si256());
            const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
            const int sum = static_cast<int>(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128;
            out[static_cast<size_t>(t * (n / 32) + b)] = -128 * sum;
        }
    }
}

template <class V, int NY>
void iq4_xs_r8_groups(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, const int32_t* neg_offsets,
                      float* out, int64_t out_stride) {
    using I = typename V::I;
    using F = typename V::F;
    using Block = ik::BlockIQ4_XS_R8;
    const I table = V::table16(ik::kIq4kValues), m4 = V::set8(0x0F);
    const ik::BlockQ8K32* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K32*>(act + t * act_bytes);
    const uint8_t* group[2] = {w + 8 * g * row_bytes, w + 8 * (g + V::kGroups - 1) * row_bytes};
    F acc[NY];
    for (auto& a : acc) a = V::set1(0.f);
    for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
        const uint8_t* b0 = group[0] + ibl * sizeof(Block);
        const uint8_t* b1 = group[1] + ibl * sizeof(Block);
        const F d8 = V::f16x8(b0 + offsetof(Block, d), b1 + offsetof(Block, d));
        I isum[NY];
        for (auto& v : isum) v = V::zero();
        for (int ib = 0; ib < 8; ++ib) {
            // lane k's scale, code 8 ib + k: the low nibble of scales_l[8 (ib % 4) + k] at 4 (ib / 4), the high
            // bits of scales_h[8 (ib % 2) + k] at 2 (ib / 2)
            const size_t l = offsetof(Block, scales_l) + 8 * (ib % 4), h = offsetof(Block, scales_h) + 8 * (ib % 2);
            const I lo = V::and_(V::srli32(V::u8x8_epi32(b0 + l, b1 + l), 4 * (ib / 4)), V::set32(0x0F));
            const I hi = V::and_(V::srli32(V::u8x8_epi32(b0 + h, b1 + h), 2 * (ib / 2)), V::set32(3));
            const I scales = V::sub32(V::or_(lo, V::slli32(hi, 4)), V::set32(32));
            I v[8], u[8];
            for (int f = 0; f < 4; ++f) {
                const size_t o = offsetof(Block, qs) + 128 * static_cast<size_t>(ib) + 32 * static_cast<size_t>(f);
                const I bits = V::bytes32(b0 + o, b1 + o);
                v[2 * f] = V::lookup(table, V::and_(bits, m4));
                v[2 * f + 1] = V::lookup(table, V::and_(V::srli16(bits, 4), m4));
            }
            for (int h8 = 0; h8 < 8; ++h8) u[h8] = kIq4XsR8Shifted ? V::add8(v[h8], V::set8(-128)) : V::abs8(v[h8]);
            for (int t = 0; t < NY; ++t) {
                const int8_t* qy = y[t][ibl].qs + 32 * ib;
                I s = kIq4XsR8Shifted ? V::set32(neg_offsets[(t * (n / ik::QK_K) + ibl) * 8 + ib]) : V::zero();
                for (int h8 = 0; h8 < 8; ++h8) {  // field h8: weights 8 (h8 / 2) + 4 (h8 % 2) + i
                    int yv;
                    std::memcpy(&yv, qy + 4 * h8, 4);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
                    s = V::unsigned_dot_acc(s, u[h8], V::set32(yv));
#else
                    s = V::signed_dot_acc(s, u[h8], v[h8], V::set32(yv));
#endif
                }
                isum[t] = V::add32(isum[t], V::mul32(s, scales));
            }
        }
        for (int t = 0; t < NY; ++t) acc[t] = V::fma(V::mul(d8, V::set1(y[t][ibl].d)), V::cvt(isum[t]), acc[t]);
    }
    for (int t = 0; t < NY; ++t) V::store_lanes(acc[t], out + t * out_stride + 8 * g);
}

template <int NY>
void iq4_xs_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    thread_local std::vector<int32_t> neg_offsets;
    if constexpr (kIq4XsR8Shifted) neg_offsets32(n, act, act_bytes, NY, neg_offsets);
    each_group_pair<8>(rows,
                       [&]<class V>(int64_t g) { iq4_xs_r8_groups<V, NY>(n, w, row_bytes, g, act, act_bytes, neg_offsets.data(), out, out_stride); });
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

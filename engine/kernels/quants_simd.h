// SIMD dot products of the low-bit formats (Q4_1 ... MXFP4) for the AVX2 and AVX-512 tables. Each kernel builds
// a 32-weight group's integer weights as bytes in element order, so that byte products summed four at a time
// land where kernels_ref_quants.cpp puts them (element e of a group in lane (e % 32) / 4); the float half is
// the reference's, lane for lane. Both ISA translation units include this file (internal linkage, their own
// flags): with AVX512-VNNI the four-byte sums are one VPDPBUSD, otherwise PMADDUBSW + PMADDWD.
#pragma once
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/kernels/blocks.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/quant_decode.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {

// ---- integer building blocks ----

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Unsigned x signed bytes, four consecutive products summed into each of eight int32 lanes. Callers keep
// u * s pair sums inside int16 (PMADDUBSW saturates; VPDPBUSD does not), so both forms agree.
inline __m256i dot_us8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
// Signed x signed: the sign moved onto the activations.
inline __m256i dot_ss8(__m256i x, __m256i y) { return dot_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)); }

// Pair sums times an int16 multiplier per half group: elements 0..15 by `lo`, 16..31 by `hi`.
inline __m256i halves16(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo))); }
inline __m256i dot_us8_scaled(__m256i u, __m256i s, __m256i scale) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale); }
inline __m256i dot_ss8_scaled(__m256i x, __m256i y, __m256i scale) {
    return dot_us8_scaled(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x), scale);
}

// A 32-weight group's 4-bit values: the low nibbles of 16 bytes are elements 0..15, the high ones 16..31.
inline __m256i nibbles32(const uint8_t* qs) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}
// The same through a 16-entry signed table.
inline __m256i table_nibbles32(const uint8_t* qs, __m128i table) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), low4 = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), low4)), _mm_shuffle_epi8(table, _mm_and_si128(b, low4)));
}

// 0xFF in byte e where bit e of `bits` is set.
inline __m256i bits_to_bytes(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// i-quant signs: for a mask byte, eight bytes of -1 (bit set) or +1, applied to the activations with PSIGNB.
constexpr std::array<uint64_t, 256> make_sign_bytes() {
    std::array<uint64_t, 256> t{};
    for (int m = 0; m < 256; ++m)
        for (int j = 0; j < 8; ++j) t[m] |= static_cast<uint64_t>((m >> j) & 1 ? 0xFF : 0x01) << (8 * j);
    return t;
}
inline constexpr std::array<uint64_t, 256> kSignBytes = make_sign_bytes();

inline __m256i sign_bytes(uint8_t m0, uint8_t m1, uint8_t m2, uint8_t m3) {
    return _mm256_set_epi64x(static_cast<int64_t>(kSignBytes[m3]), static_cast<int64_t>(kSignBytes[m2]),
                             static_cast<int64_t>(kSignBytes[m1]), static_cast<int64_t>(kSignBytes[m0]));
}
inline __m256i grid64(const uint64_t* grid, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x(static_cast<int64_t>(grid[i3]), static_cast<int64_t>(grid[i2]), static_cast<int64_t>(grid[i1]),
                             static_cast<int64_t>(grid[i0]));
}

// ---- float accumulation (kernels_ref_quants.cpp's LaneAcc) ----

struct LaneAccV {
    __m256 acc = _mm256_setzero_ps();
    void add(__m256i lanes, float d) { acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc); }
    float sum() const { return hsum_float_8(acc); }
};

// ---- 32-weight blocks ----

float simd_q4_1(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ4_1*>(w);
    auto* y = static_cast<const BlockQ8_1*>(a);
    LaneAccV acc;
    float summs = 0.f;
    for (int64_t b = 0; b < n / 32; ++b) {
        summs += h2f(x[b].m) * h2f(y[b].s);
        acc.add(dot_us8(nibbles32(x[b].qs), load32(y[b].qs)), h2f(x[b].d) * h2f(y[b].d));
    }
    return acc.sum() + summs;
}

inline uint32_t qh32(const uint8_t* qh) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return h;
}

float simd_q5_0(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ5_0*>(w);
    auto* y = static_cast<const BlockQ8_0*>(a);
    LaneAccV acc;
    for (int64_t b = 0; b < n / 32; ++b) {
        // (q | h << 4) - 16: a clear fifth bit makes the byte negative (its top four bits set).
        const __m256i hi = _mm256_andnot_si256(bits_to_bytes(qh32(x[b].qh)), _mm256_set1_epi8(static_cast<char>(0xF0)));
        acc.add(dot_ss8(_mm256_or_si256(nibbles32(x[b].qs), hi), load32(y[b].qs)), h2f(x[b].d) * h2f(y[b].d));
    }
    return acc.sum();
}

float simd_q5_1(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ5_1*>(w);
    auto* y = static_cast<const BlockQ8_1*>(a);
    LaneAccV acc;
    float summs = 0.f;
    for (int64_t b = 0; b < n / 32; ++b) {
        summs += h2f(x[b].m) * h2f(y[b].s);
        const __m256i hi = _mm256_and_si256(bits_to_bytes(qh32(x[b].qh)), _mm256_set1_epi8(0x10));
        acc.add(dot_us8(_mm256_or_si256(nibbles32(x[b].qs), hi), load32(y[b].qs)), h2f(x[b].d) * h2f(y[b].d));
    }
    return acc.sum() + summs;
}

// IQ4_NL / MXFP4: table values; the three float orders of dot_table32_ref, dot_table32_repacked_ref and
// llamafile's GEMM (one lane accumulator, d = x.scale * y.d).
inline float iq4nl_scale(const BlockIQ4_NL& b) { return h2f(b.d); }
inline float mxfp4_scale(const BlockMXFP4& b) { return quant::e8m0_half(b.e); }

template <class Block, float (*Scale)(const Block&), const int8_t* Table>
struct Table32 {
    static __m256i lanes(const Block& x, const BlockQ8_0& y) {
        return dot_ss8(table_nibbles32(x.qs, _mm_loadu_si128(reinterpret_cast<const __m128i*>(Table))), load32(y.qs));
    }
    static float vec(int64_t n, const void* w, const void* a) {
        auto* x = static_cast<const Block*>(w);
        auto* y = static_cast<const BlockQ8_0*>(a);
        const int64_t nb = n / 32;
        LaneAccV acc[2];
        int64_t b = 0;
        for (; b + 1 < nb; b += 2)
            for (int k = 0; k < 2; ++k) acc[k].add(lanes(x[b + k], y[b + k]), h2f(y[b + k].d) * Scale(x[b + k]));
        float sumf = hsum_float_8(_mm256_add_ps(acc[0].acc, acc[1].acc));
        for (; b < nb; ++b) sumf += h2f(y[b].d) * Scale(x[b]) * static_cast<float>(hsum_lanes(lanes(x[b], y[b])));
        return sumf;
    }
    static float repacked(int64_t n, const void* w, const void* a) {
        auto* x = static_cast<const Block*>(w);
        auto* y = static_cast<const BlockQ8_0*>(a);
        float acc = 0.f;
        for (int64_t b = 0; b < n / 32; ++b)
            acc = std::fma(static_cast<float>(hsum_lanes(lanes(x[b], y[b]))), Scale(x[b]) * h2f(y[b].d), acc);
        return acc;
    }
    static float gemm(int64_t n, const void* w, const void* a) {
        auto* x = static_cast<const Block*>(w);
        auto* y = static_cast<const BlockQ8_0*>(a);
        LaneAccV acc;
        for (int64_t b = 0; b < n / 32; ++b) acc.add(lanes(x[b], y[b]), Scale(x[b]) * h2f(y[b].d));
        return acc.sum();
    }
};
using IQ4NL = Table32<BlockIQ4_NL, iq4nl_scale, iq::kValuesIq4nl>;
using MXFP4 = Table32<BlockMXFP4, mxfp4_scale, iq::kValuesFp4>;

// ---- 256-weight super-blocks ----

// Q2_K: the mins' lanes (sub-blocks 2l, 2l+1 against their activation sums) and the values' lanes per half block.
struct Q2Lanes {
    __m256i mins, vals[2];
};
inline Q2Lanes q2_lanes(const BlockQ2_K& x, const BlockQ8_K& y) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F)));
    Q2Lanes out;
    out.mins = _mm256_madd_epi16(mins16, load32(y.bsums));
    const __m256i three = _mm256_set1_epi8(3);
    for (int half = 0; half < 2; ++half) {
        const __m256i bits = load32(x.qs + 32 * half);
        __m256i sum = _mm256_setzero_si256();
        for (int s = 0; s < 4; ++s) {
            const int g = 4 * half + s;
            const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * s), three);
            sum = _mm256_add_epi32(sum, dot_us8_scaled(q, load32(y.qs + 32 * g), halves16(x.scales[2 * g] & 0xF, x.scales[2 * g + 1] & 0xF)));
        }
        out.vals[half] = sum;
    }
    return out;
}

float simd_q2_K(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ2_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    LaneAccV acc;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const Q2Lanes l = q2_lanes(x[b], y[b]);
        acc.add(l.mins, -y[b].d * h2f(x[b].dmin));
        acc.add(_mm256_add_epi32(l.vals[0], l.vals[1]), y[b].d * h2f(x[b].d));
    }
    return acc.sum();
}

// llama.cpp's repacked Q2_K (AVX-512 builds): whole-block (GEMV) or half-block (GEMM) sums, see dot_q2_K_repacked_in.
inline int32_t hsum_lanes_half(__m256i v, int half) {
    alignas(32) int32_t l[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(l), v);
    return (l[4 * half] + l[4 * half + 1]) + (l[4 * half + 2] + l[4 * half + 3]);
}
template <int Parts>
float simd_q2_K_repacked(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ2_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    float acc = 0.f, acc_m = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const Q2Lanes l = q2_lanes(x[b], y[b]);
        const float dxy = h2f(x[b].d) * y[b].d, dmy = h2f(x[b].dmin) * y[b].d;
        if (Parts == 1) {
            acc = std::fma(static_cast<float>(hsum_lanes(_mm256_add_epi32(l.vals[0], l.vals[1]))), dxy, acc);
            acc_m = std::fma(static_cast<float>(hsum_lanes(l.mins)), dmy, acc_m);
        } else {
            for (int p = 0; p < 2; ++p) {
                acc = std::fma(static_cast<float>(hsum_lanes(l.vals[p])), dxy, acc);
                acc_m = std::fma(static_cast<float>(hsum_lanes_half(l.mins, p)), dmy, acc_m);
            }
        }
    }
    return acc - acc_m;
}

// Q3_K: q = low two bits - (high bit clear ? 4 : 0), times the signed 6-bit scale of each 16.
float simd_q3_K(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockQ3_K*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    LaneAccV acc;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int8_t sc[16];
        quant::q3k_scales(x[b], sc);
        const __m256i hmask = load32(x[b].hmask);
        __m256i sum = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
            const __m256i low = _mm256_and_si256(_mm256_srli_epi16(load32(x[b].qs + 32 * (g / 4)), 2 * (g % 4)), three);
            const __m256i minus4 = _mm256_slli_epi16(_mm256_xor_si256(_mm256_and_si256(_mm256_srli_epi16(hmask, g), one), one), 2);
            const __m256i yg = load32(y[b].qs + 32 * g);
            const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(low, yg), _mm256_maddubs_epi16(minus4, yg));
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, halves16(sc[2 * g], sc[2 * g + 1])));
        }
        acc.add(sum, y[b].d * h2f(x[b].d));
    }
    return acc.sum();
}

// The i-quants whose block is one lane sum: Group(x, g, y) gives group g's lanes, already times its multipliers.
template <class Block, class Group>
float iquant_dot(int64_t n, const void* w, const void* a, Group group, float factor) {
    auto* x = static_cast<const Block*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    LaneAccV acc;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        __m256i sum = _mm256_setzero_si256();
        for (int g = 0; g < QK_K / 32; ++g) sum = _mm256_add_epi32(sum, group(x[b], g, y[b].qs + 32 * g));
        acc.add(sum, h2f(x[b].d) * y[b].d);
    }
    return factor * acc.sum();
}

float simd_iq2_xxs(int64_t n, const void* w, const void* a) {
    return iquant_dot<BlockIQ2_XXS>(
        n, w, a,
        [](const BlockIQ2_XXS& x, int g, const int8_t* yq) {
            uint32_t aux[2];
            quant::iq2xxs_words(x, g, aux);
            const __m256i grid = grid64(iq::kIq2xxsGrid, aux[0] & 0xFF, (aux[0] >> 8) & 0xFF, (aux[0] >> 16) & 0xFF, aux[0] >> 24);
            const __m256i signs = sign_bytes(iq::kSignsIq2xs[aux[1] & 127], iq::kSignsIq2xs[(aux[1] >> 7) & 127],
                                             iq::kSignsIq2xs[(aux[1] >> 14) & 127], iq::kSignsIq2xs[(aux[1] >> 21) & 127]);
            return dot_us8_scaled(grid, _mm256_sign_epi8(load32(yq), signs), _mm256_set1_epi16(static_cast<int16_t>(2 * (aux[1] >> 28) + 1)));
        },
        0.125f);
}

float simd_iq2_xs(int64_t n, const void* w, const void* a) {
    return iquant_dot<BlockIQ2_XS>(
        n, w, a,
        [](const BlockIQ2_XS& x, int g, const int8_t* yq) {
            const uint16_t* q = x.qs + 4 * g;
            const __m256i grid = grid64(iq::kIq2xsGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
            const __m256i signs = sign_bytes(iq::kSignsIq2xs[q[0] >> 9], iq::kSignsIq2xs[q[1] >> 9], iq::kSignsIq2xs[q[2] >> 9], iq::kSignsIq2xs[q[3] >> 9]);
            const int sc = x.scales[g];
            return dot_us8_scaled(grid, _mm256_sign_epi8(load32(yq), signs), halves16(2 * (sc & 0xF) + 1, 2 * (sc >> 4) + 1));
        },
        0.125f);
}

float simd_iq2_s(int64_t n, const void* w, const void* a) {
    return iquant_dot<BlockIQ2_S>(
        n, w, a,
        [](const BlockIQ2_S& x, int g, const int8_t* yq) {
            const uint8_t* q = x.qs + 4 * g;
            const uint8_t* s = x.qs + QK_K / 8 + 4 * g;
            const int h = x.qh[g];
            const __m256i grid = grid64(iq::kIq2sGrid, q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300), q[2] | ((h << 4) & 0x300),
                                        q[3] | ((h << 2) & 0x300));
            const int sc = x.scales[g];
            return dot_us8_scaled(grid, _mm256_sign_epi8(load32(yq), sign_bytes(s[0], s[1], s[2], s[3])), halves16(2 * (sc & 0xF) + 1, 2 * (sc >> 4) + 1));
        },
        0.125f);
}

float simd_iq3_xxs(int64_t n, const void* w, const void* a) {
    return iquant_dot<BlockIQ3_XXS>(
        n, w, a,
        [](const BlockIQ3_XXS& x, int g, const int8_t* yq) {
            const uint8_t* q = x.qs + 8 * g;
            const uint32_t word = quant::iq3xxs_word(x, g);
            const __m256i grid = _mm256_set_epi32(static_cast<int>(iq::kIq3xxsGrid[q[7]]), static_cast<int>(iq::kIq3xxsGrid[q[6]]), static_cast<int>(iq::kIq3xxsGrid[q[5]]),
                                                  static_cast<int>(iq::kIq3xxsGrid[q[4]]), static_cast<int>(iq::kIq3xxsGrid[q[3]]), static_cast<int>(iq::kIq3xxsGrid[q[2]]),
                                                  static_cast<int>(iq::kIq3xxsGrid[q[1]]), static_cast<int>(iq::kIq3xxsGrid[q[0]]));
            const __m256i signs = sign_bytes(iq::kSignsIq2xs[word & 127], iq::kSignsIq2xs[(word >> 7) & 127], iq::kSignsIq2xs[(word >> 14) & 127],
                                             iq::kSignsIq2xs[(word >> 21) & 127]);
            return dot_us8_scaled(grid, _mm256_sign_epi8(load32(yq), signs), _mm256_set1_epi16(static_cast<int16_t>(2 * (word >> 28) + 1)));
        },
        0.25f);
}

float simd_iq3_s(int64_t n, const void* w, const void* a) {
    return iquant_dot<BlockIQ3_S>(
        n, w, a,
        [](const BlockIQ3_S& x, int g, const int8_t* yq) {
            const uint8_t* q = x.qs + 8 * g;
            const int h = x.qh[g];
            int idx[8];
            for (int k = 0; k < 8; ++k) idx[k] = q[k] | ((h << (8 - k)) & 256);
            const __m256i grid = _mm256_set_epi32(static_cast<int>(iq::kIq3sGrid[idx[7]]), static_cast<int>(iq::kIq3sGrid[idx[6]]), static_cast<int>(iq::kIq3sGrid[idx[5]]),
                                                  static_cast<int>(iq::kIq3sGrid[idx[4]]), static_cast<int>(iq::kIq3sGrid[idx[3]]), static_cast<int>(iq::kIq3sGrid[idx[2]]),
                                                  static_cast<int>(iq::kIq3sGrid[idx[1]]), static_cast<int>(iq::kIq3sGrid[idx[0]]));
            const uint8_t* s = x.signs + 4 * g;
            const int sc = 2 * quant::iq3s_scale(x, g) + 1;
            return dot_us8_scaled(grid, _mm256_sign_epi8(load32(yq), sign_bytes(s[0], s[1], s[2], s[3])), _mm256_set1_epi16(static_cast<int16_t>(sc)));
        },
        1.0f);
}

float simd_iq4_xs(int64_t n, const void* w, const void* a) {
    return iquant_dot<BlockIQ4_XS>(
        n, w, a,
        [](const BlockIQ4_XS& x, int g, const int8_t* yq) {
            const __m256i v = table_nibbles32(x.qs + 16 * g, _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq::kValuesIq4nl)));
            return dot_ss8_scaled(v, load32(yq), _mm256_set1_epi16(static_cast<int16_t>(quant::iq4xs_scale(x, g))));
        },
        1.0f);
}

inline __m256i iq1s_grid(const BlockIQ1_S& x, int g) {
    const uint8_t* q = x.qs + 4 * g;
    const int h = x.qh[g];
    return grid64(iq::kIq1sGrid, q[0] | ((h << 8) & 0x700), q[1] | ((h << 5) & 0x700), q[2] | ((h << 2) & 0x700), q[3] | ((h >> 1) & 0x700));
}

float simd_iq1_s(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockIQ1_S*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    LaneAccV acc;
    float accum1 = 0.f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        __m256i sum = _mm256_setzero_si256();
        int sumi1 = 0;
        for (int g = 0; g < 8; ++g) {
            const int scale = 2 * quant::iq1s_scale(x[b], g) + 1;
            sum = _mm256_add_epi32(sum, dot_ss8_scaled(iq1s_grid(x[b], g), load32(y[b].qs + 32 * g), _mm256_set1_epi16(static_cast<int16_t>(scale))));
            sumi1 += (y[b].bsums[2 * g] + y[b].bsums[2 * g + 1]) * quant::iq1s_delta_sign(x[b], g) * scale;
        }
        const float d = y[b].d * h2f(x[b].d);
        acc.add(sum, d);
        accum1 = std::fma(d, static_cast<float>(sumi1), accum1);
    }
    return acc.sum() + iq::kIq1sDelta * accum1;
}

float simd_iq1_m(int64_t n, const void* w, const void* a) {
    auto* x = static_cast<const BlockIQ1_M*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    LaneAccV acc1, acc2;
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        uint16_t sc[4];
        quant::iq1m_words(x[b], sc);
        __m256i sum1 = _mm256_setzero_si256(), sum2 = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) {
            const uint8_t* q = x[b].qs + 4 * g;
            const int h0 = x[b].qh[2 * g], h1 = x[b].qh[2 * g + 1];
            const __m256i grid = grid64(iq::kIq1sGrid, q[0] | ((h0 << 8) & 0x700), q[1] | ((h0 << 4) & 0x700), q[2] | ((h1 << 8) & 0x700),
                                        q[3] | ((h1 << 4) & 0x700));
            // The shift's sign per 8 weights: bit 3 (first 8 of a pair) or 7 of each qh byte.
            const auto sgn = [](int h, int bit) { return static_cast<int64_t>((h >> bit) & 1 ? 0xFFFFFFFFFFFFFFFFull : 0x0101010101010101ull); };
            const __m256i delta = _mm256_set_epi64x(sgn(h1, 7), sgn(h1, 3), sgn(h0, 7), sgn(h0, 3));
            const int shift = 6 * (g % 2);
            const __m256i scale = halves16(2 * ((sc[g / 2] >> shift) & 7) + 1, 2 * ((sc[g / 2] >> (shift + 3)) & 7) + 1);
            const __m256i yg = load32(y[b].qs + 32 * g);
            sum1 = _mm256_add_epi32(sum1, dot_ss8_scaled(grid, yg, scale));
            sum2 = _mm256_add_epi32(sum2, dot_us8_scaled(ones, _mm256_sign_epi8(yg, delta), scale));
        }
        const float d = y[b].d * h2f(quant::iq1m_d(x[b]));
        acc1.add(sum1, d);
        acc2.add(sum2, d);
    }
    return acc1.sum() + iq::kIq1sDelta * acc2.sum();
}

// ---- ternary: sums in sixteen int16 lanes, activation sums subtracted, `sumf = fma(lanes, d, sumf)` ----

// Trits of bytes already multiplied by their power of three: (m * 3) >> 8 is 0 below 86, 1 below 171, else 2.
inline __m256i trits_of(__m256i m) {
    const __m256i ge86 = _mm256_cmpeq_epi8(_mm256_max_epu8(m, _mm256_set1_epi8(86)), m);
    const __m256i ge171 = _mm256_cmpeq_epi8(_mm256_max_epu8(m, _mm256_set1_epi8(static_cast<char>(171))), m);
    return _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), ge86), ge171);
}
// (v * p) mod 256 per byte.
inline __m256i mul_bytes(__m256i v, __m256i p) {
    const __m256i even = _mm256_and_si256(_mm256_mullo_epi16(v, p), _mm256_set1_epi16(0x00FF));
    const __m256i odd = _mm256_slli_epi16(_mm256_mullo_epi16(_mm256_srli_epi16(v, 8), _mm256_srli_epi16(p, 8)), 8);
    return _mm256_or_si256(even, odd);
}
inline __m256i pow3_bytes(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi8(static_cast<char>(hi)), _mm_set1_epi8(static_cast<char>(lo))); }

template <class Block, class Groups>
float ternary_dot(int64_t n, const void* w, const void* a, Groups groups) {
    auto* x = static_cast<const Block*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    __m256 sumf = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        __m256i trits[8];
        groups(x[b], trits);
        __m256i lanes16 = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) lanes16 = _mm256_add_epi16(lanes16, _mm256_maddubs_epi16(trits[g], load32(y[b].qs + 32 * g)));
        lanes16 = _mm256_sub_epi16(lanes16, load32(y[b].bsums));
        const __m256 lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(lanes16, _mm256_set1_epi16(1)));
        sumf = _mm256_fmadd_ps(lanes, _mm256_set1_ps(y[b].d * h2f(x[b].d)), sumf);
    }
    return hsum_float_8(sumf);
}

float simd_tq2_0(int64_t n, const void* w, const void* a) {
    return ternary_dot<BlockTQ2_0>(n, w, a, [](const BlockTQ2_0& x, __m256i* t) {
        for (int g = 0; g < 8; ++g) t[g] = _mm256_and_si256(_mm256_srli_epi16(load32(x.qs + 32 * (g / 4)), 2 * (g % 4)), _mm256_set1_epi8(3));
    });
}

// TQ1_0: five trits per byte of qs[0..32) (elements 0..159), of qs[32..48) (160..239), four per byte of qh (240..255).
float simd_tq1_0(int64_t n, const void* w, const void* a) {
    return ternary_dot<BlockTQ1_0>(n, w, a, [](const BlockTQ1_0& x, __m256i* t) {
        static constexpr int kPow3[5] = {1, 3, 9, 27, 81};
        const __m256i q32 = load32(x.qs);
        for (int g = 0; g < 5; ++g) t[g] = trits_of(mul_bytes(q32, _mm256_set1_epi8(static_cast<char>(kPow3[g]))));
        const __m128i q16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 32));
        const __m256i q16x2 = _mm256_set_m128i(q16, q16);
        t[5] = trits_of(mul_bytes(q16x2, pow3_bytes(1, 3)));
        t[6] = trits_of(mul_bytes(q16x2, pow3_bytes(9, 27)));
        uint32_t h;
        std::memcpy(&h, x.qh, 4);
        // Elements 240 + 4k + j are trit k of qh[j].
        const __m256i tail = _mm256_set_m128i(_mm_set1_epi32(static_cast<int>(h)), q16);
        const __m256i pows = _mm256_set_epi8(27, 27, 27, 27, 9, 9, 9, 9, 3, 3, 3, 3, 1, 1, 1, 1,  //
                                             81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81, 81);
        t[7] = trits_of(mul_bytes(tail, pows));
    });
}

// Fills a SIMD table's low-bit entries (the float-order variants as in add_quant_reference_kernels).
inline void add_simd_quant_kernels(KernelTable& t) {
    auto set = [&](GgmlType type, DotFn f, DotRowsFn rows) {
        t.dot[static_cast<int>(type)] = f;
        t.dot_rows[static_cast<int>(type)] = rows;
    };
    set(GgmlType::Q4_1, simd_q4_1, dot_rows_of<simd_q4_1>);
    set(GgmlType::Q5_0, simd_q5_0, dot_rows_of<simd_q5_0>);
    set(GgmlType::Q5_1, simd_q5_1, dot_rows_of<simd_q5_1>);
    set(GgmlType::IQ4_NL, IQ4NL::vec, dot_rows_of<IQ4NL::vec>);
    set(GgmlType::MXFP4, MXFP4::vec, dot_rows_of<MXFP4::vec>);
    set(GgmlType::Q2_K, simd_q2_K, dot_rows_of<simd_q2_K>);
    set(GgmlType::Q3_K, simd_q3_K, dot_rows_of<simd_q3_K>);
    set(GgmlType::IQ2_XXS, simd_iq2_xxs, dot_rows_of<simd_iq2_xxs>);
    set(GgmlType::IQ2_XS, simd_iq2_xs, dot_rows_of<simd_iq2_xs>);
    set(GgmlType::IQ2_S, simd_iq2_s, dot_rows_of<simd_iq2_s>);
    set(GgmlType::IQ3_XXS, simd_iq3_xxs, dot_rows_of<simd_iq3_xxs>);
    set(GgmlType::IQ3_S, simd_iq3_s, dot_rows_of<simd_iq3_s>);
    set(GgmlType::IQ4_XS, simd_iq4_xs, dot_rows_of<simd_iq4_xs>);
    set(GgmlType::IQ1_S, simd_iq1_s, dot_rows_of<simd_iq1_s>);
    set(GgmlType::IQ1_M, simd_iq1_m, dot_rows_of<simd_iq1_m>);
    set(GgmlType::TQ1_0, simd_tq1_0, dot_rows_of<simd_tq1_0>);
    set(GgmlType::TQ2_0, simd_tq2_0, dot_rows_of<simd_tq2_0>);
    const int iq4nl = static_cast<int>(GgmlType::IQ4_NL), mxfp4 = static_cast<int>(GgmlType::MXFP4);
    t.dot_repacked[iq4nl] = IQ4NL::repacked;
    t.dot_rows_repacked[iq4nl] = dot_rows_of<IQ4NL::repacked>;
    t.dot_repacked[mxfp4] = MXFP4::repacked;
    t.dot_rows_repacked[mxfp4] = dot_rows_of<MXFP4::repacked>;
    t.dot_batch[iq4nl] = IQ4NL::gemm;
    if (t.flavor == Flavor::Avx512) {
        const int q2k = static_cast<int>(GgmlType::Q2_K);
        t.dot_repacked[q2k] = simd_q2_K_repacked<1>;
        t.dot_repacked_gemm[q2k] = simd_q2_K_repacked<2>;
        t.dot_rows_repacked[q2k] = dot_rows_of<simd_q2_K_repacked<1>>;
    }
}

}  // namespace
}  // namespace moe::kernels

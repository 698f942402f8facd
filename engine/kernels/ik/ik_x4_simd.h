// AVX2 kernels for the formats ik_llama.cpp multiplies with Q8_2_X4 activations (its trellis types, Q6_0, and
// llama.cpp's Q8_0 in an ik file), with the bits of ik_ref_x4.cpp: a group of four 32-weight blocks gives eight
// int32 lanes (lane 4h + k: half h of block k) by two rounds of PHADDD over the blocks' lane sums, FMA'd with
// (weight scale * activation scale) of the lane's block. Included by the AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/blocks.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/simd_common.h"
#include "engine/kernels/token_passes.h"

namespace moe::kernels {
namespace {
namespace ikx {

using ik::QK_K;

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
    const __m256i lo4 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0F));
    uint64_t qh;
    std::memcpy(&qh, x.qh, 8);
    // elements 8q + j take bits (0,1), (4,5), (2,3), (6,7) of qh[j] for q = 0..3: one 64-bit lane per q, shifted
    // so those bits land at 4 and 5 of each byte
    const __m256i h = _mm256_srlv_epi64(_mm256_sllv_epi64(_mm256_set1_epi64x(static_cast<long long>(qh)), _mm256_setr_epi64x(4, 0, 2, 0)),
                                        _mm256_setr_epi64x(0, 0, 0, 2));
    return _mm256_or_si256(lo4, _mm256_and_si256(h, _mm256_set1_epi8(0x30)));
}

// Blocks b .. b + 3's f16 scales as four floats by one VCVTPH2PS (not four scalar lookups of the 256 KiB table,
// which compete with the weights for L2).
template <bool Q6>
inline __m128 legacy_scales4(const void* w, int64_t b) {
    uint16_t h[4];
    for (int k = 0; k < 4; ++k) h[k] = Q6 ? static_cast<const ik::BlockQ6_0*>(w)[b + k].d : static_cast<const BlockQ8_0*>(w)[b + k].d;
    return _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h)));
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
    auto lanes = [&](__m256i x, __m256i q) { return Q6 ? dot_us8(x, q) : dot_ss8(x, q); };
    for (int64_t g = 0; g < ng; ++g) {
        const ik::BlockQ8_2x4& yg = y.group(g);
        __m256i d[4];
        for (int k = 0; k < 4; ++k) d[k] = lanes(values(4 * g + k), load32(yg.qs + 32 * k));
        const __m128 dw = legacy_scales4<Q6>(w, 4 * g);
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

// Lane j of a group: ka^(j+1) (the trellis step); G = 4: lanes 4..7 repeat ka^1..ka^4 for a second group.
template <int G>
inline __m256i trellis_ka() {
    alignas(32) static constexpr auto kPowers = [] {
        std::array<uint32_t, 8> p{};
        uint32_t x = 1;
        for (int j = 0; j < 8; ++j) p[j] = x *= 0xCBAC1FEDu;
        if (G == 4)
            for (int j = 4; j < 8; ++j) p[j] = p[j - 4];
        return p;
    }();
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPowers.data()));
}

// 32 int8 trellis values in element order from four registers whose lanes hold the (offset) index of the lane's
// group: each lane's index times its ka power, the four 6-bit bytes summed, minus 126.
inline __m256i trellis32(const __m256i (&x)[4], __m256i ka) {
    const __m256i ones = _mm256_set1_epi8(1), mask = _mm256_set1_epi32(0x3f3f3f3f), m126 = _mm256_set1_epi32(126);
    __m256i r[4];
    for (int k = 0; k < 4; ++k) r[k] = _mm256_sub_epi32(dot_us8(_mm256_and_si256(_mm256_mullo_epi32(x[k], ka), mask), ones), m126);
    // int32 -> int8 keeping order: packs interleave 128-bit halves, a dword permute restores it
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
inline __m256i lane_of(__m256i v, int k) { return _mm256_permutevar8x32_epi32(v, _mm256_set1_epi32(k)); }
inline __m256i lanes_of(__m256i v, int a, int b) { return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(a, a, a, a, b, b, b, b)); }
inline __m256i bytes8_u32(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
// Four-bit codes (bytes) through IQ4_K's first 16 values, as eight int32.
inline __m256i iq4k_scales(__m128i codes) {
    const __m128i values = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ik::kIq4kValues));
    return _mm256_cvtepi8_epi32(_mm_shuffle_epi8(values, codes));
}

// A trellis superblock's 8 block scales as int32 (IQ1_KT / IQ2_KT through IQ4_K's table, IQ3_KT's nibbles as they
// are, IQ4_KT's scale bytes / 2 - 64), and a row's matmul scale.
template <GgmlType T>
inline void trellis_block_scales(const uint8_t* blk, int* scale) {
    __m256i s;
    if constexpr (T == GgmlType::IQ1_KT) {
        s = iq4k_scales(_mm_and_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk)), _mm_set1_epi8(0xF)));
    } else if constexpr (T == GgmlType::IQ2_KT || T == GgmlType::IQ3_KT) {
        int packed;
        std::memcpy(&packed, blk, 4);
        const __m128i sc4 = _mm_cvtsi32_si128(packed);  // two nibbles per byte: blocks b, b + 4
        const __m128i nib = _mm_and_si128(_mm_unpacklo_epi32(sc4, _mm_srli_epi16(sc4, 4)), _mm_set1_epi8(0xF));
        s = T == GgmlType::IQ3_KT ? _mm256_cvtepu8_epi32(nib) : iq4k_scales(nib);
    } else {
        const __m256i shb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
        s = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_and_si256(shb, _mm256_set1_epi32(0xff)), 1), _mm256_set1_epi32(64));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(scale), s);
}
template <GgmlType T>
inline float trellis_row_scale(const uint8_t* row) {
    float d;
    std::memcpy(&d, row, 4);
    return ik::trellis_matmul_scale(T, d);
}
// The superblock's eight block scales times the row's.
inline __m256 trellis_scales_ps(float d, const int* scale) {
    return _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scale))));
}

// One superblock's group indices (offsets added), eight groups per register (G = 8: groups 8j..8j + 7, two
// blocks; G = 4: block j's eight groups), and its 8 block scales.
template <GgmlType T>
struct TrellisIndices256 {
    static constexpr int kGroup = T == GgmlType::IQ4_KT ? 4 : 8, kRegisters = 256 / (8 * kGroup);
    __m256i idx[kRegisters];
    alignas(32) int scale[8];
    void load(const uint8_t* blk) {
        trellis_block_scales<T>(blk, scale);
        const __m256i m15 = _mm256_set1_epi32(0xF), off4096 = _mm256_set1_epi32(4096);
        if constexpr (T == GgmlType::IQ1_KT) {
            const auto& x = *reinterpret_cast<const ik::BlockIQ1_KT*>(blk);
            const __m128i sh = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.sh));
            const __m256i sh32 = _mm256_cvtepu8_epi32(sh), bit_shift = _mm256_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7);
            for (int j = 0; j < 4; ++j) {  // groups 8j..8j+7: blocks 2j, 2j + 1
                const __m256i qh = bytes8_u32(x.qh + 8 * (j & 1));
                const __m256i hi = j < 2 ? _mm256_and_si256(qh, m15) : _mm256_srli_epi32(qh, 4);
                const __m256i bit = _mm256_and_si256(_mm256_srlv_epi32(lanes_of(sh32, 2 * j, 2 * j + 1), bit_shift), _mm256_set1_epi32(1));
                idx[j] = _mm256_add_epi32(
                    _mm256_or_si256(_mm256_or_si256(bytes8_u32(x.ql + 8 * j), _mm256_slli_epi32(hi, 8)), _mm256_slli_epi32(bit, 12)), off4096);
            }
        } else if constexpr (T == GgmlType::IQ2_KT || T == GgmlType::IQ3_KT) {
            const uint8_t* ql = blk + 4;
            for (int j = 0; j < 4; ++j)
                idx[j] = _mm256_add_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ql + 16 * j))), off4096);
        } else {
            const auto& x = *reinterpret_cast<const ik::BlockIQ4_KT*>(blk);
            const auto* ql = reinterpret_cast<const uint8_t*>(x.qs + 8);
            const uint8_t* qh = ql + 64;
            const __m256i shb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
            // the block's offset: 4096, plus 32768 where its scale word's low bit is set
            const __m256i offs = _mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(shb, _mm256_set1_epi32(1)), 15), off4096);
            const __m256i sh_shift = _mm256_setr_epi32(8, 11, 14, 17, 20, 23, 26, 29);
            for (int ib = 0; ib < 8; ++ib) {
                const __m256i qh8 = bytes8_u32(qh + 8 * (ib & 3));
                const __m256i hi = ib < 4 ? _mm256_and_si256(qh8, m15) : _mm256_srli_epi32(qh8, 4);
                const __m256i sh = _mm256_and_si256(_mm256_srlv_epi32(lane_of(shb, ib), sh_shift), _mm256_set1_epi32(7));
                idx[ib] = _mm256_add_epi32(
                    _mm256_or_si256(_mm256_or_si256(bytes8_u32(ql + 8 * ib), _mm256_slli_epi32(hi, 8)), _mm256_slli_epi32(sh, 12)),
                    lane_of(offs, ib));
            }
        }
    }
};

// One superblock of a trellis row: the 256 values (8 registers) and the 8 block scales. The indices are assembled
// eight lanes at a time, so the only per-group work is the trellis step itself. IQ3_KT keeps, as ik does, the
// magnitudes in v and the stored signs as +-1 bytes in sign: a token's product is then one PSIGNB of its
// activations before PMADDUBSW (the same integers as the signed values' dot_ss8).
template <GgmlType T>
struct TrellisDec : TrellisIndices256<T> {
    using Base = TrellisIndices256<T>;
    static constexpr bool kSigned = T == GgmlType::IQ3_KT;
    __m256i v[8];
    __m256i sign[kSigned ? 8 : 1];
    const uint8_t* qh = nullptr;  // IQ3_KT's sign bits
    // The indices and scales, then the values half by half (half c: blocks 4c .. 4c + 3), so a one-token dot
    // keeps four blocks in registers rather than eight spilled ones.
    void load(const uint8_t* blk) {
        Base::load(blk);
        if constexpr (kSigned) qh = reinterpret_cast<const ik::BlockIQ3_KT*>(blk)->qh;
    }
    void half(int c) {
#pragma GCC unroll 4
        for (int ib = 4 * c; ib < 4 * c + 4; ++ib) {
            if constexpr (Base::kGroup == 4) {
                // groups 0, 2, 4, 6 in the low 128-bit lane and 1, 3, 5, 7 in the high one: one permute, then each
                // pair (2k, 2k + 1) broadcast in-lane (four cross-lane permutes cost more on Zen 3)
                const __m256i b = _mm256_permutevar8x32_epi32(Base::idx[ib], _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
                const __m256i g[4] = {_mm256_shuffle_epi32(b, 0x00), _mm256_shuffle_epi32(b, 0x55), _mm256_shuffle_epi32(b, 0xAA),
                                      _mm256_shuffle_epi32(b, 0xFF)};
                v[ib] = trellis32(g, trellis_ka<4>());
            } else {
                // the block's four indices in both 128-bit lanes, then each broadcast in-lane (no lane crossing)
                const __m256i b = _mm256_permute4x64_epi64(Base::idx[ib / 2], ib % 2 ? 0xEE : 0x44);
                const __m256i g[4] = {_mm256_shuffle_epi32(b, 0x00), _mm256_shuffle_epi32(b, 0x55), _mm256_shuffle_epi32(b, 0xAA),
                                      _mm256_shuffle_epi32(b, 0xFF)};
                v[ib] = trellis32(g, trellis_ka<8>());
                if constexpr (kSigned) {  // |value|, negative where the block's bit in qh[j] is set
                    const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << ib));
                    v[ib] = _mm256_abs_epi8(v[ib]);
                    sign[ib] = _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(load32(qh), m), m), _mm256_set1_epi8(1));
                }
            }
        }
    }
    void decode(const uint8_t* blk) {
        load(blk);
        half(0), half(1);
    }
    // Block b's int32 lanes against 32 activations.
    __m256i lanes(int b, __m256i y) const {
        if constexpr (kSigned) return dot_us8(v[b], _mm256_sign_epi8(y, sign[b]));
        else return dot_ss8(v[b], y);
    }
    void decode_to(const uint8_t* blk, int8_t* out) {
        decode(blk);
        for (int b = 0; b < 8; ++b) {
            __m256i x = v[b];
            if constexpr (kSigned) x = _mm256_sign_epi8(x, sign[b]);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * b), x);
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
        dec.load(blocks + i * block_bytes);
        const __m256 S = trellis_scales_ps(d, dec.scale);
#pragma GCC unroll 2
        for (int c = 0; c < 2; ++c) {
            dec.half(c);
            const ik::BlockQ8_2x4& yg = y.group(2 * i + c);
            __m256i l[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) l[k] = dec.lanes(4 * c + k, load32(yg.qs + 32 * k));
            const __m128 s4 = c == 0 ? _mm256_castps256_ps128(S) : _mm256_extractf128_ps(S, 1);
            acc = _mm256_fmadd_ps(dup4(_mm_mul_ps(s4, bf16x4(yg.d))), _mm256_cvtepi32_ps(halves4(l[0], l[1], l[2], l[3])), acc);
        }
    }
    return hsum_float_8(acc);
}

// ---- the trellis types for one token: products group-major ----
//
// Lane g of an index register times ka^p gives, after the 6-bit mask, four bytes that sum to weight p of group g
// plus 126. A byte product against the activation of that weight repeated in all four bytes (PMADDUBSW and
// PMADDWD, or VPDPBUSD) adds the weight's product into lane g, so a token whose activations are laid out that way
// once (G planes per index register: plane p, lane g = the activation of weight p of group g) needs per G weights
// of a register's groups a multiply, an AND and the byte product: no per-group spread, byte sums or packs. 126
// times each half block's activation sum then comes off, and the half blocks' integer sums are the exact ones
// dot_trellis forms (IQ3_KT, |weight| with a stored sign, keeps dot_trellis).

inline constexpr auto kKaPowers = [] {
    std::array<uint32_t, 8> power{};
    uint32_t x = 1;
    for (auto& p : power) p = x *= 0xCBAC1FEDu;
    return power;
}();

// A token's activations as planes for index registers of `Lanes` groups of G weights.
template <int G, int Lanes>
void group_major_activations(int64_t n, const uint8_t* act, std::vector<uint32_t>& out) {
    out.resize(static_cast<size_t>(n));
    const X4Row y{act};
    for (int64_t v = 0; v < n; ++v) {  // weight v: register v / (Lanes G), lane (v % (Lanes G)) / G, plane v % G
        const int64_t r = v / (Lanes * G), g = (v % (Lanes * G)) / G, p = v % G;
        out[static_cast<size_t>(r * Lanes * G + Lanes * p + g)] = static_cast<uint8_t>(y.group(v / 128).qs[v % 128]) * 0x01010101u;
    }
}

// 126 times each half block's activation sum, eight per 128 activations in halves4's order (lane 4h + k: half h
// of block k).
inline void trellis_offsets(int64_t n, const uint8_t* act, std::vector<int32_t>& out) {
    out.resize(static_cast<size_t>(n / 16));
    const X4Row y{act};
    for (int64_t g = 0; g < n / 128; ++g)
        for (int k = 0; k < 4; ++k)
            for (int h = 0; h < 2; ++h) {
                int32_t sum = 0;
                for (int e = 0; e < 16; ++e) sum += y.group(g).qs[32 * k + 16 * h + e];
                out[static_cast<size_t>(8 * g + 4 * h + k)] = 126 * sum;
            }
}

// Lane g: the sum over the group's G weights (+ 126) times their activations. Each PMADDUBSW pair sum is at most
// 2 * 63 * 128 in size, so two planes' add in int16 before PMADDWD.
template <int G>
inline __m256i group_sums256(__m256i idx, const uint32_t* planes) {
    const __m256i mask = _mm256_set1_epi32(0x3f3f3f3f);
    __m256i acc = _mm256_setzero_si256();
    for (int p = 0; p < G; p += 2) {
        const __m256i a = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_mullo_epi32(idx, _mm256_set1_epi32(static_cast<int>(kKaPowers[p]))), mask),
                                               load32(planes + 8 * p));
        const __m256i b = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_mullo_epi32(idx, _mm256_set1_epi32(static_cast<int>(kKaPowers[p + 1]))), mask),
                                               load32(planes + 8 * p + 8));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(a, b), _mm256_set1_epi16(1)));
    }
    return acc;
}

template <GgmlType T>
void rows_trellis_group_major(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    using Ind = TrellisIndices256<T>;
    constexpr int G = Ind::kGroup;
    const auto* act = static_cast<const uint8_t*>(a);
    if (rows == 1) {  // a lone row: the group-major layout would cost as much as the row itself
        out[0] = dot_trellis<T>(n, w, a);
        return;
    }
    thread_local std::vector<uint32_t> planes;
    thread_local std::vector<int32_t> offsets;
    group_major_activations<G, 8>(n, act, planes);
    trellis_offsets(n, act, offsets);
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
            for (int c = 0; c < 2; ++c) {
                const uint32_t* pl = planes.data() + i * QK_K + 128 * c;
                __m256i h;
                if constexpr (G == 8) {  // two registers of two blocks; lanes 2j, 2j + 1 are half block j
                    const __m256i sums = _mm256_hadd_epi32(group_sums256<8>(ind.idx[2 * c], pl), group_sums256<8>(ind.idx[2 * c + 1], pl + 64));
                    h = _mm256_permutevar8x32_epi32(sums, _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7));
                } else {  // a register per block, a half block per 128-bit lane
                    h = halves4(group_sums256<4>(ind.idx[4 * c], pl), group_sums256<4>(ind.idx[4 * c + 1], pl + 32),
                                group_sums256<4>(ind.idx[4 * c + 2], pl + 64), group_sums256<4>(ind.idx[4 * c + 3], pl + 96));
                }
                h = _mm256_sub_epi32(h, load32(offsets.data() + (2 * i + c) * 8));
                const __m128 s4 = c == 0 ? _mm256_castps256_ps128(S) : _mm256_extractf128_ps(S, 1);
                acc = _mm256_fmadd_ps(dup4(_mm_mul_ps(s4, bf16x4(y.group(2 * i + c).d))), _mm256_cvtepi32_ps(h), acc);
            }
        }
        out[r] = hsum_float_8(acc);
    }
}

// Rows x tokens for the small batch: each group of four blocks decoded once for NT tokens, every (row, token) in
// dot_legacy's order.
template <bool Q6, int NT>
void legacy_tokens(int64_t ng, const uint8_t* row, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    __m256 acc[NT];
    __m128 m[NT];
    for (int j = 0; j < NT; ++j) acc[j] = _mm256_setzero_ps(), m[j] = _mm_setzero_ps();
    for (int64_t g = 0; g < ng; ++g) {
        __m256i v[4];
        for (int k = 0; k < 4; ++k) {
            if constexpr (Q6) v[k] = q6_0_values(reinterpret_cast<const ik::BlockQ6_0*>(row)[4 * g + k]);
            else v[k] = load32(reinterpret_cast<const BlockQ8_0*>(row)[4 * g + k].qs);
        }
        const __m128 dw = legacy_scales4<Q6>(row, 4 * g);
        for (int j = 0; j < NT; ++j) {
            const ik::BlockQ8_2x4& yg = X4Row{act + j * act_bytes}.group(g);
            __m256i d[4];
            for (int k = 0; k < 4; ++k) d[k] = Q6 ? dot_us8(v[k], load32(yg.qs + 32 * k)) : dot_ss8(v[k], load32(yg.qs + 32 * k));
            const __m128 dy = bf16x4(yg.d);
            acc[j] = _mm256_fmadd_ps(dup4(_mm_mul_ps(dw, dy)), _mm256_cvtepi32_ps(halves4(d[0], d[1], d[2], d[3])), acc[j]);
            if constexpr (Q6) {
                const __m128 s = _mm_cvtepi32_ps(_mm_cvtepi16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(yg.s))));
                m[j] = _mm_add_ps(m[j], _mm_mul_ps(_mm_mul_ps(dw, _mm_set1_ps(-32.f)), _mm_mul_ps(dy, s)));
            }
        }
    }
    for (int j = 0; j < NT; ++j) {
        float res;
        if constexpr (Q6) {
            const __m128 vv = _mm_add_ps(_mm_add_ps(_mm256_castps256_ps128(acc[j]), _mm256_extractf128_ps(acc[j], 1)), m[j]);
            const __m128 tt = _mm_add_ps(vv, _mm_movehl_ps(vv, vv));
            res = _mm_cvtss_f32(_mm_add_ss(tt, _mm_movehdup_ps(tt)));
        } else {
            res = hsum_float_8(acc[j]);
        }
        out[j * out_stride] = res;
    }
}

template <bool Q6>
void tile_legacy(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                 int64_t out_stride) {
    const int64_t nb = n / 32;
    for (int64_t r = 0; r < rows; ++r) {
        if (nb % 4) {  // blocks after the last group take the single-block lanes: the one-token kernel per pair
            for (int t = 0; t < n_tok; ++t) out[t * out_stride + r] = dot_legacy<Q6>(n, w + r * row_bytes, act + t * act_bytes);
            continue;
        }
        token_passes(n_tok, [&](auto nt, int t) {
            legacy_tokens<Q6, decltype(nt)::value>(nb / 4, w + r * row_bytes, act + t * act_bytes, act_bytes, out + t * out_stride + r, out_stride);
        });
    }
}

template <GgmlType T>
void tile_trellis(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                  int64_t out_stride) {
    const size_t block_bytes = type_info(T).block_bytes;
    TrellisDec<T> dec;
    constexpr int kTok = 24;  // the decode dominates: one per superblock for every token below the converted path (16, 24)
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + r * row_bytes;
        const float d = trellis_row_scale<T>(row);
        for (int t0 = 0; t0 < n_tok; t0 += kTok) {
            const int nt = std::min(kTok, n_tok - t0);
            __m256 acc[kTok];
            for (auto& a : acc) a = _mm256_setzero_ps();
            for (int64_t i = 0; i < n / QK_K; ++i) {
                dec.decode(row + 4 + i * block_bytes);
                const __m256 S = trellis_scales_ps(d, dec.scale);
                for (int j = 0; j < nt; ++j) {
                    const X4Row y{act + (t0 + j) * act_bytes};
                    for (int c = 0; c < 2; ++c) {
                        const ik::BlockQ8_2x4& yg = y.group(2 * i + c);
                        __m256i l[4];
                        for (int k = 0; k < 4; ++k) l[k] = dec.lanes(4 * c + k, load32(yg.qs + 32 * k));
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
    t.dot_rows[type_slot(GgmlType::IQ1_KT)] = ikx::rows_trellis_group_major<GgmlType::IQ1_KT>;
    t.dot_rows[type_slot(GgmlType::IQ2_KT)] = ikx::rows_trellis_group_major<GgmlType::IQ2_KT>;
    t.dot_rows[type_slot(GgmlType::IQ4_KT)] = ikx::rows_trellis_group_major<GgmlType::IQ4_KT>;
}

}  // namespace
}  // namespace moe::kernels

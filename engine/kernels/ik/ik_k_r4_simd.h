// AVX2 kernels for ik_llama.cpp's row-interleaved IQ2_K_R4 ... IQ5_K_R4, Q4_K_R4, Q6_K_R4 and Q8_0_R8 (and, in the
// AVX-512 translation unit, Q8_0_R8 sixteen rows per 512-bit register), a group of rows at a time in ik's lanes
// (lane k: row k's first 16 of each 32 weights, lane 4 + k: its second 16; Q8_0_R8: lane k = row k), with the
// bits of ik_ref_r4.cpp. Included by ik_r4_simd.h.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <vector>
#include <type_traits>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_r4_lanes.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

// The four fields' 4-bit quants of sub-block ib of a nibble array at offset `at` of the blocks
// (ik_r4_layout.h's nibble order).
template <class V>
void nibble_fields_v(const uint8_t* b0, const uint8_t* b1, size_t at, int ib, typename V::I q4[4]) {
    const size_t o = at + 64 * static_cast<size_t>(ib);
    const typename V::I x1 = V::bytes32(b0 + o, b1 + o), x2 = V::bytes32(b0 + o + 32, b1 + o + 32), m4 = V::set8(0x0F);
    q4[0] = V::and_(x1, m4), q4[1] = V::and_(x2, m4), q4[2] = V::and_(V::srli16(x1, 4), m4), q4[3] = V::and_(V::srli16(x2, 4), m4);
}

// One block of four rows (two blocks: two groups, V::kGroups), decoded per sub-block ib: each weight's kernel
// value for the four fields f (field f: weights 4f + i of the first 16 in lane k, 16 + 4f + i of the second 16 in
// lane 4 + k; ik_r4_layout.h) and the lanes' scales as int16 pairs. IQ2_K_R4 / IQ3_K_R4 give ik's unsigned values
// (table value + M); IQ4_K_R4 / IQ5_K_R4 the signed ones.
template <class V, GgmlType T>
struct KR4Block {
    using I = typename V::I;
    static constexpr bool kUnsigned = T == GgmlType::IQ2_K_R4 || T == GgmlType::IQ3_K_R4;
    const uint8_t* b0;
    const uint8_t* b1;
    I xbits;  // lane j's extra byte, repeated over its four bytes

    KR4Block(const uint8_t* p0, const uint8_t* p1) : b0(p0), b1(p1), xbits(V::lane_bytes(p0 + 8, p1 + 8)) {}
    // 0 or 1 per byte: the table-half bit of sub-block ib
    I xbit(int ib) const { return V::and_(V::srli16(xbits, ib), V::set8(1)); }
    I pairs(size_t at) const { return V::pairs(b0 + at, b1 + at); }
    I bytes32(size_t at) const { return V::bytes32(b0 + at, b1 + at); }
    I bytes16(size_t at) const { return V::bytes16(b0 + at, b1 + at); }

    I scales(int ib) const {
        const int nib_shift = 4 * (ib / 4);
        if constexpr (kUnsigned) {
            const size_t scales_l = T == GgmlType::IQ2_K_R4 ? 16 : 24;
            const I nib = V::and_(V::srli16(pairs(scales_l + 8 * (ib % 4)), nib_shift), V::set16(0xF));
            if constexpr (T == GgmlType::IQ2_K_R4) return V::sub16(nib, V::set16(8));
            const I sign = V::and_(V::srli16(pairs(16), ib), V::set16(1));
            const I m = V::or_(V::slli16(nib, 1), V::set16(1));
            return V::mul16(m, V::sub16(V::set16(1), V::slli16(sign, 1)));  // (2 nib + 1), negated where the sign bit is set
        } else {
            const I low = V::and_(V::srli16(pairs(32 + 8 * (ib % 4)), nib_shift), V::set16(0xF));
            const I high = V::and_(V::srli16(pairs(16 + 8 * (ib % 2)), 2 * (ib / 2)), V::set16(3));
            return V::sub16(V::or_(low, V::slli16(high, 4)), V::set16(32));
        }
    }

    void values(int ib, I qx[4]) const {
        if constexpr (kUnsigned) {
            const size_t qs = T == GgmlType::IQ2_K_R4 ? 48 : 56;
            const I bits = bytes32(qs + 32 * ib), m3 = V::set8(3);
            if constexpr (T == GgmlType::IQ2_K_R4) {  // iq2nl_values + 32, the second half via index + 4
                static constexpr int8_t kTable[16] = {1, 19, 33, 49, 6, 24, 38, 54, 0, 0, 0, 0, 0, 0, 0, 0};
                const I table = V::table16(kTable), add = V::slli16(xbit(ib), 2);
                for (int f = 0; f < 4; ++f) qx[f] = V::lookup(table, V::add8(V::and_(V::srli16(bits, 2 * f), m3), add));
            } else {  // iq3nl_values + 64, the second half via index + 8
                static constexpr int8_t kTable[16] = {1, 24, 41, 54, 65, 77, 92, 111, 5, 28, 45, 58, 69, 81, 96, 115};
                const I table = V::table16(kTable), add = V::slli16(xbit(ib), 3);
                const I hb = bytes16(qs + 256 + 16 * ib);
                for (int f = 0; f < 4; ++f) {
                    const I idx = V::or_(V::and_(V::srli16(bits, 2 * f), m3), V::bit_at(hb, f, f + 4, 2));
                    qx[f] = V::lookup(table, V::add8(idx, add));
                }
            }
        } else {
            constexpr size_t kQs = 64;
            I q4[4];
            nibble_fields_v<V>(b0, b1, kQs, ib, q4);
            // (+ 128 where the products run unsigned: V::kUnsignedDot)
            alignas(16) static constexpr auto kTables = [] {
                std::array<std::array<int8_t, 16>, 3> t{};
                const int add = V::kUnsignedDot ? 128 : 0;
                for (int i = 0; i < 16; ++i) {
                    t[0][i] = static_cast<int8_t>(ik::kIq4kValues[i] + add);
                    t[1][i] = static_cast<int8_t>(ik::kIq5nlValues[i] + add);
                    t[2][i] = static_cast<int8_t>(ik::kIq5nlValues[16 + i] + add);
                }
                return t;
            }();
            if constexpr (T == GgmlType::IQ4_K_R4) {
                const I table = V::table16(kTables[0].data()), add = V::slli16(xbit(ib), 2);  // the second half is the first + 4
                for (int f = 0; f < 4; ++f) qx[f] = V::add8(V::lookup(table, q4[f]), add);
            } else {
                const I lo = V::table16(kTables[1].data()), hi = V::table16(kTables[2].data());
                const I add = V::slli16(xbit(ib), 1);  // + 2
                const I hb = bytes16(kQs + 512 + 16 * ib);
                constexpr int kLo[4] = {0, 4, 1, 5}, kHi[4] = {2, 6, 3, 7};  // fifth-bit positions of field f's weights
                for (int f = 0; f < 4; ++f)
                    qx[f] = V::add8(V::select(V::bit_of(hb, kLo[f], kHi[f]), V::lookup(lo, q4[f]), V::lookup(hi, q4[f])), add);
            }
        }
    }
};

// NY tokens per pass over V::kGroups groups of four rows from group g, each sub-block decoded once. Per 256
// weights and token the two halves' integer sums (IQ2/IQ3: of unsigned values, their offset taken back through
// the sums of 16 with sub-blocks 0..3 in the first accumulator and 4..7 in the second, as ik's kernel does), then
// fma(d * y.d, sum, acc); the row is the two accumulators' sum.
template <class V, GgmlType T, int NY>
void k_r4_groups(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, const int32_t* neg_offsets,
                 float* out, int64_t out_stride) {
    using I = typename V::I;
    using F = typename V::F;
    using Block = KR4Block<V, T>;
    constexpr int kShift = T == GgmlType::IQ2_K_R4 ? 5 : 6;   // log2 of the offset (32, 64)
    constexpr int kMax = T == GgmlType::IQ2_K_R4 ? 54 : 115;  // the largest unsigned value
    constexpr size_t kBlock = T == GgmlType::IQ2_K_R4   ? sizeof(ik::BlockIQ2_K_R4)
                              : T == GgmlType::IQ3_K_R4 ? sizeof(ik::BlockIQ3_K_R4)
                              : T == GgmlType::IQ4_K_R4 ? sizeof(ik::BlockIQ4_K_R4)
                                                        : sizeof(ik::BlockIQ5_K_R4);
    const ik::BlockQ8K* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes);
    const uint8_t* group[2] = {w + 4 * g * row_bytes, w + 4 * (g + V::kGroups - 1) * row_bytes};
    F acc[NY];
    for (auto& a : acc) a = V::set1(0.f);
    for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
        const Block blk(group[0] + ibl * kBlock, group[1] + ibl * kBlock);
        const F dd = V::rows_f16(blk.b0, blk.b1);
        I isum[NY];
        for (auto& v : isum) v = V::zero();
        I iscales[8];
        for (int ib = 0; ib < 8; ++ib) iscales[ib] = blk.scales(ib);
        for (int ib = 0; ib < 8; ++ib) {
            I qx[4];
            blk.values(ib, qx);
            if constexpr (Block::kUnsigned) {
                for (int t = 0; t < NY; ++t)
                    isum[t] = V::add32(isum[t], V::template scaled_dot4<kMax>(qx, V::activations(y[t][ibl].qs + 32 * ib), iscales[ib]));
            } else if constexpr (V::kUnsignedDot) {  // qx holds the values + 128
                const I scales = V::low16(iscales[ib]);
                for (int t = 0; t < NY; ++t)
                    isum[t] = V::add32(isum[t], V::unsigned_scaled_dot4(qx, V::activations(y[t][ibl].qs + 32 * ib),
                                                                        V::neg_offsets(neg_offsets + (t * (n / 32) + 8 * ibl + ib) * 8), scales));
            } else {
                I ux[4];
                for (int f = 0; f < 4; ++f) ux[f] = V::abs8(qx[f]);
                for (int t = 0; t < NY; ++t)
                    isum[t] = V::add32(isum[t], V::signed_scaled_dot4(ux, qx, V::activations(y[t][ibl].qs + 32 * ib), iscales[ib]));
            }
        }
        if constexpr (Block::kUnsigned) {
            // The offset's share: lane j of sub-blocks (2i, 2i + 1) as one int16 pair against the sums of 16 they
            // meet (bs(4i + h), bs(4i + 2 + h), h = j >= 4); lane k then takes its lanes k and 4 + k over
            // sub-blocks 0..3, lane 4 + k those over 4..7.
            for (int t = 0; t < NY; ++t) isum[t] = V::sub32(isum[t], V::slli32(V::offsets(iscales, y[t][ibl].bsums), kShift));
        }
        for (int t = 0; t < NY; ++t) acc[t] = V::fma(V::mul(dd, V::set1(y[t][ibl].d)), V::cvt(isum[t]), acc[t]);
    }
    for (int t = 0; t < NY; ++t) V::store(acc[t], out + t * out_stride + 4 * g);
}

// Q4_K_R4 (and Q5_K_R4: Five, its fifth bits OR-ed into the nibbles) against Q8_K32 for V::kGroups groups from
// group g, NY tokens per pass (ik_ref_r4.cpp's order; Lone: a lone column's mins).
template <class V, bool Lone, bool Five, int NY>
void q4_k_r4_groups(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    using I = typename V::I;
    using F = typename V::F;
    using Block = std::conditional_t<Five, ik::BlockQ5_K_R4, ik::BlockQ4_K_R4>;
    const ik::BlockQ8K32* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K32*>(act + t * act_bytes);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    const uint8_t* group[2] = {w + 4 * g * row_bytes, w + 4 * (g + V::kGroups - 1) * row_bytes};
    F acc[NY];
    for (auto& a : acc) a = V::set1(0.f);
    for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
        const uint8_t* b0 = group[0] + ibl * sizeof(Block);
        const uint8_t* b1 = group[1] + ibl * sizeof(Block);
        const F dd = V::rows_f16(b0, b1), md = V::mul(V::set1(-1.f), V::rows_f16(b0 + 8, b1 + 8));
        // codes 4 ib + k of each group: the scale's and the min's 6 bits, byte 4 ib + k of each
        alignas(32) uint8_t sc[2][32], mn[2][32];
        for (int q = 0; q < V::kGroups; ++q) {
            const auto& b = *reinterpret_cast<const ik::BlockQ4_K_R4*>(q ? b1 : b0);  // (the header both share)
            const __m256i l = load32(b.scales_l);
            const __m128i h16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales_h));
            const __m256i h = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(h16, 4), h16), m4);
            _mm256_store_si256(reinterpret_cast<__m256i*>(sc[q]),
                               _mm256_or_si256(_mm256_and_si256(l, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4)));
            _mm256_store_si256(
                reinterpret_cast<__m256i*>(mn[q]),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4)));
        }
        const int q1 = V::kGroups - 1;
        F mins[4];  // lanes k: sub-block j's min of row k; lanes 4 + k: sub-block j + 4's
        for (int j = 0; j < 4; ++j) mins[j] = V::bytes_ps(mn[0] + 4 * j, mn[0] + 4 * j + 16, mn[q1] + 4 * j, mn[q1] + 4 * j + 16);
        for (int t = 0; t < NY; ++t) {
            const float* bs = y[t][ibl].bsums;
            if constexpr (Lone) {
                F sum = V::mul(mins[0], V::halves_ps(bs[0], bs[4]));
                for (int j = 1; j < 4; ++j) sum = V::fma(mins[j], V::halves_ps(bs[j], bs[j + 4]), sum);
                acc[t] = V::fma(md, sum, acc[t]);
            } else {
                for (int j = 0; j < 4; ++j) acc[t] = V::fma(V::mul(md, mins[j]), V::halves_ps(bs[j], bs[j + 4]), acc[t]);
            }
        }
        I isum[NY];
        for (auto& v : isum) v = V::zero();
        for (int ib = 0; ib < 8; ++ib) {
            I q4[4];
            nibble_fields_v<V>(b0, b1, offsetof(Block, qs), ib, q4);
            if constexpr (Five) {  // bits {0, 4}, {2, 6}, {1, 5}, {3, 7} for the four fields' two halves
                const size_t o = offsetof(ik::BlockQ5_K_R4, qh) + 16 * static_cast<size_t>(ib);
                const I hb = V::bytes16(b0 + o, b1 + o);
                constexpr int kLo[4] = {0, 2, 1, 3};
                for (int f = 0; f < 4; ++f) q4[f] = V::or_(q4[f], V::bit_at(hb, kLo[f], kLo[f] + 4, 4));
            }
            if constexpr (V::kUnsignedDot) {  // VPDPBUSD's exact sums times the scales read straight as int32 lanes
                const I s32 = V::scales32(reinterpret_cast<const int8_t*>(sc[0] + 4 * ib), reinterpret_cast<const int8_t*>(sc[q1] + 4 * ib));
                for (int t = 0; t < NY; ++t)
                    isum[t] = V::add32(isum[t], V::mul32(V::template dot4<31>(q4, V::activations(y[t][ibl].qs + 32 * ib)), s32));
            } else {
                const I iscales = V::pairs4(sc[0] + 4 * ib, sc[q1] + 4 * ib);  // both halves: row k's
                for (int t = 0; t < NY; ++t)
                    isum[t] = V::add32(isum[t], V::template scaled_dot4<31>(q4, V::activations(y[t][ibl].qs + 32 * ib), iscales));
            }
        }
        for (int t = 0; t < NY; ++t) acc[t] = V::fma(V::mul(dd, V::set1(y[t][ibl].d)), V::cvt(isum[t]), acc[t]);
    }
    for (int t = 0; t < NY; ++t) V::store(acc[t], out + t * out_stride + 4 * g);
}

// Q6_K_R4 against Q8_K for V::kGroups groups from group g, NY tokens per pass (ik_ref_r4.cpp's order; Lone: y.d
// folded into d first).
template <class V, bool Lone, int NY>
void q6_k_r4_groups(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    using I = typename V::I;
    using F = typename V::F;
    using Block = ik::BlockQ6_K_R4;
    const ik::BlockQ8K* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes);
    constexpr int kShift[4] = {0, 4, 2, 6};  // the high bits of field f's weights
    const uint8_t* group[2] = {w + 4 * g * row_bytes, w + 4 * (g + V::kGroups - 1) * row_bytes};
    F acc[NY];
    for (auto& a : acc) a = V::set1(0.f);
    for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
        const uint8_t* b0 = group[0] + ibl * sizeof(Block);
        const uint8_t* b1 = group[1] + ibl * sizeof(Block);
        const F dd = V::rows_f16(b0, b1);
        I iscales[8];
        F fscales[8];
        for (int ib = 0; ib < 8; ++ib) {
            const size_t o = offsetof(Block, scales) + 8 * static_cast<size_t>(ib);
            iscales[ib] = V::pairs_s8(b0 + o, b1 + o);
            fscales[ib] = V::cvt(V::low16(iscales[ib]));
        }
        F D[NY];
        for (int t = 0; t < NY; ++t) {
            const F yd = V::set1(y[t][ibl].d);
            D[t] = Lone ? V::mul(dd, yd) : dd;
            const F mn = V::mul(D[t], V::set1(-32.f));
            const F cm = Lone ? mn : V::mul(mn, yd);
            acc[t] = V::fma(cm, V::cvt(V::offsets(iscales, y[t][ibl].bsums)), acc[t]);
        }
        for (int ib = 0; ib < 8; ++ib) {
            I u[4];
            nibble_fields_v<V>(b0, b1, offsetof(Block, ql), ib, u);
            const size_t o = offsetof(Block, qh) + 32 * static_cast<size_t>(ib);
            const I hb = V::bytes32(b0 + o, b1 + o);
            for (int f = 0; f < 4; ++f) u[f] = V::or_(u[f], V::bits_to(hb, kShift[f], 4, 0x30));
            for (int t = 0; t < NY; ++t) {
                const I S = V::template dot4<63>(u, V::activations(y[t][ibl].qs + 32 * ib));
                F c = V::mul(D[t], fscales[ib]);
                if constexpr (!Lone) c = V::mul(c, V::set1(y[t][ibl].d));
                acc[t] = V::fma(c, V::cvt(S), acc[t]);
            }
        }
    }
    for (int t = 0; t < NY; ++t) V::store(acc[t], out + t * out_stride + 4 * g);
}

template <GgmlType T, int NY>
void k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    thread_local std::vector<int32_t> neg_offsets;  // for IQ4_K_R4 / IQ5_K_R4's unsigned products
    if constexpr (Lanes4::kUnsignedDot && !(T == GgmlType::IQ2_K_R4 || T == GgmlType::IQ3_K_R4))
        neg_offsets128<ik::BlockQ8K>(n, act, act_bytes, NY, neg_offsets);
    each_group_pair<4>(rows,
                       [&]<class V>(int64_t g) { k_r4_groups<V, T, NY>(n, w, row_bytes, g, act, act_bytes, neg_offsets.data(), out, out_stride); });
}
template <bool Lone, int NY, bool Five = false>
void q4_k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    each_group_pair<4>(rows, [&]<class V>(int64_t g) { q4_k_r4_groups<V, Lone, Five, NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride); });
}
template <bool Lone, int NY>
void q6_k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    each_group_pair<4>(rows, [&]<class V>(int64_t g) { q6_k_r4_groups<V, Lone, NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride); });
}

// Block b of a Q8_2_X4 row: its scale, its values and their sum (groups of four blocks, then single ones).
// A Q8_2_X4 group's four block scales (bf16) and four activation sums (int16) as floats.
inline __m128 x4_scales(const ik::BlockQ8_2x4& y) {
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(y.d))), 16));
}
inline __m128 x4_sums(const ik::BlockQ8_2x4& y) {
    return _mm_cvtepi32_ps(_mm_cvtepi16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(y.s))));
}
inline const int8_t* x4_block(const uint8_t* row, int64_t b, int64_t grouped, float& dy, int& sum) {
    if (b < grouped) {
        const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(row)[b / 4];
        dy = bf16_to_fp32(yg.d[b % 4]), sum = yg.s[b % 4];
        return yg.qs + 32 * (b % 4);
    }
    uint16_t h;
    int16_t s;
    std::memcpy(&h, row + 36 * b, 2);
    std::memcpy(&s, row + 36 * b + 2, 2);
    dy = bf16_to_fp32(h), sum = s;
    return reinterpret_cast<const int8_t*>(row + 36 * b + 4);
}

// Q8_0_R8 against Q8_2_X4: eight rows (group g) in the lanes, per 32 weights the exact integer sum and
// fma(d * y.d, sum, acc). As ik's AVX2 kernel: a block in two halves of four registers (eight values and their
// magnitudes would take all sixteen), each half's dwords from one 128-bit broadcast, y.d once per four blocks.
template <int NY>
void q8_0_r8_group8(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    const auto* blocks = reinterpret_cast<const ik::BlockQ8_0_R8*>(w + 8 * g * row_bytes);
    __m256 acc[NY];
    for (auto& a : acc) a = _mm256_setzero_ps();
    // rows' values of half h of block b (dwords 4h .. 4h + 3 of each row) against the 16 activations at qy
    const auto half = [&](int64_t b, int h, const int8_t* const qy[NY], __m256i sums[NY]) {
        __m256i q[4], u[4];
        for (int l = 0; l < 4; ++l) q[l] = load32(blocks[b].qs + 128 * h + 32 * l), u[l] = _mm256_sign_epi8(q[l], q[l]);
        for (int t = 0; t < NY; ++t) {
            const __m256i y = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qy[t])));
            const __m256i p0 = dot_us8(u[0], _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0x00), q[0]));
            const __m256i p1 = dot_us8(u[1], _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0x55), q[1]));
            const __m256i p2 = dot_us8(u[2], _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0xaa), q[2]));
            const __m256i p3 = dot_us8(u[3], _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0xff), q[3]));
            const __m256i s = _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
            sums[t] = h == 0 ? s : _mm256_add_epi32(sums[t], s);
        }
    };
    alignas(16) float dys[NY][4];
    for (int64_t g4 = 0; g4 < grouped / 4; ++g4) {
        for (int t = 0; t < NY; ++t) {
            const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(act + t * act_bytes)[g4];
            _mm_store_ps(dys[t], x4_scales(yg));
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            const int64_t b = 4 * g4 + j;
            const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].d)));
            __m256i sums[NY];
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                const int8_t* qy[NY];
                for (int t = 0; t < NY; ++t) qy[t] = reinterpret_cast<const ik::BlockQ8_2x4*>(act + t * act_bytes)[g4].qs + 32 * j + 16 * h;
                half(b, h, qy, sums);
            }
            for (int t = 0; t < NY; ++t)
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_broadcast_ss(&dys[t][j])), _mm256_cvtepi32_ps(sums[t]), acc[t]);
        }
    }
    for (int64_t b = grouped; b < nb; ++b) {  // blocks after the last group of four
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].d)));
        float dy[NY];
        const int8_t* qy[NY];
        for (int t = 0; t < NY; ++t) {
            int ysum;
            qy[t] = x4_block(act + t * act_bytes, b, grouped, dy[t], ysum);
        }
        __m256i sums[NY];
        half(b, 0, qy, sums);
        for (int t = 0; t < NY; ++t) qy[t] += 16;
        half(b, 1, qy, sums);
        for (int t = 0; t < NY; ++t) acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(dy[t])), _mm256_cvtepi32_ps(sums[t]), acc[t]);
    }
    for (int t = 0; t < NY; ++t) _mm256_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// Two groups (sixteen rows) in a 512-bit register: the values made unsigned (q + 128) for VPDPBUSD, 128 times the
// block's activation sum taken back; the same exact integers and float steps per row as eight at a time. That
// needs the stored sum to be the sum of the stored values: quantize_q8_2_x4's values never reach its clamp (|x / d|
// <= 127.5 with d = bf16(amax / 127)), so they are.
template <int NY>
void q8_0_r8_group16(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    const auto* b0 = reinterpret_cast<const ik::BlockQ8_0_R8*>(w + 8 * g * row_bytes);
    const auto* b1 = reinterpret_cast<const ik::BlockQ8_0_R8*>(w + 8 * (g + 1) * row_bytes);
    __m512 acc[NY];
    for (auto& a : acc) a = _mm512_setzero_ps();
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t b = 0; b < nb; ++b) {
        const __m512 d16 = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0[b].d))),
                                                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1[b].d)), 1));
        __m512i u[8];
        for (int l = 0; l < 8; ++l)
            u[l] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(load32(b0[b].qs + 32 * l)), load32(b1[b].qs + 32 * l), 1), flip);
        for (int t = 0; t < NY; ++t) {
            float dy;
            int ysum;
            const int8_t* qy = x4_block(act + t * act_bytes, b, grouped, dy, ysum);
            __m512i s = _mm512_set1_epi32(-128 * ysum);
            for (int l = 0; l < 8; ++l) {
                int v;
                std::memcpy(&v, qy + 4 * l, 4);
                s = _mm512_dpbusd_epi32(s, u[l], _mm512_set1_epi32(v));
            }
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d16, _mm512_set1_ps(dy)), _mm512_cvtepi32_ps(s), acc[t]);
        }
    }
    for (int t = 0; t < NY; ++t) _mm512_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
}
#endif

template <int NY>
void q8_0_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    int64_t g = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (; g + 2 <= rows / 8; g += 2) q8_0_r8_group16<NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
#endif
    for (; g < rows / 8; ++g) q8_0_r8_group8<NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

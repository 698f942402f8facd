// The lanes of ik_llama.cpp's four-row interleaved forms (lane k: row k's first 16 of each 32 weights, lane 4 + k:
// its second 16) and the helpers their AVX2 kernels share; Lanes4 / Lanes8 let one kernel body run one group per
// __m256 or, in the AVX-512 translation unit, two groups per __m512 with each lane's steps unchanged. Included by
// the ik_*_r4_simd.h headers.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

inline int u32_of(const int8_t* p) {
    int v;
    std::memcpy(&v, p, 4);
    return v;
}

// Per byte 0 or 1: bit `shift_lo` of each byte in the low 128-bit half, `shift_hi` in the high half.
inline __m256i bit_of_bytes(__m256i bytes, int shift_lo, int shift_hi) {
    const __m256i sh = _mm256_setr_epi32(shift_lo, shift_lo, shift_lo, shift_lo, shift_hi, shift_hi, shift_hi, shift_hi);
    return _mm256_and_si256(_mm256_srlv_epi32(bytes, sh), _mm256_set1_epi8(1));
}

// Four rows' results: each row's two accumulators (lanes k and 4 + k) added.
inline void store_row_sums(__m256 acc, float* out) { _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1))); }

// The offset's share per block: sub-blocks (2i, 2i + 1)'s lane scales (int16 pairs) against the sums of 16 they
// meet; lane k of the result sums lanes k and 4 + k over sub-blocks 0..3, lane 4 + k over 4..7.
inline __m256i offset_sums(const __m256i iscales[8], const int16_t* bsums) {
    const __m256i pick0 = _mm256_setr_epi8(0, 1, 4, 5, 0, 1, 4, 5, 0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7, 2, 3, 6, 7, 2, 3, 6, 7);
    const __m256i pick1 = _mm256_add_epi8(pick0, _mm256_set1_epi8(8));
    const __m256i b03 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums)));
    const __m256i b47 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bsums + 8)));
    __m256i pairs[4];
    for (int i = 0; i < 4; ++i) pairs[i] = _mm256_blend_epi16(iscales[2 * i], iscales[2 * i + 1], 0xAA);
    const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(pairs[0], _mm256_shuffle_epi8(b03, pick0)),
                                        _mm256_madd_epi16(pairs[1], _mm256_shuffle_epi8(b03, pick1)));
    const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(pairs[2], _mm256_shuffle_epi8(b47, pick0)),
                                        _mm256_madd_epi16(pairs[3], _mm256_shuffle_epi8(b47, pick1)));
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

// The four fields' 4-bit quants of sub-block ib (ik_r4_layout.h's nibble order).
inline void nibble_fields(const uint8_t* qs, int ib, __m256i q4[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i b1 = load32(qs + 64 * ib), b2 = load32(qs + 64 * ib + 32);
    q4[0] = _mm256_and_si256(b1, m4), q4[1] = _mm256_and_si256(b2, m4);
    q4[2] = _mm256_and_si256(_mm256_srli_epi16(b1, 4), m4), q4[3] = _mm256_and_si256(_mm256_srli_epi16(b2, 4), m4);
}

// Eight bytes b0..b7 as int16 [b0, b0, b1, b1, ..., b7, b7]: lane j's byte in both halves of its dword.
inline __m256i paired_bytes(const uint8_t* p) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
}

// The registers of one group of four rows (__m256: lane k holds row k's first 16 weights of each 32, lane 4 + k
// its second 16) or, in the AVX-512 translation unit, of two groups (__m512: the second group in the upper half),
// each lane's integer and float steps the same. p0 / p1: the same field of the first and second group's block.
struct Lanes4 {
    using I = __m256i;
    using F = __m256;
    static constexpr int kGroups = 1;
    static I bytes32(const uint8_t* p0, const uint8_t*) { return load32(p0); }
    static I bytes16(const uint8_t* p0, const uint8_t*) { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))); }
    static I pairs(const uint8_t* p0, const uint8_t*) { return paired_bytes(p0); }
    static F rows_f16(const uint8_t* p0, const uint8_t*) {  // the group's four f16 in both halves
        const __m128 d = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)));
        return _mm256_set_m128(d, d);
    }
    static I pairs_s8(const uint8_t* p0, const uint8_t*) {  // signed bytes as int16 pairs
        const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0));
        return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(v, v));
    }
    static I pairs4(const uint8_t* p0, const uint8_t*) {  // bytes b0..b3 as [b0, b0, .., b3, b3] in both halves
        int v;
        std::memcpy(&v, p0, 4);
        const __m128i x = _mm_cvtsi32_si128(v);
        return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_unpacklo_epi8(x, x)));
    }
    // lanes 0..3 from the four bytes at lo, lanes 4..7 from those at hi, as floats
    static F bytes_ps(const uint8_t* lo0, const uint8_t* hi0, const uint8_t*, const uint8_t*) {
        int lo, hi;
        std::memcpy(&lo, lo0, 4), std::memcpy(&hi, hi0, 4);
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32(lo, hi, 0, 0)));
    }
    static F halves_ps(float lo, float hi) { return _mm256_set_m128(_mm_set1_ps(hi), _mm_set1_ps(lo)); }
    static F bytes_ps_s8(const uint8_t* lo0, const uint8_t* hi0, const uint8_t*, const uint8_t*) {  // bytes_ps of signed bytes
        int lo, hi;
        std::memcpy(&lo, lo0, 4), std::memcpy(&hi, hi0, 4);
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_setr_epi32(lo, hi, 0, 0)));
    }
    // P[i] = a * b per lane as floats (exact: small integers), lanes 0..3 from bytes 4i..4i + 3 of each group's 32,
    // lanes 4..7 from 16 + 4i..; a[q], b[q]: group q's bytes
    static void byte_products_ps(const int8_t (*a)[32], const int8_t (*b)[32], int, F P[4]) {
        for (int i = 0; i < 4; ++i) {
            const auto at = [&](const int8_t(*x)[32], int o) { return reinterpret_cast<const uint8_t*>(x[0] + o); };
            P[i] = _mm256_mul_ps(bytes_ps_s8(at(a, 4 * i), at(a, 16 + 4 * i), nullptr, nullptr),
                                 bytes_ps_s8(at(b, 4 * i), at(b, 16 + 4 * i), nullptr, nullptr));
        }
    }
    static I pairs4_s8(const uint8_t* p0, const uint8_t*) {  // pairs4 of signed bytes
        int v;
        std::memcpy(&v, p0, 4);
        const __m128i x = _mm_cvtsi32_si128(v);
        return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_unpacklo_epi8(x, x)));
    }
    // Four rows' results times their scales d[0..3]: each row's two accumulators added, then scaled.
    static void store_scaled(F acc, const float* d0, const float*, float* out) {
        _mm_storeu_ps(out, _mm_mul_ps(_mm_loadu_ps(d0), _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1))));
    }
    static I activations(const int8_t* y) { return load32(y); }
    static I bit_of(I bytes, int shift_lo, int shift_hi) { return bit_of_bytes(bytes, shift_lo, shift_hi); }
    // bit_of's bits moved to bit `to` of each byte: where VPROLVD exists one rotate per lane (the rotation never
    // carries another byte's bit into bit `to`: both positions are in one byte, and wrapped bits land below it or
    // in byte 3's bits past it), else a shift after.
    static I bit_at(I bytes, int shift_lo, int shift_hi, int to) {
#if defined(__AVX512F__) && defined(__AVX512VL__)
        const int lo = (to - shift_lo) & 31, hi = (to - shift_hi) & 31;
        return _mm256_and_si256(_mm256_rolv_epi32(bytes, _mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi)),
                                _mm256_set1_epi8(static_cast<char>(1 << to)));
#else
        return _mm256_slli_epi16(bit_of(bytes, shift_lo, shift_hi), to);
#endif
    }
    // The bits (mask >> to) at `shift` of each byte moved to `to` (the bits under `mask`), one rotate as bit_at's.
    static I bits_to(I bytes, int shift, int to, int mask) {
#if defined(__AVX512F__) && defined(__AVX512VL__)
        return _mm256_and_si256(_mm256_rolv_epi32(bytes, _mm256_set1_epi32((to - shift) & 31)), _mm256_set1_epi8(static_cast<char>(mask)));
#else
        return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bytes, shift), _mm256_set1_epi8(static_cast<char>(mask >> to))), to);
#endif
    }
    static I offsets(const I s[8], const int16_t* bsums) { return offset_sums(s, bsums); }
    static void store(F acc, float* out) { store_row_sums(acc, out); }
    static I zero() { return _mm256_setzero_si256(); }
    static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
    static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
    static I mul32(I a, I b) { return _mm256_mullo_epi32(a, b); }
    static I set32(int v) { return _mm256_set1_epi32(v); }
    static I srli32(I a, int n) { return _mm256_srli_epi32(a, n); }
    // The eight-row forms (lane k = row k): a group's eight f16, eight bytes as int32 lanes, the store.
    static F f16x8(const uint8_t* p0, const uint8_t*) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0))); }
    static I u8x8_epi32(const uint8_t* p0, const uint8_t*) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0))); }
    static void store_lanes(F acc, float* out) { _mm256_storeu_ps(out, acc); }
    // acc + each lane's exact sum of u (|v|) times y with v's sign moved onto y
    static I signed_dot_acc(I acc, I u, I v, I y) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
        return _mm256_dpbusd_epi32(acc, u, _mm256_sign_epi8(y, v));
#else
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(y, v)), _mm256_set1_epi16(1)));
#endif
    }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    // acc + each lane's exact sum of u (unsigned) times y: no saturation at any u
    static I unsigned_dot_acc(I acc, I u, I y) { return _mm256_dpbusd_epi32(acc, u, y); }
#endif
    static I slli32(I a, int n) { return _mm256_slli_epi32(a, n); }
    static I add8(I a, I b) { return _mm256_add_epi8(a, b); }
    static I mul16(I a, I b) { return _mm256_mullo_epi16(a, b); }
    static I table16(const int8_t* t) { return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))); }
    static I lookup(I table, I idx) { return _mm256_shuffle_epi8(table, idx); }
    static I select(I bit01, I if0, I if1) { return _mm256_blendv_epi8(if0, if1, _mm256_cmpeq_epi8(bit01, _mm256_set1_epi8(1))); }
    static I abs8(I a) { return _mm256_sign_epi8(a, a); }
    // each lane's extra byte of 8 (lane j: byte j) repeated over its four bytes
    static I lane_bytes(const uint8_t* p0, const uint8_t*) {
        const __m256i e = _mm256_broadcastsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p0)));
        return _mm256_shuffle_epi8(e,
                                   _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7));
    }
    static I and_(I a, I b) { return _mm256_and_si256(a, b); }
    static I or_(I a, I b) { return _mm256_or_si256(a, b); }
    static I srli16(I a, int n) { return _mm256_srli_epi16(a, n); }
    static I slli16(I a, int n) { return _mm256_slli_epi16(a, n); }
    static I sub16(I a, I b) { return _mm256_sub_epi16(a, b); }
    static I set8(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }
    static I set16(int v) { return _mm256_set1_epi16(static_cast<int16_t>(v)); }
    static I low16(I a) { return _mm256_srai_epi32(_mm256_slli_epi32(a, 16), 16); }  // each int32's low int16, sign-extended
    static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
    static F set1(float x) { return _mm256_set1_ps(x); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    // Lane j's exact sum of four 4-byte fields: q[f] (unsigned, at most kMax) times the activations' dword f of
    // its half; scaled_dot4 times the lane's int16 scale (scales: int16 pairs), also exact.
    template <int kMax>
    static I dot4(const I q[4], I y) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
        I s = _mm256_setzero_si256();
        for (int f = 0; f < 4; ++f) s = _mm256_dpbusd_epi32(s, q[f], _mm256_shuffle_epi32(y, 0x55 * f));
        return s;
#else
        return scaled_dot4<kMax>(q, y, _mm256_set1_epi16(1));
#endif
    }
    template <int kMax>
    static I scaled_dot4(const I q[4], I y, I scales) {
        I yf[4];
        for (int f = 0; f < 4; ++f) yf[f] = _mm256_shuffle_epi32(y, 0x55 * f);
        return scaled_sum4<kMax>(q, yf, scales);
    }
    // Signed values v (|v| <= 127, u = |v|): v's sign moved onto the activations.
    static I signed_scaled_dot4(const I u[4], const I v[4], I y, I scales) {
        I yf[4];
        for (int f = 0; f < 4; ++f) yf[f] = _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0x55 * f), v[f]);
        return scaled_sum4<127>(u, yf, scales);
    }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    // With VPDPBUSD (no saturation) values + 128 multiply unsigned: unsigned_scaled_dot4 is the lane's exact sum
    // over the four fields of u (value + 128) times the activations' dword f of its half, plus minus_offset
    // (neg_offset128: -128 times that half's 16 activations), times the lane's int16 scale: signed_scaled_dot4's
    // integers without the sign steps.
    static constexpr bool kUnsignedDot = true;
    static I unsigned_scaled_dot4(const I u[4], I y, I minus_offset, I scales32) {
        I s = minus_offset;
        for (int f = 0; f < 4; ++f) s = _mm256_dpbusd_epi32(s, u[f], _mm256_shuffle_epi32(y, 0x55 * f));
        return _mm256_mullo_epi32(s, scales32);
    }
#else
    static constexpr bool kUnsignedDot = false;  // values + 128 would saturate PMADDUBSW's pair sums
    static I unsigned_scaled_dot4(const I u[4], I, I, I) { return u[0]; }
#endif
    // neg_offsets128's eight lanes for a sub-block: -128 times its first 16 activations (lanes 0..3), its second
    // 16 (lanes 4..7)
    static I neg_offsets(const int32_t* p) { return load32(p); }
    // four signed bytes as the int32 scales of lanes 0..3 and 4..7
    static I scales32(const int8_t* p0, const int8_t*) { return _mm256_cvtepi8_epi32(_mm_set1_epi32(u32_of(p0))); }
    template <int kMax>
    static I scaled_sum4(const I q[4], const I yf[4], I scales) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
        I s = _mm256_setzero_si256();
        for (int f = 0; f < 4; ++f) s = _mm256_dpbusd_epi32(s, q[f], yf[f]);
        return _mm256_mullo_epi32(s, low16(scales));
#else
        I p[4];
        for (int f = 0; f < 4; ++f) p[f] = _mm256_maddubs_epi16(q[f], yf[f]);
        if constexpr (4 * 2 * 127 * kMax <= 32767) {  // the four fields' pair sums fit int16
            return _mm256_madd_epi16(scales, _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])));
        } else if constexpr (2 * 2 * 127 * kMax <= 32767) {  // two fields' do
            return _mm256_add_epi32(_mm256_madd_epi16(scales, _mm256_add_epi16(p[0], p[1])), _mm256_madd_epi16(scales, _mm256_add_epi16(p[2], p[3])));
        } else {
            I s = _mm256_setzero_si256();
            for (int f = 0; f < 4; ++f) s = _mm256_add_epi32(s, _mm256_madd_epi16(scales, p[f]));
            return s;
        }
#endif
    }
};
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
struct Lanes8 {
    using I = __m512i;
    using F = __m512;
    static constexpr int kGroups = 2;
    static I join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }
    static I bytes32(const uint8_t* p0, const uint8_t* p1) { return join(load32(p0), load32(p1)); }
    static I bytes16(const uint8_t* p0, const uint8_t* p1) { return join(Lanes4::bytes16(p0, p0), Lanes4::bytes16(p1, p1)); }
    static I pairs(const uint8_t* p0, const uint8_t* p1) { return join(paired_bytes(p0), paired_bytes(p1)); }
    static F rows_f16(const uint8_t* p0, const uint8_t* p1) { return join_ps(Lanes4::rows_f16(p0, p0), Lanes4::rows_f16(p1, p1)); }
    static I pairs_s8(const uint8_t* p0, const uint8_t* p1) { return join(Lanes4::pairs_s8(p0, p0), Lanes4::pairs_s8(p1, p1)); }
    static I pairs4(const uint8_t* p0, const uint8_t* p1) { return join(Lanes4::pairs4(p0, p0), Lanes4::pairs4(p1, p1)); }
    static F join_ps(__m256 a, __m256 b) {
        return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b), 1));
    }
    static F bytes_ps(const uint8_t* lo0, const uint8_t* hi0, const uint8_t* lo1, const uint8_t* hi1) {
        return join_ps(Lanes4::bytes_ps(lo0, hi0, lo0, hi0), Lanes4::bytes_ps(lo1, hi1, lo1, hi1));
    }
    static F halves_ps(float lo, float hi) {
        const __m256 h = Lanes4::halves_ps(lo, hi);
        return join_ps(h, h);
    }
    static F bytes_ps_s8(const uint8_t* lo0, const uint8_t* hi0, const uint8_t* lo1, const uint8_t* hi1) {
        return join_ps(Lanes4::bytes_ps_s8(lo0, hi0, lo0, hi0), Lanes4::bytes_ps_s8(lo1, hi1, lo1, hi1));
    }
    // Lanes4's, both groups' products at once: 32 int16 products per group (VPMULLW), then per i one VPERMT2W picks
    // the sixteen lanes' and one conversion makes them floats (the same values: the products are exact either way)
    static void byte_products_ps(const int8_t (*a)[32], const int8_t (*b)[32], int q1, F P[4]) {
        __m512i prod[2];
        for (int q = 0; q < 2; ++q) {
            const int g = q ? q1 : 0;
            prod[q] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(load32(a[g])), _mm512_cvtepi8_epi16(load32(b[g])));
        }
        for (int i = 0; i < 4; ++i) {
            // lane k < 8: group 0's product 4i + k (k < 4) or 16 + 4i + k - 4; lanes 8..15 the same of group 1 (+ 32)
            alignas(64) static constexpr auto kPick = [] {
                std::array<std::array<int16_t, 32>, 4> t{};
                for (int ii = 0; ii < 4; ++ii)
                    for (int k = 0; k < 16; ++k)
                        t[ii][k] = static_cast<int16_t>((k >= 8 ? 32 : 0) + (k % 8 < 4 ? 4 * ii + k % 4 : 16 + 4 * ii + k % 4));
                return t;
            }();
            const __m512i picked = _mm512_permutex2var_epi16(prod[0], _mm512_load_si512(kPick[i].data()), prod[1]);
            P[i] = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(picked)));
        }
    }
    static I pairs4_s8(const uint8_t* p0, const uint8_t* p1) { return join(Lanes4::pairs4_s8(p0, p0), Lanes4::pairs4_s8(p1, p1)); }
    static void store_scaled(F acc, const float* d0, const float* d1, float* out) {
        Lanes4::store_scaled(_mm512_castps512_ps256(acc), d0, d0, out);
        Lanes4::store_scaled(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)), d1, d1, out + 4);
    }
    static I activations(const int8_t* y) { return _mm512_broadcast_i64x4(load32(y)); }
    static I bit_of(I bytes, int shift_lo, int shift_hi) {
        const __m512i sh = _mm512_setr_epi32(shift_lo, shift_lo, shift_lo, shift_lo, shift_hi, shift_hi, shift_hi, shift_hi, shift_lo, shift_lo,
                                             shift_lo, shift_lo, shift_hi, shift_hi, shift_hi, shift_hi);
        return _mm512_and_si512(_mm512_srlv_epi32(bytes, sh), _mm512_set1_epi8(1));
    }
    static I bits_to(I bytes, int shift, int to, int mask) {  // (as Lanes4's)
        return _mm512_and_si512(_mm512_rolv_epi32(bytes, _mm512_set1_epi32((to - shift) & 31)), _mm512_set1_epi8(static_cast<char>(mask)));
    }
    static I bit_at(I bytes, int shift_lo, int shift_hi, int to) {  // (as Lanes4's)
        const int lo = (to - shift_lo) & 31, hi = (to - shift_hi) & 31;
        const __m512i r = _mm512_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi, lo, lo, lo, lo, hi, hi, hi, hi);
        return _mm512_and_si512(_mm512_rolv_epi32(bytes, r), _mm512_set1_epi8(static_cast<char>(1 << to)));
    }
    static I offsets(const I s[8], const int16_t* bsums) {
        __m256i lo[8], hi[8];
        for (int i = 0; i < 8; ++i) lo[i] = _mm512_castsi512_si256(s[i]), hi[i] = _mm512_extracti64x4_epi64(s[i], 1);
        return join(offset_sums(lo, bsums), offset_sums(hi, bsums));
    }
    static void store(F acc, float* out) {  // the second group's rows follow the first's
        store_row_sums(_mm512_castps512_ps256(acc), out);
        store_row_sums(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)), out + 4);
    }
    static I zero() { return _mm512_setzero_si512(); }
    static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
    static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
    static I mul32(I a, I b) { return _mm512_mullo_epi32(a, b); }
    static I set32(int v) { return _mm512_set1_epi32(v); }
    static I srli32(I a, int n) { return _mm512_srli_epi32(a, static_cast<unsigned>(n)); }
    static F f16x8(const uint8_t* p0, const uint8_t* p1) { return join_ps(Lanes4::f16x8(p0, p0), Lanes4::f16x8(p1, p1)); }
    static I u8x8_epi32(const uint8_t* p0, const uint8_t* p1) { return join(Lanes4::u8x8_epi32(p0, p0), Lanes4::u8x8_epi32(p1, p1)); }
    static void store_lanes(F acc, float* out) { _mm512_storeu_ps(out, acc); }
    static I signed_dot_acc(I acc, I u, I v, I y) {
        return _mm512_dpbusd_epi32(acc, u, _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(v), _mm512_setzero_si512(), y));
    }
    static I unsigned_dot_acc(I acc, I u, I y) { return _mm512_dpbusd_epi32(acc, u, y); }
    static I slli32(I a, int n) { return _mm512_slli_epi32(a, static_cast<unsigned>(n)); }
    static I add8(I a, I b) { return _mm512_add_epi8(a, b); }
    static I mul16(I a, I b) { return _mm512_mullo_epi16(a, b); }
    static I table16(const int8_t* t) { return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))); }
    static I lookup(I table, I idx) { return _mm512_shuffle_epi8(table, idx); }
    static I select(I bit01, I if0, I if1) { return _mm512_mask_blend_epi8(_mm512_test_epi8_mask(bit01, bit01), if0, if1); }
    static I abs8(I a) { return _mm512_abs_epi8(a); }
    static I lane_bytes(const uint8_t* p0, const uint8_t* p1) { return join(Lanes4::lane_bytes(p0, p0), Lanes4::lane_bytes(p1, p1)); }
    static I and_(I a, I b) { return _mm512_and_si512(a, b); }
    static I or_(I a, I b) { return _mm512_or_si512(a, b); }
    static I srli16(I a, int n) { return _mm512_srli_epi16(a, static_cast<unsigned>(n)); }
    static I slli16(I a, int n) { return _mm512_slli_epi16(a, static_cast<unsigned>(n)); }
    static I sub16(I a, I b) { return _mm512_sub_epi16(a, b); }
    static I set8(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }
    static I set16(int v) { return _mm512_set1_epi16(static_cast<int16_t>(v)); }
    static I low16(I a) { return _mm512_srai_epi32(_mm512_slli_epi32(a, 16), 16); }
    static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
    static F set1(float x) { return _mm512_set1_ps(x); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    template <int>
    static I dot4(const I q[4], I y) {
        I s = _mm512_setzero_si512();
        for (int f = 0; f < 4; ++f) s = _mm512_dpbusd_epi32(s, q[f], _mm512_shuffle_epi32(y, static_cast<_MM_PERM_ENUM>(0x55 * f)));
        return s;
    }
    template <int kMax>
    static I scaled_dot4(const I q[4], I y, I scales) {
        return _mm512_mullo_epi32(dot4<kMax>(q, y), low16(scales));
    }
    static I signed_scaled_dot4(const I u[4], const I v[4], I y, I scales) {
        I s = _mm512_setzero_si512();
        for (int f = 0; f < 4; ++f) {
            const I yf = _mm512_shuffle_epi32(y, static_cast<_MM_PERM_ENUM>(0x55 * f));
            // y where v >= 0, -y where v < 0 (where v = 0, u = 0: the product is 0 either way)
            s = _mm512_dpbusd_epi32(s, u[f], _mm512_mask_sub_epi8(yf, _mm512_movepi8_mask(v[f]), _mm512_setzero_si512(), yf));
        }
        return _mm512_mullo_epi32(s, low16(scales));
    }
    static constexpr bool kUnsignedDot = true;  // as Lanes4's
    static I unsigned_scaled_dot4(const I u[4], I y, I minus_offset, I scales32) {
        I s = minus_offset;
        for (int f = 0; f < 4; ++f) s = _mm512_dpbusd_epi32(s, u[f], _mm512_shuffle_epi32(y, static_cast<_MM_PERM_ENUM>(0x55 * f)));
        return _mm512_mullo_epi32(s, scales32);
    }
    static I neg_offsets(const int32_t* p) { return _mm512_broadcast_i64x4(load32(p)); }
    static I scales32(const int8_t* p0, const int8_t* p1) {
        const int a = u32_of(p0), b = u32_of(p1);
        return _mm512_cvtepi8_epi32(_mm_setr_epi32(a, a, b, b));
    }
};
#endif

// -128 times each 16 activations' sum, as Lanes4::neg_offsets reads them: per token and sub-block of 32, the first
// 16's four times, then the second 16's (only where the products run unsigned).
template <class Block>  // the activations' blocks of 256 (Q8_K32, Q8_K)
void neg_offsets128(int64_t n, const uint8_t* act, size_t act_bytes, int n_tok, std::vector<int32_t>& out) {
    out.resize(static_cast<size_t>(n_tok * (n / 32) * 8));
    for (int t = 0; t < n_tok; ++t) {
        const auto* y = reinterpret_cast<const Block*>(act + t * act_bytes);
        for (int64_t b = 0; b < n / 32; ++b)
            for (int h = 0; h < 2; ++h) {
                int32_t sum = 0;
                for (int e = 0; e < 16; ++e) sum += y[b / 8].qs[32 * (b % 8) + 16 * h + e];
                for (int k = 0; k < 4; ++k) out[static_cast<size_t>((t * (n / 32) + b) * 8 + 4 * h + k)] = -128 * sum;
            }
    }
}

// Every group of `group` rows: two at a time on AVX-512 (Lanes8), the odd last one (and every one on AVX2) alone
// (Lanes4); run.template operator()<V>(g) computes the groups from g.
template <int Group, class Run>
void each_group_pair(int64_t rows, const Run& run) {
    int64_t g = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (; g + 2 <= rows / Group; g += 2) run.template operator()<Lanes8>(g);
#endif
    for (; g < rows / Group; ++g) run.template operator()<Lanes4>(g);
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

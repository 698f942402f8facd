// AVX2 kernels for ik_llama.cpp's Q2_K_R4 and Q3_K_R4 against Q8_K, a group of four rows at a time in ik's lanes
// (lane k: row k's first 16 of each 32 weights, lane 4 + k: its second 16), with the bits of ik_ref_r4_low_k.cpp:
// the mins or the offset through the sums of 16 first, then one FMA per sub-block with the lanes' float scales.
// The AVX-512 translation unit runs two groups per 512-bit register. Included by ik_r4_simd.h.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_k_r4_simd.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {
namespace ikr {

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
    static I activations(const int8_t* y) { return load32(y); }
    static I bit_of(I bytes, int shift_lo, int shift_hi) { return bit_of_bytes(bytes, shift_lo, shift_hi); }
    static I offsets(const I s[8], const int16_t* bsums) { return offset_sums(s, bsums); }
    static void store(F acc, float* out) { store_row_sums(acc, out); }
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
    // Lane j's exact sum of four 4-byte fields: q[f] (unsigned) times the activations' dword f of its half.
    static I dot4(const I q[4], I y) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
        I s = _mm256_setzero_si256();
        for (int f = 0; f < 4; ++f) s = _mm256_dpbusd_epi32(s, q[f], _mm256_shuffle_epi32(y, 0x55 * f));
        return s;
#else
        I p = _mm256_setzero_si256();  // quants <= 7: the four fields' pair sums fit int16 (<= 7,112)
        for (int f = 0; f < 4; ++f) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q[f], _mm256_shuffle_epi32(y, 0x55 * f)));
        return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
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
    static F rows_f16(const uint8_t* p0, const uint8_t* p1) {
        return _mm512_castpd_ps(
            _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(Lanes4::rows_f16(p0, p0))), _mm256_castps_pd(Lanes4::rows_f16(p1, p1)), 1));
    }
    static I activations(const int8_t* y) { return _mm512_broadcast_i64x4(load32(y)); }
    static I bit_of(I bytes, int shift_lo, int shift_hi) {
        const __m512i sh = _mm512_setr_epi32(shift_lo, shift_lo, shift_lo, shift_lo, shift_hi, shift_hi, shift_hi, shift_hi, shift_lo, shift_lo,
                                             shift_lo, shift_lo, shift_hi, shift_hi, shift_hi, shift_hi);
        return _mm512_and_si512(_mm512_srlv_epi32(bytes, sh), _mm512_set1_epi8(1));
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
    static I dot4(const I q[4], I y) {
        I s = _mm512_setzero_si512();
        for (int f = 0; f < 4; ++f) s = _mm512_dpbusd_epi32(s, q[f], _mm512_shuffle_epi32(y, static_cast<_MM_PERM_ENUM>(0x55 * f)));
        return s;
    }
};
#endif

// Q2_K_R4 / Q3_K_R4 (Three) for V::kGroups groups from group g, NY tokens per pass (Lone: a lone column's scale
// products).
template <class V, bool Three, bool Lone, int NY>
void low_k_r4_groups(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    using I = typename V::I;
    using F = typename V::F;
    constexpr size_t kBlock = Three ? sizeof(ik::BlockQ3_K_R4) : sizeof(ik::BlockQ2_K_R4);
    const ik::BlockQ8K* y[NY];
    for (int t = 0; t < NY; ++t) y[t] = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes);
    const uint8_t* group0 = w + 4 * g * row_bytes;
    const uint8_t* group1 = V::kGroups > 1 ? group0 + 4 * row_bytes : group0;
    F acc[NY];
    for (auto& a : acc) a = V::set1(0.f);
    for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
        const uint8_t* b0 = group0 + ibl * kBlock;
        const uint8_t* b1 = group1 + ibl * kBlock;
        const F dd = V::rows_f16(b0, b1);
        // per sub-block the lanes' scales (int16 pairs, for the sums of 16) and, Q2, their mins
        I iscales[8], imins[8];
        for (int ib = 0; ib < 8; ++ib) {
            if constexpr (Three) {
                constexpr size_t kL = offsetof(ik::BlockQ3_K_R4, scales_l), kH = offsetof(ik::BlockQ3_K_R4, scales_h);
                const size_t l = kL + 8 * (ib % 4), h = kH + 8 * (ib % 2);
                const I low = V::and_(V::srli16(V::pairs(b0 + l, b1 + l), 4 * (ib / 4)), V::set16(0xF));
                const I high = V::and_(V::srli16(V::pairs(b0 + h, b1 + h), 2 * (ib / 2)), V::set16(3));
                iscales[ib] = V::sub16(V::or_(low, V::slli16(high, 4)), V::set16(32));
            } else {
                const size_t c = offsetof(ik::BlockQ2_K_R4, scales) + 8 * ib;
                const I code = V::pairs(b0 + c, b1 + c);
                iscales[ib] = V::and_(code, V::set16(0xF));
                imins[ib] = V::srli16(code, 4);
            }
        }
        F fscales[8];  // Lone: d * y.d comes first, so the lanes' scales stay apart from d
        for (int ib = 0; ib < 8; ++ib) {
            const F s = V::cvt(V::low16(iscales[ib]));
            fscales[ib] = Lone ? s : V::mul(dd, s);
        }
        // the mins' (Q2: -dmin) or the offset's (Q3: -4 d) factor before y.d
        const F cm0 = Three ? V::mul(dd, V::set1(-4.f)) : V::mul(V::set1(-1.f), V::rows_f16(b0 + 8, b1 + 8));
        F D[NY];
        for (int t = 0; t < NY; ++t) {
            const F yd = V::set1(y[t][ibl].d);
            if constexpr (Lone) D[t] = V::mul(dd, yd);
            const F cm = Three && Lone ? V::mul(D[t], V::set1(-4.f)) : V::mul(cm0, yd);
            acc[t] = V::fma(cm, V::cvt(V::offsets(Three ? iscales : imins, y[t][ibl].bsums)), acc[t]);
        }
        constexpr size_t kQs = Three ? offsetof(ik::BlockQ3_K_R4, qs) : offsetof(ik::BlockQ2_K_R4, qs);
        for (int ib = 0; ib < 8; ++ib) {
            // four 2-bit fields (weights 4f + i of each half), Q3 with its third bits
            const I bits = V::bytes32(b0 + kQs + 32 * ib, b1 + kQs + 32 * ib);
            I q[4];
            for (int f = 0; f < 4; ++f) q[f] = V::and_(V::srli16(bits, 2 * f), V::set8(3));
            if constexpr (Three) {
                constexpr size_t kQh = offsetof(ik::BlockQ3_K_R4, qh);
                const I hb = V::bytes16(b0 + kQh + 16 * ib, b1 + kQh + 16 * ib);
                for (int f = 0; f < 4; ++f) q[f] = V::or_(q[f], V::slli16(V::bit_of(hb, f, f + 4), 2));
            }
            for (int t = 0; t < NY; ++t) {
                const F c = Lone ? V::mul(D[t], fscales[ib]) : V::mul(fscales[ib], V::set1(y[t][ibl].d));
                acc[t] = V::fma(c, V::cvt(V::dot4(q, V::activations(y[t][ibl].qs + 32 * ib))), acc[t]);
            }
        }
    }
    for (int t = 0; t < NY; ++t) V::store(acc[t], out + t * out_stride + 4 * g);
}

template <bool Three, bool Lone, int NY>
void low_k_r4_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    int64_t g = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (; g + 2 <= rows / 4; g += 2) low_k_r4_groups<Lanes8, Three, Lone, NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
#endif
    for (; g < rows / 4; ++g) low_k_r4_groups<Lanes4, Three, Lone, NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
}

}  // namespace ikr
}  // namespace
}  // namespace moe::kernels

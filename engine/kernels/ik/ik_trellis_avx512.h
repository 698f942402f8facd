// The AVX-512 decoder of ik_llama.cpp's trellis types (IQ1_KT ... IQ4_KT): sixteen weights per 512-bit register,
// a group's index spread to its lanes by one VPERMD, the four masked LCG bytes summed by one VPDPBUSD, packed to
// bytes. Included by ik_trellis_avx512.cpp only (AVX-512 F/BW/VL + VNNI flags).
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_x4_simd.h"

namespace moe::kernels {
namespace {
namespace ikx {

// Lane j of a value register: ka^(j % G + 1), G weights per group (IQ4_KT: 4, the others 8).
template <int G>
inline __m512i ka_powers512() {
    alignas(64) static constexpr auto kPowers = [] {
        std::array<uint32_t, 16> lanes{};
        for (int j = 0; j < 16; ++j) lanes[j] = kKaPowers[j % G];
        return lanes;
    }();
    return _mm512_load_si512(kPowers.data());
}

// Value register m of an index register (sixteen groups' indices): lane j takes group (16 / G) m + j / G.
template <int G>
inline __m512i spread(int m) {
    alignas(64) static constexpr auto kSpread = [] {
        std::array<std::array<uint32_t, 16>, G> s{};
        for (int k = 0; k < G; ++k)
            for (int j = 0; j < 16; ++j) s[k][j] = static_cast<uint32_t>((16 / G) * k + j / G);
        return s;
    }();
    return _mm512_load_si512(kSpread[m].data());
}

// 64 weights in element order from an index register, value registers first..first + 3. Unsigned: the byte sums
// (weight + 126); signed: the weights themselves.
template <int G, bool Signed>
inline __m512i weights64(__m512i idx, int first) {
    const __m512i ka = ka_powers512<G>(), mask = _mm512_set1_epi32(0x3f3f3f3f), ones = _mm512_set1_epi8(1);
    const __m512i init = _mm512_set1_epi32(Signed ? -126 : 0);
    __m512i r[4];
    for (int k = 0; k < 4; ++k)
        r[k] = _mm512_dpbusd_epi32(init, _mm512_and_si512(_mm512_mullo_epi32(_mm512_permutexvar_epi32(spread<G>(first + k), idx), ka), mask), ones);
    // the packs keep 128-bit lanes: lane L ends up holding register k's values 4L..4L+3 in dword k, so a 4x4 dword
    // transpose restores element order
    const __m512i a = _mm512_packs_epi32(r[0], r[1]), b = _mm512_packs_epi32(r[2], r[3]);
    const __m512i p = Signed ? _mm512_packs_epi16(a, b) : _mm512_packus_epi16(a, b);
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), p);
}

// Sixteen bytes as sixteen int32.
inline __m512i bytes16_u32(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// One superblock's group indices (offsets added) in index registers of sixteen groups each (G = 8: two, G = 4:
// four) and its 8 block scales.
template <GgmlType T>
struct TrellisIndices {
    static constexpr int kGroup = T == GgmlType::IQ4_KT ? 4 : 8, kRegisters = 64 / kGroup;
    __m512i idx[kRegisters];
    alignas(32) int scale[8];
    void load(const uint8_t* blk) {
        trellis_block_scales<T>(blk, scale);
        const __m512i m15 = _mm512_set1_epi32(0xF), off4096 = _mm512_set1_epi32(4096);
        if constexpr (T == GgmlType::IQ1_KT) {
            const auto& x = *reinterpret_cast<const ik::BlockIQ1_KT*>(blk);
            const __m128i sh = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.sh));
            // group g: ql[g] | (qh nibble << 8) | (bit 4 + g % 4 of sh[g / 4]) << 12, + 4096
            const __m512i sh32 = _mm512_cvtepu8_epi32(sh), qh = bytes16_u32(x.qh);
            const __m512i bit_shift = _mm512_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);
            for (int h = 0; h < 2; ++h) {
                const __m512i group = _mm512_add_epi32(_mm512_set1_epi32(16 * h),
                                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
                const __m512i sh_of_group = _mm512_permutexvar_epi32(_mm512_srli_epi32(group, 2), sh32);
                const __m512i bit = _mm512_and_si512(_mm512_srlv_epi32(sh_of_group, bit_shift), _mm512_set1_epi32(1));
                const __m512i hi = h == 0 ? _mm512_and_si512(qh, m15) : _mm512_srli_epi32(qh, 4);
                idx[h] = _mm512_add_epi32(
                    _mm512_or_si512(_mm512_or_si512(bytes16_u32(x.ql + 16 * h), _mm512_slli_epi32(hi, 8)), _mm512_slli_epi32(bit, 12)), off4096);
            }
        } else if constexpr (T == GgmlType::IQ2_KT || T == GgmlType::IQ3_KT) {
            for (int h = 0; h < 2; ++h) idx[h] = _mm512_add_epi32(_mm512_cvtepu16_epi32(load32(blk + 4 + 32 * h)), off4096);
        } else {
            const auto& x = *reinterpret_cast<const ik::BlockIQ4_KT*>(blk);
            const auto* ql = reinterpret_cast<const uint8_t*>(x.qs + 8);
            const uint8_t* qh = ql + 64;
            const __m256i shb = load32(x.qs);
            const __m512i shb512 = _mm512_zextsi256_si512(shb);
            const __m512i sh_shift = _mm512_setr_epi32(8, 11, 14, 17, 20, 23, 26, 29, 8, 11, 14, 17, 20, 23, 26, 29);
            for (int k = 0; k < 4; ++k) {  // groups 16k..16k + 15: blocks 2k, 2k + 1
                const __m512i word = _mm512_permutexvar_epi32(_mm512_inserti64x4(_mm512_set1_epi32(2 * k), _mm256_set1_epi32(2 * k + 1), 1), shb512);
                const __m512i qh16 = bytes16_u32(qh + 16 * (k & 1));
                const __m512i hi = k < 2 ? _mm512_and_si512(qh16, m15) : _mm512_srli_epi32(qh16, 4);
                const __m512i sh = _mm512_and_si512(_mm512_srlv_epi32(word, sh_shift), _mm512_set1_epi32(7));
                // the block's offset: 4096, plus 32768 where its scale word's low bit is set
                const __m512i offset = _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(word, _mm512_set1_epi32(1)), 15), off4096);
                idx[k] = _mm512_add_epi32(
                    _mm512_or_si512(_mm512_or_si512(bytes16_u32(ql + 16 * k), _mm512_slli_epi32(hi, 8)), _mm512_slli_epi32(sh, 12)), offset);
            }
        }
    }
};

// One superblock's weights: w[k] = blocks 2k and 2k + 1 (unsigned, see above; IQ3_KT: |weight|, negative where
// neg[k] is set).
template <GgmlType T>
struct TrellisDec512 : TrellisIndices<T> {
    static constexpr bool kSigned = T == GgmlType::IQ3_KT;
    using Base = TrellisIndices<T>;
    __m512i w[4];
    __mmask64 neg[4];
    void decode(const uint8_t* blk) {
        Base::load(blk);
        for (int k = 0; k < 4; ++k) {
            if constexpr (Base::kGroup == 4) w[k] = weights64<4, false>(Base::idx[k], 0);
            else w[k] = weights64<8, kSigned>(Base::idx[k / 2], 4 * (k % 2));
        }
        if constexpr (kSigned) {  // element e's sign: bit e / 32 of qh[e % 32]
            const __m512i qh = _mm512_broadcast_i64x4(load32(reinterpret_cast<const ik::BlockIQ3_KT*>(blk)->qh));
            for (int k = 0; k < 4; ++k) {
                const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << 2 * k)),
                                                        _mm256_set1_epi8(static_cast<char>(1 << (2 * k + 1))), 1);
                neg[k] = _mm512_test_epi8_mask(qh, bits);
                w[k] = _mm512_abs_epi8(w[k]);
            }
        }
    }
};

// One superblock's weights as int8 in element order (ik's Q8_0_R8 conversion of a trellis row).
template <GgmlType T>
struct TrellisSigned512 : TrellisIndices<T> {
    using Base = TrellisIndices<T>;
    void decode_to(const uint8_t* blk, int8_t* out) {
        Base::load(blk);
        __m512i w[4];
        for (int k = 0; k < 4; ++k) {
            if constexpr (Base::kGroup == 4) w[k] = weights64<4, true>(Base::idx[k], 0);
            else w[k] = weights64<8, true>(Base::idx[k / 2], 4 * (k % 2));
        }
        if constexpr (T == GgmlType::IQ3_KT) {  // |weight|, negated where bit e / 32 of qh[e % 32] is set
            const __m512i qh = _mm512_broadcast_i64x4(load32(reinterpret_cast<const ik::BlockIQ3_KT*>(blk)->qh));
            for (int k = 0; k < 4; ++k) {
                const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << 2 * k)),
                                                        _mm256_set1_epi8(static_cast<char>(1 << (2 * k + 1))), 1);
                const __m512i a = _mm512_abs_epi8(w[k]);
                w[k] = _mm512_mask_sub_epi8(a, _mm512_test_epi8_mask(qh, bits), _mm512_setzero_si512(), a);
            }
        }
        for (int k = 0; k < 4; ++k) _mm512_storeu_si512(out + 64 * k, w[k]);
    }
};

}  // namespace ikx
}  // namespace
}  // namespace moe::kernels

// IQ2_KL's and IQ6_K's decoders for AVX-512 CPUs with VBMI (Ice Lake, Zen 4 and later), compiled with -mavx512vbmi and installed
// by fill_avx512_table only where the CPU has it. IQ2_KL stores one 5-bit index per two weights into a table of
// value pairs; without VBMI each group pair takes four 16-entry lookups, two blends and an interleave
// (ik_table_avx512.h). With it: the whole block's indices at once (VPMULTISHIFTQB brings each group's fifth bit
// from qh into place), then per group pair one VPERMI2B that spreads the indices to both weights of their pair
// and one VPERMB into the 64-byte table of first and second values. The same bytes as the generic decoder, so the
// same integer lanes and float steps (ik's AVX2 bits); the generic one stays the single-row dot, and the kernel
// tests compare the two.
#include <immintrin.h>

#include <array>

#include "engine/kernels/ik/ik_table_avx512.h"
#include "engine/kernels/kernels_internal.h"

namespace moe::kernels {
namespace {
namespace ikt {

// Per output byte j of lane p (qword j / 8 of that lane), the 8-bit window of its qword that puts bit 2p + odd of
// byte j % 8 at bit 4 (VPMULTISHIFTQB rotates within the qword, so windows may wrap).
alignas(64) constexpr auto kFifthBit = [] {
    std::array<std::array<uint8_t, 64>, 2> w{};
    for (int odd = 0; odd < 2; ++odd)
        for (int j = 0; j < 64; ++j) w[odd][j] = static_cast<uint8_t>((8 * (j % 8) + 2 * (j / 16) + odd - 4) & 63);
    return w;
}();
// Pair p's 64 bytes as the generic decoder lays them out: lanes 0 and 1 group 2p's pairs 0..7 and 8..15, lanes 2 and
// 3 group 2p + 1's, each pair's index twice (first value, then second: + 32, added after the spread). VPERMI2B's
// index bit 6 picks `high`.
alignas(64) constexpr auto kSpread = [] {
    std::array<std::array<uint8_t, 64>, 4> s{};
    for (int p = 0; p < 4; ++p)
        for (int b = 0; b < 64; ++b) {
            const int lane = b / 16, pair = (b % 16) / 2;
            s[p][b] = static_cast<uint8_t>((lane >= 2 ? 64 : 0) + 16 * p + 8 * (lane % 2) + pair);
        }
    return s;
}();

struct Dec512VbmiIQ2KL : Dec<GgmlType::IQ2_KL> {
    explicit Dec512VbmiIQ2KL(const uint8_t* row) : Dec(row) {
        alignas(64) uint8_t t[64];
        _mm_store_si128(reinterpret_cast<__m128i*>(t), first[0]);
        _mm_store_si128(reinterpret_cast<__m128i*>(t + 16), first[1]);
        _mm_store_si128(reinterpret_cast<__m128i*>(t + 32), second[0]);
        _mm_store_si128(reinterpret_cast<__m128i*>(t + 48), second[1]);
        table = _mm512_load_si512(t);
    }
    __m512i table;      // the pairs' first values (+64) at 0..31, their second values at 32..63
    __m512i low, high;  // 5-bit indices: 128-bit lane p holds group 2p's sixteen (low), group 2p + 1's (high)
    void block(const uint8_t* blk) {
        Dec::block(blk);
        // qs[16p + k]: low nibble the index of group 2p's pair k, high nibble group 2p + 1's; the fifth bit of
        // group g's pair k is bit g of qh[k]
        const __m512i q = load64(x->qs), m15 = _mm512_set1_epi8(0x0F), m16 = _mm512_set1_epi8(0x10);
        const __m512i qh = _mm512_broadcast_i32x4(load16(x->qh));
        constexpr int kOrAnd = 0xF8;  // A | (B & C)
        const __m512i w0 = _mm512_load_si512(kFifthBit[0].data()), w1 = _mm512_load_si512(kFifthBit[1].data());
        low = _mm512_ternarylogic_epi32(_mm512_and_si512(q, m15), _mm512_multishift_epi64_epi8(w0, qh), m16, kOrAnd);
        high = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(q, 4), m15), _mm512_multishift_epi64_epi8(w1, qh), m16, kOrAnd);
    }
    // Pair p's 64 bytes as the generic decoder lays them out: lanes 0 and 1 group 2p's pairs 0..7 and 8..15, lanes
    // 2 and 3 group 2p + 1's, each pair's index twice (first value, then second: + 32).
    __m512i values2(int p) const {
        const __m512i idx = _mm512_permutex2var_epi8(low, _mm512_load_si512(kSpread[p].data()), high);
        return _mm512_permutexvar_epi8(_mm512_or_si512(idx, _mm512_set1_epi16(0x2000)), table);
    }
};

// IQ6_K: a 6-bit index (a nibble from qs, two bits from qh) into the first 64 entries of the IQ6 table. Without
// VBMI that is four 16-entry lookups and three blends per group pair; with it one VPERMB into the magnitudes, and
// the sign from the index (the table is negative exactly below kIq6FirstNonNegative).
constexpr int kIq6FirstNonNegative = [] {
    int i = 0;
    while (i < 64 && ik::kIq6nlValues[i] < 0) ++i;
    return i;
}();
static_assert([] {
    for (int i = kIq6FirstNonNegative; i < 64; ++i)
        if (ik::kIq6nlValues[i] < 0) return false;
    return true;
}());
alignas(64) constexpr auto kIq6Magnitudes = [] {
    std::array<int8_t, 64> m{};
    for (int i = 0; i < 64; ++i) m[i] = static_cast<int8_t>(ik::kIq6nlValues[i] < 0 ? -ik::kIq6nlValues[i] : ik::kIq6nlValues[i]);
    return m;
}();

struct Dec512VbmiIQ6K : Dec<GgmlType::IQ6_K> {
    using Dec::Dec;
    const __m512i magnitudes = _mm512_load_si512(kIq6Magnitudes.data());
    const __m512i values = _mm512_loadu_si512(ik::kIq6nlValues);
    // Groups 2p and 2p + 1: the nibbles of qs[32p + j] (low, high), and bits b, b + 1 (group 2p) and b + 2, b + 3
    // (group 2p + 1) of qh[32 (p / 2) + j], b = 4 (p % 2), moved to bits 4 and 5 (16-bit shifts: the bits read
    // never cross a byte).
    __m512i index2(int p) const {
        const __m512i nib = nibble_half_pair(x->qs, p), qh = broadcast32(x->qh + 32 * (p / 2));
        const __m512i high = p % 2 ? _mm512_srlv_epi16(qh, half_shifts<0, 2>()) : _mm512_sllv_epi16(qh, half_shifts<4, 2>());
        return _mm512_ternarylogic_epi32(nib, high, _mm512_set1_epi8(0x30), 0xF8);  // A | (B & C)
    }
    __m512i values2(int p) const { return _mm512_permutexvar_epi8(index2(p), values); }
    __m512i magnitudes2(int p, __mmask64& negative) const {
        const __m512i idx = index2(p);
        negative = _mm512_cmplt_epu8_mask(idx, _mm512_set1_epi8(kIq6FirstNonNegative));
        return _mm512_permutexvar_epi8(idx, magnitudes);
    }
};

}  // namespace ikt
}  // namespace

void add_ik_table_kernels_vbmi(KernelTable& t) {
    constexpr int kl = type_slot(GgmlType::IQ2_KL), k6 = type_slot(GgmlType::IQ6_K);
    t.dot_rows[kl] = ikt::dot_rows_of_table<ikt::Dec512VbmiIQ2KL, ikt::Pairs512>;
    t.tile[kl] = ikt::tile_of_paired<ikt::Dec512VbmiIQ2KL, ikt::Pairs512>;
    t.dot_rows[k6] = ikt::dot_rows_of_table<ikt::Dec512VbmiIQ6K, ikt::Pairs512>;
    t.tile[k6] = ikt::tile_of_paired<ikt::Dec512VbmiIQ6K, ikt::Pairs512>;
}

}  // namespace moe::kernels

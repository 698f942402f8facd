// SIMD dot products of the 32-weight formats and the ternary types for the AVX2 and AVX-512 tables (the K-quants
// are in kquant_simd.h, the i-quants in iquants_simd.h). Each kernel builds
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
#include <type_traits>

#include "engine/kernels/blocks.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/quant_decode.h"
#include "engine/kernels/simd_common.h"
#include "engine/kernels/tile_simd.h"

namespace moe::kernels {
namespace {

// ---- float accumulation (kernels_ref_quants.cpp's LaneAcc) ----

struct LaneAccV {
    __m256 acc = _mm256_setzero_ps();
    void add(__m256i lanes, float d) { acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc); }
    float sum() const { return hsum_float_8(acc); }
};

// ---- 32-weight blocks ----

inline uint32_t qh32(const uint8_t* qh) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return h;
}

// 32-weight blocks as step kernels (tile_simd.h): vec_dot's eight float lanes, plus for Q4_1/Q5_1 the mins'
// products summed in a plain float (m * s, then +=, as ggml's C code does).
template <class B, class A>
struct Block32Step {
    using Block = B;
    using Act = A;
    static constexpr int64_t kBlockElems = 32;
    struct State {
        __m256 acc;
        float summs;
    };
    static State init() { return {_mm256_setzero_ps(), 0.f}; }
    static void add(State& s, __m256i lanes, float d) { s.acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), s.acc); }
    static float finish(const State& s) { return hsum_float_8(s.acc) + s.summs; }
};

struct Q4_1Step : Block32Step<BlockQ4_1, BlockQ8_1> {
    static void step(State& s, const BlockQ4_1& x, const BlockQ8_1& y) {
        s.summs += h2f(x.m) * h2f(y.s);
        add(s, dot_us8(nibbles32(x.qs), load32(y.qs)), h2f(x.d) * h2f(y.d));
    }
};

struct Q5_0Step : Block32Step<BlockQ5_0, BlockQ8_0> {
    static void step(State& s, const BlockQ5_0& x, const BlockQ8_0& y) {
        // (q | h << 4) - 16: a clear fifth bit makes the byte negative (its top four bits set).
        const __m256i hi = _mm256_andnot_si256(bits_to_bytes(qh32(x.qh)), _mm256_set1_epi8(static_cast<char>(0xF0)));
        add(s, dot_ss8(_mm256_or_si256(nibbles32(x.qs), hi), load32(y.qs)), h2f(x.d) * h2f(y.d));
    }
    static float finish(const State& st) { return hsum_float_8(st.acc); }
};

struct Q5_1Step : Block32Step<BlockQ5_1, BlockQ8_1> {
    static void step(State& s, const BlockQ5_1& x, const BlockQ8_1& y) {
        s.summs += h2f(x.m) * h2f(y.s);
        const __m256i hi = _mm256_and_si256(bits_to_bytes(qh32(x.qh)), _mm256_set1_epi8(0x10));
        add(s, dot_us8(_mm256_or_si256(nibbles32(x.qs), hi), load32(y.qs)), h2f(x.d) * h2f(y.d));
    }
};

constexpr auto simd_q4_1 = step_dot<Q4_1Step>;
constexpr auto simd_q5_0 = step_dot<Q5_0Step>;
constexpr auto simd_q5_1 = step_dot<Q5_1Step>;

// IQ4_NL / MXFP4: table values; the three float orders of dot_table32_ref, dot_table32_repacked_ref and
// llamafile's GEMM (one lane accumulator, d = x.scale * y.d).
inline float iq4nl_scale(const BlockIQ4_NL& b) { return h2f(b.d); }
inline float mxfp4_scale(const BlockMXFP4& b) { return quant::e8m0_half(b.e); }

template <class B, float (*Scale)(const B&), const int8_t* Table>
struct Table32 {
    using Block = B;
    static constexpr const int8_t* kTable = Table;
    static constexpr float (*kScale)(const B&) = Scale;
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
    // The order of weights llama.cpp repacks (rows % 8 == 0), as a step kernel (tile_simd.h).
    struct RepackedStep {
        using Block = B;
        using Act = BlockQ8_0;
        static constexpr int64_t kBlockElems = 32;
        struct State {
            float acc;
        };
        static State init() { return {0.f}; }
        static void step(State& s, const Block& x, const BlockQ8_0& y) {
            s.acc = std::fma(static_cast<float>(hsum_lanes(lanes(x, y))), Scale(x) * h2f(y.d), s.acc);
        }
        static float finish(const State& s) { return s.acc; }
    };
    static float repacked(int64_t n, const void* w, const void* a) { return step_dot<RepackedStep>(n, w, a); }
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

// ---- ternary: sums in sixteen int16 lanes, activation sums subtracted, `sumf = fma(lanes, d, sumf)` ----

// Trits of bytes already multiplied by their power of three: (m * 3) >> 8 is 0 below 86, 1 below 171, else 2.
inline __m256i trits_of(__m256i m) {
    const __m256i ge86 = _mm256_cmpeq_epi8(_mm256_max_epu8(m, _mm256_set1_epi8(86)), m);
    const __m256i ge171 = _mm256_cmpeq_epi8(_mm256_max_epu8(m, _mm256_set1_epi8(static_cast<char>(171))), m);
    return _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), ge86), ge171);
}
// Bytes times 3 and times 9, mod 256: adds and a shift (no byte multiply on x86).
inline __m256i times3(__m256i v) { return _mm256_add_epi8(v, _mm256_add_epi8(v, v)); }
inline __m256i times9(__m256i v) { return _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(v, 3), _mm256_set1_epi8(static_cast<char>(0xF8))), v); }

// As a step kernel (tile_simd.h); Groups fills the eight groups' trits of a block.
template <class B, class Groups>
struct TernaryStep {
    using Block = B;
    using Act = BlockQ8_K;
    static constexpr int64_t kBlockElems = QK_K;
    using State = Acc8State;
    static State init() { return {_mm256_setzero_ps()}; }
    static void step(State& s, const B& x, const BlockQ8_K& y) {
        __m256i trits[8];
        Groups{}(x, trits);
        __m256i lanes16 = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g) lanes16 = _mm256_add_epi16(lanes16, _mm256_maddubs_epi16(trits[g], load32(y.qs + 32 * g)));
        lanes16 = _mm256_sub_epi16(lanes16, load32(y.bsums));
        const __m256 lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(lanes16, _mm256_set1_epi16(1)));
        s.acc = _mm256_fmadd_ps(lanes, _mm256_set1_ps(y.d * h2f(x.d)), s.acc);
    }
    static float finish(const State& s) { return hsum_float_8(s.acc); }
};

inline constexpr auto tq2_0_groups = [](const BlockTQ2_0& x, __m256i* t) {
    for (int g = 0; g < 8; ++g) t[g] = _mm256_and_si256(_mm256_srli_epi16(load32(x.qs + 32 * (g / 4)), 2 * (g % 4)), _mm256_set1_epi8(3));
};
using TQ2_0Step = TernaryStep<BlockTQ2_0, std::remove_const_t<decltype(tq2_0_groups)>>;
constexpr auto simd_tq2_0 = step_dot<TQ2_0Step>;

// TQ1_0: five trits per byte of qs[0..32) (elements 0..159), of qs[32..48) (160..239), four per byte of qh (240..255);
// trit k of a byte is trits_of(byte * 3^k mod 256).
inline constexpr auto tq1_0_groups = [](const BlockTQ1_0& x, __m256i* t) {
    const __m256i q1 = load32(x.qs), q3 = times3(q1), q9 = times9(q1);
    t[0] = trits_of(q1);
    t[1] = trits_of(q3);
    t[2] = trits_of(q9);
    t[3] = trits_of(times9(q3));
    t[4] = trits_of(times9(q9));
    const __m128i q16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs + 32));
    uint32_t h;
    std::memcpy(&h, x.qh, 4);
    // Elements 160..239: trits 0 and 1, 2 and 3, 4 of the 16 bytes; 240 + 4k + j: trit k of qh[j].
    const __m256i p1 = _mm256_set_m128i(q16, q16), p3 = times3(p1), p9 = times9(p1);
    t[5] = trits_of(_mm256_blend_epi32(p1, p3, 0xF0));
    t[6] = trits_of(_mm256_blend_epi32(p9, times9(p3), 0xF0));
    const __m256i hq = _mm256_set_m128i(_mm_set1_epi32(static_cast<int>(h)), q16);
    const __m256i h3 = times3(hq), h9 = times9(hq), h27 = times9(h3), h81 = times9(h9);
    // low lane: the 16 bytes times 81; high lane: qh's 4 bytes times 1, 3, 9, 27 (dword k of the lane)
    t[7] = trits_of(_mm256_blend_epi32(_mm256_blend_epi32(_mm256_blend_epi32(_mm256_blend_epi32(h81, hq, 0x10), h3, 0x20), h9, 0x40), h27, 0x80));
};
using TQ1_0Step = TernaryStep<BlockTQ1_0, std::remove_const_t<decltype(tq1_0_groups)>>;
constexpr auto simd_tq1_0 = step_dot<TQ1_0Step>;

// Fills a SIMD table's low-bit entries (the float-order variants as in add_quant_reference_kernels).
inline void add_simd_quant_kernels(KernelTable& t) {
    set_dot<simd_q4_1>(t, GgmlType::Q4_1);
    set_dot<simd_q5_0>(t, GgmlType::Q5_0);
    set_dot<simd_q5_1>(t, GgmlType::Q5_1);
    set_dot<IQ4NL::vec>(t, GgmlType::IQ4_NL);
    set_dot<MXFP4::vec>(t, GgmlType::MXFP4);
    set_dot<simd_tq1_0>(t, GgmlType::TQ1_0);
    set_dot<simd_tq2_0>(t, GgmlType::TQ2_0);
    const int iq4nl = static_cast<int>(GgmlType::IQ4_NL), mxfp4 = static_cast<int>(GgmlType::MXFP4);
    t.dot_repacked[iq4nl] = IQ4NL::repacked;
    t.dot_rows_repacked[iq4nl] = dot_rows_of<IQ4NL::repacked>;
    t.dot_repacked[mxfp4] = MXFP4::repacked;
    t.dot_rows_repacked[mxfp4] = dot_rows_of<MXFP4::repacked>;
    t.tile[static_cast<int>(GgmlType::Q4_1)] = step_tile<Q4_1Step>;
    t.tile[static_cast<int>(GgmlType::Q5_0)] = step_tile<Q5_0Step>;
    t.tile[static_cast<int>(GgmlType::Q5_1)] = step_tile<Q5_1Step>;
    t.tile[static_cast<int>(GgmlType::TQ1_0)] = step_tile<TQ1_0Step>;
    t.tile[static_cast<int>(GgmlType::TQ2_0)] = step_tile<TQ2_0Step>;
    t.tile_repacked[iq4nl] = step_tile<IQ4NL::RepackedStep>;
    t.tile_repacked[mxfp4] = step_tile<MXFP4::RepackedStep>;
    t.dot_batch[iq4nl] = IQ4NL::gemm;
}

}  // namespace
}  // namespace moe::kernels

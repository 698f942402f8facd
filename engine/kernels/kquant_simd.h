// The float half of the K-quant dot products for the SIMD tables (AVX2 and AVX-512 translation units include
// it; everything here has internal linkage, so each is compiled with its own flags). Same operations as
// kquant_order.h, lane for lane, kept in registers.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {

// A block's integer sums in kquant_order.h's layout.
struct KBlockLanes {
    __m256i pair[4];
    int32_t mins[8];
    __m256i lanes() const { return _mm256_add_epi32(_mm256_add_epi32(pair[0], pair[1]), _mm256_add_epi32(pair[2], pair[3])); }
    int32_t mins_total() const {
        int32_t t = 0;
        for (int s = 0; s < 8; ++s) t += mins[s];
        return t;
    }
};

struct Q4KVecLanes {
    __m256 acc = _mm256_setzero_ps();
    float acc_m[4] = {};
    void add(const KBlockLanes& s, float d, float dmin_neg) {
        for (int k = 0; k < 4; ++k) acc_m[k] = std::fma(dmin_neg, static_cast<float>(s.mins[2 * k] + s.mins[2 * k + 1]), acc_m[k]);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s.lanes()), acc);
    }
    float result() const { return hsum_float_8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])); }
};

struct Q4KRepackedLanes {
    float acc = 0.f, acc_m = 0.f;
    void add(const KBlockLanes& s, float dxy, float dmy) {
        acc = std::fma(static_cast<float>(hsum_lanes(s.lanes())), dxy, acc);
        acc_m = std::fma(static_cast<float>(s.mins_total()), dmy, acc_m);
    }
    float result() const { return acc - acc_m; }
};

struct Q4KRepackedGemmLanes {
    float acc = 0.f, acc_m = 0.f;
    void add(const KBlockLanes& s, float dxy, float dmy) {
        for (int p = 0; p < 4; ++p) {
            acc = std::fma(static_cast<float>(hsum_lanes(s.pair[p])), dxy, acc);
            acc_m = std::fma(static_cast<float>(s.mins[2 * p] + s.mins[2 * p + 1]), dmy, acc_m);
        }
    }
    float result() const { return acc - acc_m; }
};

struct Q5KVecLanes {
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.f;
    void add(const KBlockLanes& s, float d, float dmin_neg) {
        summs = std::fma(dmin_neg, static_cast<float>(s.mins_total()), summs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s.lanes()), acc);
    }
    float result() const { return hsum_float_8(acc) + summs; }
};

// Q4_K / Q5_K dot products over a block producer `Block(blk, y) -> KBlockLanes`.
template <class Order, class BlockT, class Block>
float q45_dot(int64_t n, const void* w, const void* a, Block block, bool repacked) {
    auto* x = static_cast<const BlockT*>(w);
    auto* y = static_cast<const BlockQ8_K*>(a);
    Order o;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const KBlockLanes s = block(x[b], y[b]);
        if (repacked) o.add(s, h2f(x[b].d) * y[b].d, h2f(x[b].dmin) * y[b].d);
        else o.add(s, y[b].d * h2f(x[b].d), -y[b].d * h2f(x[b].dmin));
    }
    return o.result();
}

// The Q4_K/Q5_K entry points over a translation unit's block function (its integer sums in this layout).
using Q45BlockFn = KBlockLanes (*)(const uint8_t* blk, size_t qs_off, size_t qh_off, bool five, const BlockQ8_K& y);

template <Q45BlockFn Block>
struct Q45Dots {
    static KBlockLanes q4k(const BlockQ4_K& x, const BlockQ8_K& y) {
        return Block(reinterpret_cast<const uint8_t*>(&x), offsetof(BlockQ4_K, qs), 0, false, y);
    }
    static KBlockLanes q5k(const BlockQ5_K& x, const BlockQ8_K& y) {
        return Block(reinterpret_cast<const uint8_t*>(&x), offsetof(BlockQ5_K, qs), offsetof(BlockQ5_K, qh), true, y);
    }
    static float q4_K(int64_t n, const void* w, const void* a) { return q45_dot<Q4KVecLanes, BlockQ4_K>(n, w, a, q4k, false); }
    static float q4_K_repacked(int64_t n, const void* w, const void* a) {
        return q45_dot<Q4KRepackedLanes, BlockQ4_K>(n, w, a, q4k, true);
    }
    static float q4_K_repacked_gemm(int64_t n, const void* w, const void* a) {
        return q45_dot<Q4KRepackedGemmLanes, BlockQ4_K>(n, w, a, q4k, true);
    }
    static float q5_K(int64_t n, const void* w, const void* a) { return q45_dot<Q5KVecLanes, BlockQ5_K>(n, w, a, q5k, false); }
};

// Q6_K entry points over a translation unit's block function: `Lanes` returns a block's eight int32 lanes of
// sum((q - 32) * y * scale) in ggml's split (dot_q6_K_ref).
using Q6LanesFn = __m256i (*)(const BlockQ6_K& x, const BlockQ8_K& y);

template <Q6LanesFn Lanes>
struct Q6Dots {
    static __m256 add_block(__m256 acc, const BlockQ6_K& x, const BlockQ8_K& y) {
        return _mm256_fmadd_ps(_mm256_set1_ps(y.d * h2f(x.d)), _mm256_cvtepi32_ps(Lanes(x, y)), acc);
    }
    static float dot(int64_t n, const void* w, const void* a) {
        auto* x = static_cast<const BlockQ6_K*>(w);
        auto* y = static_cast<const BlockQ8_K*>(a);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < n / QK_K; ++b) acc = add_block(acc, x[b], y[b]);
        return hsum_float_8(acc);
    }
    static void rows(int64_t n, const uint8_t* w, size_t row_bytes, int64_t n_rows, const void* a, float* out) {
        auto* y = static_cast<const BlockQ8_K*>(a);
        const int64_t nb = n / QK_K;
        for (int64_t r = 0; r < n_rows; ++r) {
            auto* x = reinterpret_cast<const BlockQ6_K*>(w + static_cast<size_t>(r) * row_bytes);
            __m256 acc = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) acc = add_block(acc, x[b], y[b]);
            out[r] = hsum_float_8(acc);
        }
    }
};

}  // namespace
}  // namespace moe::kernels

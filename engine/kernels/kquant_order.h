// The float half of the K-quant dot products, shared by the scalar and SIMD kernels: each ISA computes a
// block's exact integer sums, then these accumulate them in the order llama.cpp's x86 kernels do.
//
// Integer layout, as ggml's maddubs/madd chains leave it: element e of a 256-block lands in lane (e % 32) / 4
// (times its sub-block scale); `pair[j]` holds the lanes of sub-blocks 2j and 2j+1 (elements 64j..64j+63),
// `mins[s]` = min(s) * (sum of the activations of sub-block s).
#pragma once
#include <cmath>
#include <cstdint>

namespace moe::kernels {

struct KBlockSums {
    int32_t pair[4][8];
    int32_t mins[8];
    int32_t lane(int l) const { return (pair[0][l] + pair[1][l]) + (pair[2][l] + pair[3][l]); }
    int32_t total() const {
        int32_t t = 0;
        for (int l = 0; l < 8; ++l) t += lane(l);
        return t;
    }
    int32_t mins_total() const {
        int32_t t = 0;
        for (int s = 0; s < 8; ++s) t += mins[s];
        return t;
    }
};

// llama.cpp's hsum_float_8: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
inline float hsum_float_8(const float* a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

// ggml_vec_dot_q4_K_q8_K (AVX2): value lanes FMA'd with d = y.d * x.d; the mins in four lanes of pair sums.
struct Q4KVecOrder {
    float acc[8] = {}, acc_m[4] = {};
    void add(const KBlockSums& s, float d, float dmin_neg) {
        for (int k = 0; k < 4; ++k) acc_m[k] = std::fma(dmin_neg, static_cast<float>(s.mins[2 * k] + s.mins[2 * k + 1]), acc_m[k]);
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(s.lane(l)), acc[l]);
    }
    float result() const { return hsum_float_8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3])); }
};

// q4_K_8x8 GEMV (weights llama.cpp repacked): one FMA per block with x.d * y.d, mins apart, subtracted last.
struct Q4KRepackedOrder {
    float acc = 0.f, acc_m = 0.f;
    void add(const KBlockSums& s, float dxy, float dmy) {
        acc = std::fma(static_cast<float>(s.total()), dxy, acc);
        acc_m = std::fma(static_cast<float>(s.mins_total()), dmy, acc_m);
    }
    float result() const { return acc - acc_m; }
};

// q4_K_8x8 GEMM (activation rows in groups of four): one FMA per pair of sub-blocks.
struct Q4KRepackedGemmOrder {
    float acc = 0.f, acc_m = 0.f;
    void add(const KBlockSums& s, float dxy, float dmy) {
        for (int p = 0; p < 4; ++p) {
            int32_t part = 0;
            for (int l = 0; l < 8; ++l) part += s.pair[p][l];
            acc = std::fma(static_cast<float>(part), dxy, acc);
            acc_m = std::fma(static_cast<float>(s.mins[2 * p] + s.mins[2 * p + 1]), dmy, acc_m);
        }
    }
    float result() const { return acc - acc_m; }
};

// ggml_vec_dot_q5_K_q8_K (AVX2): value lanes as Q4_K; the mins as one float, `summs += dmin * sum` per block,
// which GCC contracts into an FMA (ggml's C files build as gnu11, where -ffp-contract=fast is the default).
struct Q5KVecOrder {
    float acc[8] = {}, summs = 0.f;
    void add(const KBlockSums& s, float d, float dmin_neg) {
        summs = std::fma(dmin_neg, static_cast<float>(s.mins_total()), summs);
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(s.lane(l)), acc[l]);
    }
    float result() const { return hsum_float_8(acc) + summs; }
};

// ggml_vec_dot_q6_K_q8_K (AVX2): lanes of (q - 32) * y * scale FMA'd with y.d * x.d.
struct Q6KVecOrder {
    float acc[8] = {};
    void add(const int32_t lanes[8], float d) {
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(lanes[l]), acc[l]);
    }
    float result() const { return hsum_float_8(acc); }
};

}  // namespace moe::kernels

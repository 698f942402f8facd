// IEEE half and bfloat16 conversions with round-to-nearest-even, bit-identical to F16C / ggml.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace moe {

constexpr float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            bits = sign | ((112 - e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    return std::bit_cast<float>(bits);
}

// Every fp16 value as float (256 KiB, built at compile time), for hot loops: the KV cache, and the kernels'
// per-block scales, where a load is cheaper than VCVTPH2PS's shuffle-port uops (llama.cpp's x86 kernels use a
// table for the same reason).
namespace detail {
struct Fp16Table {
    float v[65536];
    constexpr Fp16Table() : v() {
        for (uint32_t h = 0; h < 65536; ++h) v[h] = fp16_to_fp32(static_cast<uint16_t>(h));
    }
};
extern const Fp16Table kFp16Table;
}  // namespace detail
inline float fp16_to_fp32_lut(uint16_t h) { return detail::kFp16Table.v[h]; }

inline uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (absx < 0x38800000u) {                                               // result is subnormal or zero
        // The result is mant >> (shift + 13), rounded to nearest even: below 2^-25 (shift >= 12) that is zero,
        // and larger shifts would overflow the 32-bit shift counts below.
        int shift = 113 - static_cast<int>(absx >> 23);
        if (shift >= 12) return static_cast<uint16_t>(sign);
        uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
        uint32_t half = mant >> (shift + 13);
        uint32_t rem = mant & ((1u << (shift + 13)) - 1);
        uint32_t mid = 1u << (shift + 12);
        if (rem > mid || (rem == mid && (half & 1))) ++half;
        return static_cast<uint16_t>(sign | half);
    }
    uint32_t half = ((absx >> 13) - (112u << 10));
    uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
}

inline float bf16_to_fp32(uint16_t h) {
    uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t fp32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64);  // quiet NaN
    return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1))) >> 16);
}

// VDPBF16PS on one 32-bit lane, as the BF16 kernels of llama.cpp's and ik_llama.cpp's AVX512-BF16 builds sum: the
// odd pair's product added first, then the even one's, each product and sum rounded once (a fused multiply-add:
// on an Intel host this matched the instruction on 4M random lanes, where rounding the product first differed
// when it fell below FLT_MIN), denormal inputs and results flushed to signed zero.
inline float flush_denormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x; }
inline float dpbf16_lane(float acc, const uint16_t* a, const uint16_t* b) {
    acc = flush_denormal(std::fma(flush_denormal(bf16_to_fp32(a[1])), flush_denormal(bf16_to_fp32(b[1])), acc));
    return flush_denormal(std::fma(flush_denormal(bf16_to_fp32(a[0])), flush_denormal(bf16_to_fp32(b[0])), acc));
}

}  // namespace moe

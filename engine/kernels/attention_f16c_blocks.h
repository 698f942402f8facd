// The pieces the F16C attention translation units share (attention_f16c.cpp: fp16 caches; attention_typed_f16c.cpp:
// llama.cpp's other cache types; attention_tiled_f16c.cpp: a prompt batch's tiles): internal linkage only, and
// included only by translation units compiled with -mavx2 -mfma -mf16c.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/kernels/attention.h"
#include "engine/kernels/expf_simd.h"
#include "engine/kernels/ggml_numerics.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/libm_expf.h"
#include "engine/kernels/simd_common.h"

namespace moe::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline uint16_t f2h(float f) { return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

// The rows of a group (G >= 1 query rows sharing a view) pass over the keys in blocks of up to kKeyBlock visible
// keys. Per row, the block's scores, then the online softmax's exp arguments in key order (key i raises the
// running max, and its exp rescales what came before, or not, and its exp weighs its value), all the block's
// exps at once (libm_expf.h), then the value updates, key by key with the rows interleaved: each row's fp16
// accumulator is a chain of dependent updates, and the rows' chains overlap. Every row sees exactly the
// key-by-key loop's operations, so its bits are the reference's.
constexpr int kKeyBlock = 16;
struct RowBlock {
    alignas(32) float sc[kKeyBlock], arg[kKeyBlock], e[kKeyBlock];
    bool raise[kKeyBlock];
    // lanes: libm's expf eight at a time (the AVX-512 path; qemu 7.2's AVX2 emulation rounds the lanes' packed
    // FMA otherwise at times, so the AVX2 path, which the CPU-model tests run emulated, calls libm per key).
    template <bool Lanes>
    void exps(int n, float& M) {
        for (int i = 0; i < n; ++i) {
            raise[i] = sc[i] > M;
            arg[i] = raise[i] ? M - sc[i] : sc[i] - M;
            if (raise[i]) M = sc[i];
        }
        if constexpr (Lanes) {
            for (int i = n; i < kKeyBlock; ++i) arg[i] = 0.f;
            expf_libm(arg, e, (n + 7) / 8 * 8);
        } else {
            for (int i = 0; i < n; ++i) e[i] = std::exp(arg[i]);
        }
    }
};

// acc (fp16) = acc * m, or v * m + acc, eight values per register, as ggml_vec_scale_f16 / ggml_vec_mad_f16.
inline void scale_f16_256(uint16_t* acc, float m, int n) {
    int d = 0;
    const __m256 mv = _mm256_set1_ps(m);
    for (; d + 8 <= n; d += 8) {
        const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + d)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + d), _mm256_cvtps_ph(_mm256_mul_ps(a, mv), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < n; ++d) acc[d] = f2h(h2f(acc[d]) * m);
}
inline void mad_f16_256(uint16_t* acc, const uint16_t* v, float m, int n) {
    int d = 0;
    const __m256 mv = _mm256_set1_ps(m);
    for (; d + 8 <= n; d += 8) {
        const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + d)));
        const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + d)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + d), _mm256_cvtps_ph(_mm256_fmadd_ps(x, mv, a), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < n; ++d) acc[d] = f2h(std::fma(h2f(v[d]), m, h2f(acc[d])));
}

}  // namespace
}  // namespace moe::kernels

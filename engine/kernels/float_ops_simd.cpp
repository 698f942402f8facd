// Compiled with -mavx2 -mfma. SwiGLU and SiLU through the vector exp eight lanes at a time (expf_simd.h), the
// reference's float expressions lane for lane: x / (1 + exp(0 - x)) with the build's exp, an IEEE division and
// multiply, so the same bits as float_ops.cpp. The prompt's experts evaluate one per gate value (8 experts x
// their width per token and layer), which the scalar exp made a tenth of a 512-token prompt.
#include <cmath>

#include "engine/kernels/attention.h"
#include "engine/kernels/expf_simd.h"
#include "engine/kernels/kernels.h"

namespace moe::kernels {
namespace {

template <Flavor F>
inline __m256 silu8(__m256 x) {
    const __m256 e = expf8<F>(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// The reference's loops: whole registers of the build (16 lanes for AVX-512, as two halves) through the vector
// exp, the tail (below one register) through std::exp.
template <Flavor F>
void swiglu8(float* g, const float* u, int n) {
    constexpr int L = f32_lanes(F);
    int i = 0;
    for (; i + L <= n; i += L)
        for (int h = 0; h < L; h += 8) _mm256_storeu_ps(g + i + h, _mm256_mul_ps(silu8<F>(_mm256_loadu_ps(g + i + h)), _mm256_loadu_ps(u + i + h)));
    for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

template <Flavor F>
void silu8_row(float* x, int n) {
    constexpr int L = f32_lanes(F);
    int i = 0;
    for (; i + L <= n; i += L)
        for (int h = 0; h < L; h += 8) _mm256_storeu_ps(x + i + h, silu8<F>(_mm256_loadu_ps(x + i + h)));
    for (; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

// ops::relu_weighted_sum eight keys at a time: max(0, x) keeps x where x is NaN or -0, as std::max(x, 0) does.
void relu_weighted_sum8(const float* part, int64_t stride, int heads, const float* w, int64_t m, float* out) {
    const __m256 zero = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= m; j += 8) {
        __m256 acc = zero;
        for (int h = 0; h < heads; ++h) acc = _mm256_fmadd_ps(_mm256_max_ps(zero, _mm256_loadu_ps(part + h * stride + j)), _mm256_set1_ps(w[h]), acc);
        _mm256_storeu_ps(out + j, _mm256_add_ps(acc, zero));
    }
    if (j < m) ops::relu_weighted_sum(part + j, stride, heads, w, m - j, out + j);
}

}  // namespace

const ops::FloatOps& simd_float_ops(Flavor f) {
    if (active_table(f).isa == Isa::Scalar) return ops::float_ops(f);
    static const ops::FloatOps avx512 = [] {
        ops::FloatOps o = ops::float_ops(Flavor::Avx512);
        o.swiglu = &swiglu8<Flavor::Avx512>;
        o.silu = &silu8_row<Flavor::Avx512>;
        o.relu_weighted_sum = &relu_weighted_sum8;
        return o;
    }();
    static const ops::FloatOps avx2 = [] {
        ops::FloatOps o = ops::float_ops(Flavor::Avx2);
        o.swiglu = &swiglu8<Flavor::Avx2>;
        o.silu = &silu8_row<Flavor::Avx2>;
        o.relu_weighted_sum = &relu_weighted_sum8;
        return o;
    }();
    return f == Flavor::Avx512 ? avx512 : avx2;
}

}  // namespace moe::kernels

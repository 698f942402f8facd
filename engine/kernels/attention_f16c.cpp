// Compiled with -mavx2 -mfma -mf16c. Uses intrinsics and internal-linkage helpers only (simd_common.h,
// ggml_numerics.h), so nothing compiled with these flags can leak into baseline code through the linker.
// Call the getters only on CPUs with AVX2/F16C (attention.cpp checks).
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

// ggml_vec_dot_f16 in each build's order: four accumulators of 16 (pairs of 256-bit halves) or 8 lanes over
// steps of four registers, added pairwise, reduced as one register; the tail in double.
template <Flavor F>
float dot_f16_vec_order(const uint16_t* x, const uint16_t* y, int n) {
    if constexpr (F == Flavor::Avx512) {
        __m256 acc[4][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
        const int np = n & ~63;
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 4; ++j)
                for (int h = 0; h < 2; ++h)
                    acc[j][h] = _mm256_fmadd_ps(load_f16x8(x + i + 16 * j + 8 * h), load_f16x8(y + i + 16 * j + 8 * h), acc[j][h]);
        for (int h = 0; h < 2; ++h) {
            acc[0][h] = _mm256_add_ps(acc[0][h], acc[2][h]);
            acc[1][h] = _mm256_add_ps(acc[1][h], acc[3][h]);
            acc[0][h] = _mm256_add_ps(acc[0][h], acc[1][h]);
        }
        double s = hsum_float_8(_mm256_add_ps(acc[0][1], acc[0][0]));
        for (int i = np; i < n; ++i) s += static_cast<double>(h2f(x[i]) * h2f(y[i]));
        return static_cast<float>(s);
    } else {
        __m256 acc[4];
        for (auto& a : acc) a = _mm256_setzero_ps();
        const int np = n & ~31;
        for (int i = 0; i < np; i += 32)
            for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(load_f16x8(x + i + 8 * j), load_f16x8(y + i + 8 * j), acc[j]);
        acc[0] = _mm256_add_ps(acc[0], acc[2]);
        acc[1] = _mm256_add_ps(acc[1], acc[3]);
        const __m256 v = _mm256_add_ps(acc[0], acc[1]);
        const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 t1 = _mm_hadd_ps(t0, t0);
        double s = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
        for (int i = np; i < n; ++i) s += static_cast<double>(h2f(x[i]) * h2f(y[i]));
        return static_cast<float>(s);
    }
}

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

// One block for all rows: per row the block's scores and exps, then the value updates key by key with the rows
// interleaved.
template <Flavor F>
void group_block_256(const uint16_t* q16, int G, const ops::KvView& kv, const int* idx, int n, float scale, float* M, float* S, uint16_t* acc16,
                     RowBlock* rows) {
    const int dk = kv.dk, dv = kv.dv;
    for (int g = 0; g < G; ++g) {
        RowBlock& b = rows[g];
        for (int i = 0; i < n; ++i)
            b.sc[i] = dot_f16_vec_order<F>(kv.k + static_cast<size_t>(idx[i]) * kv.k_stride, q16 + static_cast<size_t>(g) * dk, dk) * scale +
                      0.0f;  // + the mask's zero
        b.exps<false>(n, M[g]);
    }
    for (int i = 0; i < n; ++i) {
        const uint16_t* vj = kv.v + static_cast<size_t>(idx[i]) * kv.v_stride;
        for (int g = 0; g < G; ++g) {
            const RowBlock& b = rows[g];
            const float ms = b.raise[i] ? b.e[i] : 1.f, vs = b.raise[i] ? 1.f : b.e[i];
            uint16_t* acc = acc16 + static_cast<size_t>(g) * dv;
            if (b.raise[i]) scale_f16_256(acc, ms, dv);
            mad_f16_256(acc, vj, vs, dv);
            S[g] = std::fma(S[g], ms, vs);  // contracted, as GCC builds ggml
        }
    }
}

// The same in 512-bit registers (AVX-512 CPUs, by function target): the value updates are elementwise, and the
// AVX-512 build's dot keeps its sixteen-lane accumulators in one register each, so the bits do not change.
// acc (fp16) = acc * m: sixteen values per register, then eight, then one.
__attribute__((target("avx512f"), always_inline)) inline void scale_f16_512(uint16_t* acc, float m, int n) {
    int d = 0;
    const __m512 mv = _mm512_set1_ps(m);
    for (; d + 16 <= n; d += 16) {
        const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + d)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + d), _mm512_cvtps_ph(_mm512_mul_ps(a, mv), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d + 8 <= n; d += 8) {
        const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + d)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + d), _mm256_cvtps_ph(_mm256_mul_ps(a, _mm256_set1_ps(m)), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < n; ++d) acc[d] = f2h(h2f(acc[d]) * m);
}
// ggml_vec_dot_f16's order over rows already converted to f32 (the same values, so the same bits): the
// AVX-512 build's four sixteen-lane accumulators, or the AVX2 build's four of eight over 32-value steps.
template <Flavor F>
__attribute__((target("avx512f"), always_inline)) inline float dot_f32_in_f16_order(const float* x, const float* y, int n) {
    double s;
    int np;
    if constexpr (F == Flavor::Avx512) {
        __m512 acc[4];
        for (auto& a : acc) a = _mm512_setzero_ps();
        np = n & ~63;
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 4; ++j) acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), _mm512_loadu_ps(y + i + 16 * j), acc[j]);
        acc[0] = _mm512_add_ps(acc[0], acc[2]);
        acc[1] = _mm512_add_ps(acc[1], acc[3]);
        acc[0] = _mm512_add_ps(acc[0], acc[1]);
        const __m256 lo = _mm512_castps512_ps256(acc[0]), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[0]), 1));
        s = hsum_float_8(_mm256_add_ps(hi, lo));
    } else {
        __m256 acc[4];
        for (auto& a : acc) a = _mm256_setzero_ps();
        np = n & ~31;
        for (int i = 0; i < np; i += 32)
            for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), acc[j]);
        acc[0] = _mm256_add_ps(acc[0], acc[2]);
        acc[1] = _mm256_add_ps(acc[1], acc[3]);
        const __m256 v = _mm256_add_ps(acc[0], acc[1]);
        const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 t1 = _mm_hadd_ps(t0, t0);
        s = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    }
    for (int i = np; i < n; ++i) s += static_cast<double>(x[i] * y[i]);
    return static_cast<float>(s);
}

// acc (fp16) = v * m + acc with v already in f32.
__attribute__((target("avx512f"), always_inline)) inline void mad_f32_into_f16_512(uint16_t* acc, const float* v, float m, int n) {
    int d = 0;
    const __m512 mv = _mm512_set1_ps(m);
    for (; d + 16 <= n; d += 16) {
        const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + d)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + d),
                            _mm512_cvtps_ph(_mm512_fmadd_ps(_mm512_loadu_ps(v + d), mv, a), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < n; ++d) acc[d] = f2h(std::fma(v[d], m, h2f(acc[d])));
}

__attribute__((target("avx512f"), always_inline)) inline void f16_to_f32_512(const uint16_t* h, float* f, int n) {
    int d = 0;
    for (; d + 16 <= n; d += 16) _mm512_storeu_ps(f + d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + d))));
    for (; d < n; ++d) f[d] = h2f(h[d]);
}

// The 512-bit block: the block's keys and values converted to f32 once for all rows (exact), the queries given
// in f32 (qf, G x dk), then as group_block_256.
template <Flavor F>
__attribute__((target("avx512f"))) void group_block_512(const float* qf, int G, const ops::KvView& kv, const int* idx, int n, float scale, float* M,
                                                        float* S, uint16_t* acc16, RowBlock* rows, float* kf, float* vf) {
    const int dk = kv.dk, dv = kv.dv;
    for (int i = 0; i < n; ++i) {
        f16_to_f32_512(kv.k + static_cast<size_t>(idx[i]) * kv.k_stride, kf + static_cast<size_t>(i) * dk, dk);
        f16_to_f32_512(kv.v + static_cast<size_t>(idx[i]) * kv.v_stride, vf + static_cast<size_t>(i) * dv, dv);
    }
    for (int g = 0; g < G; ++g) {
        RowBlock& b = rows[g];
        for (int i = 0; i < n; ++i)
            b.sc[i] = dot_f32_in_f16_order<F>(kf + static_cast<size_t>(i) * dk, qf + static_cast<size_t>(g) * dk, dk) * scale +
                      0.0f;  // + the mask's zero
        b.exps<true>(n, M[g]);
    }
    for (int i = 0; i < n; ++i) {
        const float* vj = vf + static_cast<size_t>(i) * dv;
        for (int g = 0; g < G; ++g) {
            const RowBlock& b = rows[g];
            const float ms = b.raise[i] ? b.e[i] : 1.f, vs = b.raise[i] ? 1.f : b.e[i];
            uint16_t* acc = acc16 + static_cast<size_t>(g) * dv;
            if (b.raise[i]) scale_f16_512(acc, ms, dv);
            mad_f32_into_f16_512(acc, vj, vs, dv);
            S[g] = std::fma(S[g], ms, vs);  // contracted, as GCC builds ggml
        }
    }
}

// The G rows (queries q16, G x dk fp16) over keys [0, kv.n_kv), masked ones skipped; M, S and the fp16
// accumulators (G x dv) carried in and out.
template <Flavor F, bool Wide>
void group_keys(const uint16_t* q16, int G, const ops::KvView& kv, float scale, float* M, float* S, uint16_t* acc16) {
    thread_local std::vector<RowBlock> rows;
    thread_local std::vector<float> qf, kf, vf;
    if (rows.size() < static_cast<size_t>(G)) rows.resize(static_cast<size_t>(G));
    if constexpr (Wide) {
        qf.resize(static_cast<size_t>(G) * kv.dk);
        for (size_t i = 0; i < qf.size(); ++i) qf[i] = h2f(q16[i]);
        kf.resize(static_cast<size_t>(kKeyBlock) * kv.dk);
        vf.resize(static_cast<size_t>(kKeyBlock) * kv.dv);
    }
    int idx[kKeyBlock];
    for (int j = 0; j < kv.n_kv;) {
        int n = 0;
        for (; j < kv.n_kv && n < kKeyBlock; ++j)
            if (!kv.visible || kv.visible[j]) idx[n++] = j;
        if (n == 0) continue;
        if constexpr (Wide) group_block_512<F>(qf.data(), G, kv, idx, n, scale, M, S, acc16, rows.data(), kf.data(), vf.data());
        else group_block_256<F>(q16, G, kv, idx, n, scale, M, S, acc16, rows.data());
    }
}

// The one-row loop: the keys' scores, the online softmax and the fp16 accumulator (s.acc16), as the reference.
template <Flavor F, bool Wide = false>
void attend_f16c_loop(const float* q, const ops::KvView& kv, float scale, float& M, float& S, ops::AttnScratch& s) {
    const int dk = kv.dk, dv = kv.dv;
    s.q16.resize(static_cast<size_t>(dk));
    s.acc16.assign(static_cast<size_t>(dv), 0);
    for (int d = 0; d < dk; ++d) s.q16[d] = f2h(q[d]);
    M = kNegInf, S = 0.f;
    group_keys<F, Wide>(s.q16.data(), 1, kv, scale, &M, &S, s.acc16.data());
}

// The chunk kernel for the G query rows that share a view (the heads of one kv head, or all of MLA's): a long
// cache is read from memory once per group instead of once per row, and the rows' update chains overlap.
// Row g's query at q + g * q_stride; its M, S and f32 accumulator in M[g], S[g], acc_out + g * dv; sinks[g].
template <Flavor F, bool Wide>
void attend_chunk_group_f16c_impl(const float* q, int64_t q_stride, int G, const ops::KvView& kv, float scale, float* M, float* S, float* acc_out,
                                  ops::AttnScratch& s) {
    const int dk = kv.dk, dv = kv.dv;
    s.q16.resize(static_cast<size_t>(G) * dk);
    s.acc16.assign(static_cast<size_t>(G) * dv, 0);
    for (int g = 0; g < G; ++g) {
        for (int d = 0; d < dk; ++d) s.q16[static_cast<size_t>(g) * dk + d] = f2h(q[g * q_stride + d]);
        M[g] = kNegInf, S[g] = 0.f;
    }
    group_keys<F, Wide>(s.q16.data(), G, kv, scale, M, S, s.acc16.data());
    for (int g = 0; g < G; ++g) {
        float* acc = acc_out + static_cast<size_t>(g) * dv;
        for (int d = 0; d < dv; ++d) acc[d] = h2f(s.acc16[static_cast<size_t>(g) * dv + d]);
        if (kv.sinks) {  // as the chunk kernel's tail, with row g's sink
            ops::KvView one = kv;
            one.sinks = kv.sinks + g;
            const float sink_scale = ops::apply_sink(one, 0, M[g], S[g]);
            M[g] = std::max(M[g], one.sinks[0]);
            for (int d = 0; d < dv; ++d) acc[d] *= sink_scale;
        }
    }
}

template <Flavor F>
void attend_f16c_impl(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    float M, S;
    attend_f16c_loop<F>(q, kv, scale, M, S, s);
    const float sink_scale = ops::apply_sink(kv, 0, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < kv.dv; ++d) out[d] = h2f(s.acc16[d]) * sink_scale * inv;
}

// ops::attend_chunk's tail after the same loop (masked keys skipped as there).
template <Flavor F>
void attend_chunk_f16c_impl(const float* q, const ops::KvView& kv, float scale, float& M, float& S, float* acc_out, ops::AttnScratch& s) {
    attend_f16c_loop<F>(q, kv, scale, M, S, s);
    for (int d = 0; d < kv.dv; ++d) acc_out[d] = h2f(s.acc16[d]);
    const float sink_scale = ops::apply_sink(kv, 0, M, S);
    if (kv.sinks) {
        M = std::max(M, kv.sinks[0]);
        for (int d = 0; d < kv.dv; ++d) acc_out[d] *= sink_scale;
    }
}

// A V row to f32 as the type's to_float computes it (one rounding per value: d * q), eight values at a time for
// the common types; the others through dequantize_row.
inline void v_row_to_f32(GgmlType t, const uint8_t* row, float* out, int n) {
    if (t == GgmlType::Q8_0) {
        for (int b = 0; b < n / 32; ++b) {
            const uint8_t* blk = row + 34 * b;
            uint16_t dh;
            std::memcpy(&dh, blk, 2);
            const __m256 d = _mm256_set1_ps(h2f(dh));
            for (int k = 0; k < 4; ++k) {
                const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k)));
                _mm256_storeu_ps(out + 32 * b + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
    } else if (t == GgmlType::Q4_0) {
        for (int b = 0; b < n / 32; ++b) {
            const uint8_t* blk = row + 18 * b;
            uint16_t dh;
            std::memcpy(&dh, blk, 2);
            const __m256 d = _mm256_set1_ps(h2f(dh));
            const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
            const __m128i eight = _mm_set1_epi8(8);
            const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, _mm_set1_epi8(0x0F)), eight);                     // elements 0..15
            const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(0x0F)), eight);  // 16..31
            const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 32 * b + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), d));
        }
    } else if (t == GgmlType::BF16) {
        const auto* h = reinterpret_cast<const uint16_t*>(row);
        for (int i = 0; i < n; i += 8) {
            const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
            _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)));
        }
    } else {
        dequantize_row(t, row, out, n);
    }
}

// One visible key's update of one row's accumulator over a typed cache, as the reference, given the online
// softmax's factors (raise: the max rose, rescale by ms): eight lanes at a time (an fp16 V: fp16 accumulator
// through F16C with round-to-nearest-even; any other V, already converted to f32 in vr: f32 with one FMA per
// value).
__attribute__((always_inline)) inline void typed_value_update(bool raise, float ms, float vs, float& S, bool f16_v, uint16_t* acc16, float* acc,
                                                              const uint16_t* vh, const float* vr, int dv) {
    if (f16_v) {  // ggml_vec_scale_f16 / ggml_vec_mad_f16, as the fp16 caches' kernels above
        if (raise) scale_f16_256(acc16, ms, dv);
        mad_f16_256(acc16, vh, vs, dv);
    } else {
        int d = 0;
        if (raise) {
            const __m256 msv = _mm256_set1_ps(ms);
            for (; d + 8 <= dv; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), msv));
            for (; d < dv; ++d) acc[d] *= ms;
        }
        const __m256 vsv = _mm256_set1_ps(vs);
        for (d = 0; d + 8 <= dv; d += 8) _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(_mm256_loadu_ps(vr + d), vsv, _mm256_loadu_ps(acc + d)));
        for (; d < dv; ++d) acc[d] = std::fma(vr[d], vs, acc[d]);
    }
    S = std::fma(S, ms, vs);
}
// The same with the online softmax's step for score sc first (libm's expf).
__attribute__((always_inline)) inline void typed_value_step(float sc, float& M, float& S, bool f16_v, uint16_t* acc16, float* acc, const uint16_t* vh,
                                                            const float* vr, int dv) {
    float ms, vs;
    const bool raise = ops::online_softmax_step(sc, M, ms, vs);
    typed_value_update(raise, ms, vs, S, f16_v, acc16, acc, vh, vr, dv);
}

// Value row j of a typed view: the fp16 row itself, or its values in f32 (an f32 row in place, else converted
// into buf).
struct TypedValueRow {
    const uint16_t* h = nullptr;
    const float* f = nullptr;
};
__attribute__((always_inline)) inline TypedValueRow typed_value_row(const ops::KvView& kv, int j, float* buf) {
    const uint8_t* vj = kv.v_raw + static_cast<size_t>(j) * kv.v_row;
    if (kv.v_type == GgmlType::F16) return {reinterpret_cast<const uint16_t*>(vj), nullptr};
    if (kv.v_type == GgmlType::F32) return {nullptr, reinterpret_cast<const float*>(vj)};
    v_row_to_f32(kv.v_type, vj, buf, kv.dv);
    return {nullptr, buf};
}

// A row's output from its accumulator: the sink joined, divided by the sum.
inline void typed_finish(const ops::KvView& kv, int row, float M, float S, bool f16_v, const uint16_t* acc16, const float* acc, float* out) {
    const float sink_scale = ops::apply_sink(kv, row, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    if (f16_v)
        for (int d = 0; d < kv.dv; ++d) out[d] = h2f(acc16[d]) * sink_scale * inv;
    else
        for (int d = 0; d < kv.dv; ++d) out[d] = acc[d] * sink_scale * inv;
}

// ops::attend_typed with the same operations per value: every score first, through the K type's row kernel (the
// same bits as its dot per row), then the online softmax and V's updates (typed_value_step).
void attend_typed_f16c_impl(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    const KernelTable& kt = *kv.table;
    const int slot = type_slot(kv.k_type), dv = kv.dv;
    s.q_act.resize(activation_bytes(kv.k_type, kv.dk));
    prepare_activations(kv.k_type, q, s.q_act.data(), kv.dk);
    s.scores.resize(static_cast<size_t>(kv.n_kv));
    float* score = s.scores.data();
    if (kt.dot_rows[slot]) {
        kt.dot_rows[slot](kv.dk, kv.k_raw, kv.k_row, kv.n_kv, s.q_act.data(), score);
    } else {
        for (int j = 0; j < kv.n_kv; ++j) score[j] = kt.dot[slot](kv.dk, kv.k_raw + static_cast<size_t>(j) * kv.k_row, s.q_act.data());
    }
    const bool f16_v = kv.v_type == GgmlType::F16;
    s.acc16.assign(f16_v ? static_cast<size_t>(dv) : 0, 0);
    s.acc.assign(static_cast<size_t>(dv), 0.f);
    s.kv_block.resize(static_cast<size_t>(dv));
    float M = kNegInf, S = 0.f;
    for (int j = 0; j < kv.n_kv; ++j) {
        if (kv.visible && !kv.visible[j]) continue;
        float sc = score[j] * scale;
        sc += 0.0f;  // the mask's zero
        const TypedValueRow v = typed_value_row(kv, j, s.kv_block.data());
        typed_value_step(sc, M, S, f16_v, s.acc16.data(), s.acc.data(), v.h, v.f, dv);
    }
    typed_finish(kv, 0, M, S, f16_v, s.acc16.data(), s.acc.data(), out);
}

// attend_typed for the G rows that share a view (the query heads of one kv head; in a prompt's block of tokens,
// row r sees n_kv + r / rows_per_position positions): the visible keys in blocks of up to kKeyBlock, each
// block's scores for every row through the K type's row kernel and then its online-softmax factors (RowBlock:
// the running max key by key, the exps together, eight lanes at a time with libm's bits where Lanes), each value
// row converted once for all the rows, each row's accumulator updated as the one-row kernel updates it. Every
// row gets that kernel's bits, and the cache is read once per group instead of once per row (at 64k positions
// a kv head's q8_0 keys and values are 8.5 MiB).
// One row's f32 accumulator over the first m keys of a block whose values are in f32 (vr[i]): per value the
// operations of typed_value_update key after key (the rescale where the max rose, then one FMA), taken 64 values
// at a time with the keys inside so that the accumulator stays in registers; the same bits.
// The 512-bit form (AVX-512 CPUs, by function target): 128 values at a time, then values_f32_block's loops.
inline void values_f32_block(const RowBlock& b, int m, const float* const* vr, float& S, float* acc, int dv, int d = 0);
__attribute__((target("avx512f"))) void values_f32_block_512(const RowBlock& b, int m, const float* const* vr, float& S, float* acc, int dv) {
    int d = 0;
    for (; d + 128 <= dv; d += 128) {
        __m512 a[8];
        for (int k = 0; k < 8; ++k) a[k] = _mm512_loadu_ps(acc + d + 16 * k);
        for (int i = 0; i < m; ++i) {
            if (b.raise[i]) {
                const __m512 ms = _mm512_set1_ps(b.e[i]);
                for (int k = 0; k < 8; ++k) a[k] = _mm512_mul_ps(a[k], ms);
            }
            const __m512 vs = _mm512_set1_ps(b.raise[i] ? 1.f : b.e[i]);
            for (int k = 0; k < 8; ++k) a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(vr[i] + d + 16 * k), vs, a[k]);
        }
        for (int k = 0; k < 8; ++k) _mm512_storeu_ps(acc + d + 16 * k, a[k]);
    }
    values_f32_block(b, m, vr, S, acc, dv, d);
}
inline void values_f32_block(const RowBlock& b, int m, const float* const* vr, float& S, float* acc, int dv, int d) {
    for (; d + 64 <= dv; d += 64) {
        __m256 a[8];
        for (int k = 0; k < 8; ++k) a[k] = _mm256_loadu_ps(acc + d + 8 * k);
        for (int i = 0; i < m; ++i) {
            if (b.raise[i]) {
                const __m256 ms = _mm256_set1_ps(b.e[i]);
                for (int k = 0; k < 8; ++k) a[k] = _mm256_mul_ps(a[k], ms);
            }
            const __m256 vs = _mm256_set1_ps(b.raise[i] ? 1.f : b.e[i]);
            for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(_mm256_loadu_ps(vr[i] + d + 8 * k), vs, a[k]);
        }
        for (int k = 0; k < 8; ++k) _mm256_storeu_ps(acc + d + 8 * k, a[k]);
    }
    for (; d + 8 <= dv; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        for (int i = 0; i < m; ++i) {
            if (b.raise[i]) a = _mm256_mul_ps(a, _mm256_set1_ps(b.e[i]));
            a = _mm256_fmadd_ps(_mm256_loadu_ps(vr[i] + d), _mm256_set1_ps(b.raise[i] ? 1.f : b.e[i]), a);
        }
        _mm256_storeu_ps(acc + d, a);
    }
    for (; d < dv; ++d)
        for (int i = 0; i < m; ++i) {
            if (b.raise[i]) acc[d] *= b.e[i];
            acc[d] = std::fma(vr[i][d], b.raise[i] ? 1.f : b.e[i], acc[d]);
        }
    for (int i = 0; i < m; ++i) S = std::fma(S, b.raise[i] ? b.e[i] : 1.f, b.raise[i] ? 1.f : b.e[i]);
}

template <bool Lanes>
void attend_typed_group_f16c_impl(const float* q, int64_t q_stride, int G, const ops::KvView& kv, float scale, float* out, int64_t out_stride,
                                  ops::AttnScratch& s) {
    const KernelTable& kt = *kv.table;
    const int slot = type_slot(kv.k_type), dk = kv.dk, dv = kv.dv;
    const size_t act = activation_bytes(kv.k_type, dk);
    const bool f16_v = kv.v_type == GgmlType::F16;
    thread_local std::vector<RowBlock> rows;
    if (rows.size() < static_cast<size_t>(G)) rows.resize(static_cast<size_t>(G));
    s.q_act.resize(static_cast<size_t>(G) * act);
    for (int g = 0; g < G; ++g) prepare_activations(kv.k_type, q + g * q_stride, s.q_act.data() + static_cast<size_t>(g) * act, dk);
    s.max_sum.assign(static_cast<size_t>(2) * G, 0.f);
    float *M = s.max_sum.data(), *S = M + G;
    std::fill_n(M, G, kNegInf);
    s.acc16.assign(f16_v ? static_cast<size_t>(G) * dv : 0, 0);
    s.acc.assign(static_cast<size_t>(G) * dv, 0.f);
    s.kv_block.resize(static_cast<size_t>(f16_v ? 1 : kKeyBlock) * dv);
    // Positions row g sees; the rows' longest view bounds the pass.
    auto seen = [&](int g) { return kv.rows_per_position > 0 ? kv.n_kv + g / kv.rows_per_position : kv.n_kv; };
    const int last = seen(G - 1);
    int idx[kKeyBlock];
    thread_local std::vector<int> row_keys;  // per row: how many of the block's keys it sees (a prefix)
    row_keys.resize(static_cast<size_t>(G));
    thread_local std::vector<uint8_t> key_rows;
    for (int j = 0; j < last;) {
        int n = 0;
        for (; j < last && n < kKeyBlock; ++j)
            if (!kv.visible || kv.visible[j]) idx[n++] = j;
        if (n == 0) continue;
        // The block's key rows in one piece: consecutive positions as they lie, scattered ones (the DSA picks)
        // copied together, so that every row takes one call of the rows kernel.
        const uint8_t* keys = kv.k_raw + static_cast<size_t>(idx[0]) * kv.k_row;
        bool together = idx[n - 1] - idx[0] == n - 1;
        if (!together && kt.dot_rows[slot]) {
            key_rows.resize(static_cast<size_t>(kKeyBlock) * kv.k_row);
            for (int i = 0; i < n; ++i)
                std::memcpy(key_rows.data() + static_cast<size_t>(i) * kv.k_row, kv.k_raw + static_cast<size_t>(idx[i]) * kv.k_row, kv.k_row);
            keys = key_rows.data();
            together = true;
        }
        for (int g = 0; g < G; ++g) {
            const int limit = seen(g);
            int m = n;
            while (m > 0 && idx[m - 1] >= limit) --m;
            row_keys[g] = m;
            if (m == 0) continue;
            RowBlock& b = rows[g];
            const uint8_t* qa = s.q_act.data() + static_cast<size_t>(g) * act;
            if (together && kt.dot_rows[slot]) kt.dot_rows[slot](dk, keys, kv.k_row, m, qa, b.sc);
            else
                for (int i = 0; i < m; ++i) b.sc[i] = kt.dot[slot](dk, kv.k_raw + static_cast<size_t>(idx[i]) * kv.k_row, qa);
            for (int i = 0; i < m; ++i) {
                b.sc[i] *= scale;
                b.sc[i] += 0.0f;  // the mask's zero
            }
            b.exps<Lanes>(m, M[g]);
        }
        if (!f16_v) {  // f32 accumulators: the block's values in f32 once, then each row's keys over them
            const float* vr[kKeyBlock];
            for (int i = 0; i < n; ++i) vr[i] = typed_value_row(kv, idx[i], s.kv_block.data() + static_cast<size_t>(i) * dv).f;
            for (int g = 0; g < G; ++g) {
                if constexpr (Lanes) values_f32_block_512(rows[g], row_keys[g], vr, S[g], s.acc.data() + static_cast<size_t>(g) * dv, dv);
                else values_f32_block(rows[g], row_keys[g], vr, S[g], s.acc.data() + static_cast<size_t>(g) * dv, dv);
            }
            continue;
        }
        for (int i = 0; i < n; ++i) {
            const TypedValueRow v = typed_value_row(kv, idx[i], s.kv_block.data());
            for (int g = 0; g < G; ++g) {
                if (i >= row_keys[g]) continue;
                const RowBlock& b = rows[g];
                const bool raise = b.raise[i];
                typed_value_update(raise, raise ? b.e[i] : 1.f, raise ? 1.f : b.e[i], S[g], f16_v, s.acc16.data() + static_cast<size_t>(g) * dv,
                                   s.acc.data() + static_cast<size_t>(g) * dv, v.h, v.f, dv);
            }
        }
    }
    for (int g = 0; g < G; ++g)
        typed_finish(kv, g, M[g], S[g], f16_v, s.acc16.data() + static_cast<size_t>(g) * (f16_v ? dv : 0), s.acc.data() + static_cast<size_t>(g) * dv,
                     out + g * out_stride);
}

// The reference's tiled path with the same operations per value: the score chains of eight positions run side
// by side (their K rows transposed eight dimensions at a time), V is added eight dimensions at a time.
// The f32-copy loops of the tiled path, in 256-bit registers and (for AVX-512 CPUs, by function target) in
// 512-bit ones: the same FMA per lane in the same order, so the same bits. Scores of a full 64-position tile
// from keys laid out [dk][64]: independent chains of 8 (or 16) positions.
inline void tile_scores_256(const float* kt, const float* q, int dk, float scale, float* kq) {
    __m256 sc[8];
    for (auto& v : sc) v = _mm256_setzero_ps();
    for (int d = 0; d < dk; ++d) {
        const __m256 qd = _mm256_set1_ps(q[d]);
        for (int j = 0; j < 8; ++j) sc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(kt + static_cast<size_t>(d) * 64 + 8 * j), qd, sc[j]);
    }
    for (int j = 0; j < 8; ++j) _mm256_store_ps(kq + 8 * j, _mm256_mul_ps(sc[j], _mm256_set1_ps(scale)));
}
__attribute__((target("avx512f"))) void tile_scores_512(const float* kt, const float* q, int dk, float scale, float* kq) {
    __m512 sc[4];
    for (auto& v : sc) v = _mm512_setzero_ps();
    for (int d = 0; d < dk; ++d) {
        const __m512 qd = _mm512_set1_ps(q[d]);
        for (int j = 0; j < 4; ++j) sc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(kt + static_cast<size_t>(d) * 64 + 16 * j), qd, sc[j]);
    }
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(kq + 16 * j, _mm512_mul_ps(sc[j], _mm512_set1_ps(scale)));
}
// acc[d..) += sum over the tile's positions of kq[i] * v[i][d] (v: the tile's first position, rows dv apart), in
// chunks of 128 and then 64 values from d; returns where it stopped (the rest take the 8-wide loop).
inline int tile_values_256(const float* v, int dv, const float* kq, int in_tile, float* acc, int d = 0) {
    for (; d + 64 <= dv; d += 64) {
        __m256 a[8];
        for (int j = 0; j < 8; ++j) a[j] = _mm256_loadu_ps(&acc[d + 8 * j]);
        for (int i = 0; i < in_tile; ++i) {
            if (kq[i] == 0.f) continue;
            const __m256 w = _mm256_set1_ps(kq[i]);
            const float* vi = v + static_cast<size_t>(i) * dv + d;
            for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(vi + 8 * j), w, a[j]);
        }
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(&acc[d + 8 * j], a[j]);
    }
    return d;
}
__attribute__((target("avx512f"))) int tile_values_512(const float* v, int dv, const float* kq, int in_tile, float* acc) {
    int d = 0;
    for (; d + 128 <= dv; d += 128) {
        __m512 a[8];
        for (int j = 0; j < 8; ++j) a[j] = _mm512_loadu_ps(&acc[d + 16 * j]);
        for (int i = 0; i < in_tile; ++i) {
            if (kq[i] == 0.f) continue;
            const __m512 w = _mm512_set1_ps(kq[i]);
            const float* vi = v + static_cast<size_t>(i) * dv + d;
            for (int j = 0; j < 8; ++j) a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(vi + 16 * j), w, a[j]);
        }
        for (int j = 0; j < 8; ++j) _mm512_storeu_ps(&acc[d + 16 * j], a[j]);
    }
    return tile_values_256(v, dv, kq, in_tile, acc, d);
}

// R query rows against one full tile from the f32 copies, the tile's keys and values loaded once for all R
// (one row at a time, a row's 64 x dk + 64 x dv multiply-adds stream 2 x 64 x dk floats from L2: that, not the
// arithmetic, bounded long prompts). Each row's score chains and value sums run in the one-row path's order;
// the value sums do not skip zero weights, which changes nothing while the tile's values are finite (a + 0 x v
// is a; the accumulators never hold -0), so callers check that first.
struct RowTile {
    const float* q;  // the row's query
    float* acc;      // its dv accumulators
    float* M;        // its running max and sum
    float* S;
};
template <int R>
__attribute__((target("avx512f"))) void tile_scores_rows_512(const float* kt, const RowTile* rows, int dk, float scale, float (*kq)[64]) {
    __m512 sc[R][4];
    for (auto& row : sc)
        for (auto& v : row) v = _mm512_setzero_ps();
    for (int d = 0; d < dk; ++d) {
        __m512 k[4];
        for (int j = 0; j < 4; ++j) k[j] = _mm512_loadu_ps(kt + static_cast<size_t>(d) * 64 + 16 * j);
        for (int r = 0; r < R; ++r) {
            const __m512 qd = _mm512_set1_ps(rows[r].q[d]);
            for (int j = 0; j < 4; ++j) sc[r][j] = _mm512_fmadd_ps(k[j], qd, sc[r][j]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < 4; ++j) _mm512_storeu_ps(kq[r] + 16 * j, _mm512_mul_ps(sc[r][j], _mm512_set1_ps(scale)));
}
template <int R>
__attribute__((target("avx512f"))) void tile_values_rows_512(const float* v, int dv, const float (*kq)[64], const RowTile* rows) {
    for (int d = 0; d < dv; d += 64) {
        __m512 a[R][4];
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < 4; ++j) a[r][j] = _mm512_loadu_ps(rows[r].acc + d + 16 * j);
        for (int i = 0; i < 64; ++i) {
            __m512 x[4];
            for (int j = 0; j < 4; ++j) x[j] = _mm512_loadu_ps(v + static_cast<size_t>(i) * dv + d + 16 * j);
            for (int r = 0; r < R; ++r) {
                const __m512 w = _mm512_set1_ps(kq[r][i]);
                for (int j = 0; j < 4; ++j) a[r][j] = _mm512_fmadd_ps(x[j], w, a[r][j]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < 4; ++j) _mm512_storeu_ps(rows[r].acc + d + 16 * j, a[r][j]);
    }
}
// The same in 256-bit registers (sixteen of them): R rows x W positions of scores, R rows x W dims of values,
// W = 64 / R so that R x W / 8 accumulators stay at eight.
template <int R>
void tile_scores_rows_256(const float* kt, const RowTile* rows, int dk, float scale, float (*kq)[64]) {
    constexpr int J = 8 / R, W = 8 * J;
    for (int part = 0; part < 64; part += W) {
        __m256 sc[R][J];
        for (auto& row : sc)
            for (auto& v : row) v = _mm256_setzero_ps();
        for (int d = 0; d < dk; ++d) {
            __m256 k[J];
            for (int j = 0; j < J; ++j) k[j] = _mm256_loadu_ps(kt + static_cast<size_t>(d) * 64 + part + 8 * j);
            for (int r = 0; r < R; ++r) {
                const __m256 qd = _mm256_set1_ps(rows[r].q[d]);
                for (int j = 0; j < J; ++j) sc[r][j] = _mm256_fmadd_ps(k[j], qd, sc[r][j]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < J; ++j) _mm256_storeu_ps(kq[r] + part + 8 * j, _mm256_mul_ps(sc[r][j], _mm256_set1_ps(scale)));
    }
}
template <int R>
void tile_values_rows_256(const float* v, int dv, const float (*kq)[64], const RowTile* rows) {
    constexpr int J = 8 / R, W = 8 * J;
    for (int d = 0; d < dv; d += W) {
        __m256 a[R][J];
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < J; ++j) a[r][j] = _mm256_loadu_ps(rows[r].acc + d + 8 * j);
        for (int i = 0; i < 64; ++i) {
            __m256 x[J];
            for (int j = 0; j < J; ++j) x[j] = _mm256_loadu_ps(v + static_cast<size_t>(i) * dv + d + 8 * j);
            for (int r = 0; r < R; ++r) {
                const __m256 w = _mm256_set1_ps(kq[r][i]);
                for (int j = 0; j < J; ++j) a[r][j] = _mm256_fmadd_ps(x[j], w, a[r][j]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < J; ++j) _mm256_storeu_ps(rows[r].acc + d + 8 * j, a[r][j]);
    }
}
// True when every value of the tile (64 positions x dv) is finite.
inline bool finite_values(const float* v, int count) {
    __m256 bad = _mm256_setzero_ps();
    const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity()), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int i = 0;
    for (; i + 8 <= count; i += 8) bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(v + i), abs_mask), inf, _CMP_NLT_UQ));
    bool ok = _mm256_movemask_ps(bad) == 0;
    for (; i < count; ++i) ok = ok && std::isfinite(v[i]);
    return ok;
}
// One full tile for R rows: scores, each row's softmax step, values. A row whose scores are all masked keeps
// its state (weights zeroed, so the shared value sums leave its accumulators as they are).
template <Flavor F, bool Wide, int R>
void tile_rows_step(const float* kt, const float* v, int dk, int dv, float scale, const uint8_t* visible, const RowTile* rows) {
    alignas(64) float kq[R][64];
    if constexpr (Wide) tile_scores_rows_512<R>(kt, rows, dk, scale, kq);
    else tile_scores_rows_256<R>(kt, rows, dk, scale, kq);
    bool any = false;
    for (int r = 0; r < R; ++r) {
        if (visible)
            for (int t = 0; t < 64; ++t)
                if (!visible[t]) kq[r][t] = -std::numeric_limits<float>::infinity();
        if (tiled_softmax_step8<F>(kq[r], *rows[r].M, *rows[r].S, rows[r].acc, dv)) any = true;
        else std::fill_n(kq[r], 64, 0.f);
    }
    if (!any) return;
    if constexpr (Wide) tile_values_rows_512<R>(v, dv, kq, rows);
    else tile_values_rows_256<R>(v, dv, kq, rows);
}

// Rows per block: four in both widths (AVX2's as 4 rows x 16 positions or dims, see tile_scores_rows_256), so a
// tile's keys and values stream from L2 once per four rows (AVX2 had two: 4,096-token prompt +11%).
inline constexpr int kRowBlock = 4;

// One query row over a sparse view (ops::KvView::positions): the tiles are llama.cpp's view positions, each
// holding the rows that sit in it (the others masked), so the bits are ops::float_ops' attend_tiled's. Scores
// eight rows at a time (transposed loads, the same FMA chain per row), values by position order.
template <Flavor F>
void attend_tiled_positions(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    constexpr int kTile = ggml::kFaTile;
    const int dk = kv.dk, dv = kv.dv;
    s.acc.assign(static_cast<size_t>(dv), 0.f);
    float* acc = s.acc.data();
    float M = kNegInf, S = 0.f;
    alignas(32) float kq[kTile];
    for (int j0 = 0; j0 < kv.n_kv;) {
        const int base = kv.positions[j0] / kTile * kTile;
        int j1 = j0;
        while (j1 < kv.n_kv && kv.positions[j1] < base + kTile) ++j1;
        std::fill_n(kq, kTile, kNegInf);
        int j = j0;
        for (; j + 8 <= j1; j += 8) {
            __m256 sc = _mm256_setzero_ps();
            int d = 0;
            for (; d + 8 <= dk; d += 8) {
                __m256 rows[8], cols[8];
                for (int p = 0; p < 8; ++p) rows[p] = load_f16x8(kv.k + static_cast<size_t>(j + p) * kv.k_stride + d);
                transpose8(rows, cols);
                for (int c = 0; c < 8; ++c) sc = _mm256_fmadd_ps(cols[c], _mm256_set1_ps(q[d + c]), sc);
            }
            alignas(32) float part[8];
            _mm256_store_ps(part, sc);
            for (; d < dk; ++d)
                for (int p = 0; p < 8; ++p) part[p] = std::fma(h2f(kv.k[static_cast<size_t>(j + p) * kv.k_stride + d]), q[d], part[p]);
            for (int p = 0; p < 8; ++p) kq[kv.positions[j + p] - base] = part[p] * scale;
        }
        for (; j < j1; ++j) {
            const uint16_t* kt = kv.k + static_cast<size_t>(j) * kv.k_stride;
            float sc = 0.f;
            for (int d = 0; d < dk; ++d) sc = std::fma(h2f(kt[d]), q[d], sc);
            kq[kv.positions[j] - base] = sc * scale;
        }
        if (kv.visible)
            for (j = j0; j < j1; ++j)
                if (!kv.visible[j]) kq[kv.positions[j] - base] = kNegInf;
        if (tiled_softmax_step8<F>(kq, M, S, acc, dv)) {
            int d = 0;
            for (; d + 8 <= dv; d += 8) {
                __m256 a = _mm256_loadu_ps(&acc[d]);
                for (j = j0; j < j1; ++j) {
                    const float w = kq[kv.positions[j] - base];
                    if (w != 0.f) a = _mm256_fmadd_ps(load_f16x8(kv.v + static_cast<size_t>(j) * kv.v_stride + d), _mm256_set1_ps(w), a);
                }
                _mm256_storeu_ps(&acc[d], a);
            }
            for (; d < dv; ++d) {
                float a = acc[d];
                for (j = j0; j < j1; ++j) {
                    const float w = kq[kv.positions[j] - base];
                    if (w != 0.f) a = std::fma(h2f(kv.v[static_cast<size_t>(j) * kv.v_stride + d]), w, a);
                }
                acc[d] = a;
            }
        }
        j0 = j1;
    }
    const float sink_scale = ops::apply_sink(kv, 0, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    for (int d = 0; d < dv; ++d) out[d] = acc[d] * sink_scale * inv;
}

// Several query rows (the heads that share a kv head) against one view, tile by tile, so that each tile of
// keys and values is read from memory once for all of them; each row's arithmetic is the one-row path's.
template <Flavor F, bool Wide>
void attend_tiled_group_impl(const float* q_rows, int64_t q_stride, int rows, const ops::KvView& kv, float scale, float* out_rows, int64_t out_stride,
                             ops::AttnScratch& s) {
    constexpr int kTile = ggml::kFaTile;
    const int dk = kv.dk, dv = kv.dv;
    s.acc.assign(static_cast<size_t>(rows) * dv, 0.f);
    s.max_sum.assign(static_cast<size_t>(rows) * 2, 0.f);
    for (int r = 0; r < rows; ++r) s.max_sum[2 * r] = kNegInf;
    alignas(32) float kq[kTile];
    // Each row's positions: all the same, or one more per token of a block (kv.rows_per_position).
    auto row_n_kv = [&](int r) { return kv.rows_per_position > 0 ? kv.n_kv + r / kv.rows_per_position : kv.n_kv; };
    const int most_kv = row_n_kv(rows - 1);
    for (int ic = 0; ic < most_kv; ic += kTile) {
        // A tile with no visible position (DSA's sparse selection) leaves the softmax state as it is
        // (tiled_softmax_step returns false): skip its scores.
        if (kv.visible && std::none_of(kv.visible + ic, kv.visible + std::min(most_kv, ic + kTile), [](uint8_t v) { return v != 0; })) continue;
        // Rows whose view holds the whole tile go R at a time through the f32 copies (rows are in position
        // order, so once one does, the rest do); the others, and tiles with non-finite values, row by row.
        constexpr int R = kRowBlock;
        int finite = -1;  // the tile's values: not yet checked
        for (int r = 0; r < rows; ++r) {
            if (kv.k_tiles && kv.v_f32 && dv % (Wide ? 64 : 32) == 0 && r + R <= rows && ic + kTile <= row_n_kv(r)) {
                const float* v = kv.v_f32 + static_cast<size_t>(ic) * dv;
                if (finite < 0) finite = finite_values(v, kTile * dv);
                if (finite) {
                    RowTile block[R];
                    for (int i = 0; i < R; ++i)
                        block[i] = {q_rows + (r + i) * q_stride, s.acc.data() + static_cast<size_t>(r + i) * dv, &s.max_sum[2 * (r + i)],
                                    &s.max_sum[2 * (r + i) + 1]};
                    tile_rows_step<F, Wide, R>(kv.k_tiles + static_cast<size_t>(ic / kTile) * dk * kTile, v, dk, dv, scale,
                                               kv.visible ? kv.visible + ic : nullptr, block);
                    r += R - 1;
                    continue;
                }
            }
            // Past a row's last position the tile is invisible to it: skipped, as a single-row call would.
            if (ic >= row_n_kv(r)) continue;
            const int in_tile = std::min(kTile, row_n_kv(r) - ic);
            const float* q = q_rows + r * q_stride;
            float* acc = s.acc.data() + static_cast<size_t>(r) * dv;
            float& M = s.max_sum[2 * r];
            float& S = s.max_sum[2 * r + 1];
            int t = 0;
            if (kv.k_tiles) {
                // The same FMA chain per position, its keys already f32 with positions side by side. A partial
                // tile (the diagonal one of a causal prompt) is allocated whole (float_ops.h): the scores past
                // its end are computed from whatever the copy holds there and masked below.
                const float* kt = kv.k_tiles + static_cast<size_t>(ic / kTile) * dk * kTile;
                if constexpr (Wide) tile_scores_512(kt, q, dk, scale, kq);
                else tile_scores_256(kt, q, dk, scale, kq);
                t = kTile;
            }
            for (; t + 8 <= in_tile; t += 8) {
                __m256 sc = _mm256_setzero_ps();
                int d = 0;
                for (; d + 8 <= dk; d += 8) {
                    __m256 rows[8], cols[8];
                    for (int p = 0; p < 8; ++p) rows[p] = load_f16x8(kv.k + static_cast<size_t>(ic + t + p) * kv.k_stride + d);
                    transpose8(rows, cols);
                    for (int j = 0; j < 8; ++j) sc = _mm256_fmadd_ps(cols[j], _mm256_set1_ps(q[d + j]), sc);
                }
                alignas(32) float part[8];
                _mm256_store_ps(part, sc);
                for (; d < dk; ++d)
                    for (int p = 0; p < 8; ++p) part[p] = std::fma(h2f(kv.k[static_cast<size_t>(ic + t + p) * kv.k_stride + d]), q[d], part[p]);
                _mm256_store_ps(kq + t, _mm256_mul_ps(_mm256_load_ps(part), _mm256_set1_ps(scale)));
            }
            for (; t < in_tile; ++t) {
                const uint16_t* kt = kv.k + static_cast<size_t>(ic + t) * kv.k_stride;
                float sc = 0.f;
                for (int d = 0; d < dk; ++d) sc = std::fma(h2f(kt[d]), q[d], sc);
                kq[t] = sc * scale;
            }
            for (t = 0; t < kTile; ++t)
                if (t >= in_tile || (kv.visible && !kv.visible[ic + t])) kq[t] = kNegInf;
            if (!tiled_softmax_step8<F>(kq, M, S, acc, dv)) continue;
            int d = 0;
            if (kv.v_f32) {
                const float* v = kv.v_f32 + static_cast<size_t>(ic) * dv;
                d = Wide ? tile_values_512(v, dv, kq, in_tile, acc) : tile_values_256(v, dv, kq, in_tile, acc);
            }
            for (; d + 8 <= dv; d += 8) {
                __m256 a = _mm256_loadu_ps(&acc[d]);
                if (kv.v_f32) {
                    for (int i = 0; i < in_tile; ++i)
                        if (kq[i] != 0.f)
                            a = _mm256_fmadd_ps(_mm256_loadu_ps(kv.v_f32 + static_cast<size_t>(ic + i) * dv + d), _mm256_set1_ps(kq[i]), a);
                } else {
                    for (int i = 0; i < in_tile; ++i)
                        if (kq[i] != 0.f)
                            a = _mm256_fmadd_ps(load_f16x8(kv.v + static_cast<size_t>(ic + i) * kv.v_stride + d), _mm256_set1_ps(kq[i]), a);
                }
                _mm256_storeu_ps(&acc[d], a);
            }
            for (int d = dv - dv % 8; d < dv; ++d) {
                float a = acc[d];
                for (int i = 0; i < in_tile; ++i)
                    if (kq[i] != 0.f) a = std::fma(h2f(kv.v[static_cast<size_t>(ic + i) * kv.v_stride + d]), kq[i], a);
                acc[d] = a;
            }
        }
    }
    for (int r = 0; r < rows; ++r) {
        float S = s.max_sum[2 * r + 1];
        const float sink_scale = ops::apply_sink(kv, r, s.max_sum[2 * r], S);
        const float inv = S == 0.f ? 0.f : 1.0f / S;
        const float* acc = s.acc.data() + static_cast<size_t>(r) * dv;
        for (int d = 0; d < dv; ++d) out_rows[r * out_stride + d] = acc[d] * sink_scale * inv;
    }
}

template <Flavor F, bool Wide>
void attend_tiled_f16c_impl(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    if (kv.positions) return attend_tiled_positions<F>(q, kv, scale, out, s);
    attend_tiled_group_impl<F, Wide>(q, 0, 1, kv, scale, out, 0, s);
}

}  // namespace

ops::SoftmaxStepFn tiled_softmax_step_f16c(Flavor f) {
    return f == Flavor::Avx512 ? &tiled_softmax_step8<Flavor::Avx512> : &tiled_softmax_step8<Flavor::Avx2>;
}

ops::AttendFn attend_typed_f16c() { return &attend_typed_f16c_impl; }
// (libm's exps in lanes on AVX-512 CPUs only, as the chunk kernels: qemu's AVX2-only CPU models round the lanes'
// packed FMA otherwise at times, and those are where the AVX2-only path is tested)
ops::AttendGroupFn attend_typed_group_f16c() {
    return __builtin_cpu_supports("avx512f") ? &attend_typed_group_f16c_impl<true> : &attend_typed_group_f16c_impl<false>;
}

ops::AttendFn attend_f16c(Flavor f) { return f == Flavor::Avx512 ? &attend_f16c_impl<Flavor::Avx512> : &attend_f16c_impl<Flavor::Avx2>; }
ops::AttendChunkFn attend_chunk_f16c(Flavor f) {
    return f == Flavor::Avx512 ? &attend_chunk_f16c_impl<Flavor::Avx512> : &attend_chunk_f16c_impl<Flavor::Avx2>;
}
bool libm_expf_lanes_match() { return libm_expf_checked(); }
void libm_expf_for_tests(const float* x, float* y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf8_lanes(_mm256_loadu_ps(x + i)));
    for (; i < n; ++i) y[i] = std::exp(x[i]);
}

ops::AttendChunkGroupFn attend_chunk_group_f16c(Flavor f, bool wide) {
    if (wide && !__builtin_cpu_supports("avx512f")) return nullptr;
    if (wide) return f == Flavor::Avx512 ? &attend_chunk_group_f16c_impl<Flavor::Avx512, true> : &attend_chunk_group_f16c_impl<Flavor::Avx2, true>;
    return f == Flavor::Avx512 ? &attend_chunk_group_f16c_impl<Flavor::Avx512, false> : &attend_chunk_group_f16c_impl<Flavor::Avx2, false>;
}

ops::AttendFn attend_tiled_f16c(Flavor f) {
    return f == Flavor::Avx512 ? &attend_tiled_f16c_impl<Flavor::Avx512, false> : &attend_tiled_f16c_impl<Flavor::Avx2, false>;
}

ops::AttendGroupFn attend_tiled_group(Flavor f, bool wide) {
    if (wide && !__builtin_cpu_supports("avx512f")) return nullptr;
    if (wide) return f == Flavor::Avx512 ? &attend_tiled_group_impl<Flavor::Avx512, true> : &attend_tiled_group_impl<Flavor::Avx2, true>;
    return f == Flavor::Avx512 ? &attend_tiled_group_impl<Flavor::Avx512, false> : &attend_tiled_group_impl<Flavor::Avx2, false>;
}

ops::AttendFn attend_tiled_avx512(Flavor f) {
    if (!__builtin_cpu_supports("avx512f")) return nullptr;
    return f == Flavor::Avx512 ? &attend_tiled_f16c_impl<Flavor::Avx512, true> : &attend_tiled_f16c_impl<Flavor::Avx2, true>;
}

}  // namespace moe::kernels

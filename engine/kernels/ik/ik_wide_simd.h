// AVX2 kernels for ik_llama.cpp's wide forms (ik_ref_wide.cpp has their layouts and reference): Q8_KV one row at a
// time, Q8_KV_R8 / Q8_K_R8 / MXFP4_R8 eight rows per register (lane k = row k), BF16_R16 sixteen rows in two
// registers, or one on CPUs with AVX512-BF16. Each token's integers are exact, and the float steps are the
// reference's, so every path gives its bits. Included by the AVX2 and AVX-512 translation units.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "engine/kernels/bf16_simd.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_k_r4_simd.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/simd_common.h"
#include "engine/kernels/token_passes.h"

namespace moe::kernels {
namespace {
namespace ikw {

inline float f32_at(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}
inline __m256i dword_of(const int8_t* p) { return _mm256_set1_epi32(ikr::u32_of(p)); }

// Q8_KV: one row against NY tokens, the row's bytes read once: (dx * dy) * the exact dot.
template <int NY>
void q8_kv_rows256(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                   int64_t out_stride) {
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
        __m256i acc[NY];
        for (auto& a : acc) a = _mm256_setzero_si256();
        for (int64_t i = 0; i < n; i += 32) {
            const __m256i x = load32(row + 8 + i), ux = _mm256_sign_epi8(x, x);
            for (int t = 0; t < NY; ++t) acc[t] = dot_us8_add(acc[t], ux, _mm256_sign_epi8(load32(act + t * act_bytes + 8 + i), x));
        }
        const float dx = f32_at(row);
        for (int t = 0; t < NY; ++t) out[t * out_stride + r] = (dx * f32_at(act + t * act_bytes)) * static_cast<float>(hsum_lanes(acc[t]));
    }
}

// Q8_KV_R8: per 16 values four registers of the group's rows' dwords; each token's dword broadcast.
template <int NY>
void q8_kv_r8_group8(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g0, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    for (int64_t g = g0; g < rows / 8; ++g) {
        const uint8_t* group = w + 8 * g * row_bytes;
        __m256i acc[NY];
        for (auto& a : acc) a = _mm256_setzero_si256();
        for (int64_t ib = 0; ib < n / 16; ++ib)
            for (int l = 0; l < 4; ++l) {
                const __m256i x = load32(group + 32 + 128 * ib + 32 * l), ux = _mm256_sign_epi8(x, x);
                for (int t = 0; t < NY; ++t) {
                    const auto* qy = reinterpret_cast<const int8_t*>(act + t * act_bytes + 8);
                    acc[t] = dot_us8_add(acc[t], ux, _mm256_sign_epi8(dword_of(qy + 16 * ib + 4 * l), x));
                }
            }
        const __m256 dx = _mm256_loadu_ps(reinterpret_cast<const float*>(group));
        for (int t = 0; t < NY; ++t)
            _mm256_storeu_ps(out + t * out_stride + 8 * g,
                             _mm256_mul_ps(_mm256_mul_ps(dx, _mm256_set1_ps(f32_at(act + t * act_bytes))), _mm256_cvtepi32_ps(acc[t])));
    }
}

// Q8_K_R8: per 256 the exact sums, then acc = fma(d * y.d, isum, acc).
template <int NY>
void q8_k_r8_group8(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g0, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    constexpr size_t kBlock = 16 + 8 * 256;
    for (int64_t g = g0; g < rows / 8; ++g) {
        const uint8_t* group = w + 8 * g * row_bytes;
        __m256 acc[NY];
        for (auto& a : acc) a = _mm256_setzero_ps();
        for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
            const uint8_t* block = group + ibl * kBlock;
            __m256i isum[NY];
            for (auto& s : isum) s = _mm256_setzero_si256();
            for (int c = 0; c < 64; ++c) {
                const __m256i x = load32(block + 16 + 32 * c), ux = _mm256_sign_epi8(x, x);
                for (int t = 0; t < NY; ++t) {
                    const auto& y = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes)[ibl];
                    isum[t] = dot_us8_add(isum[t], ux, _mm256_sign_epi8(dword_of(y.qs + 4 * c), x));
                }
            }
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block)));
            for (int t = 0; t < NY; ++t) {
                const auto& y = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes)[ibl];
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(y.d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
            }
        }
        for (int t = 0; t < NY; ++t) _mm256_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
    }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// The 8-bit forms on VNNI CPUs, sixteen rows (two groups) or 64 values per 512-bit register: the weights made
// unsigned (x ^ 0x80 = x + 128) once for every token's VPDPBUSD, 128 times the span's activation sum taken back
// (wrapping int32 arithmetic, so the difference is the exact dot wherever it fits, as the reference's does).
inline int32_t i32_at(const uint8_t* p) { return ikr::u32_of(reinterpret_cast<const int8_t*>(p)); }
inline __m512i two_groups(const uint8_t* a, const uint8_t* b) {
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(load32(a)), load32(b), 1), _mm512_set1_epi8(static_cast<char>(0x80)));
}
template <int NY>
void q8_kv_r8_group16(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    const uint8_t* g0 = w + 8 * g * row_bytes;
    const uint8_t* g1 = w + 8 * (g + 1) * row_bytes;
    __m512i acc[NY], acc2[NY];  // (two chains of VPDPBUSD per token: few tokens would wait on its latency)
    for (int t = 0; t < NY; ++t) acc[t] = acc2[t] = _mm512_setzero_si512();
    for (int64_t ib = 0; ib < n / 16; ++ib)
        for (int l = 0; l < 4; l += 2) {
            const __m512i x0 = two_groups(g0 + 32 + 128 * ib + 32 * l, g1 + 32 + 128 * ib + 32 * l);
            const __m512i x1 = two_groups(g0 + 64 + 128 * ib + 32 * l, g1 + 64 + 128 * ib + 32 * l);
            for (int t = 0; t < NY; ++t) {
                acc[t] = _mm512_dpbusd_epi32(acc[t], x0, _mm512_set1_epi32(i32_at(act + t * act_bytes + 8 + 16 * ib + 4 * l)));
                acc2[t] = _mm512_dpbusd_epi32(acc2[t], x1, _mm512_set1_epi32(i32_at(act + t * act_bytes + 12 + 16 * ib + 4 * l)));
            }
        }
    for (int t = 0; t < NY; ++t) acc[t] = _mm512_add_epi32(acc[t], acc2[t]);
    const __m512 dx = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_loadu_pd(reinterpret_cast<const double*>(g0))),
                                                          _mm256_loadu_pd(reinterpret_cast<const double*>(g1)), 1));  // the two groups' scales
    for (int t = 0; t < NY; ++t) {
        const __m512i isum = _mm512_sub_epi32(acc[t],
                                              _mm512_set1_epi32(static_cast<int32_t>(128u * static_cast<uint32_t>(i32_at(act + t * act_bytes + 4)))));
        _mm512_storeu_ps(out + t * out_stride + 8 * g,
                         _mm512_mul_ps(_mm512_mul_ps(dx, _mm512_set1_ps(f32_at(act + t * act_bytes))), _mm512_cvtepi32_ps(isum)));
    }
}
template <int NY>
void q8_k_r8_group16(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    constexpr size_t kBlock = 16 + 8 * 256;
    const uint8_t* g0 = w + 8 * g * row_bytes;
    const uint8_t* g1 = w + 8 * (g + 1) * row_bytes;
    __m512 acc[NY];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t ibl = 0; ibl < n / ik::QK_K; ++ibl) {
        const uint8_t* b0 = g0 + ibl * kBlock;
        const uint8_t* b1 = g1 + ibl * kBlock;
        __m512i isum[NY], isum2[NY];  // (two chains, as above)
        for (int t = 0; t < NY; ++t) isum[t] = isum2[t] = _mm512_setzero_si512();
        for (int c = 0; c < 64; c += 2) {
            const __m512i x0 = two_groups(b0 + 16 + 32 * c, b1 + 16 + 32 * c), x1 = two_groups(b0 + 48 + 32 * c, b1 + 48 + 32 * c);
            for (int t = 0; t < NY; ++t) {
                const auto* qy = reinterpret_cast<const uint8_t*>(reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes)[ibl].qs);
                isum[t] = _mm512_dpbusd_epi32(isum[t], x0, _mm512_set1_epi32(i32_at(qy + 4 * c)));
                isum2[t] = _mm512_dpbusd_epi32(isum2[t], x1, _mm512_set1_epi32(i32_at(qy + 4 * c + 4)));
            }
        }
        for (int t = 0; t < NY; ++t) isum[t] = _mm512_add_epi32(isum[t], isum2[t]);
        const __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0))),
                                                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1)), 1));
        for (int t = 0; t < NY; ++t) {
            const auto& y = reinterpret_cast<const ik::BlockQ8K*>(act + t * act_bytes)[ibl];
            const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)), _mm256_set1_epi16(1));
            const __m512i exact = _mm512_sub_epi32(isum[t], _mm512_set1_epi32(128 * hsum_lanes(bs)));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(y.d)), _mm512_cvtepi32_ps(exact), acc[t]);
        }
    }
    for (int t = 0; t < NY; ++t) _mm512_storeu_ps(out + t * out_stride + 8 * g, acc[t]);
}
// Q8_KV, R rows against NY tokens: 64 values a step (each token's load serves the R rows), a 32-value tail through
// the sign steps.
template <int NY, int R>
void q8_kv_rows512_pass(int64_t n, const uint8_t* first, size_t row_bytes, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i acc[R][NY];
    for (auto& row : acc)
        for (auto& a : row) a = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i x[R];
        for (int r = 0; r < R; ++r) x[r] = _mm512_xor_si512(_mm512_loadu_si512(first + r * row_bytes + 8 + i), flip);
        for (int t = 0; t < NY; ++t) {
            const __m512i y = _mm512_loadu_si512(act + t * act_bytes + 8 + i);
            for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], x[r], y);
        }
    }
    for (int r = 0; r < R; ++r) {
        const uint8_t* row = first + r * row_bytes;
        const float dx = f32_at(row);
        for (int t = 0; t < NY; ++t) {
            const uint8_t* y = act + t * act_bytes;
            int32_t isum = _mm512_reduce_add_epi32(acc[r][t]) - static_cast<int32_t>(128u * static_cast<uint32_t>(i32_at(y + 4)));
            if (i < n) {  // the last 32: their share of the stored sum goes back in with them
                const __m256i x = load32(row + 8 + i), yt = load32(y + 8 + i);
                isum += hsum_lanes(dot_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(yt, x))) + 128 * hsum_lanes(dot_us8(_mm256_set1_epi8(1), yt));
            }
            out[t * out_stride + r] = (dx * f32_at(y)) * static_cast<float>(isum);
        }
    }
}
template <int NY>
void q8_kv_rows512(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                   int64_t out_stride) {
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2)
        q8_kv_rows512_pass<NY, 2>(n, w + static_cast<size_t>(r) * row_bytes, row_bytes, act, act_bytes, out + r, out_stride);
    if (r < rows) q8_kv_rows512_pass<NY, 1>(n, w + static_cast<size_t>(r) * row_bytes, row_bytes, act, act_bytes, out + r, out_stride);
}
#endif

// The 8-bit forms' entry points: the 512-bit paths where this unit has them (a last odd group in eight lanes).
template <int NY>
void q8_kv_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    q8_kv_rows512<NY>(n, w, row_bytes, rows, act, act_bytes, out, out_stride);
#else
    q8_kv_rows256<NY>(n, w, row_bytes, rows, act, act_bytes, out, out_stride);
#endif
}
template <int NY>
void q8_kv_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    int64_t g = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (; g + 2 <= rows / 8; g += 2) q8_kv_r8_group16<NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
#endif
    q8_kv_r8_group8<NY>(n, w, row_bytes, g, rows, act, act_bytes, out, out_stride);
}
template <int NY>
void q8_k_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                    int64_t out_stride) {
    int64_t g = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (; g + 2 <= rows / 8; g += 2) q8_k_r8_group16<NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
#endif
    q8_k_r8_group8<NY>(n, w, row_bytes, g, rows, act, act_bytes, out, out_stride);
}

inline float dot_q8_kv(int64_t n, const void* w, const void* a) {
    float out;
    q8_kv_tokens<1>(n, static_cast<const uint8_t*>(w), 0, 1, static_cast<const uint8_t*>(a), 0, &out, 0);
    return out;
}

// MXFP4_R8: the values + 12 from a byte table (0..24, unsigned), each 32 bytes holding four values' nibbles of the
// eight rows, low nibbles values 4c.., high ones 16 + 4c..; half the E8M0 scale as ggml's GGML_E8M0_TO_FP32_HALF.
// MXFP4's values + 12 (0..24, unsigned): the table in each 128-bit lane.
alignas(16) inline constexpr std::array<int8_t, 16> kMxfp4Unsigned = [] {
    std::array<int8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<int8_t>(iq::kValuesFp4[i] + 12);
    return t;
}();
// Up to four Q8_2_X4 blocks of NY tokens from block b0: scales, sums and values.
template <int NY>
struct X4Blocks {
    float dy[NY][4];
    int ysum[NY][4];
    const int8_t* qy[NY][4];
    X4Blocks(const uint8_t* act, size_t act_bytes, int64_t b0, int nblk, int64_t grouped) {
        for (int t = 0; t < NY; ++t)
            for (int r = 0; r < nblk; ++r) qy[t][r] = ikr::x4_block(act + t * act_bytes, b0 + r, grouped, dy[t][r], ysum[t][r]);
    }
};
inline __m256 e8m0_half8(const uint8_t* e) {
    const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(x, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_slli_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(1)), 21);  // e = 0, 1: 2^-128, 2^-127
    return _mm256_castsi256_ps(_mm256_blendv_epi8(small, normal, _mm256_cmpgt_epi32(x, _mm256_set1_epi32(1))));
}
// A block's eight rows against a token's 32 activations: lo[c] / hi[c] meet dword c of the first / second 16. The
// values are at most 24, so on AVX2 four PMADDUBSW pair sums add in int16 (within 4 * 2 * 24 * 127) before each
// PMADDWD, as ik's AVX2 kernel adds two; with VNNI one VPDPBUSD chain each. The same exact integers.
inline __m256i mxfp4_r8_sums(const __m256i lo[4], const __m256i hi[4], const int8_t* qy) {
    const __m256i yl = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qy)));
    const __m256i yh = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qy + 16)));
    const __m256i l[4] = {_mm256_shuffle_epi32(yl, 0x00), _mm256_shuffle_epi32(yl, 0x55), _mm256_shuffle_epi32(yl, 0xaa),
                          _mm256_shuffle_epi32(yl, 0xff)};
    const __m256i h[4] = {_mm256_shuffle_epi32(yh, 0x00), _mm256_shuffle_epi32(yh, 0x55), _mm256_shuffle_epi32(yh, 0xaa),
                          _mm256_shuffle_epi32(yh, 0xff)};
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();  // (two chains)
    for (int c = 0; c < 4; ++c) a = _mm256_dpbusd_epi32(a, lo[c], l[c]), b = _mm256_dpbusd_epi32(b, hi[c], h[c]);
    return _mm256_add_epi32(a, b);
#else
    const __m256i a = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo[0], l[0]), _mm256_maddubs_epi16(lo[1], l[1])),
                                       _mm256_add_epi16(_mm256_maddubs_epi16(lo[2], l[2]), _mm256_maddubs_epi16(lo[3], l[3])));
    const __m256i b = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(hi[0], h[0]), _mm256_maddubs_epi16(hi[1], h[1])),
                                       _mm256_add_epi16(_mm256_maddubs_epi16(hi[2], h[2]), _mm256_maddubs_epi16(hi[3], h[3])));
    const __m256i ones = _mm256_set1_epi16(1);
    return _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(b, ones));
#endif
}
template <bool Lone, int NY>
void mxfp4_r8_group8(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g0, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    constexpr size_t kBlock = 8 + 8 * 16;
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4Unsigned.data())));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256 minus12 = _mm256_set1_ps(-12.f);
    const auto values = [&](const uint8_t* block, __m256i lo[4], __m256i hi[4]) {
        for (int c = 0; c < 4; ++c) {
            const __m256i q = load32(block + 8 + 32 * c);
            lo[c] = _mm256_shuffle_epi8(table, _mm256_and_si256(q, low4));
            hi[c] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), low4));
        }
    };
    for (int64_t g = g0; g < rows / 8; ++g) {
        const uint8_t* group = w + 8 * g * row_bytes;
        __m256 acc[NY], acc_min[NY];
        for (int t = 0; t < NY; ++t) acc[t] = acc_min[t] = _mm256_setzero_ps();
        alignas(32) float dys[NY][8];  // per token: y.d of the four blocks, then y.d * sum
        for (int64_t g4 = 0; g4 < grouped / 4; ++g4) {
            __m256 dw[4];
            for (int r = 0; r < 4; ++r) dw[r] = e8m0_half8(group + (4 * g4 + r) * kBlock);
            for (int t = 0; t < NY; ++t) {
                const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(act + t * act_bytes)[g4];
                const __m128 dy = ikr::x4_scales(yg);
                const __m128 my = _mm_mul_ps(dy, ikr::x4_sums(yg));
                _mm_store_ps(dys[t], dy), _mm_store_ps(dys[t] + 4, my);
                if constexpr (!Lone) {  // a call of several columns folds each group of four blocks' corrections in first
                    __m256 sum = _mm256_mul_ps(dw[0], _mm256_broadcast_ss(&dys[t][4]));
                    for (int r = 1; r < 4; ++r) sum = _mm256_fmadd_ps(dw[r], _mm256_broadcast_ss(&dys[t][4 + r]), sum);
                    acc[t] = _mm256_fmadd_ps(sum, minus12, acc[t]);
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r) {
                __m256i lo[4], hi[4];
                values(group + (4 * g4 + r) * kBlock, lo, hi);
                for (int t = 0; t < NY; ++t) {
                    const auto& yg = reinterpret_cast<const ik::BlockQ8_2x4*>(act + t * act_bytes)[g4];
                    const __m256i isum = mxfp4_r8_sums(lo, hi, yg.qs + 32 * r);
                    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], _mm256_broadcast_ss(&dys[t][r])), _mm256_cvtepi32_ps(isum), acc[t]);
                    if constexpr (Lone) acc_min[t] = _mm256_fmadd_ps(dw[r], _mm256_broadcast_ss(&dys[t][4 + r]), acc_min[t]);
                }
            }
        }
        for (int64_t b = grouped; b < nb; ++b) {  // blocks after the last group of four
            const uint8_t* block = group + b * kBlock;
            const __m256 dw = e8m0_half8(block);
            __m256i lo[4], hi[4];
            values(block, lo, hi);
            for (int t = 0; t < NY; ++t) {
                float dy;
                int ysum;
                const int8_t* qy = ikr::x4_block(act + t * act_bytes, b, grouped, dy, ysum);
                const __m256 my = _mm256_set1_ps(dy * static_cast<float>(ysum));
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dy)), _mm256_cvtepi32_ps(mxfp4_r8_sums(lo, hi, qy)), acc[t]);
                if constexpr (Lone) acc_min[t] = _mm256_fmadd_ps(dw, my, acc_min[t]);
                else acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, minus12), my, acc[t]);
            }
        }
        for (int t = 0; t < NY; ++t) _mm256_storeu_ps(out + t * out_stride + 8 * g, Lone ? _mm256_fmadd_ps(acc_min[t], minus12, acc[t]) : acc[t]);
    }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// The same sixteen rows (two groups) per 512-bit register: each row's lane does the eight-row kernel's steps.
inline __m512 e8m0_half16(const uint8_t* e0, const uint8_t* e1) {
    const __m512i x = _mm512_cvtepu8_epi32(
        _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e0)), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(e1))));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(x, _mm512_set1_epi32(1)), 23);
    const __m512i small = _mm512_slli_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(1)), 21);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(x, _mm512_set1_epi32(1)), small, normal));
}
template <bool Lone, int NY>
void mxfp4_r8_group16(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g, const uint8_t* act, size_t act_bytes, float* out,
                      int64_t out_stride) {
    constexpr size_t kBlock = 8 + 8 * 16;
    const int64_t nb = n / 32, grouped = 4 * (n / 128);
    const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4Unsigned.data())));
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512 minus12 = _mm512_set1_ps(-12.f);
    const uint8_t* g0 = w + 8 * g * row_bytes;
    const uint8_t* g1 = w + 8 * (g + 1) * row_bytes;
    __m512 acc[NY], acc_min[NY];
    for (int t = 0; t < NY; ++t) acc[t] = acc_min[t] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
        const int nblk = static_cast<int>(std::min<int64_t>(4, nb - b0));
        __m512 dw[4];
        for (int r = 0; r < nblk; ++r) dw[r] = e8m0_half16(g0 + (b0 + r) * kBlock, g1 + (b0 + r) * kBlock);
        const X4Blocks<NY> xb(act, act_bytes, b0, nblk, grouped);
        const auto& dy = xb.dy;
        const auto& ysum = xb.ysum;
        const auto& qy = xb.qy;
        if constexpr (!Lone)
            if (b0 < grouped)
                for (int t = 0; t < NY; ++t) {
                    __m512 sum = _mm512_mul_ps(dw[0], _mm512_set1_ps(dy[t][0] * static_cast<float>(ysum[t][0])));
                    for (int r = 1; r < 4; ++r) sum = _mm512_fmadd_ps(dw[r], _mm512_set1_ps(dy[t][r] * static_cast<float>(ysum[t][r])), sum);
                    acc[t] = _mm512_fmadd_ps(sum, minus12, acc[t]);
                }
        for (int r = 0; r < nblk; ++r) {
            const uint8_t* b0p = g0 + (b0 + r) * kBlock;
            const uint8_t* b1p = g1 + (b0 + r) * kBlock;
            __m512i lo[4], hi[4];
            for (int c = 0; c < 4; ++c) {
                const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(load32(b0p + 8 + 32 * c)), load32(b1p + 8 + 32 * c), 1);
                lo[c] = _mm512_shuffle_epi8(table, _mm512_and_si512(q, low4));
                hi[c] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), low4));
            }
            for (int t = 0; t < NY; ++t) {
                __m512i isum = _mm512_setzero_si512(), isum2 = _mm512_setzero_si512();
                for (int c = 0; c < 4; ++c) {
                    isum = _mm512_dpbusd_epi32(isum, lo[c], _mm512_set1_epi32(i32_at(reinterpret_cast<const uint8_t*>(qy[t][r]) + 4 * c)));
                    isum2 = _mm512_dpbusd_epi32(isum2, hi[c], _mm512_set1_epi32(i32_at(reinterpret_cast<const uint8_t*>(qy[t][r]) + 16 + 4 * c)));
                }
                isum = _mm512_add_epi32(isum, isum2);
                const __m512 my = _mm512_set1_ps(dy[t][r] * static_cast<float>(ysum[t][r]));
                acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], _mm512_set1_ps(dy[t][r])), _mm512_cvtepi32_ps(isum), acc[t]);
                if constexpr (Lone) acc_min[t] = _mm512_fmadd_ps(dw[r], my, acc_min[t]);
                else if (b0 >= grouped) acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], minus12), my, acc[t]);
            }
        }
    }
    for (int t = 0; t < NY; ++t) _mm512_storeu_ps(out + t * out_stride + 8 * g, Lone ? _mm512_fmadd_ps(acc_min[t], minus12, acc[t]) : acc[t]);
}
#endif
template <bool Lone, int NY>
void mxfp4_r8_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    int64_t g = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    for (; g + 2 <= rows / 8; g += 2) mxfp4_r8_group16<Lone, NY>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
#endif
    mxfp4_r8_group8<Lone, NY>(n, w, row_bytes, g, rows, act, act_bytes, out, out_stride);
}

// BF16_R16: per pair of values the group's sixteen rows' (even, odd) dwords against the token's pair, broadcast;
// emulated VDPBF16PS in two registers of eight rows.
template <int NY>
void bf16_r16_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                     int64_t out_stride) {
    for (int64_t g = 0; g < rows / 16; ++g) {
        const uint8_t* group = w + 16 * g * row_bytes;
        __m256 acc[NY][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
        for (int64_t p = 0; p < n / 2; ++p) {
            const __m256i x0 = load32(group + 64 * p), x1 = load32(group + 64 * p + 32);
            for (int t = 0; t < NY; ++t) {
                int pair;
                std::memcpy(&pair, act + t * act_bytes + 4 * p, 4);
                const __m256i y = _mm256_set1_epi32(pair);
                acc[t][0] = dpbf16(acc[t][0], x0, y);
                acc[t][1] = dpbf16(acc[t][1], x1, y);
            }
        }
        for (int t = 0; t < NY; ++t) {
            _mm256_storeu_ps(out + t * out_stride + 16 * g, acc[t][0]);
            _mm256_storeu_ps(out + t * out_stride + 16 * g + 8, acc[t][1]);
        }
    }
}

#if defined(__AVX512F__)
// The same with VDPBF16PS itself, sixteen rows per register (ik's own kernel), G groups a pass so that few tokens
// still keep several accumulation chains in flight.
template <int NY, int G>
__attribute__((target("avx512bf16"))) void bf16_r16_groups_native(int64_t n, const uint8_t* w, size_t row_bytes, int64_t g0, const uint8_t* act,
                                                                  size_t act_bytes, float* out, int64_t out_stride) {
    __m512 acc[NY][G];
    for (auto& a : acc)
        for (auto& r : a) r = _mm512_setzero_ps();
    for (int64_t p = 0; p < n / 2; ++p) {
        __m512i x[G];
        for (int j = 0; j < G; ++j) x[j] = _mm512_loadu_si512(w + 16 * (g0 + j) * row_bytes + 64 * p);
        for (int t = 0; t < NY; ++t) {
            int pair;
            std::memcpy(&pair, act + t * act_bytes + 4 * p, 4);
            const __m512bh y = (__m512bh)_mm512_set1_epi32(pair);
            for (int j = 0; j < G; ++j) acc[t][j] = _mm512_dpbf16_ps(acc[t][j], (__m512bh)x[j], y);
        }
    }
    for (int t = 0; t < NY; ++t)
        for (int j = 0; j < G; ++j) _mm512_storeu_ps(out + t * out_stride + 16 * (g0 + j), acc[t][j]);
}
template <int NY>
void bf16_r16_tokens_native(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, float* out,
                            int64_t out_stride) {
    constexpr int kG = NY == 1 ? 4 : NY == 2 ? 2 : 1;
    int64_t g = 0;
    for (; g + kG <= rows / 16; g += kG) bf16_r16_groups_native<NY, kG>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
    for (; g < rows / 16; ++g) bf16_r16_groups_native<NY, 1>(n, w, row_bytes, g, act, act_bytes, out, out_stride);
}
#endif

// Kernels by token count, as ik_r4_simd.h's rows_one / tokens_tile take them.
template <int NY>
struct Q8KvR8 {
    static constexpr auto run = q8_kv_r8_tokens<NY>;
};
template <int NY>
struct Q8KR8 {
    static constexpr auto run = q8_k_r8_tokens<NY>;
};
template <int NY>
struct Q8Kv {
    static constexpr auto run = q8_kv_tokens<NY>;
};
template <bool Lone>
struct Mxfp4R8 {
    template <int NY>
    struct Of {
        static constexpr auto run = mxfp4_r8_tokens<Lone, NY>;
    };
};
template <int NY>
struct Bf16R16 {
    static constexpr auto run = bf16_r16_tokens<NY>;
};
#if defined(__AVX512F__)
template <int NY>
struct Bf16R16Native {
    static constexpr auto run = bf16_r16_tokens_native<NY>;
};
#endif

}  // namespace ikw
}  // namespace
}  // namespace moe::kernels

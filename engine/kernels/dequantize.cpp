// Weights to floats, every computable type, with the float expressions of ggml's dequantize_row_<type> (ggml-quants.c,
// a C file: products and sums rounded one by one): the token embedding lookup (get_rows) must give llama.cpp's bits.
#include <immintrin.h>

#include <cstring>
#include <stdexcept>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_decode.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/ik/ik_trellis.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/quant_decode.h"

namespace moe::kernels {
namespace {

using namespace quant;

template <class Block, class Fn>
void each_block(const void* src, int64_t n, int block_elems, Fn fn) {
    auto* x = static_cast<const Block*>(src);
    for (int64_t b = 0; b < n / block_elems; ++b) fn(x[b], b * block_elems);
}

inline float sign_f(int s) { return s < 0 ? -1.f : 1.f; }

// fp16 rows (the caches' keys, read back for the DSA indexers every token) eight values per VCVTPH2PS, which is
// ggml's own conversion on F16C builds; the table elsewhere.
__attribute__((target("avx,f16c"))) void fp16_row_f16c(const uint16_t* h, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    for (; i < n; ++i) y[i] = fp16_to_fp32_lut(h[i]);
}
void fp16_row(const uint16_t* h, float* y, int64_t n) {
    static const bool f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    if (f16c) return fp16_row_f16c(h, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32_lut(h[i]);
}

// Q8_0 and BF16 rows (quantized caches' keys, read back for the DSA indexers every token) eight values per
// instruction: d times an int8 is exact in float, and BF16 is its top half, so these are the scalar loops' bits.
__attribute__((target("avx2"))) void q8_0_row_avx2(const BlockQ8_0* x, float* y, int64_t blocks) {
    for (int64_t b = 0; b < blocks; ++b) {
        const __m256 d = _mm256_set1_ps(fp16_to_fp32(x[b].d));
        for (int k = 0; k < 4; ++k) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[b].qs + 8 * k)));
            _mm256_storeu_ps(y + 32 * b + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
        }
    }
}
__attribute__((target("avx2"))) void bf16_row_avx2(const uint16_t* h, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; ++i) y[i] = bf16_to_fp32(h[i]);
}
bool has_avx2() {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    return avx2;
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* y, int64_t n) {
    switch (t) {
        case GgmlType::F32: std::memcpy(y, src, static_cast<size_t>(n) * 4); return;
        case GgmlType::F16: fp16_row(static_cast<const uint16_t*>(src), y, n); return;
        case GgmlType::BF16:
            if (has_avx2()) return bf16_row_avx2(static_cast<const uint16_t*>(src), y, n);
            for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(static_cast<const uint16_t*>(src)[i]);
            return;
        case GgmlType::Q8_0:
            if (has_avx2()) return q8_0_row_avx2(static_cast<const BlockQ8_0*>(src), y, n / 32);
            each_block<BlockQ8_0>(src, n, 32, [&](const BlockQ8_0& b, int64_t o) {
                for (int j = 0; j < 32; ++j) y[o + j] = fp16_to_fp32(b.d) * b.qs[j];
            });
            return;
        case GgmlType::Q4_0:
            each_block<BlockQ4_0>(src, n, 32, [&](const BlockQ4_0& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int j = 0; j < 32; ++j) y[o + j] = (nibble(b.qs, j) - 8) * d;
            });
            return;
        case GgmlType::Q4_1:
            each_block<BlockQ4_1>(src, n, 32, [&](const BlockQ4_1& b, int64_t o) {
                const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
                for (int j = 0; j < 32; ++j) y[o + j] = nibble(b.qs, j) * d + m;
            });
            return;
        case GgmlType::Q5_0:
            each_block<BlockQ5_0>(src, n, 32, [&](const BlockQ5_0& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int j = 0; j < 32; ++j) y[o + j] = ((nibble(b.qs, j) | (q5_high(b.qh, j) << 4)) - 16) * d;
            });
            return;
        case GgmlType::Q5_1:
            each_block<BlockQ5_1>(src, n, 32, [&](const BlockQ5_1& b, int64_t o) {
                const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
                for (int j = 0; j < 32; ++j) y[o + j] = (nibble(b.qs, j) | (q5_high(b.qh, j) << 4)) * d + m;
            });
            return;
        case GgmlType::MXFP4:
            each_block<BlockMXFP4>(src, n, 32, [&](const BlockMXFP4& b, int64_t o) {
                const float d = e8m0_half(b.e);
                for (int j = 0; j < 32; ++j) y[o + j] = iq::kValuesFp4[nibble(b.qs, j)] * d;
            });
            return;
        case GgmlType::IQ4_NL:
            each_block<BlockIQ4_NL>(src, n, 32, [&](const BlockIQ4_NL& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int j = 0; j < 32; ++j) y[o + j] = d * iq::kValuesIq4nl[nibble(b.qs, j)];
            });
            return;
        case GgmlType::IQ4_XS:
            each_block<BlockIQ4_XS>(src, n, QK_K, [&](const BlockIQ4_XS& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) y[o + e] = (d * iq4xs_scale(b, e / 32)) * iq4xs_value(b, e);
            });
            return;
        case GgmlType::Q2_K:
            each_block<BlockQ2_K>(src, n, QK_K, [&](const BlockQ2_K& b, int64_t o) {
                const float d = fp16_to_fp32(b.d), min = fp16_to_fp32(b.dmin);
                for (int e = 0; e < QK_K; ++e) {
                    const float dl = d * q2k_scale(b, e / 16), ml = min * q2k_min(b, e / 16);
                    y[o + e] = dl * q2k_value(b, e) - ml;
                }
            });
            return;
        case GgmlType::Q3_K:
            each_block<BlockQ3_K>(src, n, QK_K, [&](const BlockQ3_K& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                int8_t sc[16];
                q3k_scales(b, sc);
                for (int e = 0; e < QK_K; ++e) y[o + e] = (d * sc[e / 16]) * q3k_value(b, e);
            });
            return;
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: {
            const bool five = t == GgmlType::Q5_K;
            for (int64_t b = 0; b < n / QK_K; ++b) {
                const uint8_t *scales, *qs, *qh = nullptr;
                float d, dmin;
                if (five) {
                    auto& blk = static_cast<const BlockQ5_K*>(src)[b];
                    scales = blk.scales;
                    qs = blk.qs;
                    qh = blk.qh;
                    d = fp16_to_fp32(blk.d);
                    dmin = fp16_to_fp32(blk.dmin);
                } else {
                    auto& blk = static_cast<const BlockQ4_K*>(src)[b];
                    scales = blk.scales;
                    qs = blk.qs;
                    d = fp16_to_fp32(blk.d);
                    dmin = fp16_to_fp32(blk.dmin);
                }
                for (int j = 0; j < 8; ++j) {
                    uint8_t sc, m;
                    k_scale_min(j, scales, sc, m);
                    const float d1 = d * sc, m1 = dmin * m;
                    for (int l = 0; l < 32; ++l) {
                        int q = (j & 1) ? (qs[(j / 2) * 32 + l] >> 4) : (qs[(j / 2) * 32 + l] & 0xF);
                        if (five) q |= ((qh[l] >> j) & 1) << 4;
                        y[b * QK_K + j * 32 + l] = d1 * q - m1;
                    }
                }
            }
            return;
        }
        case GgmlType::Q6_K:
            each_block<BlockQ6_K>(src, n, QK_K, [&](const BlockQ6_K& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) y[o + e] = d * b.scales[e / 16] * (q6_value(b, e) - 32);
            });
            return;
        case GgmlType::IQ2_XXS:
            each_block<BlockIQ2_XXS>(src, n, QK_K, [&](const BlockIQ2_XXS& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) {
                    const float db = d * (0.5f + iq2xxs_scale(b, e / 32)) * 0.25f;
                    const int v = iq2xxs_value(b, e);
                    y[o + e] = db * (v < 0 ? -v : v) * sign_f(v);
                }
            });
            return;
        case GgmlType::IQ2_XS:
            each_block<BlockIQ2_XS>(src, n, QK_K, [&](const BlockIQ2_XS& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) {
                    const float db = d * (0.5f + iq2xs_scale(b, e)) * 0.25f;
                    const int v = iq2xs_value(b, e);
                    y[o + e] = db * (v < 0 ? -v : v) * sign_f(v);
                }
            });
            return;
        case GgmlType::IQ2_S:
            each_block<BlockIQ2_S>(src, n, QK_K, [&](const BlockIQ2_S& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) {
                    const float db = d * (0.5f + iq2s_scale(b, e)) * 0.25f;
                    const int v = iq2s_value(b, e);
                    y[o + e] = db * (v < 0 ? -v : v) * sign_f(v);
                }
            });
            return;
        case GgmlType::IQ3_XXS:
            each_block<BlockIQ3_XXS>(src, n, QK_K, [&](const BlockIQ3_XXS& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) {
                    const float db = d * (0.5f + iq3xxs_scale(b, e / 32)) * 0.5f;
                    const int v = iq3xxs_value(b, e);
                    y[o + e] = db * (v < 0 ? -v : v) * sign_f(v);
                }
            });
            return;
        case GgmlType::IQ3_S:
            each_block<BlockIQ3_S>(src, n, QK_K, [&](const BlockIQ3_S& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) {
                    const float db = d * (1 + 2 * iq3s_scale(b, e / 32));
                    const int v = iq3s_value(b, e);
                    y[o + e] = db * (v < 0 ? -v : v) * sign_f(v);
                }
            });
            return;
        case GgmlType::IQ1_S:
            each_block<BlockIQ1_S>(src, n, QK_K, [&](const BlockIQ1_S& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) {
                    const float dl = d * (2 * iq1s_scale(b, e / 32) + 1);
                    const float delta = iq1s_delta_sign(b, e / 32) < 0 ? -iq::kIq1sDelta : iq::kIq1sDelta;
                    y[o + e] = dl * (iq1s_value(b, e) + delta);
                }
            });
            return;
        case GgmlType::IQ1_M:
            each_block<BlockIQ1_M>(src, n, QK_K, [&](const BlockIQ1_M& b, int64_t o) {
                const float d = fp16_to_fp32(iq1m_d(b));
                for (int e = 0; e < QK_K; ++e) {
                    const float dl = d * (2 * iq1m_scale(b, e) + 1);
                    const float delta = iq1m_delta_sign(b, e) < 0 ? -iq::kIq1sDelta : iq::kIq1sDelta;
                    y[o + e] = dl * (iq1m_value(b, e) + delta);
                }
            });
            return;
        case GgmlType::TQ1_0:
            each_block<BlockTQ1_0>(src, n, QK_K, [&](const BlockTQ1_0& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) y[o + e] = static_cast<float>(tq1_value(b, e) - 1) * d;
            });
            return;
        case GgmlType::TQ2_0:
            each_block<BlockTQ2_0>(src, n, QK_K, [&](const BlockTQ2_0& b, int64_t o) {
                const float d = fp16_to_fp32(b.d);
                for (int e = 0; e < QK_K; ++e) y[o + e] = static_cast<float>(tq2_value(b, e) - 1) * d;
            });
            return;
        default:
            if (ik::is_table_type(t)) return ik::dequantize_table(t, src, y, n);
            if (ik::is_trellis_type(t)) return ik::dequantize_trellis(t, src, y, n);
            if (t == GgmlType::Q6_0) return ik::dequantize_q6_0(src, y, n);
            if (t == GgmlType::IQ1_BN || t == GgmlType::IQ2_BN) return ik::dequantize_bn(t, src, y, n);
            if (t == GgmlType::IK_Q8_K64 || t == GgmlType::IK_Q8_K16) {  // activations: per stream its scale times the values
                const auto* d = static_cast<const float*>(src);
                const auto* q = reinterpret_cast<const int8_t*>(d + (t == GgmlType::IK_Q8_K64 ? 8 : 5));
                for (int64_t e = 0; e < n; ++e) y[e] = d[t == GgmlType::IK_Q8_K64 ? (e % 16) / 4 : (e % 64) / 16] * static_cast<float>(q[e]);
                return;
            }
            if (t == GgmlType::Q8_KV || t == GgmlType::IK_Q8_KV) return ik::dequantize_q8_kv(src, y, n);  // (one layout)
            if (t == GgmlType::IK_Q8_0) return dequantize_row(GgmlType::Q8_0, src, y, n);
            throw std::invalid_argument("cannot dequantize type " + type_name(static_cast<uint32_t>(t)));
    }
}

}  // namespace moe::kernels

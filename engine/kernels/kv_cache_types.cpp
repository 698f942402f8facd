#include "engine/kernels/kv_cache_types.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/kernels.h"

namespace moe::kernels {
namespace {

// The block's value of largest magnitude, the first of equals (q4_0 / q5_0 scale by it, sign included).
float signed_absmax(const float* x) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < 32; ++j)
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    return max;
}
void block_min_max(const float* x, float& min, float& max) {
    min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < 32; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
}

// The rows below are llama.cpp's _ref quantizers (ggml-quants.c, built without FMA: every product and sum is
// rounded on its own, as -ffp-contract=off gives here). Casts to int truncate toward zero, as C's do.

void store_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        const float d = signed_absmax(x) / -8, id = d != 0.f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < 16; ++j) {
            const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
            const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[16 + j] * id + 8.5f)));
            y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void store_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        float min, max;
        block_min_max(x, min, max);
        const float d = (max - min) / 15, id = d != 0.f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        y[b].m = fp32_to_fp16(min);
        for (int j = 0; j < 16; ++j) {
            const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
            const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[16 + j] - min) * id + 0.5f)));
            y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void store_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        const float d = signed_absmax(x) / -16, id = d != 0.f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            const uint32_t q0 = static_cast<uint32_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
            const uint32_t q1 = static_cast<uint32_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[16 + j] * id + 16.5f))));
            y[b].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((q0 & 0x10u) >> 4) << j;
            qh |= ((q1 & 0x10u) >> 4) << (j + 16);
        }
        std::memcpy(y[b].qh, &qh, 4);
    }
}

void store_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        float min, max;
        block_min_max(x, min, max);
        const float d = (max - min) / 31, id = d != 0.f ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        y[b].m = fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            const uint32_t q0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
            const uint32_t q1 = static_cast<uint8_t>((x[16 + j] - min) * id + 0.5f);
            y[b].qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((q0 & 0x10u) >> 4) << j;
            qh |= ((q1 & 0x10u) >> 4) << (j + 16);
        }
        std::memcpy(y[b].qh, &qh, 4);
    }
}

// ggml-quants.c's best_index_int8: the nearest of 16 ascending levels, ties to the upper one.
int best_index_int8(const int8_t* val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav;
        else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// quantize_row_iq4_nl_impl(32, 32, ..., quant_weights = NULL, ntry = -1): the scale from the signed maximum,
// nearest levels, then the weighted least-squares scale (weights x^2) with the levels kept.
void store_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
    const int8_t* values = iq::kValuesIq4nl;
    for (int64_t b = 0; b < n / 32; ++b, x += 32) {
        uint8_t L[32] = {};
        const float max = signed_absmax(x), amax = std::fabs(max);
        float d = 0.f;
        if (amax >= 1e-15f) {  // GROUP_MAX_EPS
            const float id = 1 / (max / values[0]);
            float sumqx = 0, sumq2 = 0;
            for (int j = 0; j < 32; ++j) {
                L[j] = static_cast<uint8_t>(best_index_int8(values, id * x[j]));
                const float q = values[L[j]], w = x[j] * x[j];
                sumqx += w * q * x[j];
                sumq2 += w * q * q;
            }
            d = sumqx / sumq2;
        }
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
    }
}

}  // namespace

std::optional<GgmlType> parse_kv_cache_type(std::string_view name) {
    for (GgmlType t : kKvCacheTypes)
        if (name.size() == kv_cache_type_name(t).size() &&
            std::equal(name.begin(), name.end(), kv_cache_type_name(t).begin(), [](char a, char b) { return std::tolower(a) == b; }))
            return t;
    return std::nullopt;
}

std::string kv_cache_type_name(GgmlType t) { return std::string(type_info(t).name); }

std::string kv_cache_type_list() {
    std::string s;
    for (GgmlType t : kKvCacheTypes) s += (s.empty() ? "" : ", ") + kv_cache_type_name(t);
    return s;
}

bool kv_type_quantized(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }

void store_kv_row(GgmlType t, const float* x, void* dst, int64_t n) {
    switch (t) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16:
        case GgmlType::Q8_0:
            // Each its own dot type: fp16 and bf16 rounded to nearest even, q8_0's x86 form (127/amax, halves to even).
            prepare_activations(t, x, dst, n);
            return;
        case GgmlType::Q4_0: store_q4_0(x, static_cast<BlockQ4_0*>(dst), n); return;
        case GgmlType::Q4_1: store_q4_1(x, static_cast<BlockQ4_1*>(dst), n); return;
        case GgmlType::Q5_0: store_q5_0(x, static_cast<BlockQ5_0*>(dst), n); return;
        case GgmlType::Q5_1: store_q5_1(x, static_cast<BlockQ5_1*>(dst), n); return;
        case GgmlType::IQ4_NL: store_iq4_nl(x, static_cast<BlockIQ4_NL*>(dst), n); return;
        default: throw std::invalid_argument("not a KV cache type: " + type_name(static_cast<uint32_t>(t)));
    }
}

namespace {
bool rotation_disabled() {
    static const bool disabled = [] {  // llama.cpp's switch, honoured for A/B comparisons; read once
        const char* e = std::getenv("LLAMA_ATTN_ROT_DISABLE");
        return e && std::atoi(e) != 0;
    }();
    return disabled;
}
}  // namespace

int kv_rotation_k(GgmlType k, int head_dim) {
    if (!kv_type_quantized(k) || head_dim <= 0 || head_dim % 64 != 0 || rotation_disabled()) return 0;
    int n = 64;
    while (head_dim % (2 * n) == 0) n *= 2;
    return n;
}

int kv_rotation_v(GgmlType v, int head_dim) { return kv_type_quantized(v) && head_dim > 0 && head_dim % 64 == 0 && !rotation_disabled() ? 64 : 0; }

}  // namespace moe::kernels

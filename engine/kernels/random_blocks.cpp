// Random but well-formed weight rows of any block type, for kernel tests and the per-type kernel benchmark:
// random bytes with every scale field set to a moderate fp16 (or E8M0) value. Random bytes reach every code,
// grid index and sign pattern, which is how the i-quants (whose quantizers need an importance matrix) get
// covered; the scales are tamed so that sums stay in a range where float rounding is not the whole answer.
#include <cstring>
#include <random>

#include "engine/gguf/ggml_types.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_decode.h"
#include "engine/kernels/kernels.h"

namespace moe::kernels {

std::vector<uint8_t> random_weight_row(GgmlType t, size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const auto bytes = row_bytes(t, n);
    if (!bytes) return {};
    std::vector<uint8_t> row(*bytes);
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
    if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
        std::vector<float> x(n);
        std::normal_distribution<float> normal;
        for (auto& v : x) v = normal(rng);
        quantize_row(t, x.data(), row.data(), static_cast<int64_t>(n));
        return row;
    }
    std::uniform_real_distribution<float> magnitude(0.002f, 0.05f);
    auto random_scale = [&] { return fp32_to_fp16(magnitude(rng) * (byte(rng) % 2 ? 1.f : -1.f)); };
    const TypeInfo info = type_info(t);
    if (info.origin == TypeOrigin::IkLlama) {
        // ik_llama.cpp's types: the row scales in front (f16 or f32; one per row of an interleaved group), and
        // the f16 d at the start of each block of the types that have one.
        const int rs = ik::row_scale_bytes(t);
        for (uint32_t k = 0; k < (info.interleave > 1 ? 0u : 1u); ++k) {
            const float f = magnitude(rng) * (byte(rng) % 2 ? 1.f : -1.f);
            if (rs == 2) {
                const uint16_t h = fp32_to_fp16(f);
                std::memcpy(row.data() + 2 * k, &h, 2);
            } else if (rs == 4) {
                std::memcpy(row.data() + 4 * k, &f, 4);
            }
        }
        if (ik::block_has_d(t))
            for (size_t off = 0; off < row.size(); off += info.block_bytes) {
                const uint16_t h = random_scale();
                std::memcpy(row.data() + off, &h, 2);
            }
        return row;
    }
    for (size_t off = 0; off < row.size(); off += info.block_bytes) {
        uint8_t* blk = row.data() + off;
        auto put = [&](size_t at) {
            const uint16_t h = random_scale();
            std::memcpy(blk + at, &h, 2);
        };
        switch (t) {
            case GgmlType::Q4_1:
            case GgmlType::Q5_1:
                put(0);
                put(2);
                break;
            case GgmlType::Q4_K:
            case GgmlType::Q5_K:
                put(0);
                put(2);
                break;
            case GgmlType::MXFP4: blk[0] = static_cast<uint8_t>(118 + byte(rng) % 8); break;  // E8M0 2^-9..2^-2
            case GgmlType::Q2_K:
                put(80);
                put(82);
                break;
            case GgmlType::Q3_K: put(108); break;
            case GgmlType::Q6_K: put(208); break;
            case GgmlType::TQ1_0: put(52); break;
            case GgmlType::TQ2_0: put(64); break;
            case GgmlType::IQ1_M: {  // the fp16 scale lives in the top nibbles of the four scale words
                const uint16_t h = fp32_to_fp16(magnitude(rng));
                for (int k = 0; k < 4; ++k) {
                    uint8_t& hi = blk[48 + 2 * k + 1];
                    hi = static_cast<uint8_t>((hi & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
                }
                break;
            }
            default: put(0); break;  // the scale comes first: Q4_0 Q5_0 Q8_0 IQ4_NL IQ4_XS IQ2_* IQ3_* IQ1_S
        }
    }
    return row;
}

std::vector<uint8_t> random_weight_rows(GgmlType t, size_t n, size_t rows, uint64_t seed) {
    const TypeInfo info = type_info(t);
    std::vector<uint8_t> out;
    if (info.interleave == 1) {
        for (size_t r = 0; r < rows; ++r) {
            const auto row = random_weight_row(t, n, seed + r);
            out.insert(out.end(), row.begin(), row.end());
        }
        return out;
    }
    // Groups: random bytes, then the group's row scales (f16 or f32, moderate) in front.
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> magnitude(0.002f, 0.05f);
    out.resize(*row_bytes(t, n) * rows);
    for (auto& b : out) b = static_cast<uint8_t>(byte(rng));
    if (t == GgmlType::BF16_R16) {  // numbers, not NaNs: normal values (the layout does not matter to random ones)
        std::normal_distribution<float> normal;
        for (size_t i = 0; i + 1 < out.size(); i += 2) {
            const uint16_t h = fp32_to_bf16(normal(rng));
            std::memcpy(out.data() + i, &h, 2);
        }
        return out;
    }
    if (t == GgmlType::MXFP4_R8) {  // each block's eight E8M0 exponents, 2^-9..2^-2 as for MXFP4
        const size_t block = info.block_bytes * info.interleave;
        for (size_t off = 0; off < out.size(); off += block)
            for (int k = 0; k < 8; ++k) out[off + k] = static_cast<uint8_t>(118 + byte(rng) % 8);
        return out;
    }
    const size_t group = *row_bytes(t, n) * info.interleave;
    if (const int scales = ik::interleaved_block_scales(t); scales > 0) {  // each block's rows' f16 d
        const size_t block = info.block_bytes * info.interleave;
        for (size_t off = 0; off < out.size(); off += block)
            for (int k = 0; k < scales; ++k) {
                const uint16_t h = fp32_to_fp16(magnitude(rng) * (byte(rng) % 2 ? 1.f : -1.f));
                std::memcpy(out.data() + off + 2 * k, &h, 2);
            }
        return out;
    }
    for (size_t g = 0; g < rows / info.interleave; ++g)
        for (uint32_t k = 0; k < info.interleave; ++k) {
            const float f = magnitude(rng) * (byte(rng) % 2 ? 1.f : -1.f);
            if (info.row_meta == 2) {
                const uint16_t h = fp32_to_fp16(f);
                std::memcpy(out.data() + g * group + 2 * k, &h, 2);
            } else {
                std::memcpy(out.data() + g * group + 4 * k, &f, 4);
            }
        }
    return out;
}

}  // namespace moe::kernels

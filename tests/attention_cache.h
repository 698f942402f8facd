// A random fp16 key/value cache and its views, shared by the attention tests.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "engine/kernels/float_ops.h"
#include "engine/kernels/fp16.h"

namespace moe::test {

struct AttentionCache {
    int dk, dv, n_kv;
    std::vector<uint16_t> k, v;
    AttentionCache(int dk_, int dv_, int n, std::mt19937& rng) : dk(dk_), dv(dv_), n_kv(n) {
        std::normal_distribution<float> nd;
        k.resize(static_cast<size_t>(n) * dk);
        v.resize(static_cast<size_t>(n) * dv);
        for (auto& x : k) x = fp32_to_fp16(nd(rng));
        for (auto& x : v) x = fp32_to_fp16(nd(rng));
    }
    ops::KvView view(int n, const uint8_t* visible = nullptr) const {
        return {k.data(), v.data(), static_cast<size_t>(dk), static_cast<size_t>(dv), dk, dv, n, visible};
    }
    // MLA: the values are the first dv dims of each key row.
    ops::KvView latent_view(int n, const uint8_t* visible = nullptr) const {
        return {k.data(), k.data(), static_cast<size_t>(dk), static_cast<size_t>(dk), dk, dv, n, visible};
    }
};

}  // namespace moe::test

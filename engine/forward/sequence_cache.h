// What a sequence keeps between tokens, per layer and by attention kind: fp16 K and V rows for GQA layers, one
// fp16 latent row (kv_lora + qk_rope) for MLA layers, fp16 indexer keys for DSA full-indexer layers.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/model.h"

namespace moe {

struct SequenceCache {
    int n_ctx = 0;
    std::vector<std::vector<uint16_t>> k;   // [layer][n_ctx * k_width(layer)]
    std::vector<std::vector<uint16_t>> v;   // [layer][n_ctx * v_width(layer)] (empty for MLA: V is the latent)
    std::vector<std::vector<uint16_t>> ix;  // [layer][n_ctx * indexer head_dim] (DSA full layers only)
    std::vector<int> k_width, v_width;

    static SequenceCache make(const Model& m, int n_ctx);
    uint64_t bytes() const;
};

}  // namespace moe

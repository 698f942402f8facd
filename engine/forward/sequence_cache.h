// What a sequence keeps between tokens, per layer and by attention kind: fp16 K and V rows for GQA layers, one
// fp16 latent row (kv_lora + qk_rope) for MLA layers, fp16 indexer keys for DSA full-indexer layers, and for
// gated DeltaNet layers a fixed-size f32 recurrent state (the conv window and the delta-rule matrices).
//
// Positional rows can be cut back to any prefix; a recurrent state cannot (it has no history), so prefix
// reuse on hybrid models goes through snapshots of it (RecurrentSnapshot, kept by the Runner).
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
    // DeltaNet layers: conv[layer] holds, per conv channel, the K-1 previous inputs (oldest first); ssm[layer]
    // holds per v head the S x S state, row j = the state's column j (ggml's transposed layout).
    std::vector<std::vector<float>> conv, ssm;

    static SequenceCache make(const Model& m, int n_ctx);
    uint64_t bytes() const;
    bool has_recurrent() const;
    uint64_t recurrent_bytes() const;
    // The recurrent part, all layers concatenated; restore takes what save produced for the same model.
    void save_recurrent(std::vector<float>& out) const;
    void restore_recurrent(const std::vector<float>& in);
    void reset_recurrent();
};

// Bytes of one sequence's recurrent state for a model's shape (0 without DeltaNet layers).
uint64_t recurrent_state_bytes(const Hparams& hp, uint32_t n_recurrent_layers);

}  // namespace moe

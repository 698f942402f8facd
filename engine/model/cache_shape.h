// What one sequence keeps for a model, per layer, decided once from the loaded layout (no weights needed):
// values per position of context in the K and V caches (whose types the cache options choose), indexer keys
// per position, and a fixed-size f32 recurrent state. SequenceCache allocates exactly this; ModelFacts (and so
// check and plan) counts it, so the two cannot disagree about a layer pattern or a state size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model.h"

namespace moe {

struct LayerCacheShape {
    uint32_t k_width = 0, v_width = 0;  // values per position (MLA: the latent row in K, no V)
    uint32_t ix_width = 0;              // indexer key values per position: DSA full layers and MSA layers
    bool ix_f32 = false;                // MSA keeps its keys in f32; DSA's take K's type
    uint32_t conv_floats = 0;           // gated DeltaNet: the causal conv's previous inputs
    uint32_t state_floats = 0;          // gated DeltaNet: the delta rule's matrices
    bool recurrent() const { return conv_floats + state_floats > 0; }
};

std::vector<LayerCacheShape> cache_shape(const Model& m);

// The shape in one line, e.g. "fp16 K and V, 4 kv heads x 64 x 12 layers + MSA keys 64 f32 x 11 layers" (plans
// and check rows print it; "MLA latent" leads for MLA models).
std::string describe_cache_shape(const Model& m, const std::vector<LayerCacheShape>& shape);

}  // namespace moe

// What one sequence keeps for a model, per layer, decided once from the loaded layout (no weights needed):
// values per position of context in the K and V caches (whose types the cache options choose), indexer keys
// per position, and a fixed-size f32 recurrent state. SequenceCache allocates exactly this; ModelFacts (and so
// check and plan) counts it, so the two cannot disagree about a layer pattern or a state size.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model.h"

namespace moe {

struct LayerCacheShape {
    uint32_t k_width = 0, v_width = 0;  // values per row (MLA: the latent row in K, no V)
    uint32_t ix_width = 0;              // indexer key values per row: DSA full layers and MSA layers, deepseek4's ratio 4
    bool ix_f32 = false;                // MSA keeps its keys in f32; DSA's take K's type
    // Positions per K (and indexer) row: 1, or deepseek4's compression ratio (a compressed row per block).
    uint32_t positions_per_row = 1;
    // A sliding-window layer kept as a ring of this many rows (llama.cpp's SWA cache: the window plus a batch,
    // in blocks of 256; position p in row p % ring), 0 where every position has its row.
    uint32_t ring = 0;
    // The fixed f32 state: gated DeltaNet's conv inputs and delta-rule matrices; deepseek4's last sliding_window
    // raw rows and its compressors' rows for the blocks in progress.
    uint32_t conv_floats = 0;
    uint32_t state_floats = 0;
    // Rows that n_ctx positions take.
    uint64_t rows(uint64_t n_ctx) const { return ring ? std::min<uint64_t>(ring, n_ctx) : (n_ctx + positions_per_row - 1) / positions_per_row; }
    bool recurrent() const { return conv_floats + state_floats > 0; }
};

// ring_batch: the most rows one eval chunk stores (the runner's n_batch, llama.cpp's n_ubatch); 0 keeps every
// position of a sliding-window layer too (llama.cpp's --swa-full, and the plain reference forward).
std::vector<LayerCacheShape> cache_shape(const Model& m, uint32_t ring_batch = 0);
// The rows an eval chunk holds by default: the runner's n_batch, llama.cpp's (and llama-server's) n_ubatch.
constexpr uint32_t kDefaultRingBatch = 512;
// Rows of a sliding-window layer's ring: llama.cpp's GGML_PAD(n_swa + n_ubatch, 256).
uint32_t sliding_ring_rows(uint32_t window, uint32_t batch);

// deepseek4's per-layer f32 state (LayerCacheShape::conv_floats | state_floats), in this order: the raw ring
// (window rows of head_dim, position p in slot p % window), then per compressor (attention, then the indexer's)
// its slots of kv and score rows (coff*D each; slot p % slots), slots = 2*ratio with the overlap, else ratio.
struct CompressedStateLayout {
    uint32_t ring = 0;                    // window * head_dim
    uint32_t slots = 0, width = 0;        // the attention compressor: slots of kv|score (width = coff*D each)
    uint32_t ix_slots = 0, ix_width = 0;  // the indexer's compressor
    uint32_t comp_floats() const { return slots * 2 * width; }
    uint32_t total() const { return ring + comp_floats() + ix_slots * 2 * ix_width; }
};
CompressedStateLayout compressed_state_layout(const Hparams& hp, uint32_t ratio);

// The shape in one line, e.g. "fp16 K and V, 4 kv heads x 64 x 12 layers + MSA keys 64 f32 x 11 layers" (plans
// and check rows print it; "MLA latent" leads for MLA models).
std::string describe_cache_shape(const Model& m, const std::vector<LayerCacheShape>& shape);

}  // namespace moe

// What the planner and `check` need to know about a model, from its GGUF header alone (no weights read), for
// every architecture: resident and streamed bytes, bytes a token touches, cache bytes per token of context.
// Unlike the loader it accepts files the engine cannot run (an unknown architecture or weight type): planning
// for llama-server must still work on them, and `supported`/`unsupported_reason` say why the engine cannot.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernels/kv_cache_types.h"

#include "engine/gguf/gguf.h"

namespace moe {

// Routed-expert tensors (`blk.N.ffn_{gate,up,down,gate_up}_exps.weight`) are streamed; all else is resident.
bool is_routed_expert_tensor(const std::string& name);
// Layer index of a `blk.N.` tensor, or -1.
int tensor_layer(const std::string& name);
// How many of the file's `blocks` are NextN/MTP blocks: `declared` (nextn_predict_layers); for deepseek4, 0 where
// the first of them lacks `nextn.eh_proj` (a file converted without them that kept the key: every block is a
// trunk layer), as llama.cpp's deepseek4 loader probes. Other architectures' loaders in llama.cpp take the key as
// it is, and so does the engine.
uint32_t nextn_blocks(const GgufModel& model, const std::string& arch, uint32_t blocks, uint32_t declared);

struct ModelFacts {
    std::vector<std::string> files;
    std::string arch;
    std::string name;
    uint64_t file_bytes = 0;
    uint32_t n_layer = 0;        // trunk layers (what runs per token)
    uint32_t n_layer_nextn = 0;  // NextN/MTP blocks after the trunk: recognised, not read, not run
    uint32_t n_embd = 0;
    uint32_t n_head = 0;
    uint32_t n_head_kv = 0;
    uint32_t head_dim = 0;
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    uint32_t n_ctx_train = 0;
    uint32_t n_ff = 0;      // dense layers' hidden width (feed_forward_length)
    uint32_t n_ff_exp = 0;  // one routed expert's hidden width (expert_feed_forward_length)
    uint32_t n_vocab = 0;
    uint64_t resident_bytes = 0;  // read into RAM: everything but routed experts and NextN blocks
    uint64_t expert_bytes = 0;    // routed-expert tensors of the trunk
    uint64_t nextn_bytes = 0;     // NextN/MTP blocks (not loaded)
    // read_model_facts / find_nextn_file: a deepseek4 model whose block llama.cpp's converter wrote to
    // mtp-<file name> beside it: that file and its block's bytes (the model's own figures leave it out).
    std::string nextn_file;
    uint64_t nextn_file_bytes = 0;
    uint64_t shared_expert_bytes = 0;            // shared experts (resident; every token runs them)
    std::vector<uint64_t> layer_expert_bytes;    // per trunk layer, all its experts (0 for dense layers)
    std::vector<uint64_t> layer_resident_bytes;  // per trunk layer, everything else of blk.N (attention, dense FFN, shared experts, norms)
    uint64_t output_bytes = 0;                   // output.weight and output_norm (the token embeddings again when tied)
    uint32_t first_moe_layer = 0;                // leading dense layers
    uint32_t moe_layers = 0;
    uint64_t tensor_count = 0;
    uint64_t token_embd_bytes = 0;  // the embedding table (one row read per token)
    uint32_t n_vocab_rows = 0;
    bool tied_output = false;  // no output.weight: the head reads token_embd whole
    // Per-sequence cache: bytes per token of context, and what they hold.
    uint64_t cache_bytes_per_token = 0;
    // The same as elements of the K and the V cache (all layers), for caches of other types (llama.cpp's -ctk/-ctv):
    // MLA keeps its latent (and DSA keys) in K and has no V cache.
    uint64_t cache_k_elems_per_token = 0, cache_v_elems_per_token = 0;
    uint64_t cache_f32_bytes_per_token = 0;  // rows whose type no cache option changes (MSA's f32 indexer keys)
    // Recurrent layers (qwen35moe's DeltaNet): a fixed-size state per sequence, plus the snapshots the server
    // keeps of it for prefix reuse (kDefaultCheckpoints unless told otherwise).
    uint64_t state_bytes = 0;
    uint32_t recurrent_layers = 0;
    // Per sequence whatever the context (deepseek4 in llama.cpp: each layer's sliding-window rows, in K's type,
    // and its compressors' f32 state for incomplete blocks; gpt-oss's sliding-window rings in K's and V's types).
    uint64_t fixed_k_elems = 0, fixed_f32_bytes = 0;
    // Sliding-window layers kept as rings (llama.cpp's SWA cache, as the engine keeps them for its default batch):
    // ring_rows rows of ring_k_elems + ring_v_elems (all such layers), where the context is longer than that; and
    // per checkpoint (prefix reuse past a ring's slack) the window's sliding_window - 1 rows.
    uint32_t ring_rows = 0, sliding_window = 0;
    uint64_t ring_k_elems = 0, ring_v_elems = 0;
    // The same model with every position kept in those layers too (--swa-full).
    ModelFacts keeping_every_position() const;
    // The rings' bytes, and a checkpoint's copy of their windows, in these cache types.
    uint64_t ring_bytes(kernels::KvCacheTypes types) const;
    uint64_t window_snapshot_bytes(kernels::KvCacheTypes types) const;
    std::string cache_layout;  // e.g. "MLA latent (512 + 64) fp16 x 78 layers + DSA keys 128 fp16 x 78 layers"
    // Whether this engine runs the file, and if not, why (one line).
    bool supported = true;
    std::string unsupported_reason;
    std::string ik_tensor;  // the first tensor of an ik_llama.cpp type ("name (type)"): mainline llama.cpp cannot load the file

    // Bytes of one expert (gate+up+down) in a given layer, 0 when dense.
    uint64_t bytes_per_expert(uint32_t layer) const;
    // Bytes touched per decoded token: resident weights (one embedding row) plus n_expert_used experts per MoE layer.
    uint64_t active_bytes_per_token() const;
    // Expert bytes read per token with no cache hits.
    uint64_t expert_bytes_per_token() const;
    // Cache bytes for a context of n_ctx tokens: positions, the recurrent state and its checkpoints.
    uint64_t kv_bytes(uint32_t n_ctx, uint32_t checkpoints = kDefaultCheckpoints) const;
    // The same with the K and V caches in other types (--cache-type-k/-v); recurrent states stay f32.
    uint64_t kv_bytes(uint32_t n_ctx, kernels::KvCacheTypes types, uint32_t checkpoints = kDefaultCheckpoints) const;
    uint64_t cache_bytes_per_token_as(kernels::KvCacheTypes types) const;
    static constexpr uint32_t kDefaultCheckpoints = 8;
};

// Reads facts from a model's header (and its split siblings), and find_nextn_file's. Throws GgufError on a bad
// file.
ModelFacts read_model_facts(const std::string& path);
// Sets nextn_file / nextn_file_bytes where a deepseek4 model at `path` holds no block and mtp-<file name> beside
// it holds one of the same architecture (a file that cannot be read is left out: --draft mtp then says why).
void find_nextn_file(const std::string& path, ModelFacts& f);
ModelFacts model_facts(const GgufModel& model);

}  // namespace moe

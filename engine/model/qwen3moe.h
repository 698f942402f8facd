// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): hyperparameters, weights and the two forward passes.
//
// Weights are split as ../shared/design.md section 3 says: resident tensors (embeddings, attention,
// norms, router, output) live in a resident arena; routed experts are reached only through an ExpertSource,
// so the streaming cache can replace the all-in-RAM source without touching the forward pass.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/weights.h"
#include "engine/runtime/expert_cache.h"

namespace moe {

struct Qwen3MoeHparams {
    uint32_t n_layer = 0;
    uint32_t n_embd = 0;
    uint32_t n_head = 0;
    uint32_t n_head_kv = 0;
    uint32_t head_dim = 0;       // key_length == value_length for qwen3
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    uint32_t n_ff_exp = 0;       // expert hidden width
    uint32_t n_vocab = 0;
    uint32_t n_ctx_train = 0;
    float rope_freq_base = 10000.f;
    float rms_eps = 1e-6f;
};

struct Qwen3MoeLayer {
    Tensor attn_norm;    // [n_embd] f32
    Tensor wq;           // [n_embd, n_head*head_dim]
    Tensor wk;           // [n_embd, n_head_kv*head_dim]
    Tensor wv;           // [n_embd, n_head_kv*head_dim]
    Tensor wo;           // [n_head*head_dim, n_embd]
    Tensor q_norm;       // [head_dim] f32, applied per head
    Tensor k_norm;       // [head_dim] f32
    Tensor ffn_norm;     // [n_embd] f32
    Tensor gate_inp;     // [n_embd, n_expert] router
    ExpertTensor gate_exps;  // [n_embd, n_ff_exp, n_expert] streamed
    ExpertTensor up_exps;    // [n_embd, n_ff_exp, n_expert] streamed
    ExpertTensor down_exps;  // [n_ff_exp, n_embd, n_expert] streamed
};

struct Qwen3MoeModel {
    Qwen3MoeHparams hp;
    Tensor tok_embd;     // [n_embd, n_vocab]
    Tensor output_norm;  // [n_embd]
    Tensor output;       // [n_embd, n_vocab]; tok_embd when the file ties them
    std::vector<Qwen3MoeLayer> layers;
    std::unique_ptr<ResidentArena> resident;
    std::unique_ptr<ExpertSource> experts;
};

struct LoadOptions {
    // Stream experts from disk into a cache of this configuration; absent: read every expert into RAM.
    std::optional<StreamingOptions> streaming;
};

// Validates arch, metadata and every tensor shape; throws ModelError naming the tensor/key and both values.
// Resident tensors are read into RAM; experts are read into RAM or streamed, as `opt` says.
std::unique_ptr<Qwen3MoeModel> load_qwen3moe(const GgufModel& file, const LoadOptions& opt = {});

}  // namespace moe

// The plain reference forward pass: one token at a time, scalar kernels, no threads. It is the oracle the
// fast path is tested against; keep it simple, never optimise it.
#pragma once
#include <vector>

#include "engine/model/qwen3moe.h"

namespace moe {

struct RefState {
    int n_ctx = 0;
    int n_past = 0;
    std::vector<uint16_t> k_cache;  // [n_layer][n_ctx][n_head_kv*head_dim] fp16
    std::vector<uint16_t> v_cache;  // same
};

RefState make_ref_state(const Qwen3MoeModel& m, int n_ctx);
// Runs `token` at position st.n_past, appends to the KV cache, writes n_vocab logits.
void forward_ref(const Qwen3MoeModel& m, RefState& st, int token, float* logits);

}  // namespace moe

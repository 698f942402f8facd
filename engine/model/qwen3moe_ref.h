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

// llama.cpp's summation order for a matmul depends on how many activation rows it multiplies at once and on
// the row's place among them (see kernels::matmul_dots). The reference runs one token at a time, so it is told
// the batch the fast path would put the token in: its size and the token's index, for the layers (dense
// matmuls) and for the output head (which sees only the rows whose logits are wanted).
struct RefBatch {
    int n_tok = 1, index = 0;
    int n_out = 1, out_index = 0;
};

RefState make_ref_state(const Qwen3MoeModel& m, int n_ctx);
// Runs `token` at position st.n_past, appends to the KV cache, writes n_vocab logits.
void forward_ref(const Qwen3MoeModel& m, RefState& st, int token, float* logits, RefBatch batch = {});

}  // namespace moe

// What a layer kind's plain reference step (layer_unit.h) gets from the reference forward (reference.h):
// the model, the sequence's state, the token's place in the batch the fast path would put it in, the scalar
// kernels, and the matmul and attention of one token in llama.cpp's orders.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/forward/reference.h"
#include "engine/kernels/float_ops.h"
#include "engine/kernels/kernels.h"

namespace moe::ref {

using Vec = std::vector<float>;

struct Context {
    const Model& m;
    RefState& st;
    RefBatch batch;
    const kernels::KernelTable& kt;
    const ops::FloatOps& fops;
    int pos;
    int token;
    // DSA: the positions the last full indexer layer picked (the shared layers after it reuse them).
    std::vector<uint8_t>* dsa_visible;
};

// out[r] = W[r,:] . x for every row r, with x prepared as W's activation type (scalar kernels), summed in the
// order llama.cpp gives activation row `index` of `n_tok` (n_tok 0: an expert matmul, MUL_MAT_ID). `strided`:
// the activations are a strided view in llama.cpp's graph (F32 weights then keep the one-token order).
// `expert_tokens`: for an expert matmul, the tokens its batch routes to that expert (ik's per-expert switch).
void matvec(const Context& c, const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, float* out,
            int n_tok = 0, int index = 0, bool strided = false, int expert_tokens = 1);
// A dense matmul of the layer at this token's place in its batch.
void dense(const Context& c, const Tensor& t, const float* x, float* out);
// Attention of one query against this layer's cached positions 0..pos (those in `visible` when given). A lone
// row over an fp16 view of the cache's positions (whole_view: not MSA's gathered blocks; DSA's picks and a sliding
// window are masks over it) is split over the threads from 512 keys, as llama.cpp does (ops::split_kv_chunk).
void attend(const Context& c, const ops::KvView& kv, const float* q, float scale, float* out, bool whole_view = true);

}  // namespace moe::ref

// Kimi K3's cross-layer residual attention (Hparams::res_block), one token at a time, shared by the reference
// and the fast forward. Every res_block-th layer banks its raw input; before each sub-block (and the output
// norm) the residual stream is replaced by a mixture of the banked inputs and itself:
//   score_j = sum(rms_norm(c_j) * w),  p = softmax(scores),  out = sum_j p_j c_j   (the raw c_j)
// as llama.cpp's res_mix computes it: the banked inputs summed by ggml_dsv4_hc_pre, the stream added last.
#pragma once
#include "engine/kernels/float_ops.h"

namespace moe {

// banked: n_banked rows of E values, `stride` floats apart; cur: the stream; out may alias cur. scratch: E
// floats. With nothing banked, out = cur.
void residual_mix(const ops::FloatOps& ops, const float* banked, int n_banked, size_t stride, const float* cur, const float* score_w, int E,
                  float eps, float* out, float* scratch);

}  // namespace moe

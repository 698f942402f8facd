// Expert routing of one token, as llama.cpp's build_moe_ffn computes it: router probabilities (softmax or
// sigmoid), a selection score (plus exp_probs_b), group-limited top-k, then the chosen experts' unbiased
// probabilities as weights, renormalised and scaled. Shared by the reference and the fast forward.
#pragma once
#include "engine/kernels/float_ops.h"
#include "engine/model/hparams.h"

namespace moe {

// logits: the router's n_expert outputs (overwritten with the probabilities). probs_bias may be null.
// Writes n_expert_used expert ids in llama.cpp's order (that order is the order their outputs are summed)
// and their weights.
void route_token(const MoeConfig& c, const ops::FloatOps& ops, float* logits, const float* probs_bias, int* selected, float* weights);

}  // namespace moe

// Expert routing of one token, as llama.cpp's build_moe_ffn computes it: router probabilities (softmax or
// sigmoid), a selection score (plus exp_probs_b), group-limited top-k, then the chosen experts' unbiased
// probabilities as weights, renormalised and scaled. Shared by the reference and the fast forward.
#pragma once
#include "engine/kernels/float_ops.h"
#include "engine/model/model.h"

namespace moe {

// logits: the router's n_expert outputs (overwritten with the probabilities). probs_bias may be null.
// Writes n_expert_used expert ids in llama.cpp's order (that order is the order their outputs are summed)
// and their weights.
// logit_bias (gpt-oss's router bias) is added to the logits first; both biases may be null.
// forced (deepseek4's hash layers): the n_expert_used experts to take, in that order, instead of the top-k;
// their weights are still the router's probabilities.
void route_token(const MoeConfig& c, const ops::FloatOps& ops, float* logits, const float* logit_bias, const float* probs_bias, int* selected,
                 float* weights, const int32_t* forced = nullptr);
// The same for layer weights w (its router bias and selection bias; a hash layer's table row for `token`).
void route_token(const MoeConfig& c, const MoeWeights& w, const ops::FloatOps& ops, float* logits, int* selected, float* weights, int32_t token = -1);

// The model's gated activation of a feed-forward's gate and up values, into g (experts, shared expert, dense).
// limit: FfnActivation::SwigluClamped's clamp for this feed-forward (Layer::swiglu_limit or _sh; 0: none).
void ffn_activation(const Hparams& hp, const ops::FloatOps& ops, float* g, float* u, int n_ff, float limit = 0.f);
// A routed expert between its gate/up and its down projection: the expert's gate and up biases where the model
// has them (ggml_add_id), then the model's gated activation into g (u is modified by its bias).
void expert_activation(const Hparams& hp, const MoeWeights& w, const ops::FloatOps& ops, uint32_t expert, float* g, float* u, int n_ff,
                       float limit = 0.f);
// The expert's down bias added to its output y (n_embd values), where the model has one.
void expert_down_bias(const MoeWeights& w, uint32_t expert, float* y, int n_embd);

}  // namespace moe

// The gated FFN both feed-forward kinds use (a dense layer, MoE's shared expert), as llama.cpp's build_ffn
// (SILU or SWIGLU_OAI, PAR): up and gate projections, the gated activation, down.
#pragma once
#include "engine/forward/layer_context.h"
#include "engine/forward/reference_ops.h"

namespace moe {

// n rows of x (n_embd each) into out; g and u: n * F scratch. limit: FfnActivation::SwigluClamped's (0: none).
void gated_ffn_rows(LayerContext& cx, const Tensor& gate, const Tensor& up, const Tensor& down, const float* x, int n, float limit, float* g,
                    float* u, float* out);

namespace ref {
// One token: down(act(gate . x, up . x)).
void gated_ffn(const Context& c, const Tensor& gate, const Tensor& up, const Tensor& down, const Vec& xn, Vec& out, float limit = 0.f);
}  // namespace ref

}  // namespace moe

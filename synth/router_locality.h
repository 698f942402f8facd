// Routing that is correlated between consecutive tokens (mkmodel --router-locality G), as real routers are:
// nearby tokens share context, so they route much alike (Liang et al., arXiv:2505.16056, "local routing
// consistency"), while a random model's router sees each token's own embedding and routes the next token
// afresh.
//
// How: the first layer's attention head 0 becomes a recency average. Every token embedding carries one
// constant channel (channel 0); head 0's query and key read only that channel, so after the q/k norm (or the
// latent norm) they are the same vector at every position, spread evenly over the rotary pairs whose
// frequency lies in [kLowTheta, kHighTheta]. RoPE then makes the score depend on the distance alone:
// sum_i cos(theta_i * d), highest at d = 0 and falling over about ten tokens with no revival inside a
// thousand, so the head returns a weighted mean of the last ~10 tokens' values. Its output projection is
// scaled by G: that slowly moving mean rides the residual stream into every layer's router, and the larger
// G, the more of each router's logits consecutive tokens share. The draws of every tensor are unchanged
// (G = 0 writes the same file as before); the overlap reached is measured (cache-sim, bench), not assumed.
#pragma once
#include <string>

#include "synth/tensor_writer.h"

namespace moe::synth {

// The edit --router-locality makes to tensor `name` ({} when none), for the architectures it knows
// (qwen3moe, glm4moe: GQA with q/k norms; deepseek2, glm-dsa: MLA); a SpecError for the others.
Writer::RowEdit locality_edit(const SyntheticSpec& s, const std::string& name);
void check_router_locality(const SyntheticSpec& s);

}  // namespace moe::synth

// DeepSeek-V4's hyper-connections, one token at a time (llama.cpp's build_hc_pre / build_hc_post / build_hc_head
// in src/models/deepseek4.cpp): the residual stream is n copies; a sub-block reads a weighted sum of them, and
// afterwards copy d becomes post[d] * output + sum_s comb[d][s] * copy s. The weights come from a small matmul of
// the RMS-normed copies (the caller runs it: the reference and the fast path multiply differently) turned into
// pre / post / comb here. Shared by the reference and the fast forward.
#pragma once
#include <cstdint>

#include "engine/model/hparams.h"
#include "engine/model/model.h"

namespace moe {

constexpr uint32_t kMaxHyperStreams = 4;

struct HyperMix {
    float pre[kMaxHyperStreams] = {};
    float post[kMaxHyperStreams] = {};
    float comb[kMaxHyperStreams * kMaxHyperStreams] = {};  // [dst * n + src]
};

// The mixer's input: all n copies (n * E values, copy-major) RMS-normed together, without a weight.
void hyper_norm(const HyperConfig& c, const float* streams, int E, float rms_eps, float* out);
// Turns fn . hyper_norm(...) (c.n_mix() values) into the mix, with the layer's scale and base.
HyperMix hyper_mix(const HyperConfig& c, const float* mixes, const HyperWeights& w);
// The sub-block's (or the output head's) input: sum_h pre[h] * copy h.
void hyper_collapse(const HyperConfig& c, const HyperMix& mix, const float* streams, int E, float* out);
// After the sub-block (its output y): copy d = post[d] * y + sum_s comb[d][s] * copy s, in place.
void hyper_expand(const HyperConfig& c, const HyperMix& mix, const float* y, float* streams, int E, float* scratch);
// The output head's weights (fn . hyper_norm gives n values): sigmoid(mix * scale + base) + eps, as HyperMix::pre.
HyperMix hyper_head_mix(const HyperConfig& c, const float* mixes, const HyperWeights& w);

}  // namespace moe

#include "engine/forward/routing.h"

#include <limits>
#include "engine/kernels/ik/ik_ref.h"
#include <vector>

namespace moe {

void route_token(const MoeConfig& c, const ops::FloatOps& ops, float* p, const float* logit_bias, const float* probs_bias, int* selected,
                 float* weights) {
    const int X = static_cast<int>(c.n_expert), U = static_cast<int>(c.n_expert_used);
    if (logit_bias)
        for (int e = 0; e < X; ++e) p[e] += logit_bias[e];
    if (ops.ik && c.gating == Gating::Softmax && c.n_group <= 1 && !probs_bias) {  // ik's fused top-k on the logits
        ik::route_softmax(p, X, U, c.norm_weights, selected, weights);
        if (c.weights_scale != 0.f && c.weights_scale != 1.f)
            for (int s = 0; s < U; ++s) weights[s] *= c.weights_scale;
        return;
    }
    if (c.gating == Gating::Softmax) ops.softmax(p, X);
    else if (c.gating == Gating::Sigmoid)
        for (int e = 0; e < X; ++e) p[e] = ops::sigmoid(p[e]);

    // Selection scores: the probabilities plus the bias (DeepSeek-V3); the weights stay unbiased.
    std::vector<float> score(p, p + X);
    if (probs_bias)
        for (int e = 0; e < X; ++e) score[e] = p[e] + probs_bias[e];

    if (c.n_group > 1) {
        // A group scores the sum of its two best; experts outside the best n_group_used groups are masked.
        const int G = static_cast<int>(c.n_group), per = X / G;
        std::vector<float> group_score(G);
        int two[2];
        for (int g = 0; g < G; ++g) {
            ops::top_k(&score[g * per], per, 2, two);
            group_score[g] = static_cast<float>(static_cast<double>(score[g * per + two[0]]) + static_cast<double>(score[g * per + two[1]]));
        }
        std::vector<int> keep(c.n_group_used);
        ops::top_k(group_score.data(), G, static_cast<int>(c.n_group_used), keep.data());
        std::vector<char> kept(G, 0);
        for (int g : keep) kept[g] = 1;
        for (int g = 0; g < G; ++g)
            if (!kept[g]) std::fill_n(&score[g * per], per, -std::numeric_limits<float>::infinity());
    }

    ops::top_k(score.data(), X, U, selected);
    for (int s = 0; s < U; ++s) weights[s] = p[selected[s]];
    if (c.gating == Gating::SoftmaxWeight) ops.softmax(weights, U);  // over the chosen logits only
    if (c.norm_weights) {
        double sum = 0;
        for (int s = 0; s < U; ++s) sum += weights[s];
        const float norm = std::max(static_cast<float>(sum), 6.103515625e-5f);
        for (int s = 0; s < U; ++s) weights[s] /= norm;
    }
    if (c.weights_scale != 0.f && c.weights_scale != 1.f)
        for (int s = 0; s < U; ++s) weights[s] *= c.weights_scale;
}

void ffn_activation(const Hparams& hp, const ops::FloatOps& ops, float* g, const float* u, int n_ff) {
    if (hp.ffn_activation == FfnActivation::SwigluOai) return ops::swiglu_oai(g, u, n_ff);
    if (hp.ffn_activation == FfnActivation::Swiglu) return ops.swiglu(g, u, n_ff);
    // situ, as kimi_k3_situ's ggml ops: scale, tanh, scale; times sigmoid(gate); times the capped up.
    const float b = hp.situ_beta, lb = hp.situ_linear_beta, inv_b = 1.0f / b, inv_lb = lb > 0.0f ? 1.0f / lb : 0.0f;
    for (int i = 0; i < n_ff; ++i) {
        const float a = std::tanh(g[i] * inv_b) * b * ops::sigmoid(g[i]);
        const float up = lb > 0.0f ? std::tanh(u[i] * inv_lb) * lb : u[i];
        g[i] = a * up;
    }
}

void expert_activation(const Hparams& hp, const MoeWeights& w, const ops::FloatOps& ops, uint32_t expert, float* g, float* u, int n_ff) {
    if (w.gate_bias.present()) {
        const float* gb = w.gate_bias.f32() + static_cast<size_t>(expert) * n_ff;
        const float* ub = w.up_bias.f32() + static_cast<size_t>(expert) * n_ff;
        for (int i = 0; i < n_ff; ++i) g[i] += gb[i], u[i] += ub[i];
    }
    ffn_activation(hp, ops, g, u, n_ff);
}

void expert_down_bias(const MoeWeights& w, uint32_t expert, float* y, int n_embd) {
    if (!w.down_bias.present()) return;
    const float* b = w.down_bias.f32() + static_cast<size_t>(expert) * n_embd;
    for (int i = 0; i < n_embd; ++i) y[i] += b[i];
}

}  // namespace moe

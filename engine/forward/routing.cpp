#include "engine/forward/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/kernels/ik/ik_ref.h"

namespace moe {
namespace {
// The chosen experts' probabilities as their weights: renormalised and scaled as the model says.
void weigh_selected(const MoeConfig& c, const ops::FloatOps& ops, const float* p, const int* selected, float* weights);
}  // namespace

void route_token(const MoeConfig& c, const MoeWeights& w, const ops::FloatOps& ops, float* logits, int* selected, float* weights, int32_t token) {
    const int32_t* forced = nullptr;
    if (w.tid2eid.present()) {
        if (token < 0 || token >= w.tid2eid.ne1)
            throw std::out_of_range("hash-routed layer: token id " + std::to_string(token) + " has no row in " + w.tid2eid.name);
        forced = reinterpret_cast<const int32_t*>(w.tid2eid.row(token));
        for (uint32_t s = 0; s < c.n_expert_used; ++s)
            if (forced[s] < 0 || forced[s] >= static_cast<int32_t>(c.n_expert))
                throw std::runtime_error("tensor '" + w.tid2eid.name + "' sends token " + std::to_string(token) + " to expert " +
                                         std::to_string(forced[s]) + ", not one of the " + std::to_string(c.n_expert));
    }
    route_token(c, ops, logits, w.router_bias.present() ? w.router_bias.f32() : nullptr, w.probs_bias.present() ? w.probs_bias.f32() : nullptr,
                selected, weights, forced);
}

void route_token(const MoeConfig& c, const ops::FloatOps& ops, float* p, const float* logit_bias, const float* probs_bias, int* selected,
                 float* weights, const int32_t* forced) {
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
    else if (c.gating == Gating::SqrtSoftplus)
        for (int e = 0; e < X; ++e) p[e] = std::sqrt(ops::softplus(p[e]));

    if (forced) {
        std::copy_n(forced, U, selected);
        return weigh_selected(c, ops, p, selected, weights);
    }

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
    weigh_selected(c, ops, p, selected, weights);
}

namespace {

void weigh_selected(const MoeConfig& c, const ops::FloatOps& ops, const float* p, const int* selected, float* weights) {
    const int U = static_cast<int>(c.n_expert_used);
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

}  // namespace

void ffn_activation(const Hparams& hp, const ops::FloatOps& ops, float* g, float* u, int n_ff, float limit) {
    if (hp.ffn_activation == FfnActivation::SwigluOai) return ops::swiglu_oai(g, u, n_ff);
    if (hp.ffn_activation == FfnActivation::SwigluClamped) {  // as llama.cpp's DeepSeek-V4 branch: clamp both, then swiglu
        if (limit > 0.f)
            for (int i = 0; i < n_ff; ++i) g[i] = std::min(g[i], limit), u[i] = std::clamp(u[i], -limit, limit);
        return ops.swiglu(g, u, n_ff);
    }
    if (hp.ffn_activation == FfnActivation::Swiglu) return ops.swiglu(g, u, n_ff);
    // situ, as kimi_k3_situ's ggml ops: scale, tanh, scale; times sigmoid(gate); times the capped up.
    const float b = hp.situ_beta, lb = hp.situ_linear_beta, inv_b = 1.0f / b, inv_lb = lb > 0.0f ? 1.0f / lb : 0.0f;
    for (int i = 0; i < n_ff; ++i) {
        const float a = std::tanh(g[i] * inv_b) * b * ops::sigmoid(g[i]);
        const float up = lb > 0.0f ? std::tanh(u[i] * inv_lb) * lb : u[i];
        g[i] = a * up;
    }
}

void expert_activation(const Hparams& hp, const MoeWeights& w, const ops::FloatOps& ops, uint32_t expert, float* g, float* u, int n_ff, float limit) {
    if (w.gate_bias.present()) {
        const float* gb = w.gate_bias.f32() + static_cast<size_t>(expert) * n_ff;
        const float* ub = w.up_bias.f32() + static_cast<size_t>(expert) * n_ff;
        for (int i = 0; i < n_ff; ++i) g[i] += gb[i], u[i] += ub[i];
    }
    ffn_activation(hp, ops, g, u, n_ff, limit);
}

void expert_down_bias(const MoeWeights& w, uint32_t expert, float* y, int n_embd) {
    if (!w.down_bias.present()) return;
    const float* b = w.down_bias.f32() + static_cast<size_t>(expert) * n_embd;
    for (int i = 0; i < n_embd; ++i) y[i] += b[i];
}

}  // namespace moe

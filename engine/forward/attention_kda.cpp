// Kimi Delta Attention (kimi-k3's linear-attention layers), as llama.cpp's build_kda_layer with ggml's fused
// delta-rule op (its KDA branch). Per token, with x the normed input, H heads of S:
//   q, k, v = silu(causal_conv(W_q x)), ...               each with its own taps and conv window
//   q, k <- l2_norm per head
//   g = lb * sigmoid(exp(A_log) * (f_b f_a x + dt_bias))  per channel (without kda.gate_lower_bound:
//       -exp(A_log) * softplus(f_b f_a x + dt_bias))
//   beta = sigmoid(W_beta x)                              per head
//   M_h <- M_h diag(exp(g_h)) + k (beta_h (v_h - M_h^T k))^T;  o_h = M_h^T q / sqrt(S)
//   o_h <- rms_norm(o_h) * w_norm * sigmoid(W_g x)_h;  out = W_out o
// Like the gated DeltaNet, a prompt runs the recurrence token by token (parallel over channels and heads).
#include "engine/forward/layer_unit.h"
#include "engine/forward/reference_ops.h"
#include "engine/forward/runner.h"

namespace moe {
namespace {

class KdaAttention final : public AttentionUnit {
public:
    explicit KdaAttention(const Model&) {}
    template <class Size>
    static void scratch(const Model& m, const RunnerOptions& opt, Size&& size) {
        const DeltaNetConfig& c = m.hp.ssm;
        const size_t B = batch_rows(opt);
        const size_t C = c.conv_dim(), V = size_t{c.state} * c.n_v_heads;
        size(&KdaAttention::qkv_, B * C);
        size(&KdaAttention::conv_, B * C);
        size(&KdaAttention::z_, B * V);
        size(&KdaAttention::out_, B * V);
        size(&KdaAttention::g_, B * V);
        size(&KdaAttention::beta_, B * c.n_v_heads);
    }
    void forward(LayerContext& cx, uint32_t l, int n) override;

private:
    std::vector<float> qkv_, conv_;  // [n][q | k | v] projections, then after the convs and SiLU
    std::vector<float> z_, out_;     // [n][H * S] the output gate, the heads' output
    std::vector<float> g_;           // [n][H * S] the decay per key channel
    std::vector<float> beta_;        // [n][H]
};

void KdaAttention::forward(LayerContext& cx, uint32_t l, int n) {
    const Model& m = cx.model();
    const Hparams& hp = m.hp;
    const DeltaNetConfig& c = hp.ssm;
    const KdaWeights& w = m.layers[l].kda;
    const int E = static_cast<int>(hp.n_embd), S = static_cast<int>(c.state), K = static_cast<int>(c.conv_kernel);
    const int H = static_cast<int>(c.n_v_heads), V = S * H, C = 3 * V;

    // q | k | v side by side per token (the conv's channels), the output gate, beta, and the decay's low rank.
    float* low_rank = out_.data();  // free until the delta rule writes it
    cx.matmul_group({{&w.wq, qkv_.data(), C},
                     {&w.wk, qkv_.data() + V, C},
                     {&w.wv, qkv_.data() + 2 * V, C},
                     {&w.g, z_.data(), V},
                     {&w.beta, beta_.data(), H},
                     {&w.f_a, low_rank, S}},
                    cx.xn(), E, n);
    cx.matmul(w.f_b, low_rank, S, n, g_.data(), V);
    for (int t = 0; t < n; ++t) {
        for (int h = 0; h < H; ++h) {
            beta_[t * H + h] = ops::sigmoid(beta_[t * H + h]);
            for (int i = 0; i < S; ++i) {
                float& g = g_[static_cast<size_t>(t) * V + h * S + i];
                g = c.kda_log_decay(g + w.dt_bias.f32()[h * S + i], w.a.f32()[h]);
            }
        }
    }

    float* conv_state = cx.cache().conv[l].data();
    cx.pool().parallel_for(C, [&](int64_t c0, int64_t c1) {
        for (int64_t ch = c0; ch < c1; ++ch) {
            const Tensor& taps = ch < V ? w.conv_q : ch < 2 * V ? w.conv_k : w.conv_v;
            ops::causal_conv(conv_state + ch * (K - 1), qkv_.data() + ch, C, taps.f32() + (ch % V) * K, K, n, conv_.data() + ch, C);
        }
    });
    for (int t = 0; t < n; ++t) {
        float* row = &conv_[static_cast<size_t>(t) * C];
        for (int part = 0; part < 3; ++part) cx.fops().silu(row + part * V, V);  // one ggml_silu per q, k, v
        for (int h = 0; h < 2 * H; ++h) ops::l2_norm(row + h * S, S, hp.rms_eps);
    }

    float* state = cx.cache().ssm[l].data();
    const kernels::DotFn dot = cx.kernels().dot[static_cast<int>(GgmlType::F32)];
    cx.pool().parallel_for(H, [&](int64_t h0, int64_t h1) {
        std::vector<float> delta(static_cast<size_t>(S));
        for (int64_t h = h0; h < h1; ++h) {
            float* M = state + static_cast<size_t>(h) * S * S;
            for (int t = 0; t < n; ++t) {
                const float* row = &conv_[static_cast<size_t>(t) * C];
                ops::kda_delta_step(M, row + h * S, row + V + h * S, row + 2 * V + h * S, &g_[static_cast<size_t>(t) * V + h * S], beta_[t * H + h],
                                    &out_[static_cast<size_t>(t) * V + h * S], S, dot, delta.data());
            }
        }
    });

    for (int t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h) {
            float* o = &out_[static_cast<size_t>(t) * V + h * S];
            const float* z = &z_[static_cast<size_t>(t) * V + h * S];
            ops::rms_norm(o, w.norm.f32(), o, S, hp.rms_eps);
            for (int i = 0; i < S; ++i) o[i] *= ops::sigmoid(z[i]);
        }
    cx.matmul(w.out, out_.data(), V, n, cx.out(), E);
}

using ref::Vec;

// Kimi Delta Attention (see forward/attention_kda.cpp for the equations), one token: q, k, v through their
// own projections and convs, SiLU, per-head L2 norms; the per-channel decay and beta; the delta rule per head;
// the RMSNorm times the sigmoid gate; the output projection.
void reference_step(const ref::Context& c, uint32_t l, const Vec& xn, Vec& out) {
    const Hparams& hp = c.m.hp;
    const DeltaNetConfig& dc = hp.ssm;
    const KdaWeights& w = c.m.layers[l].kda;
    const int S = static_cast<int>(dc.state), K = static_cast<int>(dc.conv_kernel), H = static_cast<int>(dc.n_v_heads), V = S * H;
    Vec qkv(3 * V), conv(3 * V), gate(V), beta(H), low(S), g(V), o(V), delta(S);
    const Tensor* proj[3] = {&w.wq, &w.wk, &w.wv};
    const Tensor* taps[3] = {&w.conv_q, &w.conv_k, &w.conv_v};
    float* window = c.st.cache.conv[l].data();
    for (int part = 0; part < 3; ++part) {
        dense(c, *proj[part], xn.data(), &qkv[part * V]);
        for (int ch = 0; ch < V; ++ch)
            ops::causal_conv(window + (part * V + ch) * (K - 1), &qkv[part * V + ch], 1, taps[part]->f32() + ch * K, K, 1, &conv[part * V + ch], 1);
        c.fops.silu(&conv[part * V], V);
    }
    for (int h = 0; h < 2 * H; ++h) ops::l2_norm(&conv[h * S], S, hp.rms_eps);
    dense(c, w.f_a, xn.data(), low.data());
    dense(c, w.f_b, low.data(), g.data());
    for (int i = 0; i < V; ++i) g[i] = dc.kda_log_decay(g[i] + w.dt_bias.f32()[i], w.a.f32()[i / S]);
    dense(c, w.beta, xn.data(), beta.data());
    dense(c, w.g, xn.data(), gate.data());
    float* state = c.st.cache.ssm[l].data();
    for (int h = 0; h < H; ++h) {
        ops::kda_delta_step(state + static_cast<size_t>(h) * S * S, &conv[h * S], &conv[V + h * S], &conv[2 * V + h * S], &g[h * S],
                            ops::sigmoid(beta[h]), &o[h * S], S, c.kt.dot[static_cast<int>(GgmlType::F32)], delta.data());
        ops::rms_norm(&o[h * S], w.norm.f32(), &o[h * S], S, hp.rms_eps);
        for (int i = 0; i < S; ++i) o[h * S + i] *= ops::sigmoid(gate[h * S + i]);
    }
    dense(c, w.out, o.data(), out.data());
}

}  // namespace

const AttentionKindInfo& kda_attention() {
    static const AttentionKindInfo info{AttentionKind::KimiDelta, "kda", unit_scratch_bytes<KdaAttention>, make_unit<KdaAttention>, reference_step};
    return info;
}

}  // namespace moe

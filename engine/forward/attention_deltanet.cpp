// Gated DeltaNet (qwen35moe's linear-attention layers), as llama.cpp's build_layer_attn_linear with its fused
// CPU kernel. Per token, with x the normed input:
//   qkv = W_qkv x, z = W_z x, beta = sigmoid(W_beta x), g = a * softplus(W_alpha x + dt_bias)   (per v head)
//   qkv <- silu(causal_conv(qkv))                     the conv window is the K-1 previous qkv rows
//   q, k <- l2_norm per k head; v head j reads k head j % Hk
//   M_j <- exp(g_j) M_j + k (beta_j (v_j - M_j^T k))^T;  o_j = M_j^T q / sqrt(S)
//   o_j <- rms_norm(o_j) * w_norm * silu(z_j);  out = W_out o
// A prompt runs the recurrence token by token like decode (llama.cpp's CPU path does the same): the work is
// parallel over channels (conv) and v heads (state), sequential over tokens.
#include "engine/forward/layer_unit.h"
#include "engine/forward/reference_ops.h"
#include "engine/forward/runner.h"

namespace moe {
namespace {

class DeltaNetAttention final : public AttentionUnit {
public:
    explicit DeltaNetAttention(const Model&) {}
    template <class Size>
    static void scratch(const Model& m, const RunnerOptions& opt, Size&& size) {
        const DeltaNetConfig& c = m.hp.ssm;
        const size_t B = batch_rows(opt);
        const size_t C = c.conv_dim(), V = size_t{c.state} * c.n_v_heads;
        size(&DeltaNetAttention::qkv_, B * C);
        size(&DeltaNetAttention::conv_, B * C);
        size(&DeltaNetAttention::z_, B * V);
        size(&DeltaNetAttention::out_, B * V);
        size(&DeltaNetAttention::g_, B * c.n_v_heads);
        size(&DeltaNetAttention::beta_, B * c.n_v_heads);
    }
    void forward(LayerContext& cx, uint32_t l, int n) override;

private:
    std::vector<float> qkv_, conv_;  // [n][conv_dim] projections, then after the conv and SiLU
    std::vector<float> z_, out_;     // [n][v heads * S] the output gate, the heads' output
    std::vector<float> g_, beta_;    // [n][v heads] decay and beta
};

void DeltaNetAttention::forward(LayerContext& cx, uint32_t l, int n) {
    const Model& m = cx.model();
    const Hparams& hp = m.hp;
    const DeltaNetConfig& c = hp.ssm;
    const DeltaNetWeights& w = m.layers[l].ssm;
    const int E = static_cast<int>(hp.n_embd), S = static_cast<int>(c.state), K = static_cast<int>(c.conv_kernel);
    const int Hk = static_cast<int>(c.n_k_heads), Hv = static_cast<int>(c.n_v_heads);
    const int C = static_cast<int>(c.conv_dim()), V = S * Hv;

    cx.matmul_group({{&w.qkv, qkv_.data(), C}, {&w.z, z_.data(), V}, {&w.beta, beta_.data(), Hv}, {&w.alpha, g_.data(), Hv}}, cx.xn(), E, n);
    for (int t = 0; t < n; ++t)
        for (int h = 0; h < Hv; ++h) {
            float& b = beta_[t * Hv + h];
            b = ops::sigmoid(b);
            float& g = g_[t * Hv + h];
            g = ops::softplus(g + w.dt_bias.f32()[h]) * w.a.f32()[h];
        }

    // Causal conv per channel over the chunk, then SiLU per token row.
    float* conv_state = cx.cache().conv[l].data();
    const float* taps = w.conv1d.f32();
    cx.pool().parallel_for(C, [&](int64_t c0, int64_t c1) {
        for (int64_t ch = c0; ch < c1; ++ch)
            ops::causal_conv(conv_state + ch * (K - 1), qkv_.data() + ch, C, taps + ch * K, K, n, conv_.data() + ch, C);
    });
    for (int t = 0; t < n; ++t) {
        float* row = &conv_[static_cast<size_t>(t) * C];
        cx.fops().silu(row, C);
        for (int h = 0; h < 2 * Hk; ++h) ops::l2_norm(row + h * S, S, hp.rms_eps);  // q heads, then k heads
    }

    // The delta rule: each v head's state runs through the chunk's tokens in order.
    float* state = cx.cache().ssm[l].data();
    const kernels::DotFn dot = cx.kernels().dot[static_cast<int>(GgmlType::F32)];
    cx.pool().parallel_for(Hv, [&](int64_t h0, int64_t h1) {
        std::vector<float> delta(static_cast<size_t>(S));
        for (int64_t h = h0; h < h1; ++h) {
            const int kh = static_cast<int>(h % Hk);
            float* M = state + static_cast<size_t>(h) * S * S;
            for (int t = 0; t < n; ++t) {
                const float* row = &conv_[static_cast<size_t>(t) * C];
                ops::gated_delta_step(M, row + kh * S, row + (Hk + kh) * S, row + 2 * Hk * S + h * S, g_[t * Hv + h], beta_[t * Hv + h],
                                      &out_[static_cast<size_t>(t) * V + h * S], S, dot, delta.data());
            }
        }
    });

    // Gated RMSNorm per head, then the output projection.
    for (int t = 0; t < n; ++t)
        for (int h = 0; h < Hv; ++h) {
            float* o = &out_[static_cast<size_t>(t) * V + h * S];
            float* z = &z_[static_cast<size_t>(t) * V + h * S];
            ops::rms_norm(o, w.norm.f32(), o, S, hp.rms_eps);
            cx.fops().silu(z, S);
            for (int i = 0; i < S; ++i) o[i] *= z[i];
        }
    cx.matmul(w.out, out_.data(), V, n, cx.out(), E);
}

using ref::Vec;

// Gated DeltaNet (see forward/attention_deltanet.cpp for the equations), one token: projections and gates, the
// causal conv over the cached window, SiLU, per-head L2 norms, the delta rule per v head, the gated RMSNorm,
// the output projection.
void reference_step(const ref::Context& c, uint32_t l, const Vec& xn, Vec& out) {
    const Hparams& hp = c.m.hp;
    const DeltaNetConfig& dc = hp.ssm;
    const DeltaNetWeights& w = c.m.layers[l].ssm;
    const int S = static_cast<int>(dc.state), K = static_cast<int>(dc.conv_kernel), Hk = static_cast<int>(dc.n_k_heads);
    const int Hv = static_cast<int>(dc.n_v_heads), C = static_cast<int>(dc.conv_dim()), V = S * Hv;
    Vec qkv(C), conv(C), z(V), beta(Hv), g(Hv), o(V), delta(S);
    dense(c, w.qkv, xn.data(), qkv.data());
    dense(c, w.z, xn.data(), z.data());
    dense(c, w.beta, xn.data(), beta.data());
    dense(c, w.alpha, xn.data(), g.data());
    for (int h = 0; h < Hv; ++h) {
        beta[h] = ops::sigmoid(beta[h]);
        g[h] = ops::softplus(g[h] + w.dt_bias.f32()[h]) * w.a.f32()[h];
    }
    float* window = c.st.cache.conv[l].data();
    for (int ch = 0; ch < C; ++ch) ops::causal_conv(window + ch * (K - 1), &qkv[ch], 1, w.conv1d.f32() + ch * K, K, 1, &conv[ch], 1);
    c.fops.silu(conv.data(), C);
    for (int h = 0; h < 2 * Hk; ++h) ops::l2_norm(&conv[h * S], S, hp.rms_eps);
    float* state = c.st.cache.ssm[l].data();
    for (int h = 0; h < Hv; ++h) {
        const int kh = h % Hk;  // the converter's tiled v-head order
        ops::gated_delta_step(state + static_cast<size_t>(h) * S * S, &conv[kh * S], &conv[(Hk + kh) * S], &conv[2 * Hk * S + h * S], g[h], beta[h],
                              &o[h * S], S, c.kt.dot[static_cast<int>(GgmlType::F32)], delta.data());
        ops::rms_norm(&o[h * S], w.norm.f32(), &o[h * S], S, hp.rms_eps);
        c.fops.silu(&z[h * S], S);
        for (int i = 0; i < S; ++i) o[h * S + i] *= z[h * S + i];
    }
    dense(c, w.out, o.data(), out.data());
}

}  // namespace

const AttentionKindInfo& deltanet_attention() {
    static const AttentionKindInfo info{AttentionKind::GatedDeltaNet, "deltanet", unit_scratch_bytes<DeltaNetAttention>, make_unit<DeltaNetAttention>,
                                        reference_step};
    return info;
}

}  // namespace moe

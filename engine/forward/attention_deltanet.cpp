// Gated DeltaNet (qwen35moe's linear-attention layers), as llama.cpp's build_layer_attn_linear with its fused
// CPU kernel. Per token, with x the normed input:
//   qkv = W_qkv x, z = W_z x, beta = sigmoid(W_beta x), g = a * softplus(W_alpha x + dt_bias)   (per v head)
//   qkv <- silu(causal_conv(qkv))                     the conv window is the K-1 previous qkv rows
//   q, k <- l2_norm per k head; v head j reads k head j % Hk
//   M_j <- exp(g_j) M_j + k (beta_j (v_j - M_j^T k))^T;  o_j = M_j^T q / sqrt(S)
//   o_j <- rms_norm(o_j) * w_norm * silu(z_j);  out = W_out o
// A prompt runs the recurrence token by token like decode (llama.cpp's CPU path does the same): the work is
// parallel over channels (conv) and v heads (state), sequential over tokens.
#include "engine/forward/runner.h"

namespace moe {

void Runner::attention_deltanet(uint32_t l, int n) {
    const Hparams& hp = m_.hp;
    const DeltaNetConfig& c = hp.ssm;
    const DeltaNetWeights& w = m_.layers[l].ssm;
    const int E = static_cast<int>(hp.n_embd), S = static_cast<int>(c.state), K = static_cast<int>(c.conv_kernel);
    const int Hk = static_cast<int>(c.n_k_heads), Hv = static_cast<int>(c.n_v_heads);
    const int C = static_cast<int>(c.conv_dim()), V = S * Hv;

    matmul_group({{&w.qkv, dn_qkv_.data(), C}, {&w.z, dn_z_.data(), V}, {&w.beta, dn_beta_.data(), Hv}, {&w.alpha, dn_g_.data(), Hv}}, xn_.data(), E,
                 n);
    for (int t = 0; t < n; ++t)
        for (int h = 0; h < Hv; ++h) {
            float& b = dn_beta_[t * Hv + h];
            b = ops::sigmoid(b);
            float& g = dn_g_[t * Hv + h];
            g = ops::softplus(g + w.dt_bias.f32()[h]) * w.a.f32()[h];
        }

    // Causal conv per channel over the chunk, then SiLU per token row.
    float* conv_state = cache_->conv[l].data();
    const float* taps = w.conv1d.f32();
    pool_.parallel_for(C, [&](int64_t c0, int64_t c1) {
        for (int64_t ch = c0; ch < c1; ++ch)
            ops::causal_conv(conv_state + ch * (K - 1), dn_qkv_.data() + ch, C, taps + ch * K, K, n, dn_conv_.data() + ch, C);
    });
    for (int t = 0; t < n; ++t) {
        float* row = &dn_conv_[static_cast<size_t>(t) * C];
        fops_.silu(row, C);
        for (int h = 0; h < 2 * Hk; ++h) ops::l2_norm(row + h * S, S, hp.rms_eps);  // q heads, then k heads
    }

    // The delta rule: each v head's state runs through the chunk's tokens in order.
    float* state = cache_->ssm[l].data();
    const kernels::DotFn dot = kt_.dot[static_cast<int>(GgmlType::F32)];
    pool_.parallel_for(Hv, [&](int64_t h0, int64_t h1) {
        std::vector<float> delta(static_cast<size_t>(S));
        for (int64_t h = h0; h < h1; ++h) {
            const int kh = static_cast<int>(h % Hk);
            float* M = state + static_cast<size_t>(h) * S * S;
            for (int t = 0; t < n; ++t) {
                const float* row = &dn_conv_[static_cast<size_t>(t) * C];
                ops::gated_delta_step(M, row + kh * S, row + (Hk + kh) * S, row + 2 * Hk * S + h * S, dn_g_[t * Hv + h], dn_beta_[t * Hv + h],
                                      &dn_out_[static_cast<size_t>(t) * V + h * S], S, dot, delta.data());
            }
        }
    });

    // Gated RMSNorm per head, then the output projection.
    for (int t = 0; t < n; ++t)
        for (int h = 0; h < Hv; ++h) {
            float* o = &dn_out_[static_cast<size_t>(t) * V + h * S];
            float* z = &dn_z_[static_cast<size_t>(t) * V + h * S];
            ops::rms_norm(o, w.norm.f32(), o, S, hp.rms_eps);
            fops_.silu(z, S);
            for (int i = 0; i < S; ++i) o[i] *= z[i];
        }
    matmul(w.out, dn_out_.data(), V, n, tmp_.data(), E);
}

}  // namespace moe

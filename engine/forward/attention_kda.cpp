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
#include "engine/forward/runner.h"

namespace moe {

void Runner::attention_kda(uint32_t l, int n) {
    const Hparams& hp = m_.hp;
    const DeltaNetConfig& c = hp.ssm;
    const KdaWeights& w = m_.layers[l].kda;
    const int E = static_cast<int>(hp.n_embd), S = static_cast<int>(c.state), K = static_cast<int>(c.conv_kernel);
    const int H = static_cast<int>(c.n_v_heads), V = S * H, C = 3 * V;

    // q | k | v side by side per token (the conv's channels), the output gate, beta, and the decay's low rank.
    float* low_rank = dn_out_.data();  // free until the delta rule writes it
    matmul_group({{&w.wq, dn_qkv_.data(), C},
                  {&w.wk, dn_qkv_.data() + V, C},
                  {&w.wv, dn_qkv_.data() + 2 * V, C},
                  {&w.g, dn_z_.data(), V},
                  {&w.beta, dn_beta_.data(), H},
                  {&w.f_a, low_rank, S}},
                 xn_.data(), E, n);
    matmul(w.f_b, low_rank, S, n, dn_g_.data(), V);
    for (int t = 0; t < n; ++t) {
        for (int h = 0; h < H; ++h) {
            dn_beta_[t * H + h] = ops::sigmoid(dn_beta_[t * H + h]);
            for (int i = 0; i < S; ++i) {
                float& g = dn_g_[static_cast<size_t>(t) * V + h * S + i];
                g = c.kda_log_decay(g + w.dt_bias.f32()[h * S + i], w.a.f32()[h]);
            }
        }
    }

    float* conv_state = cache_->conv[l].data();
    pool_.parallel_for(C, [&](int64_t c0, int64_t c1) {
        for (int64_t ch = c0; ch < c1; ++ch) {
            const Tensor& taps = ch < V ? w.conv_q : ch < 2 * V ? w.conv_k : w.conv_v;
            ops::causal_conv(conv_state + ch * (K - 1), dn_qkv_.data() + ch, C, taps.f32() + (ch % V) * K, K, n, dn_conv_.data() + ch, C);
        }
    });
    for (int t = 0; t < n; ++t) {
        float* row = &dn_conv_[static_cast<size_t>(t) * C];
        for (int part = 0; part < 3; ++part) fops_.silu(row + part * V, V);  // one ggml_silu per q, k, v
        for (int h = 0; h < 2 * H; ++h) ops::l2_norm(row + h * S, S, hp.rms_eps);
    }

    float* state = cache_->ssm[l].data();
    const kernels::DotFn dot = kt_.dot[static_cast<int>(GgmlType::F32)];
    pool_.parallel_for(H, [&](int64_t h0, int64_t h1) {
        std::vector<float> delta(static_cast<size_t>(S));
        for (int64_t h = h0; h < h1; ++h) {
            float* M = state + static_cast<size_t>(h) * S * S;
            for (int t = 0; t < n; ++t) {
                const float* row = &dn_conv_[static_cast<size_t>(t) * C];
                ops::kda_delta_step(M, row + h * S, row + V + h * S, row + 2 * V + h * S, &dn_g_[static_cast<size_t>(t) * V + h * S],
                                    dn_beta_[t * H + h], &dn_out_[static_cast<size_t>(t) * V + h * S], S, dot, delta.data());
            }
        }
    });

    for (int t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h) {
            float* o = &dn_out_[static_cast<size_t>(t) * V + h * S];
            const float* z = &dn_z_[static_cast<size_t>(t) * V + h * S];
            ops::rms_norm(o, w.norm.f32(), o, S, hp.rms_eps);
            for (int i = 0; i < S; ++i) o[i] *= ops::sigmoid(z[i]);
        }
    matmul(w.out, dn_out_.data(), V, n, tmp_.data(), E);
}

}  // namespace moe

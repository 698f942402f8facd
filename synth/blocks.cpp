#include "synth/blocks.h"

#include <cmath>
#include <stdexcept>

namespace moe::synth {

void moe_block(Writer& w, const SyntheticSpec& s, const std::string& p, float gain) {
    w.f32_matrix(p + "ffn_gate_inp.weight", {s.embd, s.experts}, 2.f, skewed_router(s, p));
    if (s.probs_bias) w.vec(p + "exp_probs_b.bias", s.experts, 0.f, 0.05f);
    const uint32_t X = s.latent ? s.latent : s.embd;  // the experts' input and output width
    w.matrix(p + "ffn_gate_exps.weight", {X, s.ffn, s.experts}, gain);
    w.matrix(p + "ffn_up_exps.weight", {X, s.ffn, s.experts}, gain);
    if (s.fused_gate_up) {  // the same weights as one ffn_gate_up_exps: per expert its gate rows, then its up rows
        GgufTensorData up = std::move(w.tensors.back());
        w.tensors.pop_back();
        GgufTensorData gate = std::move(w.tensors.back());
        w.tensors.pop_back();
        const size_t per = gate.bytes.size() / s.experts;
        GgufTensorData fused{p + "ffn_gate_up_exps.weight", {X, 2ull * s.ffn, s.experts}, gate.type, {}};
        for (uint32_t e = 0; e < s.experts; ++e) {
            fused.bytes.insert(fused.bytes.end(), gate.bytes.begin() + e * per, gate.bytes.begin() + (e + 1) * per);
            fused.bytes.insert(fused.bytes.end(), up.bytes.begin() + e * per, up.bytes.begin() + (e + 1) * per);
        }
        w.tensors.push_back(std::move(fused));
    }
    w.matrix(p + "ffn_down_exps.weight", {s.ffn, X, s.experts}, 1.f / gain, true);
    if (s.shared) {
        const uint32_t f = s.ffn * s.shared;
        w.matrix(p + "ffn_gate_shexp.weight", {s.embd, f}, gain);
        w.matrix(p + "ffn_up_shexp.weight", {s.embd, f}, gain);
        w.matrix(p + "ffn_down_shexp.weight", {f, s.embd}, 1.f / gain, true);
    }
}

void dense_block(Writer& w, const SyntheticSpec& s, const std::string& p, float gain) {
    w.matrix(p + "ffn_gate.weight", {s.embd, s.dense_ffn}, gain);
    w.matrix(p + "ffn_up.weight", {s.embd, s.dense_ffn}, gain);
    w.matrix(p + "ffn_down.weight", {s.dense_ffn, s.embd}, 1.f / gain, true);
}

void msa_indexer(Writer& w, const SyntheticSpec& s, const std::string& p) {
    w.f32_matrix(p + "indexer.q_proj.weight", {s.embd, s.kv_heads * s.msa_dim}, 1.f);
    w.f32_matrix(p + "indexer.k_proj.weight", {s.embd, s.msa_dim}, 1.f);
    w.vec(p + "indexer.q_norm.weight", s.msa_dim);
    w.vec(p + "indexer.k_norm.weight", s.msa_dim);
}

namespace {

// The last `n` tensors written (one type) as one tensor `name` of shape `ne`, their rows one after another:
// a fused projection holding exactly the weights the separate ones held.
void fuse_last(Writer& w, size_t n, const std::string& name, std::vector<uint64_t> ne) {
    std::vector<GgufTensorData> parts(std::make_move_iterator(w.tensors.end() - static_cast<std::ptrdiff_t>(n)),
                                      std::make_move_iterator(w.tensors.end()));
    w.tensors.resize(w.tensors.size() - n);
    GgufTensorData fused{name, std::move(ne), parts[0].type, {}};
    for (const GgufTensorData& t : parts) {
        if (t.type != fused.type)
            throw std::runtime_error("cannot write " + name + ": the type plan gives " + t.name + " type " +
                                     type_name(static_cast<uint32_t>(t.type)) + " but " + parts[0].name + " " +
                                     type_name(static_cast<uint32_t>(fused.type)) + " (use one --type)");
        fused.bytes.insert(fused.bytes.end(), t.bytes.begin(), t.bytes.end());
    }
    w.tensors.push_back(std::move(fused));
}

// Q, K and V [embd, q], [embd, kv], [embd, kv] (and their biases): separate, or fused as newer converters write them.
void qkv_projections(Writer& w, const SyntheticSpec& s, const std::string& p, uint32_t q, uint32_t kv, bool biases) {
    w.matrix(p + "attn_q.weight", {s.embd, q});
    w.matrix(p + "attn_k.weight", {s.embd, kv});
    w.matrix(p + "attn_v.weight", {s.embd, kv}, 1.f, true);
    if (s.fused_qkv) fuse_last(w, 3, p + "attn_qkv.weight", {s.embd, q + 2ull * kv});
    if (!biases) return;
    w.vec(p + "attn_q.bias", q, 0.f, 0.1f);
    w.vec(p + "attn_k.bias", kv, 0.f, 0.1f);
    w.vec(p + "attn_v.bias", kv, 0.f, 0.1f);
    if (s.fused_qkv) fuse_last(w, 3, p + "attn_qkv.bias", {q + 2ull * kv});
}

}  // namespace

void gqa_block(Writer& w, const SyntheticSpec& s, const std::string& p, GqaExtras x) {
    const uint32_t Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim;
    qkv_projections(w, s, p, Q, KV, x.qkv_bias);
    w.matrix(p + "attn_output.weight", {Q, s.embd});
    if (x.output_bias_and_sinks) {
        w.vec(p + "attn_output.bias", s.embd, 0.f, 0.1f);
        w.vec(p + "attn_sinks.weight", s.heads, 0.f, 1.f);
    }
    if (x.qk_norm) {
        w.vec(p + "attn_q_norm.weight", x.qk_norm_whole ? Q : s.head_dim);
        w.vec(p + "attn_k_norm.weight", x.qk_norm_whole ? KV : s.head_dim);
    }
}

void gpt_oss_moe(Writer& w, const SyntheticSpec& s, const std::string& p) {
    w.f32_matrix(p + "ffn_gate_inp.weight", {s.embd, s.experts}, 2.f, skewed_router(s, p));
    w.vec(p + "ffn_gate_inp.bias", s.experts, 0.f, 0.5f);
    w.matrix(p + "ffn_gate_exps.weight", {s.embd, s.ffn, s.experts}, 4.f);
    w.f32_matrix(p + "ffn_gate_exps.bias", {s.ffn, s.experts}, 0.5f);
    w.matrix(p + "ffn_up_exps.weight", {s.embd, s.ffn, s.experts}, 4.f);
    w.f32_matrix(p + "ffn_up_exps.bias", {s.ffn, s.experts}, 0.5f);
    w.matrix(p + "ffn_down_exps.weight", {s.ffn, s.embd, s.experts}, 0.25f, true);
    w.f32_matrix(p + "ffn_down_exps.bias", {s.embd, s.experts}, 0.5f);
}

void deltanet_block(Writer& w, const SyntheticSpec& s, const std::string& p) {
    const uint32_t S = s.ssm_state, V = S * s.ssm_v_heads, C = 2 * S * s.ssm_k_heads + V;
    w.matrix(p + "attn_qkv.weight", {s.embd, C});
    w.matrix(p + "attn_gate.weight", {s.embd, V});
    w.f32_matrix(p + "ssm_conv1d.weight", {s.ssm_conv, C}, 1.f);
    w.vec(p + "ssm_dt.bias", s.ssm_v_heads, -4.5f, 2.2f);
    w.vec(p + "ssm_a", s.ssm_v_heads, -8.f, 7.9f);
    w.matrix(p + "ssm_alpha.weight", {s.embd, s.ssm_v_heads});
    w.matrix(p + "ssm_beta.weight", {s.embd, s.ssm_v_heads});
    w.vec(p + "ssm_norm.weight", S);
    w.matrix(p + "ssm_out.weight", {V, s.embd}, 1.f, true);
}

void gated_attention_block(Writer& w, const SyntheticSpec& s, const std::string& p) {
    const uint32_t Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim;
    qkv_projections(w, s, p, 2 * Q, KV, false);
    w.matrix(p + "attn_output.weight", {Q, s.embd});
    w.vec(p + "attn_q_norm.weight", s.head_dim);
    w.vec(p + "attn_k_norm.weight", s.head_dim);
}

void mla_block(Writer& w, const SyntheticSpec& s, const std::string& p, bool indexer) {
    const uint32_t qk = s.qk_nope + s.qk_rope;
    if (s.q_lora) {
        w.matrix(p + "attn_q_a.weight", {s.embd, s.q_lora});
        w.vec(p + "attn_q_a_norm.weight", s.q_lora);
        w.matrix(p + "attn_q_b.weight", {s.q_lora, s.heads * qk});
    } else {
        w.matrix(p + "attn_q.weight", {s.embd, s.heads * qk});
    }
    w.matrix(p + "attn_kv_a_mqa.weight", {s.embd, s.kv_lora + s.qk_rope});
    w.vec(p + "attn_kv_a_norm.weight", s.kv_lora);
    if (s.mla_kv_b) {
        w.matrix(p + "attn_kv_b.weight", {s.kv_lora, s.heads * (s.qk_nope + s.v_head)});
    } else {
        w.matrix(p + "attn_k_b.weight", {s.qk_nope, s.kv_lora, s.heads});
        w.matrix(p + "attn_v_b.weight", {s.kv_lora, s.v_head, s.heads}, 1.f, true);
    }
    w.matrix(p + "attn_output.weight", {s.heads * s.v_head, s.embd});
    if (indexer) {
        w.matrix(p + "indexer.attn_q_b.weight", {s.q_lora, s.ix_heads * s.ix_dim});
        w.matrix(p + "indexer.attn_k.weight", {s.embd, s.ix_dim});
        w.vec(p + "indexer.k_norm.weight", s.ix_dim);
        w.vec(p + "indexer.k_norm.bias", s.ix_dim, 0.f, 0.1f);
        w.matrix(p + "indexer.proj.weight", {s.embd, s.ix_heads});
    }
}

void kda_block(Writer& w, const SyntheticSpec& s, const std::string& p) {
    const uint32_t S = s.ssm_state, V = S * s.heads;
    for (const char* part : {"q", "k", "v"}) {
        w.matrix(p + "attn_" + part + ".weight", {s.embd, V}, 1.f, part[0] == 'v');
        w.f32_matrix(p + "ssm_conv1d_" + part + ".weight", {s.ssm_conv, 1, V}, 1.f);
    }
    w.matrix(p + "ssm_f_a.weight", {s.embd, S});
    w.matrix(p + "ssm_f_b.weight", {S, V});
    w.vec(p + "ssm_dt.bias", V, -1.f, 2.f);
    w.vec(p + "ssm_a", s.heads, -2.f, 1.5f);  // -exp(A_log), A_log ~ U(-0.7, 1.3)
    w.matrix(p + "ssm_beta.weight", {s.embd, s.heads});
    w.matrix(p + "ssm_g.weight", {s.embd, V});
    w.vec(p + "ssm_norm.weight", S);
    w.matrix(p + "attn_output.weight", {V, s.embd}, 1.f, true);
}

void latent_moe_extras(Writer& w, const SyntheticSpec& s, const std::string& p) {
    w.matrix(p + "ffn_routed_down.weight", {s.embd, s.latent});
    w.vec(p + "ffn_routed_norm.weight", s.latent);
    w.matrix(p + "ffn_routed_up.weight", {s.latent, s.embd}, 1.f, true);
}

void nextn_head(Writer& w, const SyntheticSpec& s, const std::string& p) {
    w.matrix(p + "nextn.eh_proj.weight", {2ull * s.embd, s.embd});
    w.vec(p + "nextn.enorm.weight", s.embd);
    w.vec(p + "nextn.hnorm.weight", s.embd);
    w.vec(p + "nextn.shared_head_norm.weight", s.embd);
}

}  // namespace moe::synth

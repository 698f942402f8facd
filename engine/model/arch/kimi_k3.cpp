// kimi-k3 (Kimi K3): a hybrid of Kimi Delta Attention layers (linear attention with a recurrent state and a
// decay per key channel) and MLA layers (nope-only: no RoPE anywhere, a sigmoid output gate); a dense lead, then
// a latent MoE (routed experts at a narrower width between a down and an up projection); the situ activation in
// every feed-forward; cross-layer residual attention (Hparams::res_block). ../shared/oracle/README-2026.md has
// the keys, tensors and maths; llama.cpp's src/models/kimi-k3.cpp is the computation.
#include <cmath>

#include "engine/model/arch/arch.h"

namespace moe::arch {
namespace {

// attention.head_count_kv: per block (0 marks a KDA layer) or one value for all.
std::vector<bool> kda_layers(ArchLoader& ld, const Hparams& hp) {
    const uint32_t blocks = hp.n_layer + hp.n_layer_nextn;
    std::vector<bool> kda(hp.n_layer);
    const GgufValue* v = ld.file().meta().find(ld.key_name("attention.head_count_kv"));
    if (v && v->is_array()) {
        const std::vector<uint32_t> kv = *ld.u32_array("attention.head_count_kv", blocks);
        for (uint32_t l = 0; l < hp.n_layer; ++l) kda[l] = kv[l] == 0;
    } else {
        kda.assign(hp.n_layer, ld.u32_or_zero("attention.head_count_kv") == 0);
    }
    return kda;
}

void load_kda_config(ArchLoader& ld, Hparams& hp) {
    DeltaNetConfig& s = hp.ssm;
    s.conv_kernel = ld.u32("ssm.conv_kernel");
    s.state = ld.u32("kda.head_dim");
    s.n_k_heads = s.n_v_heads = ld.u32("attention.head_count");
    if (s.conv_kernel < 2 || s.conv_kernel > 64)
        ld.fail("metadata " + ld.key_name("ssm.conv_kernel") + " = " + std::to_string(s.conv_kernel) + " is not a conv width (2..64)");
    s.has_gate_lower_bound = ld.has("kda.gate_lower_bound");
    s.gate_lower_bound = ld.f32("kda.gate_lower_bound", 0.f);
    if (s.has_gate_lower_bound && !(s.gate_lower_bound < 0.f))
        ld.fail("metadata " + ld.key_name("kda.gate_lower_bound") + " = " + std::to_string(s.gate_lower_bound) +
                " is not a negative log-decay bound");
}

void load_kda_layer(ArchLoader& ld, const Hparams& hp, Layer& L, const std::string& p) {
    const DeltaNetConfig& s = hp.ssm;
    const uint64_t E = hp.n_embd, S = s.state, H = s.n_v_heads, inner = S * H, K = s.conv_kernel;
    const std::string iwhy = "head_count " + std::to_string(H) + " x kda.head_dim " + std::to_string(S);
    const std::string cwhy = "ssm.conv_kernel " + std::to_string(K) + ", " + iwhy;
    L.attn = AttentionKind::KimiDelta;
    KdaWeights& w = L.kda;
    ld.resident(w.wq, p + "attn_q.weight", {E, inner}, iwhy);
    ld.resident(w.wk, p + "attn_k.weight", {E, inner}, iwhy);
    ld.resident(w.wv, p + "attn_v.weight", {E, inner}, iwhy);
    ld.resident(w.conv_q, p + "ssm_conv1d_q.weight", {K, 1, inner}, cwhy);
    ld.resident(w.conv_k, p + "ssm_conv1d_k.weight", {K, 1, inner}, cwhy);
    ld.resident(w.conv_v, p + "ssm_conv1d_v.weight", {K, 1, inner}, cwhy);
    ld.resident(w.f_a, p + "ssm_f_a.weight", {E, S}, "kda.head_dim " + std::to_string(S));
    ld.resident(w.f_b, p + "ssm_f_b.weight", {S, inner}, iwhy);
    ld.resident(w.dt_bias, p + "ssm_dt.bias", {inner}, iwhy);
    ld.resident(w.a, p + "ssm_a", {H}, "head_count " + std::to_string(H));
    ld.resident(w.beta, p + "ssm_beta.weight", {E, H}, "head_count " + std::to_string(H));
    ld.resident(w.g, p + "ssm_g.weight", {E, inner}, iwhy);
    ld.resident(w.norm, p + "ssm_norm.weight", {S}, "kda.head_dim " + std::to_string(S));
    ld.resident(w.out, p + "attn_output.weight", {inner, E}, iwhy);
    for (const Tensor* t : {&w.conv_q, &w.conv_k, &w.conv_v, &w.dt_bias, &w.a})
        if (t->type != GgmlType::F32) ld.fail("tensor '" + t->name + "' is " + type_name(static_cast<uint32_t>(t->type)) + ", not f32");
}

}  // namespace

void load_kimi_k3(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    load_layer_count(ld, hp);
    load_embeddings(ld, m);
    const std::vector<bool> kda = kda_layers(ld, hp);
    // The last layer runs on every row: llama.cpp narrows to the output rows only after the final residual mix.
    hp.output_rows_after_norm = true;

    uint32_t first_mla = hp.n_layer;
    for (uint32_t l = 0; l < hp.n_layer && first_mla == hp.n_layer; ++l)
        if (!kda[l]) first_mla = l;
    const bool unsplit = first_mla < hp.n_layer && mla_kv_b_unsplit(ld, first_mla);
    if (first_mla < hp.n_layer) {
        const uint32_t key_mla = load_mla_config(ld, hp, unsplit);
        hp.mla.kq_scale = 1.0f / std::sqrt(static_cast<float>(key_mla));
    }
    hp.rope = {};  // K3's MLA is nope-only: rope.dimension_count sizes k_pe, which is never rotated
    if (std::find(kda.begin(), kda.end(), true) != kda.end()) load_kda_config(ld, hp);

    load_moe_config(ld, hp, Gating::Sigmoid);
    load_dense_lead(ld, hp);
    hp.moe.n_latent = ld.u32_or_zero("expert_latent_length");
    if (hp.moe.n_latent > hp.n_embd)
        ld.fail("metadata " + ld.key_name("expert_latent_length") + " = " + std::to_string(hp.moe.n_latent) + " exceeds embedding_length " +
                std::to_string(hp.n_embd));
    hp.ffn_activation = FfnActivation::Situ;
    hp.situ_beta = ld.f32("activation.situ_beta", std::nanf(""));
    hp.situ_linear_beta = ld.f32("activation.situ_linear_beta", std::nanf(""));
    if (!(hp.situ_beta > 0.f))
        ld.fail("metadata " + ld.key_name("activation.situ_beta") + " = " + std::to_string(hp.situ_beta) + " is missing or not positive");
    if (std::isnan(hp.situ_linear_beta)) ld.fail("metadata " + ld.key_name("activation.situ_linear_beta") + " is missing");
    if (!ld.has("attn_res.block_size")) ld.fail("metadata " + ld.key_name("attn_res.block_size") + " is missing");
    hp.res_block = ld.u32_or_zero("attn_res.block_size");

    const uint64_t E = hp.n_embd;
    const std::string e_why = "embedding_length " + std::to_string(E);
    if (hp.res_block) ld.resident(m.output_res_score, "output_res_score.weight", {E}, e_why);
    m.layers.resize(hp.n_layer);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        ld.resident(L.ffn_norm, p + "ffn_norm.weight", {E}, e_why);
        if (hp.res_block) {
            ld.resident(L.attn_res_score, p + "attn_res_score.weight", {E}, e_why);
            ld.resident(L.ffn_res_score, p + "ffn_res_score.weight", {E}, e_why);
        }
        if (kda[l]) {
            load_kda_layer(ld, hp, L, p);
        } else {
            load_mla_attention(ld, hp, L, p, unsplit);
            ld.resident(L.mla.gate, p + "attn_gate.weight", {E, uint64_t{hp.mla.n_head} * hp.mla.v_head},
                        "head_count " + std::to_string(hp.mla.n_head) + " x value_length_mla " + std::to_string(hp.mla.v_head), false);
        }
        if (l < hp.n_layer_dense_lead) load_dense_ffn(ld, hp, L, p);
        else load_moe_layer(ld, hp, L, p);
    }
}

}  // namespace moe::arch

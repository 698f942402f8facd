// gpt-oss (gpt-oss-20b / -120b; llama.cpp's openai-moe): GQA with q/k/v/output biases, NeoX RoPE (YaRN) on the
// whole head, attention sinks, sliding-window layers alternating with full ones; every layer MoE with a biased
// router, softmax over the chosen experts' logits, biased experts and the clamped SwiGLU (swiglu_oai).
#include "engine/model/arch/arch.h"

namespace moe::arch {
namespace {

// Which layers slide: attention.sliding_window_pattern as one flag per layer, or as a period (llama.cpp's
// set_swa_pattern: layer l slides unless l % period == period - 1; default 2, the even layers).
std::vector<bool> sliding_layers(ArchLoader& ld, uint32_t n_layer) {
    const std::string key = "attention.sliding_window_pattern";
    if (const GgufValue* v = ld.file().meta().find(ld.key_name(key)); v && v->is_array()) return *ld.bool_array(key, n_layer);
    const uint32_t period = ld.u32_or_zero(key, 2);
    std::vector<bool> out(n_layer);
    for (uint32_t l = 0; l < n_layer; ++l) out[l] = period == 0 || l % period < period - 1;
    return out;
}

}  // namespace

void load_gpt_oss(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    load_layer_count(ld, hp);
    GqaConfig& g = hp.gqa;
    // llama.cpp sizes gpt-oss's heads by rope.dimension_count: the key length defaults to it, and they must agree.
    const std::optional<uint32_t> rot = ld.has("rope.dimension_count") ? std::optional(ld.u32("rope.dimension_count")) : std::nullopt;
    load_gqa_heads(ld, hp, rot);
    const uint32_t n_rot = rot.value_or(g.head_dim);
    if (n_rot != g.head_dim)
        ld.fail("attention.key_length " + std::to_string(g.head_dim) + " and rope.dimension_count " + std::to_string(n_rot) +
                " differ (gpt-oss rotates whole heads)");
    load_rope(ld, hp, n_rot, /*neox=*/true, false);
    if (ld.has("rope.freq_base_swa") && ld.f32("rope.freq_base_swa", hp.rope.freq_base) != hp.rope.freq_base)
        ld.fail("metadata " + ld.key_name("rope.freq_base_swa") + " = " + std::to_string(ld.f32("rope.freq_base_swa", 0.f)) +
                " differs from rope.freq_base " + std::to_string(hp.rope.freq_base) + " (a second RoPE base is not supported)");
    g.window = ld.u32("attention.sliding_window");
    const std::vector<bool> sliding = sliding_layers(ld, hp.n_layer);

    // llama.cpp's openai-moe graph fixes the routing: softmax over the top-k logits, no renormalisation, no groups.
    load_moe_config(ld, hp, Gating::Softmax);
    hp.moe.gating = Gating::SoftmaxWeight;
    hp.moe.norm_weights = false;
    hp.moe.weights_scale = 0.f;  // its graph never scales the weights (expert_weights_scale is not read)
    hp.moe.n_group = hp.moe.n_group_used = 0;
    hp.moe.n_ff_shexp = 0;
    hp.ffn_activation = FfnActivation::SwigluOai;
    load_embeddings(ld, m);

    const uint64_t E = hp.n_embd;
    const uint64_t X = hp.moe.n_expert, F = hp.moe.n_ff_exp;
    const std::string e_why = "embedding_length " + std::to_string(E);
    const std::string xwhy = "expert_count " + std::to_string(X) + ", expert_feed_forward_length " + std::to_string(F);
    m.layers.resize(hp.n_layer);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        L.attn = AttentionKind::Gqa;
        L.sliding = sliding[l];
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        load_gqa_projections(ld, hp, L.gqa, p, QkvBiases::Required);
        ld.resident(L.gqa.bo, p + "attn_output.bias", {E}, e_why);
        ld.resident(L.gqa.sinks, p + "attn_sinks.weight", {g.n_head}, "head_count " + std::to_string(g.n_head));
        ld.resident(L.ffn_norm, p + "post_attention_norm.weight", {E}, e_why);
        load_moe_layer(ld, hp, L, p);
        MoeWeights& w = L.experts;
        ld.resident(w.router_bias, p + "ffn_gate_inp.bias", {X}, xwhy);
        ld.resident(w.gate_bias, p + "ffn_gate_exps.bias", {F, X}, xwhy);
        ld.resident(w.up_bias, p + "ffn_up_exps.bias", {F, X}, xwhy);
        ld.resident(w.down_bias, p + "ffn_down_exps.bias", {E, X}, xwhy);
        for (const Tensor* b : {&w.gate_bias, &w.up_bias, &w.down_bias})
            if (b->type != GgmlType::F32)
                ld.fail("tensor '" + b->name + "' is stored as " + type_name(static_cast<uint32_t>(b->type)) + "; expected f32");
    }
}

}  // namespace moe::arch

// qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): GQA with per-head q/k RMSNorm and NeoX RoPE on the whole head;
// every layer MoE with softmax routing and renormalised weights; no shared expert.
#include "engine/model/arch/arch.h"

namespace moe::arch {

void load_qwen3moe(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    load_layer_count(ld, hp);
    GqaConfig& g = hp.gqa;
    load_gqa_heads(ld, hp);
    if (g.head_dim % 2) ld.fail("key_length " + std::to_string(g.head_dim) + " is odd (RoPE needs pairs)");
    load_gqa_rope(ld, hp, /*neox=*/true);
    // qwen3moe routes with softmax and always renormalises the chosen weights.
    load_moe_config(ld, hp, Gating::Softmax, /*force_norm=*/true);
    hp.moe.n_ff_shexp = 0;
    load_embeddings(ld, m);

    const uint64_t E = hp.n_embd;
    const std::string e_why = "embedding_length " + std::to_string(E);
    m.layers.resize(hp.n_layer);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        L.attn = AttentionKind::Gqa;
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        load_gqa_projections(ld, hp, L.gqa, p);
        ld.resident(L.gqa.q_norm, p + "attn_q_norm.weight", {g.head_dim}, "key_length");
        ld.resident(L.gqa.k_norm, p + "attn_k_norm.weight", {g.head_dim}, "key_length");
        ld.resident(L.ffn_norm, p + "ffn_norm.weight", {E}, e_why);
        load_moe_layer(ld, hp, L, p);
    }
}

}  // namespace moe::arch

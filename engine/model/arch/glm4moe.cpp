// glm4moe (GLM-4.5/4.6/4.7): GQA with q/k/v biases, optional q/k RMSNorm, NeoX RoPE on the first
// rope.dimension_count dims; leading dense layers, then MoE with sigmoid routing, a selection bias
// (exp_probs_b), renormalised and scaled weights, and a shared expert. A NextN block may follow the trunk.
#include "engine/model/arch/arch.h"

namespace moe::arch {

void load_glm4moe(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    load_gqa_trunk(ld, hp, /*neox=*/true, /*runs_nextn=*/true);
    GqaConfig& g = hp.gqa;
    load_moe_config(ld, hp, Gating::Sigmoid);
    load_dense_lead(ld, hp);
    load_embeddings(ld, m);

    const uint64_t E = hp.n_embd;
    const std::string e_why = "embedding_length " + std::to_string(E);
    m.layers.resize(blocks_to_load(ld, hp));
    for (uint32_t l = 0; l < m.layers.size(); ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        L.attn = AttentionKind::Gqa;
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        load_gqa_projections(ld, hp, L.gqa, p, QkvBiases::Optional);
        ld.resident(L.gqa.q_norm, p + "attn_q_norm.weight", {g.head_dim}, "key_length", false);
        ld.resident(L.gqa.k_norm, p + "attn_k_norm.weight", {g.head_dim}, "key_length", false);
        ld.resident(L.ffn_norm, p + "post_attention_norm.weight", {E}, e_why);
        if (l < hp.n_layer_dense_lead) load_dense_ffn(ld, hp, L, p);
        else load_moe_layer(ld, hp, L, p);
        if (l >= hp.n_layer) load_nextn_head(ld, m, l);
    }
}

}  // namespace moe::arch

// minimax-m2 (MiniMax-M2, M2.1, M2.5): GQA whose q and k are RMS-normed across all their heads at once (one
// weight per row element), NeoX RoPE on the first rope.dimension_count dims; every layer MoE with sigmoid
// routing, a selection bias and renormalised weights (llama.cpp's graph fixes the renormalisation and reads no
// scale), SwiGLU experts, no shared expert.
#include "engine/model/arch/arch.h"

namespace moe::arch {

void load_minimax_m2(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    load_gqa_trunk(ld, hp, /*neox=*/true);
    GqaConfig& g = hp.gqa;
    g.qk_norm_whole = true;
    load_moe_config(ld, hp, Gating::Sigmoid, /*force_norm=*/true);
    hp.moe.weights_scale = 0.f;  // expert_weights_scale is not read by llama.cpp for this architecture
    // llama.cpp sizes this architecture's experts by feed_forward_length: a file where it differs is not one llama.cpp loads.
    if (const uint32_t ff = ld.u32_or_zero("feed_forward_length"); ff && ff != hp.moe.n_ff_exp)
        ld.fail("metadata " + ld.key_name("feed_forward_length") + " = " + std::to_string(ff) + " differs from expert_feed_forward_length " +
                std::to_string(hp.moe.n_ff_exp) + " (minimax-m2's experts are sized by both)");
    if (hp.moe.n_ff_shexp) ld.fail("metadata " + ld.key_name("expert_shared_count") + " is set, but minimax-m2 has no shared expert");
    load_embeddings(ld, m);

    const uint64_t E = hp.n_embd, Q = uint64_t{g.n_head} * g.head_dim, KV = uint64_t{g.n_head_kv} * g.head_dim;
    const std::string e_why = "embedding_length " + std::to_string(E);
    m.layers.resize(hp.n_layer);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        load_gqa_projections(ld, hp, L.gqa, p);
        ld.resident(L.gqa.q_norm, p + "attn_q_norm.weight", {Q}, "head_count x key_length (q is normed across its heads)");
        ld.resident(L.gqa.k_norm, p + "attn_k_norm.weight", {KV}, "head_count_kv x key_length (k is normed across its heads)");
        ld.resident(L.ffn_norm, p + "ffn_norm.weight", {E}, e_why);
        load_moe_layer(ld, hp, L, p);
        if (!ld.has_tensor(p + "exp_probs_b.bias"))
            ld.fail("tensor '" + p + "exp_probs_b.bias' is missing (minimax-m2 routes with a selection bias)");
    }
}

}  // namespace moe::arch

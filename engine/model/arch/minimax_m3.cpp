// minimax-m3 (MiniMax-M3): GQA with per-head q/k RMSNorm (one weight vector for every head) and NeoX RoPE on the
// first rope.dimension_count dims; leading dense layers, then MoE layers with sigmoid routing, a selection bias,
// renormalised and scaled weights and a shared expert; swiglu_oai in every feed-forward. The MoE layers attend
// through MiniMax Sparse Attention (Hparams::msa, forward/msa.h): an indexer picks the blocks each kv group sees.
#include "engine/model/arch/arch.h"

namespace moe::arch {
namespace {

// attention.indexer.*: the MSA indexer's shape, checked against the attention's.
void load_msa(ArchLoader& ld, Hparams& hp) {
    MsaConfig& c = hp.msa;
    const uint32_t heads = ld.u32("attention.indexer.head_count");
    if (heads != hp.gqa.n_head_kv)
        ld.fail("metadata " + ld.key_name("attention.indexer.head_count") + " = " + std::to_string(heads) + " differs from head_count_kv " +
                std::to_string(hp.gqa.n_head_kv) + " (MSA has one indexer head per kv group)");
    c.head_dim = ld.u32("attention.indexer.key_length");
    if (static_cast<int>(c.head_dim) < hp.rope.n_rot)
        ld.fail("metadata " + ld.key_name("attention.indexer.key_length") + " = " + std::to_string(c.head_dim) + " is below rope.dimension_count " +
                std::to_string(hp.rope.n_rot) + " (the indexer's heads are rotated as the attention's)");
    c.top_k = ld.u32("attention.indexer.top_k");
    c.block_size = ld.u32("attention.indexer.block_size");
    c.local_blocks = ld.u32_or_zero("attention.indexer.local_blocks");
    if (c.local_blocks > c.top_k)
        ld.fail("metadata " + ld.key_name("attention.indexer.local_blocks") + " = " + std::to_string(c.local_blocks) + " exceeds top_k " +
                std::to_string(c.top_k));
}

}  // namespace

void load_minimax_m3(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    load_gqa_trunk(ld, hp, /*neox=*/true);
    GqaConfig& g = hp.gqa;
    load_moe_config(ld, hp, Gating::Sigmoid);
    hp.ffn_activation = FfnActivation::SwigluOai;
    load_dense_lead(ld, hp);
    if (hp.n_layer_dense_lead < hp.n_layer) load_msa(ld, hp);
    load_embeddings(ld, m);

    const uint64_t E = hp.n_embd, D = hp.msa.head_dim;
    const std::string e_why = "embedding_length " + std::to_string(E);
    const std::string ix_why = "head_count_kv " + std::to_string(g.n_head_kv) + " x attention.indexer.key_length " + std::to_string(D);
    m.layers.resize(hp.n_layer);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        load_gqa_projections(ld, hp, L.gqa, p);
        ld.resident(L.gqa.q_norm, p + "attn_q_norm.weight", {g.head_dim}, "key_length");
        ld.resident(L.gqa.k_norm, p + "attn_k_norm.weight", {g.head_dim}, "key_length");
        ld.resident(L.ffn_norm, p + "ffn_norm.weight", {E}, e_why);
        if (l < hp.n_layer_dense_lead) {
            load_dense_ffn(ld, hp, L, p);
            continue;
        }
        load_moe_layer(ld, hp, L, p);
        L.msa = true;  // llama.cpp: the sparse layers are the MoE layers
        ld.resident(L.gqa.ix_q, p + "indexer.q_proj.weight", {E, g.n_head_kv * D}, ix_why);
        ld.resident(L.gqa.ix_k, p + "indexer.k_proj.weight", {E, D}, ix_why);
        ld.resident(L.gqa.ix_q_norm, p + "indexer.q_norm.weight", {D}, ix_why);
        ld.resident(L.gqa.ix_k_norm, p + "indexer.k_norm.weight", {D}, ix_why);
    }
}

}  // namespace moe::arch

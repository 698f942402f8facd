// deepseek2 (DeepSeek-V2/V3/R1, Kimi-K2) and glm-dsa (GLM-5.x): multi-head latent attention in the split
// k_b/v_b form current converters write, absorbed so the cache holds one latent row (kv_lora + qk_rope) per
// token; NORM-style RoPE on the rope dims (YaRN where rope.scaling.* says so); leading dense layers, then MoE
// with shared experts, softmax or sigmoid routing, a selection bias, group-limited top-k, weight norm and
// scale. glm-dsa adds the DSA lightning indexer. NextN/MTP blocks after the trunk are recognised, not run.
#include <cmath>

#include "engine/model/arch/arch.h"

namespace moe::arch {
namespace {

// GLM-5.2's built-in indexer pattern (llama.cpp GLM_5_2_DEFAULT_INDEXER_TYPES): layers 0 and 1 full, then
// every fourth layer from 2 on.
bool glm52_full_layer(uint32_t l) { return l < 2 || (l - 2) % 4 == 0; }

void load_indexer_config(ArchLoader& ld, Hparams& hp) {
    IndexerConfig& ix = hp.indexer;
    ix.n_head = ld.u32("attention.indexer.head_count");
    ix.head_dim = ld.u32("attention.indexer.key_length");
    ix.top_k = ld.u32("attention.indexer.top_k");
    if (ix.head_dim < 64 || (ix.head_dim & (ix.head_dim - 1)))
        ld.fail("metadata " + ld.key_name("attention.indexer.key_length") + " = " + std::to_string(ix.head_dim) +
                " is not a power of two of at least 64 (its keys are Hadamard-transformed)");
    if (static_cast<uint32_t>(hp.rope.n_rot) > ix.head_dim)
        ld.fail("metadata " + ld.key_name("rope.dimension_count") + " = " + std::to_string(hp.rope.n_rot) + " exceeds " +
                ld.key_name("attention.indexer.key_length") + " = " + std::to_string(ix.head_dim));
    if (auto types = ld.bool_array("attention.indexer.types", hp.n_layer)) {
        ix.full = *types;
    } else {
        // GLM-5/5.1 files (context below 1M) carry no types: every layer is full; GLM-5.2 has a fixed pattern.
        ix.full.assign(hp.n_layer, true);
        if (hp.n_ctx_train >= 1048576)
            for (uint32_t l = 0; l < hp.n_layer; ++l) ix.full[l] = glm52_full_layer(l);
    }
    if (!ix.full[0]) ld.fail("metadata " + ld.key_name("attention.indexer.types") + " makes layer 0 a shared indexer layer (it must be full)");
}

}  // namespace

void load_deepseek2(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    const bool dsa = ld.arch() == "glm-dsa";
    load_layer_count(ld, hp);
    load_embeddings(ld, m);
    MlaConfig& c = hp.mla;
    c.n_head = ld.u32("attention.head_count");
    c.q_lora_rank = ld.u32_or_zero("attention.q_lora_rank");
    c.kv_lora_rank = ld.u32("attention.kv_lora_rank");
    if (!ld.has("attention.key_length_mla") || !ld.has("attention.value_length_mla"))
        ld.fail("metadata " + ld.key_name("attention.key_length_mla") + " / value_length_mla are missing: an older conversion with "
                "an unsplit attn_kv_b, which this engine does not run (re-convert with a current llama.cpp)");
    const uint32_t key_mla = ld.u32("attention.key_length_mla");
    c.v_head = ld.u32("attention.value_length_mla");
    c.qk_rope = ld.u32("rope.dimension_count");
    if (c.qk_rope >= key_mla)
        ld.fail("metadata " + ld.key_name("rope.dimension_count") + " = " + std::to_string(c.qk_rope) + " is not below " +
                ld.key_name("attention.key_length_mla") + " = " + std::to_string(key_mla));
    c.qk_nope = key_mla - c.qk_rope;
    // The absorbed form's own keys must agree: one latent "head" of kv_lora + rope.
    if (const uint32_t k = ld.u32_or_zero("attention.key_length"); k && k != c.kv_lora_rank + c.qk_rope)
        ld.fail("metadata " + ld.key_name("attention.key_length") + " = " + std::to_string(k) + " but kv_lora_rank " +
                std::to_string(c.kv_lora_rank) + " + rope.dimension_count " + std::to_string(c.qk_rope) + " = " +
                std::to_string(c.kv_lora_rank + c.qk_rope));
    if (const uint32_t v = ld.u32_or_zero("attention.value_length"); v && v != c.kv_lora_rank)
        ld.fail("metadata " + ld.key_name("attention.value_length") + " = " + std::to_string(v) + " but kv_lora_rank is " +
                std::to_string(c.kv_lora_rank));
    if (const uint32_t kv = ld.u32_or_zero("attention.head_count_kv"); kv > 1)
        ld.fail("metadata " + ld.key_name("attention.head_count_kv") + " = " + std::to_string(kv) + " but MLA's absorbed cache has 1");
    const float mscale = load_rope(ld, hp, c.qk_rope, /*neox=*/false, /*deepseek_log_mul=*/!dsa);
    c.kq_scale = 1.0f * mscale * mscale / std::sqrt(static_cast<float>(key_mla));

    // Gating without a key: deepseek2 softmax (sigmoid for GLM-4.7-Lite, 47/48 layers and a 154880 vocabulary), glm-dsa sigmoid.
    const bool glm47_lite = !dsa && (hp.n_layer == 47 || hp.n_layer == 48) && hp.n_vocab == 154880;
    load_moe_config(ld, hp, dsa || glm47_lite ? Gating::Sigmoid : Gating::Softmax);
    hp.n_layer_dense_lead = ld.u32_or_zero("leading_dense_block_count");
    if (hp.n_layer_dense_lead > hp.n_layer)
        ld.fail("leading_dense_block_count " + std::to_string(hp.n_layer_dense_lead) + " exceeds the " + std::to_string(hp.n_layer) + " layers");
    if (hp.n_layer_dense_lead) hp.n_ff_dense = ld.u32("feed_forward_length");
    if (dsa) {
        if (c.q_lora_rank == 0) ld.fail("metadata " + ld.key_name("attention.q_lora_rank") + " is 0: the DSA indexer reads the q-LoRA latent");
        load_indexer_config(ld, hp);
    }

    const uint64_t E = hp.n_embd, H = c.n_head, QK = key_mla;
    const std::string e_why = "embedding_length " + std::to_string(E);
    const std::string q_why = "head_count " + std::to_string(H) + " x key_length_mla " + std::to_string(QK);
    const std::string kv_why = "kv_lora_rank " + std::to_string(c.kv_lora_rank) + " + rope " + std::to_string(c.qk_rope);
    const std::string kb_why = "key_length_mla - rope " + std::to_string(c.qk_nope) + ", kv_lora_rank " + std::to_string(c.kv_lora_rank) +
                               ", head_count " + std::to_string(H);
    const std::string vb_why = "kv_lora_rank " + std::to_string(c.kv_lora_rank) + ", value_length_mla " + std::to_string(c.v_head) +
                               ", head_count " + std::to_string(H);
    m.layers.resize(hp.n_layer);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        L.attn = AttentionKind::Mla;
        MlaWeights& w = L.mla;
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        if (c.q_lora_rank) {
            const std::string r_why = "q_lora_rank " + std::to_string(c.q_lora_rank);
            ld.resident(w.wq_a, p + "attn_q_a.weight", {E, c.q_lora_rank}, r_why);
            ld.resident(w.q_a_norm, p + "attn_q_a_norm.weight", {c.q_lora_rank}, r_why);
            ld.resident(w.wq_b, p + "attn_q_b.weight", {c.q_lora_rank, H * QK}, r_why + ", " + q_why);
        } else {
            ld.resident(w.wq, p + "attn_q.weight", {E, H * QK}, q_why);
        }
        if (ld.has_tensor(p + "attn_kv_b.weight"))
            ld.fail("tensor '" + p + "attn_kv_b.weight' is the unsplit form of an older conversion; this engine needs attn_k_b/attn_v_b "
                    "(re-convert with a current llama.cpp)");
        ld.resident(w.wkv_a, p + "attn_kv_a_mqa.weight", {E, c.kv_lora_rank + c.qk_rope}, kv_why);
        ld.resident(w.kv_a_norm, p + "attn_kv_a_norm.weight", {c.kv_lora_rank}, kv_why);
        ld.resident(w.wk_b, p + "attn_k_b.weight", {c.qk_nope, c.kv_lora_rank, H}, kb_why);
        ld.resident(w.wv_b, p + "attn_v_b.weight", {c.kv_lora_rank, c.v_head, H}, vb_why);
        ld.resident(w.wo, p + "attn_output.weight", {H * c.v_head, E}, "head_count " + std::to_string(H) + " x value_length_mla " + std::to_string(c.v_head));
        if (dsa && hp.indexer.full[l]) {
            const IndexerConfig& ix = hp.indexer;
            const std::string ix_why = "indexer head_count " + std::to_string(ix.n_head) + ", key_length " + std::to_string(ix.head_dim);
            L.indexer_full = true;
            ld.resident(w.ix_q_b, p + "indexer.attn_q_b.weight", {c.q_lora_rank, uint64_t{ix.n_head} * ix.head_dim}, ix_why);
            ld.resident(w.ix_k, p + "indexer.attn_k.weight", {E, ix.head_dim}, ix_why);
            ld.resident(w.ix_k_norm, p + "indexer.k_norm.weight", {ix.head_dim}, ix_why);
            ld.resident(w.ix_k_norm_b, p + "indexer.k_norm.bias", {ix.head_dim}, ix_why);
            ld.resident(w.ix_proj, p + "indexer.proj.weight", {E, ix.n_head}, ix_why);
        } else if (dsa && ld.has_tensor(p + "indexer.attn_k.weight")) {
            ld.fail("tensor '" + p + "indexer.attn_k.weight' is present but metadata " + ld.key_name("attention.indexer.types") +
                    " makes layer " + std::to_string(l) + " a shared indexer layer");
        }
        ld.resident(L.ffn_norm, p + "ffn_norm.weight", {E}, e_why);
        if (l < hp.n_layer_dense_lead) load_dense_ffn(ld, hp, L, p);
        else load_moe_layer(ld, hp, L, p);
    }
}

}  // namespace moe::arch

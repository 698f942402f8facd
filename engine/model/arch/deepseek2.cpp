// deepseek2 (DeepSeek-V2/V3/R1, Kimi-K2) and glm-dsa (GLM-5.x): multi-head latent attention in the split
// k_b/v_b form current converters write, absorbed so the cache holds one latent row (kv_lora + qk_rope) per
// token; NORM-style RoPE on the rope dims (YaRN where rope.scaling.* says so); leading dense layers, then MoE
// with shared experts, softmax or sigmoid routing, a selection bias, group-limited top-k, weight norm and
// scale. glm-dsa adds the DSA lightning indexer. NextN/MTP blocks after the trunk are recognised, not run.
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/kernels/kernels.h"
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

// attn_k_b and attn_v_b derived from an unsplit attn_kv_b [kv_lora, n_head x (qk_nope + v_head)] as ik_llama.cpp
// derives them (llm_prepare_mla): per head, the qk_nope key rows dequantized, transposed to kv_lora rows of qk_nope
// and stored as Q8_0 when attn_kv_b is quantized (else in its float type); the v_head value rows copied as they are.
void split_kv_b(ArchLoader& ld, MlaWeights& w, const std::string& p, const MlaConfig& c) {
    const std::string kv_b = p + "attn_kv_b.weight";
    const GgufTensorInfo* t = ld.file().find_tensor(kv_b);
    const uint64_t H = c.n_head, L = c.kv_lora_rank, K = c.qk_nope, V = c.v_head;
    if (t->ne.size() < 2 || t->ne[0] != L || t->ne[1] * (t->ne.size() > 2 ? t->ne[2] : 1) != H * (K + V))
        ld.fail("tensor '" + kv_b + "' has shape " + std::to_string(t->ne[0]) + " x " + std::to_string(t->ne.size() > 1 ? t->ne[1] : 1) +
                " but kv_lora_rank " + std::to_string(L) + " and head_count " + std::to_string(H) + " x (key " + std::to_string(K) + " + value " +
                std::to_string(V) + ") imply " + std::to_string(L) + " x " + std::to_string(H * (K + V)));
    const GgmlType src = t->type();
    const auto ti = type_info(t->raw_type);
    if (!ti || !ti->computable || ti->interleave > 1)
        ld.fail("tensor '" + kv_b + "' has type " + type_name(t->raw_type) + ", which this engine cannot split into attn_k_b / attn_v_b");
    const bool quantized = ti->block_elems > 1;
    const GgmlType kb_type = quantized ? (ld.ik_made() ? GgmlType::IK_Q8_0 : GgmlType::Q8_0) : src;
    if (quantized && K % 32)
        ld.fail("tensor '" + kv_b + "': qk_nope " + std::to_string(K) + " is not a multiple of 32, so attn_k_b cannot be stored as Q8_0");
    const size_t src_row = *row_bytes(src, L);
    ld.derived(w.wk_b, p + "attn_k_b.weight", kb_type, {K, L, H}, kv_b, [=](const uint8_t* in, uint8_t* out) {
        std::vector<float> rows(K * L), col(K);
        const size_t kb_row = *row_bytes(kb_type, K);
        for (uint64_t h = 0; h < H; ++h) {
            for (uint64_t j = 0; j < K; ++j) kernels::dequantize_row(src, in + (h * (K + V) + j) * src_row, &rows[j * L], static_cast<int64_t>(L));
            for (uint64_t i = 0; i < L; ++i) {  // row i of head h: the i-th value of each key row
                for (uint64_t j = 0; j < K; ++j) col[j] = rows[j * L + i];
                uint8_t* dst = out + (h * L + i) * kb_row;
                if (quantized) kernels::quantize_q8_0(col.data(), dst, static_cast<int64_t>(K));
                else kernels::quantize_row(src, col.data(), dst, static_cast<int64_t>(K));
            }
        }
    });
    ld.derived(w.wv_b, p + "attn_v_b.weight", src, {L, V, H}, kv_b, [=](const uint8_t* in, uint8_t* out) {
        for (uint64_t h = 0; h < H; ++h) std::memcpy(out + h * V * src_row, in + (h * (K + V) + K) * src_row, V * src_row);
    });
}

void load_mla_attention(ArchLoader& ld, const Hparams& hp, Layer& L, const std::string& p, bool unsplit) {
    const MlaConfig& c = hp.mla;
    const uint64_t E = hp.n_embd, H = c.n_head, QK = c.qk_nope + c.qk_rope;
    const std::string q_why = "head_count " + std::to_string(H) + " x key_length_mla " + std::to_string(QK);
    const std::string kv_why = "kv_lora_rank " + std::to_string(c.kv_lora_rank) + " + rope " + std::to_string(c.qk_rope);
    const std::string kb_why = "key_length_mla - rope " + std::to_string(c.qk_nope) + ", kv_lora_rank " + std::to_string(c.kv_lora_rank) +
                               ", head_count " + std::to_string(H);
    const std::string vb_why = "kv_lora_rank " + std::to_string(c.kv_lora_rank) + ", value_length_mla " + std::to_string(c.v_head) + ", head_count " +
                               std::to_string(H);
    L.attn = AttentionKind::Mla;
    MlaWeights& w = L.mla;
    if (c.q_lora_rank) {
        const std::string r_why = "q_lora_rank " + std::to_string(c.q_lora_rank);
        ld.resident(w.wq_a, p + "attn_q_a.weight", {E, c.q_lora_rank}, r_why);
        ld.resident(w.q_a_norm, p + "attn_q_a_norm.weight", {c.q_lora_rank}, r_why);
        ld.resident(w.wq_b, p + "attn_q_b.weight", {c.q_lora_rank, H * QK}, r_why + ", " + q_why);
    } else {
        ld.resident(w.wq, p + "attn_q.weight", {E, H * QK}, q_why);
    }
    ld.resident(w.wkv_a, p + "attn_kv_a_mqa.weight", {E, c.kv_lora_rank + c.qk_rope}, kv_why);
    ld.resident(w.kv_a_norm, p + "attn_kv_a_norm.weight", {c.kv_lora_rank}, kv_why);
    if (unsplit) {
        split_kv_b(ld, w, p, c);
    } else {
        if (ld.has_tensor(p + "attn_kv_b.weight"))
            ld.fail("tensor '" + p + "attn_kv_b.weight' is present beside attn_k_b / attn_v_b in a file whose first layer has no attn_kv_b");
        ld.resident(w.wk_b, p + "attn_k_b.weight", {c.qk_nope, c.kv_lora_rank, H}, kb_why);
        ld.resident(w.wv_b, p + "attn_v_b.weight", {c.kv_lora_rank, c.v_head, H}, vb_why);
    }
    ld.resident(w.wo, p + "attn_output.weight", {H * c.v_head, E},
                "head_count " + std::to_string(H) + " x value_length_mla " + std::to_string(c.v_head));
}

bool mla_kv_b_unsplit(ArchLoader& ld, uint32_t first_mla_layer) {
    const std::string p = blk(first_mla_layer);
    return ld.has_tensor(p + "attn_kv_b.weight") && !ld.has_tensor(p + "attn_k_b.weight");
}

uint32_t load_mla_config(ArchLoader& ld, Hparams& hp, bool unsplit) {
    MlaConfig& c = hp.mla;
    c.n_head = ld.u32("attention.head_count");
    c.q_lora_rank = ld.u32_or_zero("attention.q_lora_rank");
    c.kv_lora_rank = ld.u32("attention.kv_lora_rank");
    // Older conversions (and files ik_llama.cpp made from them) store each layer's attn_kv_b unsplit and give the
    // per-head key/value lengths as key_length / value_length; the split is derived at load (below).
    if (!unsplit && (!ld.has("attention.key_length_mla") || !ld.has("attention.value_length_mla")))
        ld.fail("metadata " + ld.key_name("attention.key_length_mla") +
                " / value_length_mla are missing (and the file has no attn_kv_b "
                "to derive attn_k_b / attn_v_b from)");
    const uint32_t key_mla = ld.u32(unsplit && !ld.has("attention.key_length_mla") ? "attention.key_length" : "attention.key_length_mla");
    c.v_head = ld.u32(unsplit && !ld.has("attention.value_length_mla") ? "attention.value_length" : "attention.value_length_mla");
    c.qk_rope = ld.u32("rope.dimension_count");
    if (c.qk_rope >= key_mla)
        ld.fail("metadata " + ld.key_name("rope.dimension_count") + " = " + std::to_string(c.qk_rope) + " is not below " +
                ld.key_name("attention.key_length_mla") + " = " + std::to_string(key_mla));
    c.qk_nope = key_mla - c.qk_rope;
    // The absorbed form's own keys must agree: one latent "head" of kv_lora + rope.
    const bool legacy_keys = unsplit && !ld.has("attention.key_length_mla");
    if (const uint32_t k = ld.u32_or_zero("attention.key_length"); k && !legacy_keys && k != c.kv_lora_rank + c.qk_rope)
        ld.fail("metadata " + ld.key_name("attention.key_length") + " = " + std::to_string(k) + " but kv_lora_rank " +
                std::to_string(c.kv_lora_rank) + " + rope.dimension_count " + std::to_string(c.qk_rope) + " = " +
                std::to_string(c.kv_lora_rank + c.qk_rope));
    if (const uint32_t v = ld.u32_or_zero("attention.value_length"); v && !legacy_keys && v != c.kv_lora_rank)
        ld.fail("metadata " + ld.key_name("attention.value_length") + " = " + std::to_string(v) + " but kv_lora_rank is " +
                std::to_string(c.kv_lora_rank));
    return key_mla;
}

void load_deepseek2(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    const bool dsa = ld.arch() == "glm-dsa";
    load_layer_count(ld, hp, /*runs_nextn=*/true);
    load_embeddings(ld, m);
    MlaConfig& c = hp.mla;
    const bool unsplit = mla_kv_b_unsplit(ld, 0);
    const uint32_t key_mla = load_mla_config(ld, hp, unsplit);
    const bool legacy_keys = unsplit && !ld.has("attention.key_length_mla");
    if (const uint32_t kv = ld.u32_or_zero("attention.head_count_kv"); kv > 1 && !legacy_keys)
        ld.fail("metadata " + ld.key_name("attention.head_count_kv") + " = " + std::to_string(kv) + " but MLA's absorbed cache has 1");
    const float mscale = load_rope(ld, hp, c.qk_rope, /*neox=*/false, /*deepseek_log_mul=*/!dsa);
    c.kq_scale = 1.0f * mscale * mscale / std::sqrt(static_cast<float>(key_mla));

    // Gating without a key: deepseek2 softmax (sigmoid for GLM-4.7-Lite, 47/48 layers and a 154880 vocabulary), glm-dsa sigmoid.
    const bool glm47_lite = !dsa && (hp.n_layer == 47 || hp.n_layer == 48) && hp.n_vocab == 154880;
    load_moe_config(ld, hp, dsa || glm47_lite ? Gating::Sigmoid : Gating::Softmax);
    load_dense_lead(ld, hp);
    if (dsa) {
        if (c.q_lora_rank == 0) ld.fail("metadata " + ld.key_name("attention.q_lora_rank") + " is 0: the DSA indexer reads the q-LoRA latent");
        load_indexer_config(ld, hp);
    }

    const uint64_t E = hp.n_embd;
    const std::string e_why = "embedding_length " + std::to_string(E);
    m.layers.resize(blocks_to_load(ld, hp));
    for (uint32_t l = 0; l < m.layers.size(); ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        load_mla_attention(ld, hp, L, p, unsplit);
        MlaWeights& w = L.mla;
        // A NextN block runs on its own: with an indexer where it carries one, else on full MLA.
        const bool ix_full = dsa && (l < hp.n_layer ? hp.indexer.full[l] : ld.has_tensor(p + "indexer.attn_k.weight"));
        if (ix_full) {
            const IndexerConfig& ix = hp.indexer;
            const std::string ix_why = "indexer head_count " + std::to_string(ix.n_head) + ", key_length " + std::to_string(ix.head_dim);
            L.indexer_full = true;
            ld.resident(w.ix_q_b, p + "indexer.attn_q_b.weight", {c.q_lora_rank, uint64_t{ix.n_head} * ix.head_dim}, ix_why);
            ld.resident(w.ix_k, p + "indexer.attn_k.weight", {E, ix.head_dim}, ix_why);
            ld.resident(w.ix_k_norm, p + "indexer.k_norm.weight", {ix.head_dim}, ix_why);
            ld.resident(w.ix_k_norm_b, p + "indexer.k_norm.bias", {ix.head_dim}, ix_why);
            ld.resident(w.ix_proj, p + "indexer.proj.weight", {E, ix.n_head}, ix_why);
        } else if (dsa && ld.has_tensor(p + "indexer.attn_k.weight")) {
            ld.fail("tensor '" + p + "indexer.attn_k.weight' is present but metadata " + ld.key_name("attention.indexer.types") + " makes layer " +
                    std::to_string(l) + " a shared indexer layer");
        }
        ld.resident(L.ffn_norm, p + "ffn_norm.weight", {E}, e_why);
        if (l < hp.n_layer_dense_lead) load_dense_ffn(ld, hp, L, p);
        else load_moe_layer(ld, hp, L, p);
        if (l >= hp.n_layer) load_nextn_head(ld, m, l);
    }
}

}  // namespace moe::arch

// deepseek4 (DeepSeek-V4 Flash/Pro): hyper-connections (4 copies of the residual stream, remixed around every
// sub-block), compressed attention (one key = value head over a sliding window plus one compressed row per 4 or
// 128 tokens; ratio 4 picks its rows with a lightning indexer), an output LoRA per group of heads, sqrt-softplus
// routing with hash-routed leading layers and clamped SwiGLU. ../shared/oracle/README-2026.md has the keys,
// tensors and maths; llama.cpp's src/models/deepseek4.cpp is the computation.
#include <cmath>

#include "engine/model/arch/arch.h"

namespace moe::arch {
namespace {

std::string n(uint64_t v) { return std::to_string(v); }

void load_compressed_attention_config(ArchLoader& ld, Hparams& hp) {
    CompressedAttnConfig& c = hp.csa;
    c.n_head = ld.u32("attention.head_count");
    if (ld.u32("attention.head_count_kv", 1) != 1)
        ld.fail("metadata " + ld.key_name("attention.head_count_kv") + " = " + n(ld.u32("attention.head_count_kv")) +
                " is not 1 (DeepSeek-V4 has one shared key/value head)");
    c.head_dim = ld.u32("attention.key_length");
    if (ld.u32("attention.value_length", c.head_dim) != c.head_dim)
        ld.fail("metadata " + ld.key_name("attention.value_length") + " = " + n(ld.u32("attention.value_length")) + " differs from key_length " +
                n(c.head_dim) + " (the key head is the value head)");
    c.q_lora_rank = ld.u32("attention.q_lora_rank");
    c.out_groups = ld.u32("attention.output_group_count");
    c.out_rank = ld.u32("attention.output_lora_rank");
    if (c.n_head % c.out_groups)
        ld.fail("metadata " + ld.key_name("attention.output_group_count") + " = " + n(c.out_groups) + " does not divide head_count " + n(c.n_head));
    c.window = ld.u32("attention.sliding_window");
    c.ix_heads = ld.u32_or_zero("attention.indexer.head_count");
    c.ix_dim = ld.u32_or_zero("attention.indexer.key_length");
    c.ix_top_k = ld.u32_or_zero("attention.indexer.top_k");

    // RoPE (NORM pairs) on the last n_rot dims of each head: plain layers at rope.freq_base without scaling;
    // compressed layers at compress_rope_freq_base with YaRN, whose magnitude factor the graph cancels
    // (attn_factor 1 / (1 + 0.1 ln factor) against ggml's 1 + 0.1 ln(1 / freq_scale)).
    const uint32_t n_rot = ld.u32("rope.dimension_count");
    if (n_rot > c.head_dim) ld.fail("metadata " + ld.key_name("rope.dimension_count") + " = " + n(n_rot) + " exceeds key_length " + n(c.head_dim));
    load_rope(ld, hp, n_rot, /*neox=*/false, /*deepseek_log_mul=*/false);
    c.rope_compressed = hp.rope;
    c.rope_plain = hp.rope;
    c.rope_plain.freq_scale = 1.f;
    c.rope_plain.ext_factor = 0.f;
    c.rope_plain.attn_factor = 1.f;
    ops::RopeParams& rc = c.rope_compressed;
    rc.freq_base = ld.f32("attention.compress_rope_freq_base", rc.freq_base);
    if (!(rc.freq_base > 1.f))
        ld.fail("metadata " + ld.key_name("attention.compress_rope_freq_base") + " = " + std::to_string(rc.freq_base) + " is not above 1");
    if (rc.ext_factor != 0.f) {
        const float factor = 1.f / rc.freq_scale;
        rc.attn_factor = 1.0f / std::fma(0.1f, std::log(factor), 1.0f);
        const uint32_t n_ctx_orig = ld.u32("rope.scaling.original_context_length", hp.n_ctx_train);
        ops::rope_yarn_corr_dims(rc.n_rot, static_cast<int>(n_ctx_orig), rc.freq_base, ld.f32("rope.scaling.yarn_beta_fast", 32.f),
                                 ld.f32("rope.scaling.yarn_beta_slow", 1.f), rc.corr_dims);
    }
    hp.rope = c.rope_plain;

    HyperConfig& h = hp.hyper;
    h.n = ld.u32("hyper_connection.count");
    if (h.n != 4) ld.fail("metadata " + ld.key_name("hyper_connection.count") + " = " + n(h.n) + " is not 4 (as llama.cpp's graph requires)");
    h.sinkhorn_iters = ld.u32("hyper_connection.sinkhorn_iterations");
    h.eps = ld.f32("hyper_connection.epsilon", 1e-6f);
    const uint32_t out = ld.u32("embedding_length_out", h.n * hp.n_embd);
    if (out != h.n * hp.n_embd)
        ld.fail("metadata " + ld.key_name("embedding_length_out") + " = " + n(out) + " is not hyper_connection.count x embedding_length " +
                n(uint64_t{h.n} * hp.n_embd));
}

void load_compressor(ArchLoader& ld, CompressorWeights& w, const std::string& p, uint64_t E, uint64_t D, uint32_t ratio) {
    const uint64_t coff = ratio == CompressedAttnConfig::kOverlapRatio ? 2 : 1;
    const std::string why = "compression ratio " + n(ratio) + ", head size " + n(D);
    ld.resident(w.kv, p + "_kv.weight", {E, coff * D}, why);
    ld.resident(w.gate, p + "_gate.weight", {E, coff * D}, why);
    ld.resident(w.ape, p + "_ape.weight", {coff * D, ratio}, why);
    ld.resident(w.norm, p + "_norm.weight", {D}, why);
}

void load_compressed_attention(ArchLoader& ld, const Hparams& hp, Layer& L, const std::string& p) {
    const CompressedAttnConfig& c = hp.csa;
    const uint64_t E = hp.n_embd, D = c.head_dim, H = c.n_head, Q = c.q_lora_rank;
    const std::string hwhy = "head_count " + n(H) + " x key_length " + n(D);
    L.attn = AttentionKind::Compressed;
    CompressedAttnWeights& w = L.csa;
    ld.resident(w.wq_a, p + "attn_q_a.weight", {E, Q}, "q_lora_rank " + n(Q));
    ld.resident(w.q_a_norm, p + "attn_q_a_norm.weight", {Q}, "q_lora_rank " + n(Q));
    ld.resident(w.wq_b, p + "attn_q_b.weight", {Q, H * D}, hwhy);
    ld.resident(w.wkv, p + "attn_kv.weight", {E, D}, "key_length " + n(D));
    ld.resident(w.kv_norm, p + "attn_kv_a_norm.weight", {D}, "key_length " + n(D));
    ld.resident(w.sinks, p + "attn_sinks.weight", {H}, "head_count " + n(H));
    const uint64_t G = c.out_groups, R = c.out_rank;
    const std::string owhy = hwhy + ", output_group_count " + n(G) + ", output_lora_rank " + n(R);
    ld.resident(w.wo_a, p + "attn_output_a.weight", {H * D / G, G * R}, owhy);
    // the grouped output LoRA multiplies each group's R rows on its own: an interleaved form's groups must not span two
    if (const uint32_t group = type_info(w.wo_a.type).interleave; R % group != 0)
        ld.fail("tensor '" + p + "attn_output_a.weight' is " + std::string(type_info(w.wo_a.type).name) + ", which stores rows in groups of " +
                std::to_string(group) + ", but output_lora_rank " + n(R) + " is not a multiple of it");
    ld.resident(w.wo_b, p + "attn_output_b.weight", {G * R, E}, owhy);
    const uint32_t ratio = L.compress_ratio;
    if (ratio == 0) return;
    load_compressor(ld, w.comp, p + "attn_compressor", E, D, ratio);
    if (ratio != CompressedAttnConfig::kOverlapRatio) return;
    if (!c.ix_heads || !c.ix_dim || !c.ix_top_k)
        ld.fail("metadata " + ld.key_name("attention.indexer.head_count") + " / key_length / top_k are missing but layer " + p +
                " has compression ratio 4 (its indexer needs them)");
    load_compressor(ld, w.ix_comp, p + "indexer_compressor", E, c.ix_dim, ratio);
    ld.resident(w.ix_q_b, p + "indexer.attn_q_b.weight", {Q, uint64_t{c.ix_heads} * c.ix_dim},
                "indexer head_count " + n(c.ix_heads) + " x key_length " + n(c.ix_dim));
    ld.resident(w.ix_proj, p + "indexer.proj.weight", {E, c.ix_heads}, "indexer head_count " + n(c.ix_heads));
}

void load_hyper(ArchLoader& ld, HyperWeights& w, const std::string& p, uint64_t E, uint32_t hc, uint32_t mixes, uint64_t scales) {
    const std::string why = "hyper_connection.count " + n(hc) + ", embedding_length " + n(E);
    ld.resident(w.fn, p + "_fn.weight", {hc * E, mixes}, why);
    ld.resident(w.base, p + "_base.weight", {mixes}, why);
    ld.resident(w.scale, p + "_scale.weight", {scales}, why);
}

// swiglu_clamp_exp / _shexp: one limit per block (0: no clamp).
std::vector<float> clamp_limits(ArchLoader& ld, const std::string& key, uint32_t blocks) {
    std::vector<float> out(blocks, 0.f);
    const GgufValue* v = ld.file().meta().find(ld.key_name(key));
    if (!v) return out;
    std::vector<float> a = v->is_array() ? v->f32_array() : std::vector<float>(blocks, ld.f32(key, 0.f));
    if (a.size() < blocks) ld.fail("metadata " + ld.key_name(key) + " has " + n(a.size()) + " entries, fewer than block_count " + n(blocks));
    a.resize(blocks);  // (a list that also holds a left-out MTP block's entry, as compress_ratios)
    for (uint32_t l = 0; l < blocks; ++l)
        if (!(a[l] >= 0.f)) ld.fail("metadata " + ld.key_name(key) + "[" + n(l) + "] = " + std::to_string(a[l]) + " is not a limit >= 0");
    return a;
}

}  // namespace

void load_deepseek4(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    load_layer_count(ld, hp, /*runs_nextn=*/true);
    load_embeddings(ld, m);
    load_compressed_attention_config(ld, hp);
    // Every row runs every layer: llama.cpp keeps only the output rows just before the hyper-connection head.
    hp.output_rows_after_norm = true;
    const uint32_t blocks = hp.n_layer + hp.n_layer_nextn;
    // llama.cpp's converter copies the checkpoint's list, which has the MTP block's entry also where the file
    // leaves the block out (it goes to mtp-<name>.gguf): at least one per block, as llama.cpp reads it
    const std::optional<std::vector<uint32_t>> ratios = ld.u32_array("attention.compress_ratios", blocks, /*at_least=*/true);
    if (!ratios) ld.fail("metadata " + ld.key_name("attention.compress_ratios") + " is missing");

    load_moe_config(ld, hp, Gating::SqrtSoftplus);
    hp.moe.n_hash_layers = ld.u32_or_zero("hash_layer_count");
    if (hp.moe.n_hash_layers > hp.n_layer)
        ld.fail("metadata " + ld.key_name("hash_layer_count") + " = " + n(hp.moe.n_hash_layers) + " exceeds the " + n(hp.n_layer) + " layers");
    hp.ffn_activation = FfnActivation::SwigluClamped;
    const std::vector<float> limit = clamp_limits(ld, "swiglu_clamp_exp", blocks), limit_sh = clamp_limits(ld, "swiglu_clamp_shexp", blocks);

    const uint64_t E = hp.n_embd;
    const uint32_t hc = hp.hyper.n, mixes = hp.hyper.n_mix();
    load_hyper(ld, m.output_hc, "output_hc", E, hc, hc, 1);
    const uint32_t loaded = blocks_to_load(ld, hp);  // the trunk, then the MTP block when drafts use it
    m.layers.resize(loaded);
    for (uint32_t l = ld.nextn_only() ? hp.n_layer : 0; l < loaded; ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        L.compress_ratio = (*ratios)[l];
        if (L.compress_ratio == 1 || L.compress_ratio > 1 << 16)
            ld.fail("metadata " + ld.key_name("attention.compress_ratios") + "[" + n(l) + "] = " + n(L.compress_ratio) +
                    " is not a compression ratio (0, or 2..65536)");
        // llama.cpp's MTP graph runs the block as a sliding-window layer: no compressor, no indexer
        if (l >= hp.n_layer && L.compress_ratio != 0)
            ld.fail("metadata " + ld.key_name("attention.compress_ratios") + "[" + n(l) + "] = " + n(L.compress_ratio) + " for the NextN/MTP block " +
                    p + ", which runs as a sliding-window layer (ratio 0)");
        load_hyper(ld, L.hc_attn, p + "hc_attn", E, hc, mixes, 3);
        load_hyper(ld, L.hc_ffn, p + "hc_ffn", E, hc, mixes, 3);
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, "embedding_length " + n(E));
        ld.resident(L.ffn_norm, p + "ffn_norm.weight", {E}, "embedding_length " + n(E));
        load_compressed_attention(ld, hp, L, p);
        load_moe_layer(ld, hp, L, p);
        L.swiglu_limit = limit[l];
        L.swiglu_limit_sh = limit_sh[l];
        if (l < hp.moe.n_hash_layers) {
            if (!ld.has_tensor(p + "ffn_gate_tid2eid.weight"))
                ld.fail("tensor '" + p + "ffn_gate_tid2eid.weight' is missing: metadata " + ld.key_name("hash_layer_count") + " = " +
                        n(hp.moe.n_hash_layers) + " makes layer " + n(l) + " hash-routed, which needs its token-to-expert table");
            ld.resident(L.experts.tid2eid, p + "ffn_gate_tid2eid.weight", {hp.moe.n_expert_used, hp.n_vocab},
                        "expert_used_count " + n(hp.moe.n_expert_used) + ", vocabulary " + n(hp.n_vocab));
            if (L.experts.tid2eid.type != GgmlType::I32) ld.fail("tensor '" + p + "ffn_gate_tid2eid.weight' is not i32");
        }
        if (l >= hp.n_layer) load_nextn_head(ld, m, l);
    }
}

}  // namespace moe::arch

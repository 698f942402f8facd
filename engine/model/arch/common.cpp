// Pieces every MoE architecture shares: layer count with NextN blocks, embeddings, RoPE scaling, MoE config.
#include <cmath>

#include "engine/model/arch/arch.h"
#include "engine/model/model_facts.h"

namespace moe::arch {

void load_layer_count(ArchLoader& ld, Hparams& hp, bool runs_nextn) {
    const uint32_t blocks = ld.u32("block_count");
    hp.n_layer_nextn = ld.u32_or_zero("nextn_predict_layers");
    if (hp.n_layer_nextn >= blocks)
        ld.fail("metadata " + ld.key_name("nextn_predict_layers") + " = " + std::to_string(hp.n_layer_nextn) +
                " leaves no trunk layers of block_count " + std::to_string(blocks));
    hp.n_layer_nextn = nextn_blocks(ld.file(), ld.arch(), blocks, hp.n_layer_nextn);
    hp.n_layer = blocks - hp.n_layer_nextn;
    // The NextN/MTP blocks feed speculative decoding only: recognised, and read only when drafts use the first
    // (llama.cpp also loads them only for its MTP drafts).
    const uint32_t loaded = runs_nextn && ld.nextn_wanted() && hp.n_layer_nextn ? 1 : 0;
    ld.skip_blocks(hp.n_layer + loaded, hp.n_layer_nextn - loaded);
    if (ld.nextn_only()) ld.skip_blocks(0, hp.n_layer);  // (such a file holds none of the trunk's blocks)
    hp.n_nextn_loaded = loaded;
    hp.n_ctx_train = ld.u32("context_length", 4096);
    hp.n_embd = ld.u32("embedding_length");
    hp.rms_eps = ld.f32("attention.layer_norm_rms_epsilon", 1e-6f);
}

uint32_t blocks_to_load(const ArchLoader&, const Hparams& hp) { return hp.n_layer + hp.n_nextn_loaded; }

void load_nextn_head(ArchLoader& ld, Model& m, uint32_t block) {
    const uint64_t E = m.hp.n_embd;
    const std::string p = blk(block) + "nextn.", why = "embedding_length " + std::to_string(E);
    MtpInput& n = m.nextn;
    ld.resident(n.eh_proj, p + "eh_proj.weight", {2 * E, E}, "2 x " + why);
    ld.resident(n.enorm, p + "enorm.weight", {E}, why);
    ld.resident(n.hnorm, p + "hnorm.weight", {E}, why);
    ld.resident(n.head_norm, p + "shared_head_norm.weight", {E}, why);
    // GLM-4.6 and later files leave these out: the model's own embeddings and output head serve.
    ld.resident(n.embed, p + "embed_tokens.weight", {E, m.hp.n_vocab}, why, false);
    ld.resident(n.head, p + "shared_head_head.weight", {E, m.hp.n_vocab}, why, false);
}

void load_gqa_heads(ArchLoader& ld, Hparams& hp, std::optional<uint32_t> default_head_dim) {
    GqaConfig& g = hp.gqa;
    g.n_head = ld.u32("attention.head_count");
    g.n_head_kv = ld.u32("attention.head_count_kv", g.n_head);
    g.head_dim = ld.u32("attention.key_length", default_head_dim.value_or(hp.n_embd / g.n_head));
    const uint32_t v_dim = ld.u32("attention.value_length", g.head_dim);
    if (v_dim != g.head_dim)
        ld.fail("metadata " + ld.key_name("attention.value_length") + " = " + std::to_string(v_dim) + " differs from key_length " +
                std::to_string(g.head_dim));
    if (g.n_head % g.n_head_kv)
        ld.fail("metadata " + ld.key_name("attention.head_count") + " = " + std::to_string(g.n_head) + " is not a multiple of head_count_kv " +
                std::to_string(g.n_head_kv));
}

void load_gqa_projections(ArchLoader& ld, const Hparams& hp, GqaWeights& w, const std::string& p, QkvBiases biases) {
    const GqaConfig& g = hp.gqa;
    const uint64_t E = hp.n_embd, Q = uint64_t{g.n_head} * g.head_dim, KV = uint64_t{g.n_head_kv} * g.head_dim;
    const std::string qwhy = "head_count " + std::to_string(g.n_head) + " x key_length " + std::to_string(g.head_dim);
    const std::string kvwhy = "head_count_kv " + std::to_string(g.n_head_kv) + " x key_length " + std::to_string(g.head_dim);
    load_qkv(ld, p, E, Q, KV, qwhy, kvwhy, w, biases);
    ld.resident(w.wo, p + "attn_output.weight", {Q, E}, qwhy);
}

void load_qkv(ArchLoader& ld, const std::string& p, uint64_t E, uint64_t Q, uint64_t KV, const std::string& qwhy, const std::string& kvwhy,
              GqaWeights& w, QkvBiases biases) {
    const bool required = biases == QkvBiases::Required;
    if (const std::string fused = p + "attn_qkv.weight"; ld.has_tensor(fused)) {
        const std::vector<uint64_t> shape = {E, Q + 2 * KV};
        const std::string why = qwhy + " + 2 x " + kvwhy;
        ld.resident_rows(w.wq, fused, shape, 0, Q, fused + "[q]", why);
        ld.resident_rows(w.wk, fused, shape, Q, KV, fused + "[k]", why);
        ld.resident_rows(w.wv, fused, shape, Q + KV, KV, fused + "[v]", why);
        if (biases == QkvBiases::None) return;
        const std::string bias = p + "attn_qkv.bias";
        ld.resident_rows(w.bq, bias, {Q + 2 * KV}, 0, Q, bias + "[q]", why, required);
        ld.resident_rows(w.bk, bias, {Q + 2 * KV}, Q, KV, bias + "[k]", why, required);
        ld.resident_rows(w.bv, bias, {Q + 2 * KV}, Q + KV, KV, bias + "[v]", why, required);
        return;
    }
    ld.resident(w.wq, p + "attn_q.weight", {E, Q}, qwhy);
    ld.resident(w.wk, p + "attn_k.weight", {E, KV}, kvwhy);
    ld.resident(w.wv, p + "attn_v.weight", {E, KV}, kvwhy);
    if (biases == QkvBiases::None) return;
    ld.resident(w.bq, p + "attn_q.bias", {Q}, qwhy, required);
    ld.resident(w.bk, p + "attn_k.bias", {KV}, kvwhy, required);
    ld.resident(w.bv, p + "attn_v.bias", {KV}, kvwhy, required);
}

void load_embeddings(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    const GgufTensorInfo* embd = ld.file().find_tensor("token_embd.weight");
    if (!embd) ld.fail("tensor 'token_embd.weight' is missing");
    if (embd->ne.size() < 2) ld.fail("tensor 'token_embd.weight' has shape " + shape_string(embd->ne));
    if (embd->ne[1] == 0 || embd->ne[1] > (1u << 30)) ld.fail("tensor 'token_embd.weight' has " + std::to_string(embd->ne[1]) + " rows");
    hp.n_vocab = static_cast<uint32_t>(embd->ne[1]);
    if (const GgufValue* toks = ld.file().meta().find("tokenizer.ggml.tokens"); toks && toks->count != hp.n_vocab)
        ld.fail("tokenizer.ggml.tokens has " + std::to_string(toks->count) + " entries but token_embd.weight has " + std::to_string(hp.n_vocab) +
                " rows");
    const uint64_t E = hp.n_embd;
    const std::string why = "embedding_length " + std::to_string(E);
    if (ld.nextn_only()) {  // the block drafts with the trunk's own embeddings and head
        for (const char* name : {"token_embd.weight", "output_norm.weight", "output.weight"}) ld.skip_tensor(name);
        return;
    }
    ld.resident(m.tok_embd, "token_embd.weight", {E, hp.n_vocab}, why);
    ld.resident(m.output_norm, "output_norm.weight", {E}, why);
    ld.resident(m.output, "output.weight", {E, hp.n_vocab}, why, false);
}

float load_rope(ArchLoader& ld, Hparams& hp, uint32_t n_rot, bool neox, bool deepseek_log_mul) {
    ops::RopeParams& r = hp.rope;
    r.n_rot = static_cast<int>(n_rot);
    r.neox = neox;
    if (n_rot % 2) ld.fail("metadata " + ld.key_name("rope.dimension_count") + " = " + std::to_string(n_rot) + " is odd (RoPE rotates pairs)");
    r.freq_base = ld.f32("rope.freq_base", 10000.f);
    if (!(r.freq_base > 1.f)) ld.fail("metadata " + ld.key_name("rope.freq_base") + " = " + std::to_string(r.freq_base) + " is not above 1");
    // As llama.cpp's load_hparams and context: a factor without a type means linear scaling.
    float factor = ld.f32("rope.scaling.factor", 0.f);
    if (factor == 0.f) factor = ld.f32("rope.scale_linear", 0.f);
    if (factor < 0.f) ld.fail("metadata " + ld.key_name("rope.scaling.factor") + " = " + std::to_string(factor) + " is negative");
    const std::string type = ld.str("rope.scaling.type").value_or("linear");
    if (type != "none" && type != "linear" && type != "yarn")
        ld.fail("metadata " + ld.key_name("rope.scaling.type") + " = '" + type + "' is not supported (none, linear, yarn)");
    r.freq_scale = (type == "none" || factor == 0.f) ? 1.f : 1.f / factor;
    r.ext_factor = type == "yarn" ? 1.f : 0.f;
    const uint32_t n_ctx_orig = ld.u32("rope.scaling.original_context_length", hp.n_ctx_train);
    const float beta_fast = ld.f32("rope.scaling.yarn_beta_fast", 32.f), beta_slow = ld.f32("rope.scaling.yarn_beta_slow", 1.f);
    // deepseek2's converter stores 0.1 * mscale_all_dim ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]); llama.cpp divides it back.
    const float log_mul = deepseek_log_mul ? ld.f32("rope.scaling.yarn_log_multiplier", 0.f) / 0.1f : 0.f;
    // llama_context's yarn_attn_factor: YaRN's magnitude correction, with RoPE's own (1 + 0.1 ln s) cancelled.
    // GCC contracts these C++ expressions (a*b + 1 as one FMA).
    auto get_mscale = [](float scale, float mscale) { return scale <= 1.0f ? 1.0f : std::fma(0.1f * mscale, std::log(scale), 1.0f); };
    float attn = 1.f;
    if (r.ext_factor != 0.f) {
        const float s = 1.0f / r.freq_scale;
        if (log_mul != 0.f) {
            const float mscale = (deepseek_log_mul && log_mul != 1.0f) ? log_mul : 1.0f;
            attn = get_mscale(s, mscale) / get_mscale(s, log_mul);
        } else {
            attn = get_mscale(s, 1.0f);
        }
        attn *= 1.0f / std::fma(0.1f, std::log(s), 1.0f);
    }
    attn *= ld.f32("rope.scaling.attn_factor", 1.f);
    r.attn_factor = attn;
    ops::rope_yarn_corr_dims(r.n_rot, static_cast<int>(n_ctx_orig), r.freq_base, beta_fast, beta_slow, r.corr_dims);
    // deepseek2's graph: undo the cancellation, then mscale = that * (1 + 0.1 * log_mul * ln s).
    const float l = std::log(1.0f / r.freq_scale);
    const float attn_org = attn * std::fma(0.1f, l, 1.0f);
    return attn_org * std::fma(0.1f * log_mul, l, 1.0f);
}

void load_gqa_rope(ArchLoader& ld, Hparams& hp, bool neox) {
    const GqaConfig& g = hp.gqa;
    load_rope(ld, hp, ld.u32("rope.dimension_count", g.head_dim), neox, false);
    if (hp.rope.n_rot > static_cast<int>(g.head_dim))
        ld.fail("rope.dimension_count " + std::to_string(hp.rope.n_rot) + " exceeds key_length " + std::to_string(g.head_dim));
}

void load_gqa_trunk(ArchLoader& ld, Hparams& hp, bool neox, bool runs_nextn) {
    load_layer_count(ld, hp, runs_nextn);
    load_gqa_heads(ld, hp);
    load_gqa_rope(ld, hp, neox);
}

void load_dense_lead(ArchLoader& ld, Hparams& hp) {
    hp.n_layer_dense_lead = ld.u32_or_zero("leading_dense_block_count");
    if (hp.n_layer_dense_lead > hp.n_layer)
        ld.fail("leading_dense_block_count " + std::to_string(hp.n_layer_dense_lead) + " exceeds the " + std::to_string(hp.n_layer) + " layers");
    if (hp.n_layer_dense_lead) hp.n_ff_dense = ld.u32("feed_forward_length");
}

void load_moe_config(ArchLoader& ld, Hparams& hp, Gating default_gating, bool force_norm) {
    MoeConfig& c = hp.moe;
    c.n_expert = ld.u32("expert_count");
    c.n_expert_used = ld.u32("expert_used_count");
    if (c.n_expert_used > c.n_expert)
        ld.fail("metadata " + ld.key_name("expert_used_count") + " = " + std::to_string(c.n_expert_used) + " exceeds " + ld.key_name("expert_count") +
                " = " + std::to_string(c.n_expert));
    c.n_ff_exp = ld.u32("expert_feed_forward_length");
    c.n_ff_shexp = c.n_ff_exp * ld.u32_or_zero("expert_shared_count");
    const uint32_t gating = ld.u32_or_zero("expert_gating_func");
    // llama.cpp's llama_expert_gating_func_type: 1 softmax, 2 sigmoid, 4 sqrt(softplus) (deepseek4).
    if (gating == 3 || gating > 4)
        ld.fail("metadata " + ld.key_name("expert_gating_func") + " = " + std::to_string(gating) +
                " is not 1 (softmax), 2 (sigmoid) or 4 (sqrt-softplus)");
    c.gating = gating == 0 ? default_gating : gating == 1 ? Gating::Softmax : gating == 2 ? Gating::Sigmoid : Gating::SqrtSoftplus;
    c.norm_weights = force_norm || ld.flag("expert_weights_norm", false);
    c.weights_scale = ld.f32("expert_weights_scale", 0.f);
    c.n_group = ld.u32_or_zero("expert_group_count");
    c.n_group_used = ld.u32_or_zero("expert_group_used_count");
    if (c.n_group > 1) {
        const std::string g = ld.key_name("expert_group_count") + " = " + std::to_string(c.n_group);
        if (c.n_expert % c.n_group) ld.fail("metadata " + g + " does not divide " + ld.key_name("expert_count") + " = " + std::to_string(c.n_expert));
        if (c.n_group_used == 0 || c.n_group_used > c.n_group)
            ld.fail("metadata " + ld.key_name("expert_group_used_count") + " = " + std::to_string(c.n_group_used) + " is not in 1.." +
                    std::to_string(c.n_group) + " (" + g + ")");
        if (c.n_expert / c.n_group < 2)
            ld.fail("metadata " + g + " leaves fewer than 2 experts per group (expert_count " + std::to_string(c.n_expert) + ")");
        if (c.n_group_used * (c.n_expert / c.n_group) < c.n_expert_used)
            ld.fail("metadata " + ld.key_name("expert_group_used_count") + " = " + std::to_string(c.n_group_used) + " groups of " +
                    std::to_string(c.n_expert / c.n_group) + " experts cannot supply expert_used_count " + std::to_string(c.n_expert_used));
    }
}

void load_moe_layer(ArchLoader& ld, const Hparams& hp, Layer& L, const std::string& p) {
    const MoeConfig& c = hp.moe;
    const uint64_t E = hp.n_embd, X = c.n_latent ? c.n_latent : E;  // the routed experts' input and output width
    L.moe = true;
    MoeWeights& w = L.experts;
    ld.resident(w.router, p + "ffn_gate_inp.weight", {E, c.n_expert}, "expert_count " + std::to_string(c.n_expert));
    ld.resident(w.probs_bias, p + "exp_probs_b.bias", {c.n_expert}, "expert_count " + std::to_string(c.n_expert), false);
    const std::string why = "expert_count " + std::to_string(c.n_expert) + ", expert_feed_forward_length " + std::to_string(c.n_ff_exp) +
                            (c.n_latent ? ", expert_latent_length " + std::to_string(c.n_latent) : "");
    if (ld.has_tensor(p + "ffn_gate_up_exps.weight")) {
        // Newer converters fuse gate and up: per expert 2 x n_ff_exp rows, gate first (llama.cpp splits the
        // product the same way), so each half is an expert tensor with twice the stride.
        const ExpertTensor fused = ld.experts(p + "ffn_gate_up_exps.weight", X, 2ull * c.n_ff_exp, c.n_expert, "2 x " + why);
        w.gate = w.up = fused;
        w.gate.n_out = w.up.n_out = c.n_ff_exp;
        w.gate.expert_bytes = w.up.expert_bytes = fused.row_bytes * c.n_ff_exp;
        w.up.file_offset += w.up.expert_bytes;
        if (ld.has_tensor(p + "ffn_gate_exps.weight") || ld.has_tensor(p + "ffn_up_exps.weight"))
            ld.fail("tensor '" + p + "ffn_gate_up_exps.weight' is present together with separate gate/up expert tensors");
    } else {
        w.gate = ld.experts(p + "ffn_gate_exps.weight", X, c.n_ff_exp, c.n_expert, why);
        w.up = ld.experts(p + "ffn_up_exps.weight", X, c.n_ff_exp, c.n_expert, why);
    }
    w.down = ld.experts(p + "ffn_down_exps.weight", c.n_ff_exp, X, c.n_expert, why);
    if (c.n_latent) {
        const std::string lwhy = "expert_latent_length " + std::to_string(c.n_latent);
        ld.resident(w.routed_down, p + "ffn_routed_down.weight", {E, c.n_latent}, lwhy);
        ld.resident(w.routed_norm, p + "ffn_routed_norm.weight", {c.n_latent}, lwhy, false);
        ld.resident(w.routed_up, p + "ffn_routed_up.weight", {c.n_latent, E}, lwhy);
    }
    if (c.n_ff_shexp) {
        const std::string swhy = "shared expert width " + std::to_string(c.n_ff_shexp);
        ld.resident(w.gate_sh, p + "ffn_gate_shexp.weight", {E, c.n_ff_shexp}, swhy);
        ld.resident(w.up_sh, p + "ffn_up_shexp.weight", {E, c.n_ff_shexp}, swhy);
        ld.resident(w.down_sh, p + "ffn_down_shexp.weight", {c.n_ff_shexp, E}, swhy);
    } else if (ld.has_tensor(p + "ffn_gate_shexp.weight")) {
        ld.fail("tensor '" + p + "ffn_gate_shexp.weight' is present but metadata " + ld.key_name("expert_shared_count") + " is 0 or missing");
    }
}

void load_dense_ffn(ArchLoader& ld, const Hparams& hp, Layer& L, const std::string& p) {
    const uint64_t E = hp.n_embd, F = hp.n_ff_dense;
    const std::string why = "feed_forward_length " + std::to_string(F);
    L.moe = false;
    ld.resident(L.dense.gate, p + "ffn_gate.weight", {E, F}, why);
    ld.resident(L.dense.up, p + "ffn_up.weight", {E, F}, why);
    ld.resident(L.dense.down, p + "ffn_down.weight", {F, E}, why);
}

}  // namespace moe::arch

// qwen35moe (Qwen3.5 MoE): a hybrid. Most layers are gated DeltaNet (linear attention with a recurrent state:
// a causal conv over recent tokens, then the gated delta rule); every full_attention_interval-th layer is GQA
// whose attn_q also yields a per-head output gate, with q/k RMSNorm and interleaved multi-section RoPE. Every
// layer's feed-forward is MoE (softmax routing, renormalised weights) plus a shared expert scaled by a sigmoid
// gate. MTP blocks after the trunk are recognised and skipped, the first loaded for drafts where asked (a
// full-attention layer). ../shared/oracle/README-hybrid.md has the maths.
#include "engine/model/arch/arch.h"

namespace moe::arch {

namespace {

// Which trunk layers are DeltaNet: an explicit flag array over all blocks, else every layer but each
// full_attention_interval-th (llama.cpp's load_arch_hparams). A loaded MTP block is full attention.
std::vector<bool> recurrent_layers(ArchLoader& ld, const Hparams& hp) {
    const uint32_t blocks = hp.n_layer + hp.n_layer_nextn;
    std::vector<bool> recr(blocks_to_load(ld, hp), false);
    if (auto flags = ld.bool_array("attention.recurrent_layers", blocks)) {
        for (uint32_t l = 0; l < hp.n_layer; ++l) recr[l] = (*flags)[l];
    } else {
        const uint32_t interval = ld.u32("full_attention_interval", 4);
        for (uint32_t l = 0; l < hp.n_layer; ++l) recr[l] = (l + 1) % interval != 0;
    }
    return recr;
}

}  // namespace

void load_qwen35moe(ArchLoader& ld, Model& m) {
    Hparams& hp = m.hp;
    load_layer_count(ld, hp, /*runs_nextn=*/true);
    hp.output_rows_after_norm = true;  // its graph runs the last layer on every row (get_rows after output_norm)
    GqaConfig& g = hp.gqa;
    load_gqa_heads(ld, hp);
    g.output_gate = true;
    load_rope(ld, hp, ld.u32("rope.dimension_count", g.head_dim), /*neox=*/true, false);
    if (hp.rope.n_rot > static_cast<int>(g.head_dim))
        ld.fail("metadata " + ld.key_name("rope.dimension_count") + " = " + std::to_string(hp.rope.n_rot) + " exceeds key_length " +
                std::to_string(g.head_dim));
    hp.rope.imrope = true;
    if (auto sections = ld.u32_array("rope.dimension_sections", 4)) {
        uint32_t sum = 0;
        for (int i = 0; i < 4; ++i) sum += hp.rope.sections[i] = static_cast<int>((*sections)[i]);
        if (sum * 2 > static_cast<uint32_t>(hp.rope.n_rot) && hp.rope.n_rot > 0)
            ld.fail("metadata " + ld.key_name("rope.dimension_sections") + " covers " + std::to_string(sum) + " pairs but rope.dimension_count " +
                    std::to_string(hp.rope.n_rot) + " has " + std::to_string(hp.rope.n_rot / 2));
    }

    DeltaNetConfig& s = hp.ssm;
    s.conv_kernel = ld.u32("ssm.conv_kernel");
    s.state = ld.u32("ssm.state_size");
    s.n_k_heads = ld.u32("ssm.group_count");
    s.n_v_heads = ld.u32("ssm.time_step_rank");
    const uint32_t inner = ld.u32("ssm.inner_size");
    if (inner != s.state * s.n_v_heads)
        ld.fail("metadata " + ld.key_name("ssm.inner_size") + " = " + std::to_string(inner) + " is not ssm.state_size " + std::to_string(s.state) +
                " x ssm.time_step_rank " + std::to_string(s.n_v_heads));
    if (s.n_v_heads % s.n_k_heads)
        ld.fail("metadata " + ld.key_name("ssm.time_step_rank") + " = " + std::to_string(s.n_v_heads) + " (v heads) is not a multiple of " +
                ld.key_name("ssm.group_count") + " = " + std::to_string(s.n_k_heads) + " (k heads)");
    if (s.conv_kernel < 2 || s.conv_kernel > 64)
        ld.fail("metadata " + ld.key_name("ssm.conv_kernel") + " = " + std::to_string(s.conv_kernel) + " is not a conv width (2..64)");

    load_moe_config(ld, hp, Gating::Softmax, /*force_norm=*/true);
    hp.moe.gating = Gating::Softmax;  // qwen35moe always routes with softmax
    hp.moe.n_ff_shexp = ld.u32_or_zero("expert_shared_feed_forward_length", ld.u32_or_zero("feed_forward_length"));
    hp.moe.shared_gate = hp.moe.n_ff_shexp > 0;
    load_embeddings(ld, m);

    const std::vector<bool> recr = recurrent_layers(ld, hp);
    const uint64_t E = hp.n_embd, Q = uint64_t{g.n_head} * g.head_dim, KV = uint64_t{g.n_head_kv} * g.head_dim;
    const uint64_t S = s.state, Hv = s.n_v_heads, conv = s.conv_dim(), value = S * Hv;
    const std::string e_why = "embedding_length " + std::to_string(E);
    const std::string qwhy = "2 x head_count " + std::to_string(g.n_head) + " x key_length " + std::to_string(g.head_dim) + " (query and gate)";
    const std::string owhy = "head_count " + std::to_string(g.n_head) + " x key_length " + std::to_string(g.head_dim);
    const std::string kvwhy = "head_count_kv " + std::to_string(g.n_head_kv) + " x key_length " + std::to_string(g.head_dim);
    const std::string cwhy = "ssm conv channels 2 x " + std::to_string(S) + " x " + std::to_string(s.n_k_heads) + " + " + std::to_string(value);
    const std::string vwhy = "ssm.inner_size " + std::to_string(value);
    const std::string hwhy = "ssm.time_step_rank " + std::to_string(Hv);
    m.layers.resize(blocks_to_load(ld, hp));
    for (uint32_t l = 0; l < m.layers.size(); ++l) {
        const std::string p = blk(l);
        Layer& L = m.layers[l];
        ld.resident(L.attn_norm, p + "attn_norm.weight", {E}, e_why);
        ld.resident(L.ffn_norm, p + "post_attention_norm.weight", {E}, e_why);
        if (recr[l]) {
            L.attn = AttentionKind::GatedDeltaNet;
            DeltaNetWeights& w = L.ssm;
            ld.resident(w.qkv, p + "attn_qkv.weight", {E, conv}, cwhy);
            ld.resident(w.z, p + "attn_gate.weight", {E, value}, vwhy);
            ld.resident(w.conv1d, p + "ssm_conv1d.weight", {s.conv_kernel, conv}, "ssm.conv_kernel " + std::to_string(s.conv_kernel) + ", " + cwhy);
            ld.resident(w.dt_bias, p + "ssm_dt.bias", {Hv}, hwhy);
            ld.resident(w.a, p + "ssm_a", {Hv}, hwhy);
            ld.resident(w.alpha, p + "ssm_alpha.weight", {E, Hv}, hwhy);
            ld.resident(w.beta, p + "ssm_beta.weight", {E, Hv}, hwhy);
            ld.resident(w.norm, p + "ssm_norm.weight", {S}, "ssm.state_size " + std::to_string(S));
            ld.resident(w.out, p + "ssm_out.weight", {value, E}, vwhy);
            if (w.conv1d.type != GgmlType::F32) ld.fail("tensor '" + p + "ssm_conv1d.weight' is not f32");
        } else {
            L.attn = AttentionKind::Gqa;
            load_qkv(ld, p, E, 2 * Q, KV, qwhy, kvwhy, L.gqa);
            ld.resident(L.gqa.wo, p + "attn_output.weight", {Q, E}, owhy);
            ld.resident(L.gqa.q_norm, p + "attn_q_norm.weight", {g.head_dim}, "key_length");
            ld.resident(L.gqa.k_norm, p + "attn_k_norm.weight", {g.head_dim}, "key_length");
        }
        load_moe_layer(ld, hp, L, p);
        if (hp.moe.shared_gate) ld.resident(L.experts.gate_inp_sh, p + "ffn_gate_inp_shexp.weight", {E}, e_why);
        if (l >= hp.n_layer) load_nextn_head(ld, m, l);
    }
}

}  // namespace moe::arch

// Synthetic models: the vocabulary, the spec's checks, each architecture's metadata and its layers' blocks
// (blocks.h) in file order.
#include "synth/synthetic_model.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <random>

#include "engine/kernels/kernels.h"
#include "synth/blocks.h"
#include "synth/deepseek4.h"
#include "synth/router_locality.h"

namespace moe::synth {

MetadataList builtin_vocab() {
    std::vector<std::string> tokens;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
        std::string s;
        if (cp < 0x80) s += static_cast<char>(cp);
        else {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        }
        tokens.push_back(s);
    }
    std::vector<int32_t> types(tokens.size(), 1);
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        tokens.push_back(special);
        types.push_back(3);
    }
    const int32_t eot = 256, im_end = 258;
    return {
        {"tokenizer.ggml.model", GgufValue::string("gpt2")},
        {"tokenizer.ggml.pre", GgufValue::string("qwen2")},
        {"tokenizer.ggml.tokens", GgufValue::string_array(tokens)},
        {"tokenizer.ggml.token_type", GgufValue::i32_array_of(types)},
        {"tokenizer.ggml.merges", GgufValue::string_array({})},
        {"tokenizer.ggml.eos_token_id", GgufValue::u32(im_end)},
        {"tokenizer.ggml.padding_token_id", GgufValue::u32(eot)},
        {"tokenizer.ggml.bos_token_id", GgufValue::u32(eot)},
        {"tokenizer.ggml.add_bos_token", GgufValue::boolean(false)},
        {"tokenizer.chat_template",
         GgufValue::string("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                           "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")},
    };
}

MetadataList vocab_from(const std::string& path) {
    GgufFile f = read_gguf_header(path);
    MetadataList out;
    for (const auto& [k, v] : f.kv)
        if (k.rfind("tokenizer.", 0) == 0) out.emplace_back(k, v);
    if (!f.find("tokenizer.ggml.tokens")) throw SpecError(path + ": no tokenizer.ggml.tokens to copy");
    return out;
}

uint64_t write_synthetic_model(const SyntheticSpec& s_in, const MetadataList& vocab, const std::string& out) {
    SyntheticSpec s = s_in;
    const std::string& A = s.arch;
    const bool hybrid = A == "qwen35moe";
    const bool oss = A == "gpt-oss", mm2 = A == "minimax-m2", mm3 = A == "minimax-m3", k3 = A == "kimi-k3", dsv4 = A == "deepseek4";
    if (A != "qwen3moe" && A != "glm4moe" && !hybrid && !is_mla(A) && !oss && !mm2 && !mm3 && !k3 && !dsv4)
        throw SpecError("--arch " + A +
                        " is not supported (qwen3moe, glm4moe, qwen35moe, deepseek2, glm-dsa, gpt-oss, minimax-m2, minimax-m3, kimi-k3, deepseek4)");
    if (mm2 || k3) s.probs_bias = true;  // their routers always have a selection bias
    check_positive({{"layers", s.layers}, {"embd", s.embd}, {"heads", s.heads}, {"experts", s.experts}, {"experts-used", s.used}, {"ffn", s.ffn}});
    if (s.used > s.experts) throw SpecError("--experts-used " + std::to_string(s.used) + " exceeds --experts " + std::to_string(s.experts));
    if (s.dense_layers >= s.layers && s.dense_layers) throw SpecError("--dense-layers " + std::to_string(s.dense_layers) + " leaves no MoE layer");
    if (s.dense_layers && !s.dense_ffn) s.dense_ffn = s.ffn * std::max(s.used, 1u);
    if ((A == "qwen3moe" || oss || mm2) && (s.dense_layers || s.shared)) throw SpecError(A + " has no dense layers or shared experts");
    if (oss && (s.rope_dims && s.rope_dims != (s.head_dim ? s.head_dim : s.embd / s.heads)))
        throw SpecError("gpt-oss rotates whole heads: --rope-dims must equal --head-dim");
    if (oss) check_positive({{"window", s.window}});
    if (hybrid) {
        if (s.dense_layers) throw SpecError("qwen35moe has no dense layers");
        check_positive({{"ssm-state", s.ssm_state},
                        {"ssm-k-heads", s.ssm_k_heads},
                        {"ssm-v-heads", s.ssm_v_heads},
                        {"full-attention-interval", s.full_interval}});
        if (s.ssm_v_heads % s.ssm_k_heads) throw SpecError("--ssm-v-heads must be a multiple of --ssm-k-heads");
        if (s.ssm_conv < 2 || s.ssm_conv > 64) throw SpecError("--ssm-conv must be in 2..64");
    }
    if (dsv4) {
        check_deepseek4_spec(s);
    } else if (k3) {
        if (s.nextn) throw SpecError("kimi-k3: --nextn is not supported");
        check_positive({{"ssm-state", s.ssm_state}, {"full-attention-interval", s.full_interval}, {"kv-lora", s.kv_lora}, {"v-head", s.v_head}});
        if (s.ssm_conv < 2 || s.ssm_conv > 64) throw SpecError("--ssm-conv must be in 2..64");
        if (s.latent > s.embd) throw SpecError("--latent " + std::to_string(s.latent) + " exceeds --embd " + std::to_string(s.embd));
        if (!(s.situ_beta > 0.f)) throw SpecError("--situ-beta must be positive");
    } else if (!is_mla(A)) {
        if (!s.kv_heads) s.kv_heads = s.heads;
        if (!s.head_dim) s.head_dim = s.embd / s.heads;
        check_positive({{"kv-heads", s.kv_heads}, {"head-dim", s.head_dim}});
        if (s.heads % s.kv_heads)
            throw SpecError("--heads " + std::to_string(s.heads) + " is not a multiple of --kv-heads " + std::to_string(s.kv_heads));
        if (!s.rope_dims) s.rope_dims = A == "glm4moe" || mm2 || mm3 ? s.head_dim / 2 : hybrid ? s.head_dim / 4 : s.head_dim;
        if (s.rope_dims % 2 || s.rope_dims > s.head_dim) throw SpecError("--rope-dims must be even and at most --head-dim");
        if (mm3) {
            if (!s.msa_dim) s.msa_dim = s.head_dim;
            check_positive({{"msa-block", s.msa_block}, {"msa-top-k", s.msa_top_k}});
            if (s.msa_dim < s.rope_dims) throw SpecError("--msa-dim must be at least --rope-dims (the indexer's heads are rotated)");
            if (s.msa_local > s.msa_top_k) throw SpecError("--msa-local must be at most --msa-top-k");
        }
    } else {
        check_positive({{"kv-lora", s.kv_lora}, {"qk-nope", s.qk_nope}, {"qk-rope", s.qk_rope}, {"v-head", s.v_head}});
        if (s.qk_rope % 2) throw SpecError("--qk-rope must be even (RoPE rotates pairs)");
        if (A == "glm-dsa") {
            if (!s.q_lora) throw SpecError("glm-dsa needs --q-lora (the indexer reads the q-LoRA latent)");
            check_positive({{"indexer-heads", s.ix_heads}, {"indexer-dim", s.ix_dim}, {"indexer-top-k", s.ix_top_k}});
            if (s.ix_dim < 64 || (s.ix_dim & (s.ix_dim - 1)) || s.ix_dim < s.qk_rope)
                throw SpecError("--indexer-dim must be a power of two of at least 64 and at least --qk-rope");
            if (!s.ix_full.empty() && (s.ix_full.size() != s.layers || !s.ix_full[0]))
                throw SpecError("--indexer-types needs one flag per layer, the first one full");
        }
    }
    if (s.groups && (s.experts % s.groups || !s.groups_used || s.groups_used > s.groups))
        throw SpecError("--groups must divide --experts and --groups-used must be in 1..--groups");

    const TypePlan plan = type_plan(s.type, s.random_blocks);

    uint32_t n_vocab = 0;
    for (const auto& [k, v] : vocab)
        if (k == "tokenizer.ggml.tokens") n_vocab = static_cast<uint32_t>(v.count);

    // Metadata
    MetadataList kv = {
        {"general.architecture", GgufValue::string(A)},
        {"general.name", GgufValue::string("moestream synthetic " + A)},
        {"general.description", GgufValue::string("synthetic random-weight MoE model (moestream mkmodel seed=" + std::to_string(s.seed) + ")")}};
    kv.insert(kv.end(), vocab.begin(), vocab.end());
    if (!s.chat_template.empty()) {
        std::erase_if(kv, [](const auto& e) { return e.first == "tokenizer.chat_template"; });
        kv.emplace_back("tokenizer.chat_template", GgufValue::string(s.chat_template));
    }
    auto key = [&](const std::string& k, GgufValue v) { kv.emplace_back(A + "." + k, std::move(v)); };
    auto u32 = [](uint32_t v) { return GgufValue::u32(v); };
    key("vocab_size", u32(n_vocab));
    key("context_length", u32(4096));
    key("embedding_length", u32(s.embd));
    key("block_count", u32(s.layers + s.nextn));
    key("attention.head_count", u32(s.heads));
    key("attention.layer_norm_rms_epsilon", GgufValue::f32(1e-6f));
    key("rope.freq_base", GgufValue::f32(s.rope_base));
    key("expert_count", u32(s.experts));
    key("expert_used_count", u32(s.used));
    key("expert_feed_forward_length", u32(s.ffn));
    if (dsv4) {
        deepseek4_keys(s, key);
    } else if (hybrid) {
        key("attention.head_count_kv", u32(s.kv_heads));
        key("attention.key_length", u32(s.head_dim));
        key("attention.value_length", u32(s.head_dim));
        key("rope.dimension_count", u32(s.rope_dims));
        // Qwen3.5's interleaved sections, in proportion 11:11:10 of the rotated pairs
        const uint32_t pairs = s.rope_dims / 2, t = (pairs * 11 + 31) / 32, h = (pairs * 11 + 31) / 32;
        GgufValue sections = GgufValue::i32_array_of(
            {static_cast<int32_t>(t), static_cast<int32_t>(std::min(h, pairs - t)), static_cast<int32_t>(pairs - t - std::min(h, pairs - t)), 0});
        key("rope.dimension_sections", sections);
        key("ssm.conv_kernel", u32(s.ssm_conv));
        key("ssm.state_size", u32(s.ssm_state));
        key("ssm.group_count", u32(s.ssm_k_heads));
        key("ssm.time_step_rank", u32(s.ssm_v_heads));
        key("ssm.inner_size", u32(s.ssm_state * s.ssm_v_heads));
        key("full_attention_interval", u32(s.full_interval));
        if (s.shared) key("expert_shared_feed_forward_length", u32(s.ffn * s.shared));
        key("nextn_predict_layers", u32(s.nextn));
    } else if (k3) {
        std::vector<int32_t> kv_heads(s.layers);  // 0 marks a KDA layer
        for (uint32_t l = 0; l < s.layers; ++l) kv_heads[l] = (l + 1) % s.full_interval == 0 ? 1 : 0;
        key("attention.head_count_kv", GgufValue::i32_array_of(kv_heads));
        key("ssm.conv_kernel", u32(s.ssm_conv));
        key("kda.head_dim", u32(s.ssm_state));
        if (s.kda_lower_bound != 0.f) key("kda.gate_lower_bound", GgufValue::f32(s.kda_lower_bound));
        key("attention.q_lora_rank", u32(s.q_lora));
        key("attention.kv_lora_rank", u32(s.kv_lora));
        key("rope.dimension_count", u32(s.qk_rope));
        key("attention.key_length", u32(s.kv_lora + s.qk_rope));
        key("attention.value_length", u32(s.kv_lora));
        key("attention.key_length_mla", u32(s.qk_nope + s.qk_rope));
        key("attention.value_length_mla", u32(s.v_head));
        key("feed_forward_length", u32(s.dense_ffn ? s.dense_ffn : s.ffn * s.used));
        if (s.latent) key("expert_latent_length", u32(s.latent));
        key("activation.situ_beta", GgufValue::f32(s.situ_beta));
        key("activation.situ_linear_beta", GgufValue::f32(s.situ_linear_beta));
        key("attn_res.block_size", u32(s.res_block));
        if (s.gating.empty()) key("expert_gating_func", u32(2));
    } else if (!is_mla(A)) {
        // minimax-m2's experts are sized by feed_forward_length in llama.cpp (its converter writes the expert width).
        key("feed_forward_length", u32(s.dense_layers ? s.dense_ffn : mm2 ? s.ffn : s.ffn * s.used));
        key("attention.head_count_kv", u32(s.kv_heads));
        key("attention.key_length", u32(s.head_dim));
        key("attention.value_length", u32(s.head_dim));
        if (A != "qwen3moe" || s.rope_dims != s.head_dim) key("rope.dimension_count", u32(s.rope_dims));
        if (oss) key("attention.sliding_window", u32(s.window));
        if (mm3) {
            key("attention.indexer.head_count", u32(s.kv_heads));
            key("attention.indexer.key_length", u32(s.msa_dim));
            key("attention.indexer.top_k", u32(s.msa_top_k));
            key("attention.indexer.block_size", u32(s.msa_block));
            key("attention.indexer.local_blocks", u32(s.msa_local));
        }
        if ((mm2 || mm3) && s.gating.empty()) key("expert_gating_func", u32(2));  // sigmoid, as their converter writes
    } else {
        key("feed_forward_length", u32(s.dense_ffn ? s.dense_ffn : s.ffn * s.used));
        if (s.mla_kv_b) {  // the older keys: per-head key and value lengths, no *_mla keys
            key("attention.head_count_kv", u32(s.heads));
            key("attention.key_length", u32(s.qk_nope + s.qk_rope));
            key("attention.value_length", u32(s.v_head));
        } else {
            key("attention.head_count_kv", u32(1));
            key("attention.key_length", u32(s.kv_lora + s.qk_rope));
            key("attention.value_length", u32(s.kv_lora));
            key("attention.key_length_mla", u32(s.qk_nope + s.qk_rope));
            key("attention.value_length_mla", u32(s.v_head));
        }
        key("attention.q_lora_rank", u32(s.q_lora));
        key("attention.kv_lora_rank", u32(s.kv_lora));
        key("rope.dimension_count", u32(s.qk_rope));
        if (A == "glm-dsa") {
            key("attention.indexer.head_count", u32(s.ix_heads));
            key("attention.indexer.key_length", u32(s.ix_dim));
            key("attention.indexer.top_k", u32(s.ix_top_k));
            if (!s.ix_full.empty()) {
                GgufValue types;
                types.type = GgufValueType::ARRAY;
                types.elem_type = GgufValueType::BOOL;
                types.count = s.ix_full.size();
                for (bool f : s.ix_full) types.raw.push_back(f ? 1 : 0);
                key("attention.indexer.types", types);
            }
        }
    }
    if (A != "qwen3moe" && !hybrid && !oss && !dsv4) {
        key("leading_dense_block_count", u32(s.dense_layers));
        key("expert_shared_count", u32(s.shared));
        key("expert_weights_norm", GgufValue::boolean(s.norm_weights));
        key("expert_weights_scale", GgufValue::f32(s.weights_scale));
        key("nextn_predict_layers", u32(s.nextn));
        if (s.groups) {
            key("expert_group_count", u32(s.groups));
            key("expert_group_used_count", u32(s.groups_used));
        }
    }
    if (!s.gating.empty()) {
        if (s.gating != "softmax" && s.gating != "sigmoid") throw SpecError("--gating " + s.gating + " is not softmax or sigmoid");
        key("expert_gating_func", u32(s.gating == "softmax" ? 1 : 2));
    }
    if (s.yarn_factor > 1.f) {
        key("rope.scaling.type", GgufValue::string("yarn"));
        key("rope.scaling.factor", GgufValue::f32(s.yarn_factor));
        key("rope.scaling.original_context_length", u32(s.yarn_orig_ctx));
        if (s.yarn_log_mul != 0.f) key("rope.scaling.yarn_log_multiplier", GgufValue::f32(s.yarn_log_mul));
    }

    // Tensors
    Writer w(s, plan);
    check_router_locality(s);
    w.edit_for = [&s](const std::string& name) { return locality_edit(s, name); };
    w.matrix("token_embd.weight", {s.embd, n_vocab}, std::sqrt(static_cast<float>(s.embd) / 3.f));
    w.vec("output_norm.weight", s.embd);
    // With the built-in byte vocabulary the demo's output head has rows only for printable ASCII, newline and
    // <|im_end|> (258): its random text then prints as characters rather than stray bytes.
    std::function<bool(uint64_t)> unprintable;
    if (s.printable_head) unprintable = [](uint64_t id) { return !((id >= 32 && id <= 126) || id == 10 || id == 258); };
    if (!s.tie_output) w.matrix("output.weight", {s.embd, n_vocab}, 4.f, true, unprintable);
    if (k3 && s.res_block) w.vec("output_res_score.weight", s.embd, 0.f, 0.3f);
    const std::string ffn_norm = A == "glm4moe" || hybrid || oss ? "post_attention_norm.weight" : "ffn_norm.weight";
    if (dsv4) deepseek4_tensors(w, s, n_vocab);
    for (uint32_t l = 0; l < (dsv4 ? 0 : s.layers + s.nextn); ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        w.vec(p + "attn_norm.weight", s.embd);
        if (k3 && s.res_block) {
            w.vec(p + "attn_res_score.weight", s.embd, 0.f, 0.3f);
            w.vec(p + "ffn_res_score.weight", s.embd, 0.f, 0.3f);
        }
        if (k3 && (l + 1) % s.full_interval != 0) kda_block(w, s, p);
        else if (k3) {
            mla_block(w, s, p, false);
            w.matrix(p + "attn_gate.weight", {s.embd, s.heads * s.v_head});
        } else if (is_mla(A)) mla_block(w, s, p, A == "glm-dsa" && (s.ix_full.empty() || (l < s.layers && s.ix_full[l]) || l >= s.layers));
        else if (hybrid && l < s.layers && (l + 1) % s.full_interval != 0) deltanet_block(w, s, p);
        else if (hybrid) gated_attention_block(w, s, p);
        else if (oss) gqa_block(w, s, p, {.qkv_bias = true, .qk_norm = false, .output_bias_and_sinks = true, .qk_norm_whole = false});
        else gqa_block(w, s, p, {.qkv_bias = A == "glm4moe", .qk_norm = true, .output_bias_and_sinks = false, .qk_norm_whole = mm2});
        w.vec(p + ffn_norm, s.embd);
        if (l < s.dense_layers) dense_block(w, s, p, mm3 ? 4.f : 1.f);
        else if (oss) gpt_oss_moe(w, s, p);
        else moe_block(w, s, p, mm3 ? 4.f : 1.f);
        if (k3 && s.latent && l >= s.dense_layers) latent_moe_extras(w, s, p);
        if (mm3 && l >= s.dense_layers) msa_indexer(w, s, p);
        if (hybrid && s.shared) w.vec(p + "ffn_gate_inp_shexp.weight", s.embd, 0.f, 0.3f);
        if (l >= s.layers) nextn_head(w, s, p);  // a NextN/MTP block's own tensors
    }
    uint64_t bytes = 0;
    for (const auto& t : w.tensors) bytes += t.bytes.size();
    if (dsv4 && !s.nextn_file.empty()) write_deepseek4_split(s, plan, std::move(kv), std::move(w.tensors), out);
    else write_gguf(out, kv, w.tensors);
    return bytes;
}

}  // namespace moe::synth

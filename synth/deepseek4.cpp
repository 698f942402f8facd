// deepseek4's synthetic models: the keys DeepseekV4Model.set_gguf_parameters writes and the tensors
// llama.cpp's load_arch_tensors reads (../shared/oracle/README-2026.md), at mkmodel's shapes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "synth/blocks.h"
#include "synth/deepseek4.h"

namespace moe::synth {
namespace {

constexpr uint32_t kStreams = 4;  // hyper-connection copies (llama.cpp's graph requires 4)

uint32_t ratio_of(const SyntheticSpec& s, uint32_t l) {
    if (l >= s.layers) return 0;  // the NextN/MTP block: a sliding-window layer (llama.cpp asserts it)
    if (!s.compress_ratios.empty()) return s.compress_ratios[l];
    return l == 0 ? 0 : l % 2 ? 4 : 128;
}

void hyper_mixer(Writer& w, const SyntheticSpec& s, const std::string& p, uint32_t mixes, uint64_t scales) {
    w.matrix(p + "_fn.weight", {kStreams * s.embd, mixes});
    w.vec(p + "_base.weight", mixes, 0.f, 1.f);
    w.vec(p + "_scale.weight", scales, 1.f, 0.3f);
}

void compressor(Writer& w, const SyntheticSpec& s, const std::string& p, uint32_t dim, uint32_t ratio) {
    const uint64_t coff = ratio == 4 ? 2 : 1;
    w.matrix(p + "_kv.weight", {s.embd, coff * dim});
    w.matrix(p + "_gate.weight", {s.embd, coff * dim});
    w.matrix(p + "_ape.weight", {coff * dim, ratio}, std::sqrt(static_cast<float>(coff * dim) / 3.f));
    w.vec(p + "_norm.weight", dim);
}

// tid2eid: n_used distinct experts per token id, drawn from the seed.
void hash_table(Writer& w, const SyntheticSpec& s, const std::string& p, uint32_t n_vocab, uint32_t layer) {
    GgufTensorData t{p + "ffn_gate_tid2eid.weight", {s.used, n_vocab}, GgmlType::I32, std::vector<uint8_t>(4ull * s.used * n_vocab)};
    std::mt19937_64 rng(s.seed * 1000003 + layer);
    std::vector<int32_t> ids(s.experts);
    for (uint32_t tok = 0; tok < n_vocab; ++tok) {
        std::iota(ids.begin(), ids.end(), 0);
        for (uint32_t k = 0; k < s.used; ++k) std::swap(ids[k], ids[k + rng() % (s.experts - k)]);
        std::memcpy(t.bytes.data() + 4ull * s.used * tok, ids.data(), 4ull * s.used);
    }
    w.tensors.push_back(std::move(t));
}

}  // namespace

void check_deepseek4_spec(SyntheticSpec& s) {
    if (!s.head_dim) s.head_dim = 64;
    if (!s.rope_dims) s.rope_dims = std::min(64u, s.head_dim);
    check_positive({{"head-dim", s.head_dim}, {"q-lora", s.q_lora}, {"window", s.window}, {"out-groups", s.out_groups}, {"out-rank", s.out_rank}});
    if (s.rope_dims % 2 || s.rope_dims > s.head_dim) throw SpecError("--rope-dims must be even and at most --head-dim");
    if (s.heads % s.out_groups) throw SpecError("--out-groups must divide --heads");
    if (s.hash_layers > s.layers) throw SpecError("--hash-layers exceeds --layers");
    if (s.dense_layers) throw SpecError("deepseek4: --dense-layers is not supported");
    if (s.nextn > 1) throw SpecError("deepseek4: --nextn is 0 or 1 (DeepSeek-V4 has one MTP block)");
    if (!s.nextn_file.empty() && !s.nextn) throw SpecError("--nextn-file needs --nextn 1");
    if (!s.compress_ratios.empty() && s.compress_ratios.size() != s.layers) throw SpecError("--compress-ratios needs one ratio per layer");
    bool indexer = false;
    for (uint32_t l = 0; l < s.layers; ++l) {
        const uint32_t r = ratio_of(s, l);
        if (r == 1 || r > 65536) throw SpecError("--compress-ratios: " + std::to_string(r) + " is not 0 or 2..65536");
        indexer |= r == 4;
    }
    if (indexer) {
        check_positive({{"indexer-heads", s.ix_heads}, {"indexer-top-k", s.ix_top_k}});
        if (s.ix_dim < s.rope_dims || (s.ix_dim & (s.ix_dim - 1))) throw SpecError("--indexer-dim must be a power of two of at least --rope-dims");
    }
}

void deepseek4_keys(const SyntheticSpec& s, const std::function<void(const std::string&, GgufValue)>& key) {
    auto u32 = [](uint32_t v) { return GgufValue::u32(v); };
    key("embedding_length_out", u32(kStreams * s.embd));
    key("feed_forward_length", u32(s.ffn));
    key("attention.head_count_kv", u32(1));
    key("attention.key_length", u32(s.head_dim));
    key("attention.value_length", u32(s.head_dim));
    key("attention.q_lora_rank", u32(s.q_lora));
    key("attention.sliding_window", u32(s.window));
    key("attention.output_group_count", u32(s.out_groups));
    key("attention.output_lora_rank", u32(s.out_rank));
    const uint32_t blocks = s.layers + s.nextn;
    std::vector<int32_t> ratios(blocks);
    for (uint32_t l = 0; l < blocks; ++l) ratios[l] = static_cast<int32_t>(ratio_of(s, l));
    key("attention.compress_ratios", GgufValue::i32_array_of(ratios));
    key("attention.compress_rope_freq_base", GgufValue::f32(s.rope_base * 16.f));
    key("attention.indexer.head_count", u32(s.ix_heads));
    key("attention.indexer.key_length", u32(s.ix_dim));
    key("attention.indexer.top_k", u32(s.ix_top_k));
    key("rope.dimension_count", u32(s.rope_dims));
    key("expert_shared_count", u32(s.shared));
    key("expert_weights_norm", GgufValue::boolean(true));
    key("expert_weights_scale", GgufValue::f32(s.weights_scale ? s.weights_scale : 1.5f));
    key("expert_gating_func", u32(4));
    key("swiglu_clamp_exp", GgufValue::f32_array_of(std::vector<float>(blocks, s.swiglu_limit)));
    key("swiglu_clamp_shexp", GgufValue::f32_array_of(std::vector<float>(blocks, s.swiglu_limit)));
    if (s.nextn) key("nextn_predict_layers", u32(s.nextn));
    key("hyper_connection.count", u32(kStreams));
    key("hyper_connection.sinkhorn_iterations", u32(20));
    key("hyper_connection.epsilon", GgufValue::f32(1e-6f));
    key("hash_layer_count", u32(s.hash_layers));
}

void deepseek4_tensors(Writer& w, const SyntheticSpec& s, uint32_t n_vocab) {
    const uint32_t mixes = 2 * kStreams + kStreams * kStreams, D = s.head_dim, H = s.heads;
    hyper_mixer(w, s, "output_hc", kStreams, 1);
    for (uint32_t l = 0; l < s.layers + s.nextn; ++l) {  // the trunk, then the MTP block (as llama.cpp's converter writes it)
        const std::string p = "blk." + std::to_string(l) + ".";
        const uint32_t ratio = ratio_of(s, l);
        hyper_mixer(w, s, p + "hc_attn", mixes, 3);
        hyper_mixer(w, s, p + "hc_ffn", mixes, 3);
        w.vec(p + "attn_norm.weight", s.embd);
        w.matrix(p + "attn_q_a.weight", {s.embd, s.q_lora});
        w.vec(p + "attn_q_a_norm.weight", s.q_lora);
        w.matrix(p + "attn_q_b.weight", {s.q_lora, H * D});
        w.matrix(p + "attn_kv.weight", {s.embd, D});
        w.vec(p + "attn_kv_a_norm.weight", D);
        w.vec(p + "attn_sinks.weight", H, 0.f, 1.f);
        w.matrix(p + "attn_output_a.weight", {H * D / s.out_groups, s.out_groups * s.out_rank});
        w.matrix(p + "attn_output_b.weight", {s.out_groups * s.out_rank, s.embd});
        if (ratio) compressor(w, s, p + "attn_compressor", D, ratio);
        if (ratio == 4) {
            compressor(w, s, p + "indexer_compressor", s.ix_dim, ratio);
            w.matrix(p + "indexer.attn_q_b.weight", {s.q_lora, s.ix_heads * s.ix_dim});
            w.matrix(p + "indexer.proj.weight", {s.embd, s.ix_heads});
        }
        w.vec(p + "ffn_norm.weight", s.embd);
        SyntheticSpec biased = s;
        biased.probs_bias = l >= s.hash_layers;  // hash layers select by token id, with no selection bias
        moe_block(w, biased, p);
        if (l < s.hash_layers) hash_table(w, s, p, n_vocab, l);
        if (l >= s.layers) nextn_head(w, s, p);
    }
}

void write_deepseek4_split(const SyntheticSpec& s, TypePlan plan, MetadataList kv, std::vector<GgufTensorData> tensors, const std::string& out) {
    const std::string block = "blk." + std::to_string(s.layers) + ".";
    std::vector<GgufTensorData> trunk, side;
    for (auto& t : tensors) {
        if (t.name.starts_with(block)) side.push_back(std::move(t));
        else {
            if (t.name == "token_embd.weight" || t.name == "output_norm.weight" || t.name == "output.weight") side.push_back(t);
            trunk.push_back(std::move(t));
        }
    }
    // the block's own output head mixer (mtp.0.hc_head_*), in the root names the graph reads
    SyntheticSpec other = s;
    other.seed = s.seed * 31 + 7;
    Writer head(other, plan);
    hyper_mixer(head, other, "output_hc", kStreams, 1);
    for (auto& t : head.tensors) side.push_back(std::move(t));
    write_gguf(s.nextn_file, kv, side);
    for (auto& [k, v] : kv)
        if (k.ends_with(".block_count")) v = GgufValue::u32(s.layers);
    std::erase_if(kv, [](const auto& e) { return e.first.ends_with(".nextn_predict_layers"); });
    write_gguf(out, kv, trunk);
}

}  // namespace moe::synth

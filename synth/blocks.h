// Internal to synth/: one writer per block kind (attention kinds, feed-forward kinds), shared by every
// architecture write_synthetic_model builds.
#pragma once
#include <string>

#include "synth/tensor_writer.h"

namespace moe::synth {

// Router, selection bias, routed experts (at --latent's width when set) and shared expert of one MoE block. `gain` scales gate and up up and
// down back (swiglu_oai's models use 4, as their reference files, so that its clamps at 7 are reached).
void moe_block(Writer& w, const SyntheticSpec& s, const std::string& p, float gain = 1.f);

// A dense layer's gated feed-forward (gate and up scaled by `gain`, down by its inverse).
void dense_block(Writer& w, const SyntheticSpec& s, const std::string& p, float gain = 1.f);

// minimax-m3's MSA indexer (its MoE layers): one query head per kv group, one key; f32 as llama-quantize keeps them.
void msa_indexer(Writer& w, const SyntheticSpec& s, const std::string& p);

// What a GQA block carries besides its projections: q/k/v biases (glm4moe, gpt-oss), per-head q/k norms
// (qwen3moe, glm4moe), an output bias and a sink logit per head (gpt-oss).
struct GqaExtras {
    bool qkv_bias = false, qk_norm = true, output_bias_and_sinks = false;
    bool qk_norm_whole = false;  // minimax-m2: one norm weight per element of the whole q and k rows
};

void gqa_block(Writer& w, const SyntheticSpec& s, const std::string& p, GqaExtras x);

// gpt-oss's experts: a biased router, biased experts; gate and up x4 and down /4 (as the reference files) so
// that swiglu_oai's clamps at 7 are reached.
void gpt_oss_moe(Writer& w, const SyntheticSpec& s, const std::string& p);

// qwen35moe's gated DeltaNet block, with the value ranges of real checkpoints' initialisation: -exp(A_log)
// for A ~ U(0, 16), dt bias for dt in [1e-3, 1e-1].
void deltanet_block(Writer& w, const SyntheticSpec& s, const std::string& p);

// qwen35moe's gated full attention: attn_q yields per head the query then the output gate.
void gated_attention_block(Writer& w, const SyntheticSpec& s, const std::string& p);

// MLA in the split k_b/v_b form (or one attn_kv_b with --mla-kv-b), with glm-dsa's indexer tensors.
void mla_block(Writer& w, const SyntheticSpec& s, const std::string& p, bool indexer);

// kimi-k3's Kimi Delta Attention block: q, k, v each with its own conv taps, the decay's low-rank pair and
// per-channel dt bias, -exp(A_log) per head, beta, the full-rank output gate.
void kda_block(Writer& w, const SyntheticSpec& s, const std::string& p);

// kimi-k3's latent MoE extras: routed_down before the experts, routed_norm and routed_up after.
void latent_moe_extras(Writer& w, const SyntheticSpec& s, const std::string& p);
// A NextN/MTP block's own input and head tensors (nextn.eh_proj, enorm, hnorm, shared_head_norm).
void nextn_head(Writer& w, const SyntheticSpec& s, const std::string& p);

}  // namespace moe::synth

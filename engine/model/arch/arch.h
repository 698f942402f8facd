// Architecture descriptions: each reads its hyperparameter keys and tensor names into the one Model layout,
// choosing per layer an attention kind and a feed-forward kind. Adding an architecture means a description
// here and, where its layers are new, one attention or gating kind in engine/forward.
#pragma once
#include <optional>

#include "engine/model/arch/arch_loader.h"

namespace moe::arch {

void load_qwen3moe(ArchLoader& ld, Model& m);
void load_glm4moe(ArchLoader& ld, Model& m);
void load_qwen35moe(ArchLoader& ld, Model& m);
void load_deepseek2(ArchLoader& ld, Model& m);  // deepseek2 (DeepSeek-V2/V3, Kimi-K2) and glm-dsa (GLM-5.x)
void load_gpt_oss(ArchLoader& ld, Model& m);
void load_minimax_m2(ArchLoader& ld, Model& m);
void load_minimax_m3(ArchLoader& ld, Model& m);
void load_kimi_k3(ArchLoader& ld, Model& m);
void load_deepseek4(ArchLoader& ld, Model& m);

// Shared pieces (common.cpp).

// block_count minus nextn_predict_layers, with the NextN blocks' tensors recognised and skipped; with
// `runs_nextn`, the first of them is left for the description to load when the load asked for it.
void load_layer_count(ArchLoader& ld, Hparams& hp, bool runs_nextn = false);
// The blocks a description loads as layers: the trunk, plus the NextN/MTP block left by load_layer_count. The
// description loads that block as it loads a trunk layer, then its own tensors with load_nextn_head; the
// loader makes it a model of its own (Model::mtp).
uint32_t blocks_to_load(const ArchLoader& ld, const Hparams& hp);
void load_nextn_head(ArchLoader& ld, Model& m, uint32_t block);
// GQA's heads: head_count, head_count_kv, key_length (default: default_head_dim, else embedding_length /
// head_count) and value_length, which must equal it; a whole number of query heads per kv head.
void load_gqa_heads(ArchLoader& ld, Hparams& hp, std::optional<uint32_t> default_head_dim = {});
// A GQA layer's attn_q, attn_k, attn_v and attn_output at the shapes hp.gqa gives, and the q/k/v biases
// (attn_*.bias) as the architecture has them.
enum class QkvBiases { None, Optional, Required };
void load_gqa_projections(ArchLoader& ld, const Hparams& hp, GqaWeights& w, const std::string& prefix, QkvBiases biases = QkvBiases::None);
// Q [E, q], K and V [E, kv] (and their biases): the file's attn_q / attn_k / attn_v, or one fused attn_qkv
// [E, q + 2 kv] whose row ranges are the three over the same bytes (llama.cpp's create_tensor_qkv takes the fused
// tensor first; newer converters write it), its bias attn_qkv.bias alike.
void load_qkv(ArchLoader& ld, const std::string& prefix, uint64_t E, uint64_t q, uint64_t kv, const std::string& qwhy, const std::string& kvwhy,
              GqaWeights& w, QkvBiases biases = QkvBiases::None);
// token_embd (sets n_vocab), output_norm, output (tied to token_embd when absent).
void load_embeddings(ArchLoader& ld, Model& m);
// RoPE on n_rot dims: base, linear or YaRN scaling (rope.scaling.*). Returns YaRN's attention mscale for
// deepseek2's kq_scale (1 without YaRN); `deepseek_log_mul` reads rope.scaling.yarn_log_multiplier as
// deepseek2 does.
float load_rope(ArchLoader& ld, Hparams& hp, uint32_t n_rot, bool neox, bool deepseek_log_mul);
// The start every GQA architecture shares: layer count, heads, RoPE (NeoX or not).
void load_gqa_trunk(ArchLoader& ld, Hparams& hp, bool neox, bool runs_nextn = false);
// GQA's RoPE: rope.dimension_count dims (default: the whole head), at most key_length.
void load_gqa_rope(ArchLoader& ld, Hparams& hp, bool neox);
// leading_dense_block_count (at most the layer count) and their feed_forward_length.
void load_dense_lead(ArchLoader& ld, Hparams& hp);
// expert_count/used/ffn, shared experts, gating (default when the key is absent), weight norm/scale, groups.
void load_moe_config(ArchLoader& ld, Hparams& hp, Gating default_gating, bool force_norm = false);
// One MoE layer's router, selection bias, routed experts and shared expert.
void load_moe_layer(ArchLoader& ld, const Hparams& hp, Layer& L, const std::string& prefix);
void load_dense_ffn(ArchLoader& ld, const Hparams& hp, Layer& L, const std::string& prefix);
// MLA (deepseek2.cpp): whether the file stores attn_kv_b unsplit (judged on the first MLA layer); hp.mla's
// heads, ranks and key/value lengths (not RoPE), returning key_length_mla; one layer's MLA tensors.
bool mla_kv_b_unsplit(ArchLoader& ld, uint32_t first_mla_layer);
uint32_t load_mla_config(ArchLoader& ld, Hparams& hp, bool unsplit);
void load_mla_attention(ArchLoader& ld, const Hparams& hp, Layer& L, const std::string& prefix, bool unsplit);

inline std::string blk(uint32_t l) { return "blk." + std::to_string(l) + "."; }

}  // namespace moe::arch

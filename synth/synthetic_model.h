// Synthetic MoE models with seeded random weights, for tests, the demo and benchmarks: any supported
// architecture, shape and weight type, written as a GGUF file llama.cpp would accept. A library of its own:
// `moestream mkmodel` parses options into a SyntheticSpec, tests fill one directly.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/gguf.h"

namespace moe::synth {

// An inconsistent spec or an unusable vocabulary file: one line naming the option (as mkmodel spells it).
struct SpecError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

struct SyntheticSpec {
    std::string arch = "qwen3moe";  // qwen3moe | glm4moe | qwen35moe | deepseek2 | glm-dsa | gpt-oss | minimax-m2 | minimax-m3 | kimi-k3 | deepseek4
    uint32_t layers = 0, embd = 0, vocab = 0;
    uint32_t experts = 0, used = 0, ffn = 0;  // routed experts per layer, chosen per token, their hidden width
    // GQA (qwen3moe, glm4moe)
    uint32_t heads = 0, kv_heads = 0, head_dim = 0;
    uint32_t rope_dims = 0;  // 0: the whole head (qwen3moe, gpt-oss) / half of it (glm4moe, minimax-m2/m3)
    uint32_t window = 128;   // gpt-oss: the sliding window of its even layers
    // MSA (minimax-m3's MoE layers): indexer key length (0: the head size), block size, blocks kept, local blocks
    uint32_t msa_dim = 0, msa_block = 16, msa_top_k = 4, msa_local = 1;
    // MLA (deepseek2, glm-dsa)
    uint32_t q_lora = 96, kv_lora = 64, qk_nope = 32, qk_rope = 16, v_head = 32;
    // DSA indexer (glm-dsa)
    uint32_t ix_heads = 8, ix_dim = 64, ix_top_k = 16;
    std::vector<bool> ix_full;  // empty: no indexer.types key (every layer full)
    // Gated DeltaNet (qwen35moe): state size S, q/k heads, v heads, conv taps; every full_interval-th layer is
    // gated full attention
    uint32_t ssm_state = 32, ssm_k_heads = 2, ssm_v_heads = 4, ssm_conv = 4, full_interval = 4;
    // kimi-k3: Kimi Delta Attention layers (--heads heads of --ssm-state, --ssm-conv taps; every
    // full_interval-th layer MLA), the KDA gate's lower bound (0: no key, kimi-linear's softplus decay), the
    // latent MoE's width (0: experts at --embd),
    // residual attention's block size (0: none), situ's betas.
    float kda_lower_bound = -5.f;
    uint32_t latent = 0, res_block = 2;
    float situ_beta = 1.f, situ_linear_beta = 2.f;
    // deepseek4: compression ratio per layer (empty: 0 for the first layer, then 4 and 128 alternating), the
    // hash-routed leading layers, the output LoRA's groups and rank, SwiGLU's clamp (0: none). Heads are
    // --heads of --head-dim (one key = value head), --q-lora, --rope-dims, --window, --indexer-*, --yarn-*.
    std::vector<uint32_t> compress_ratios;
    uint32_t hash_layers = 2, out_groups = 2, out_rank = 32;
    float swiglu_limit = 2.f;
    // MoE extras
    uint32_t dense_layers = 0, dense_ffn = 0, shared = 0, groups = 0, groups_used = 0;
    std::string gating;  // "", softmax, sigmoid: written as expert_gating_func when set
    bool probs_bias = false;
    // > 0: expert popularity per layer follows a Zipf law of this exponent (the hot experts differ per layer),
    // as real routers are skewed; 0: the random router's own, close to uniform.
    float router_skew = 0.f;
    // > 0: consecutive tokens route alike, more so the larger (synth/router_locality.h); 0: off.
    float router_locality = 0.f;
    bool norm_weights = false;
    float weights_scale = 0.f;
    uint32_t nextn = 0;  // NextN/MTP blocks appended after the trunk
    // deepseek4 with nextn: the block goes to this file of its own, as llama.cpp's converter writes it
    // (mtp-<name>.gguf: the block, its own output hyper-connection head, copies of the embeddings and head)
    std::string nextn_file;
    // RoPE
    float rope_base = 1e6f;
    float yarn_factor = 0.f;  // > 1: rope.scaling.type yarn with this factor
    uint32_t yarn_orig_ctx = 4096;
    float yarn_log_mul = 0.f;  // deepseek2's stored value (0.1 * mscale_all_dim)
    // Weights
    std::string type = "f32";  // a type the engine computes, or q4_k_m (q4_K with q6_K attn_v/ffn_down/output)
    bool tie_output = false;
    // Weights as random well-formed blocks instead of quantized random floats: for speed benchmarks of the types
    // whose quantizers need an importance matrix (IQ1_S ... IQ3_S); the model computes noise.
    bool random_blocks = false;
    bool fused_gate_up = false;   // routed experts' gate and up as one ffn_gate_up_exps tensor (newer converters)
    bool fused_qkv = false;       // full-attention layers' q, k and v as one attn_qkv tensor (newer converters)
    bool mla_kv_b = false;        // MLA as older converters (and ik_llama.cpp files made from them) store it: one attn_kv_b
    bool printable_head = false;  // only printable ASCII tokens get an output row (the demo's readable noise)
    std::string chat_template;    // replaces the vocabulary's tokenizer.chat_template when set
    uint64_t seed = 1;
};

using MetadataList = std::vector<std::pair<std::string, GgufValue>>;

// 256 byte tokens of GPT-2's byte-level alphabet plus the ChatML control tokens.
MetadataList builtin_vocab();
// The tokenizer.* keys of another GGUF file.
MetadataList vocab_from(const std::string& path);

// Throws SpecError naming the option when the spec is inconsistent; returns the weight bytes written.
uint64_t write_synthetic_model(const SyntheticSpec& spec, const MetadataList& vocab, const std::string& out);

}  // namespace moe::synth

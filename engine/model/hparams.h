// Hyperparameters of a MoE model, for every architecture the engine runs: one plain struct, read from GGUF
// metadata by an architecture description (model/arch/), consumed by the one forward pass (engine/forward).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernels/float_ops.h"

namespace moe {

// What a layer's attention block is.
enum class AttentionKind {
    Gqa,            // grouped-query attention; optional q/k norm, q/k/v biases, partial RoPE, output gate
    Mla,            // multi-head latent attention with absorbed k_b/v_b (deepseek2), optionally the DSA indexer
    GatedDeltaNet,  // linear attention with a recurrent state (qwen35moe)
    KimiDelta,      // Kimi Delta Attention (kimi-k3): the delta rule with a decay per key channel, q/k/v convs of their own
    Compressed,     // DeepSeek-V4: one K=V head over a sliding window plus compressed rows (every ratio tokens), sinks
};
constexpr size_t kAttentionKindCount = 5;

enum class FeedForwardKind {
    Dense,  // a gated FFN (dense leading layers)
    Moe,    // routed experts (streamed or in RAM), optional shared expert, latent MoE
};
constexpr size_t kFeedForwardKindCount = 2;

// Softmax and Sigmoid turn every router logit into a probability before the top-k; SoftmaxWeight (gpt-oss)
// picks the top-k logits and softmaxes only those into the weights.
// SqrtSoftplus (deepseek4): sqrt(softplus(logit)).
enum class Gating { Softmax, Sigmoid, SoftmaxWeight, SqrtSoftplus };

// The gated activation between a feed-forward's gate/up and its down projection: routed experts, shared
// expert and dense layers alike.
enum class FfnActivation {
    Swiglu,         // silu(gate) * up
    SwigluOai,      // gpt-oss, minimax-m3: gate clamped to <= 7, up to [-7, 7]; gate * sigmoid(1.702 gate) * (up + 1)
    Situ,           // kimi-k3: b tanh(gate / b) sigmoid(gate) * lb tanh(up / lb), b and lb from Hparams::situ_*
    SwigluClamped,  // deepseek4: gate clamped to <= limit, up to [-limit, limit], then silu(gate) * up (limit per layer)
};

struct GqaConfig {
    uint32_t n_head = 0, n_head_kv = 0;
    uint32_t head_dim = 0;       // key_length == value_length
    bool output_gate = false;    // qwen35moe: attn_q also yields a per-head gate, out *= sigmoid(gate)
    bool qk_norm_whole = false;  // minimax-m2: q and k RMS-normed across all their heads at once (norm weights per row)
    // Sliding-window layers (Layer::sliding) see only the last `window` positions, their own included (gpt-oss).
    uint32_t window = 0;
};

struct MlaConfig {
    uint32_t n_head = 0;
    uint32_t q_lora_rank = 0;   // 0: plain attn_q
    uint32_t kv_lora_rank = 0;  // latent width: the cache holds kv_lora + qk_rope halves per token
    uint32_t qk_nope = 0, qk_rope = 0, v_head = 0;
    float kq_scale = 0.f;  // mscale^2 / sqrt(qk_nope + qk_rope)
};

// The DSA lightning indexer (glm-dsa): per query, the top_k past positions the main attention may see.
struct IndexerConfig {
    uint32_t n_head = 0, head_dim = 0, top_k = 0;
    std::vector<bool> full;  // per trunk layer: a full indexer layer (else it reuses the last full layer's picks)
};

// MiniMax Sparse Attention (minimax-m3's MoE layers): an indexer with one query head per kv group and one key
// per position scores blocks of block_size positions (the best q.k within the block); each kv group's heads
// attend only to the positions of its top_k blocks, the query's own local_blocks always among them.
struct MsaConfig {
    uint32_t head_dim = 0;  // indexer query and key length
    uint32_t top_k = 0;     // blocks per query and kv group (0: no MSA)
    uint32_t block_size = 0;
    uint32_t local_blocks = 0;
};

// Both recurrent kinds (GatedDeltaNet and KimiDelta): their conv window and delta-rule state have this shape.
struct DeltaNetConfig {
    uint32_t conv_kernel = 0;  // K: taps of the causal conv over recent tokens
    uint32_t state = 0;        // S: head dim of q/k/v
    uint32_t n_k_heads = 0;    // Hk: q/k heads (ssm.group_count)
    uint32_t n_v_heads = 0;    // Hv: v heads (ssm.time_step_rank); v head j uses k head j % Hk
    // KimiDelta's per-channel log-decay: lower_bound * sigmoid(exp(A_log) * pre) when the file gives the bound
    // (kda.gate_lower_bound), else -exp(A_log) * softplus(pre) as kimi-linear.
    bool has_gate_lower_bound = false;
    float gate_lower_bound = 0.f;
    uint32_t conv_dim() const { return 2 * state * n_k_heads + state * n_v_heads; }
    // KimiDelta's log-decay of one channel from its pre-activation (f_b f_a x + dt_bias) and its head's
    // a = -exp(A_log), as the graph's ggml ops round it.
    float kda_log_decay(float pre, float a) const {
        if (has_gate_lower_bound) return ops::sigmoid((pre * a) * -1.0f) * gate_lower_bound;
        return ops::softplus(pre) * a;
    }
};

// DeepSeek-V4's compressed attention (AttentionKind::Compressed). Queries through a LoRA with a per-head RMS norm;
// one head serves as both key and value; RoPE on the last n_rot dims of each head and rotated back on the output;
// the output through a grouped LoRA. Every layer sees the last `window` raw rows; a layer with a compression ratio
// also sees one compressed row per `ratio` tokens (ratio 4: rows chosen by the lightning indexer; others: all).
struct CompressedAttnConfig {
    uint32_t n_head = 0, head_dim = 0, q_lora_rank = 0;
    uint32_t out_groups = 0, out_rank = 0;  // attn_output_a: per group of heads, head_dim*n_head/groups -> rank
    uint32_t window = 0;
    ops::RopeParams rope_plain;                       // ratio-0 layers: rope.freq_base, no YaRN
    ops::RopeParams rope_compressed;                  // compressed layers, their compressed rows and the indexer
    uint32_t ix_heads = 0, ix_dim = 0, ix_top_k = 0;  // the lightning indexer of ratio-4 layers
    // Ratio with the overlap (two blocks per compressed row, half the channels each), and the one with the indexer.
    static constexpr uint32_t kOverlapRatio = 4;
};

// DeepSeek-V4's hyper-connections: n copies of the residual stream; before each sub-block a learned mix of them is
// its input, after it the copies are remixed (a Sinkhorn-normalised n x n matrix) and each takes a share of its output.
struct HyperConfig {
    uint32_t n = 0;  // 0: one plain residual stream
    uint32_t sinkhorn_iters = 0;
    float eps = 0.f;
    uint32_t n_mix() const { return 2 * n + n * n; }  // pre, post, comb
};

struct MoeConfig {
    uint32_t n_expert = 0, n_expert_used = 0;
    uint32_t n_ff_exp = 0;    // routed expert hidden width
    uint32_t n_ff_shexp = 0;  // shared expert hidden width (0: none)
    Gating gating = Gating::Softmax;
    bool norm_weights = false;               // renormalise the selected weights to sum 1
    float weights_scale = 0.f;               // multiply the weights (0 or 1: no scaling)
    uint32_t n_group = 0, n_group_used = 0;  // group-limited routing (DeepSeek-V3) when n_group > 1
    bool shared_gate = false;                // qwen35moe: shared expert output times sigmoid(ffn_gate_inp_shexp . x)
    // kimi-k3's latent MoE: routed experts run at this width (routed_down before, RMSNorm + routed_up after);
    // the router and the shared expert read the full-width input. 0: experts at n_embd.
    uint32_t n_latent = 0;
    uint32_t n_hash_layers = 0;  // deepseek4: leading layers routed by token id (ffn_gate_tid2eid), weighted by the router
};

struct Hparams {
    std::string arch;
    uint32_t n_layer = 0;         // trunk layers (NextN/MTP blocks excluded)
    uint32_t n_layer_nextn = 0;   // appended NextN/MTP blocks: recognised, run only as drafts (Model::mtp)
    uint32_t n_nextn_loaded = 0;  // while loading: 1 when the first NextN block is loaded after the trunk's layers
    uint32_t n_embd = 0;
    uint32_t n_vocab = 0;
    uint32_t n_ctx_train = 0;
    float rms_eps = 1e-6f;
    ops::RopeParams rope;  // n_rot, style, base, YaRN
    // llama.cpp's graphs keep only the rows whose logits are wanted from the last layer's feed-forward on (most
    // architectures), or only after the final norm (qwen35moe): that changes what its last router sees.
    bool output_rows_after_norm = false;
    uint32_t n_layer_dense_lead = 0;  // leading layers with a dense FFN
    uint32_t n_ff_dense = 0;          // their hidden width
    GqaConfig gqa;
    MlaConfig mla;
    IndexerConfig indexer;
    MsaConfig msa;
    DeltaNetConfig ssm;
    MoeConfig moe;
    FfnActivation ffn_activation = FfnActivation::Swiglu;
    float situ_beta = 0.f, situ_linear_beta = 0.f;  // FfnActivation::Situ (linear beta <= 0: up passes unchanged)
    // kimi-k3's cross-layer residual attention: every res_block-th layer's raw input is banked and the stream
    // restarts from that layer's attention output; before each sub-block and the output norm the stream is
    // replaced by a softmax mixture of the banked inputs and itself. 0: plain residuals.
    uint32_t res_block = 0;
    CompressedAttnConfig csa;  // deepseek4
    HyperConfig hyper;
};

}  // namespace moe

// A loaded model: hyperparameters plus, per layer, the weights of its attention kind and feed-forward kind.
// Plain data. Resident tensors point into the model's ResidentArena; routed experts are reached only through
// its ExpertSource (in RAM or streamed from disk), so the forward pass never sees where they live.
//
// Shapes are ggml's: [ne0 = row length (inputs), ne1 = rows (outputs)]; a 3-D tensor [a, b, c] is viewed as
// rows of `a` elements, c groups of b rows.
#pragma once
#include <memory>
#include <vector>

#include "engine/model/hparams.h"
#include "engine/weights/weights.h"

namespace moe {

struct GqaWeights {
    Tensor wq;              // [n_embd, n_head*head_dim] (qwen35moe: n_head*2*head_dim, q and gate per head)
    Tensor wk, wv;          // [n_embd, n_head_kv*head_dim]
    Tensor bq, bk, bv;      // optional biases [rows] f32 (glm4moe)
    Tensor q_norm, k_norm;  // optional [head_dim] f32, RMS per head (GqaConfig::qk_norm_whole: [n_head*head_dim], [n_head_kv*head_dim])
    Tensor wo;              // [n_head*head_dim, n_embd]
    Tensor bo;              // optional [n_embd] f32 output bias (gpt-oss)
    Tensor sinks;           // optional [n_head] f32: a logit per head that joins the softmax without a value (gpt-oss)
    // MSA indexer (minimax-m3 MoE layers; Layer::msa): one query head per kv group, one key per position.
    Tensor ix_q;                  // [n_embd, n_head_kv*msa.head_dim]
    Tensor ix_k;                  // [n_embd, msa.head_dim]
    Tensor ix_q_norm, ix_k_norm;  // [msa.head_dim] f32, RMS per head
};

struct MlaWeights {
    Tensor wq_a;       // [n_embd, q_lora]          (absent when q_lora_rank is 0)
    Tensor q_a_norm;   // [q_lora] f32
    Tensor wq_b;       // [q_lora, n_head*(qk_nope+qk_rope)]
    Tensor wq;         // [n_embd, n_head*(qk_nope+qk_rope)]   (only when q_lora_rank is 0)
    Tensor wkv_a;      // [n_embd, kv_lora+qk_rope]  attn_kv_a_mqa
    Tensor kv_a_norm;  // [kv_lora] f32
    Tensor wk_b;       // [qk_nope, kv_lora, n_head]  head h: kv_lora rows of qk_nope
    Tensor wv_b;       // [kv_lora, v_head, n_head]   head h: v_head rows of kv_lora
    Tensor wo;         // [n_head*v_head, n_embd]
    Tensor gate;       // optional [n_embd, n_head*v_head] (kimi-k3): heads' output times sigmoid(gate . x) before wo
    // DSA lightning indexer (glm-dsa full indexer layers)
    Tensor ix_q_b;                  // [q_lora, ix_heads*ix_dim]
    Tensor ix_k;                    // [n_embd, ix_dim]
    Tensor ix_k_norm, ix_k_norm_b;  // [ix_dim] f32 LayerNorm weight and bias
    Tensor ix_proj;                 // [n_embd, ix_heads]  per-head weights of the scores
};

struct DeltaNetWeights {
    Tensor qkv;          // [n_embd, conv_dim]  rows: q (Hk*S), k (Hk*S), v (Hv*S)
    Tensor z;            // [n_embd, Hv*S]      attn_gate: the output gate
    Tensor conv1d;       // [K, conv_dim] f32   depthwise causal conv taps
    Tensor dt_bias;      // [Hv] f32
    Tensor a;            // [Hv] f32            -exp(A_log)
    Tensor alpha, beta;  // [n_embd, Hv]
    Tensor norm;         // [S] f32
    Tensor out;          // [Hv*S, n_embd]
};

// Kimi Delta Attention (kimi-k3): q, k, v each through their own projection and causal conv; the decay per
// key channel from a low-rank projection; a full-rank sigmoid output gate.
struct KdaWeights {
    Tensor wq, wk, wv;              // [n_embd, H*S]
    Tensor conv_q, conv_k, conv_v;  // [K, H*S] f32 (ssm_conv1d_q/k/v)
    Tensor f_a;                     // [n_embd, S]    decay, low rank
    Tensor f_b;                     // [S, H*S]
    Tensor dt_bias;                 // [H*S] f32
    Tensor a;                       // [H] f32        -exp(A_log)
    Tensor beta;                    // [n_embd, H]
    Tensor g;                       // [n_embd, H*S]  output gate
    Tensor norm;                    // [S] f32
    Tensor out;                     // [H*S, n_embd]
};

// DeepSeek-V4's compressed attention (AttentionKind::Compressed; shapes for head_dim D, H heads, q-LoRA Q).
struct CompressorWeights {  // per-token row and score, softmax-pooled over each block of `ratio` tokens
    Tensor kv, gate;        // [n_embd, coff*D]  (coff 2 with the overlap, else 1)
    Tensor ape;             // [coff*D, ratio]   score bias by position within the block
    Tensor norm;            // [D] f32
};
struct CompressedAttnWeights {
    Tensor wq_a;                // [n_embd, Q]
    Tensor q_a_norm;            // [Q] f32
    Tensor wq_b;                // [Q, H*D]
    Tensor wkv;                 // [n_embd, D]  the one key = value head
    Tensor kv_norm;             // [D] f32
    Tensor sinks;               // [H] f32
    Tensor wo_a;                // [H*D/G, G*rank]: group g's heads through rows g*rank..
    Tensor wo_b;                // [G*rank, n_embd]
    CompressorWeights comp;     // layers with a compression ratio
    CompressorWeights ix_comp;  // ratio-4 layers: the indexer's keys (D = ix_dim)
    Tensor ix_q_b;              // [Q, ix_heads*ix_dim]
    Tensor ix_proj;             // [n_embd, ix_heads]
};

// Hyper-connection mixer (deepseek4): fn . rms_norm(all streams) gives the pre/post/comb mixes.
struct HyperWeights {
    Tensor fn;     // [hc*n_embd, 2*hc + hc*hc] (the head's: [hc*n_embd, hc])
    Tensor base;   // [2*hc + hc*hc] f32
    Tensor scale;  // [3] f32 (the head's: [1])
};

struct DenseFfnWeights {
    Tensor gate, up;  // [n_embd, n_ff]
    Tensor down;      // [n_ff, n_embd]
};

struct MoeWeights {
    Tensor router;                // [n_embd, n_expert] ffn_gate_inp
    Tensor router_bias;           // optional [n_expert] f32: added to the router's logits (gpt-oss)
    Tensor probs_bias;            // optional [n_expert] f32 exp_probs_b: added to the selection scores only
    ExpertTensor gate, up, down;  // routed experts [n_embd, n_ff_exp, n_expert] / [n_ff_exp, n_embd, n_expert]
    // Optional per-expert biases (gpt-oss), resident f32: [n_ff_exp, n_expert] for gate and up, [n_embd, n_expert] for down.
    Tensor gate_bias, up_bias, down_bias;
    Tensor gate_sh, up_sh, down_sh;  // optional shared expert
    Tensor gate_inp_sh;              // optional [n_embd] f32 (qwen35moe): the shared expert's sigmoid gate
    // Latent MoE (MoeConfig::n_latent): experts see routed_down . x and their sum goes through routed_norm, routed_up.
    Tensor routed_down;  // [n_embd, n_latent]
    Tensor routed_norm;  // optional [n_latent] f32
    Tensor routed_up;    // [n_latent, n_embd]
    Tensor tid2eid;      // deepseek4 hash layers: [n_expert_used, n_vocab] i32, the experts of each token id
};

struct Layer {
    AttentionKind attn = AttentionKind::Gqa;
    bool moe = true;                       // else a dense FFN
    bool indexer_full = false;             // MLA with DSA: this layer computes top-k (else reuses the last full layer's)
    bool sliding = false;                  // GQA over the last GqaConfig::window positions only
    bool msa = false;                      // GQA through MiniMax Sparse Attention's block selection (Hparams::msa)
    Tensor attn_norm;                      // [n_embd] f32
    Tensor ffn_norm;                       // [n_embd] f32 (post_attention_norm in glm4moe/qwen35moe files)
    Tensor attn_res_score, ffn_res_score;  // [n_embd] f32: the residual mixture's score weights (Hparams::res_block)
    GqaWeights gqa;
    MlaWeights mla;
    DeltaNetWeights ssm;
    KdaWeights kda;
    CompressedAttnWeights csa;
    uint32_t compress_ratio = 0;                      // AttentionKind::Compressed: tokens per compressed row (0: window only)
    HyperWeights hc_attn, hc_ffn;                     // deepseek4: the mixers around the attention and the feed-forward
    float swiglu_limit = 0.f, swiglu_limit_sh = 0.f;  // FfnActivation::SwigluClamped: routed and shared limits
    DenseFfnWeights dense;
    MoeWeights experts;

    FeedForwardKind ffn() const { return moe ? FeedForwardKind::Moe : FeedForwardKind::Dense; }
};

// A NextN/MTP block's own tensors: its layer's input is eh_proj . [enorm(embedding of the next token);
// hnorm(the trunk's final hidden state)], its output goes through head_norm and the output head.
struct MtpInput {
    Tensor eh_proj;       // [2*n_embd, n_embd]
    Tensor enorm, hnorm;  // [n_embd] f32
    Tensor head_norm;     // [n_embd] f32 shared_head_norm
    Tensor embed, head;   // optional own embeddings / output head [n_embd, n_vocab] (else the trunk's)
};

struct Model {
    Hparams hp;
    Tensor tok_embd;          // [n_embd, n_vocab]
    Tensor output_norm;       // [n_embd]
    Tensor output;            // [n_embd, n_vocab]; tok_embd when the file ties them
    Tensor output_res_score;  // [n_embd] f32: the last residual mixture, before output_norm (Hparams::res_block)
    HyperWeights output_hc;   // deepseek4: the streams' weighted sum before output_norm
    std::vector<Layer> layers;
    std::unique_ptr<ResidentArena> resident;
    std::vector<std::unique_ptr<uint8_t[]>> derived;  // tensors computed at load (ArchLoader::derived)
    std::unique_ptr<ExpertSource> experts;
    // The file was made by ik_llama.cpp (it holds one of its types): the forward pass follows ik's arithmetic
    // where it differs from llama.cpp's (its flash attention, routing, expert sum, fused norms; its Q8_0 and F32
    // matmul orders), so the file gives the tokens ik gives.
    bool ik_numerics = false;

    // The NextN/MTP block as a one-layer model (LoadOptions::mtp, glm4moe / deepseek2 / glm-dsa): its
    // embeddings and output are its own or the trunk's, `nextn` its input, `experts` its routed experts in RAM.
    std::unique_ptr<Model> mtp;
    MtpInput nextn;

    bool has_indexer() const { return hp.indexer.top_k > 0; }
};

}  // namespace moe

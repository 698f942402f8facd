// DeepSeek-V4's compressed attention in the fast forward: the projections batched over the chunk's rows, then
// the per-token step (compressed_attention.h, shared with the reference) in order, since each token's window,
// compressor and compressed rows are the next token's context, then the output LoRA batched again.
#include "engine/forward/compressed_attention.h"
#include "engine/forward/runner.h"
#include "engine/kernels/attention.h"

namespace moe {

void Runner::attention_compressed(uint32_t l, int n) {
    const Hparams& hp = m_.hp;
    const CompressedAttnConfig& c = hp.csa;
    const Layer& L = m_.layers[l];
    const CompressedAttnWeights& w = L.csa;
    const int E = static_cast<int>(hp.n_embd), D = static_cast<int>(c.head_dim), H = static_cast<int>(c.n_head), Q = static_cast<int>(c.q_lora_rank);
    const int HD = H * D, X = static_cast<int>(c.ix_dim), IH = static_cast<int>(c.ix_heads);
    const uint32_t ratio = L.compress_ratio;
    const int CW = (ratio == CompressedAttnConfig::kOverlapRatio ? 2 : 1) * D;  // compressor row width
    const int CS = 4 * D;                                                       // csa_comp_ row: kv | score (widest)
    const int IS = 4 * X + IH * X + IH;                                         // csa_ix_ row: kv | score | q | weights

    // x-round: every projection of the normed input in one pass over the weights' rows
    if (ratio == 0) {
        matmul_group({{&w.wq_a, qa_.data(), Q}, {&w.wkv, kva_.data(), D}}, xn_.data(), E, n);
    } else if (ratio != CompressedAttnConfig::kOverlapRatio) {
        matmul_group(
            {{&w.wq_a, qa_.data(), Q}, {&w.wkv, kva_.data(), D}, {&w.comp.kv, csa_comp_.data(), CS}, {&w.comp.gate, csa_comp_.data() + CW, CS}},
            xn_.data(), E, n);
    } else {
        matmul_group({{&w.wq_a, qa_.data(), Q},
                      {&w.wkv, kva_.data(), D},
                      {&w.comp.kv, csa_comp_.data(), CS},
                      {&w.comp.gate, csa_comp_.data() + CW, CS},
                      {&w.ix_comp.kv, csa_ix_.data(), IS},
                      {&w.ix_comp.gate, csa_ix_.data() + 2 * X, IS},
                      {&w.ix_proj, csa_ix_.data() + 4 * X + IH * X, IS}},
                     xn_.data(), E, n);
    }
    // qr-round: the normed q-LoRA latent into the heads' queries (and the indexer's)
    for (int t = 0; t < n; ++t) fops_.norm(&qa_[t * Q], w.q_a_norm.f32(), &qa_[t * Q], Q, hp.rms_eps);
    if (ratio == CompressedAttnConfig::kOverlapRatio)
        matmul_group({{&w.wq_b, q_.data(), HD}, {&w.ix_q_b, csa_ix_.data() + 4 * X, IS}}, qa_.data(), Q, n);
    else matmul(w.wq_b, qa_.data(), Q, n, q_.data(), HD);

    const ParallelFor over_heads = [this](int64_t count, const std::function<void(int64_t, int64_t)>& fn) { pool_.parallel_for(count, fn); };
    const AttendKernels kernels{attend_, attend_tiled_, fops_.ik ? nullptr : kernels::attention_chunk_kernel(opt_.flavor)};
    for (int t = 0; t < n; ++t) {
        CompressedAttnToken tok;
        tok.pos = n_past_ + t;
        tok.q = &q_[static_cast<size_t>(t) * HD];
        tok.kv = &kva_[static_cast<size_t>(t) * D];
        if (ratio) {
            tok.comp_kv = &csa_comp_[static_cast<size_t>(t) * CS];
            tok.comp_score = &csa_comp_[static_cast<size_t>(t) * CS + CW];
        }
        if (ratio == CompressedAttnConfig::kOverlapRatio) {
            float* row = &csa_ix_[static_cast<size_t>(t) * IS];
            tok.ix_kv = row;
            tok.ix_score = row + 2 * X;
            tok.ix_q = row + 4 * X;
            tok.ix_w = row + 4 * X + IH * X;
        }
        compressed_attention_token(m_, l, fops_, *cache_, tok, kernel_rows(n), opt_.n_threads, &att_[static_cast<size_t>(t) * HD], csa_scratch_,
                                   over_heads, &kernels);
    }

    // the output LoRA: each group of heads through its rows of attn_output_a, then attn_output_b
    const int G = static_cast<int>(c.out_groups), R = static_cast<int>(c.out_rank);
    matmul_heads(w.wo_a, G, R, att_.data(), HD / G, HD, n, csa_lora_.data(), R, G * R);
    matmul(w.wo_b, csa_lora_.data(), G * R, n, tmp_.data(), E);
}

}  // namespace moe

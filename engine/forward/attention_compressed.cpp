// DeepSeek-V4's compressed attention in the fast forward: the projections batched over the chunk's rows, then
// the per-token step (compressed_attention.h, shared with the reference) in order, since each token's window,
// compressor and compressed rows are the next token's context, then the output LoRA batched again.
#include "engine/forward/layer_unit.h"
#include "engine/forward/compressed_attention.h"
#include "engine/forward/reference_ops.h"
#include "engine/forward/runner.h"
#include "engine/kernels/attention.h"

namespace moe {
namespace {

class CompressedAttention final : public AttentionUnit {
public:
    explicit CompressedAttention(const Model&) {}
    template <class Size>
    static void scratch(const Model& m, const RunnerOptions& opt, Size&& size) {
        const CompressedAttnConfig& c = m.hp.csa;
        const size_t B = batch_rows(opt);
        const size_t hd = size_t{c.n_head} * c.head_dim;
        size(&CompressedAttention::q_, B * hd);
        size(&CompressedAttention::att_, B * hd);
        size(&CompressedAttention::qa_, B * c.q_lora_rank);
        size(&CompressedAttention::kva_, B * c.head_dim);
        size(&CompressedAttention::comp_, B * 4 * c.head_dim);
        size(&CompressedAttention::ix_, B * (4 * c.ix_dim + c.ix_heads * c.ix_dim + c.ix_heads));
        size(&CompressedAttention::lora_, B * c.out_groups * c.out_rank);
    }
    void forward(LayerContext& cx, uint32_t l, int n) override;

private:
    std::vector<float> q_, att_, qa_, kva_;  // heads' queries and outputs, the q-LoRA latent, the key = value row
    // compressor rows (kv | score), the indexer's (kv | score | queries | head weights), the output LoRA's middle
    std::vector<float> comp_, ix_, lora_;
    CompressedAttnScratch step_;  // the per-token step's
};

void CompressedAttention::forward(LayerContext& cx, uint32_t l, int n) {
    const Model& m = cx.model();
    const Hparams& hp = m.hp;
    const CompressedAttnConfig& c = hp.csa;
    const Layer& L = m.layers[l];
    const CompressedAttnWeights& w = L.csa;
    const int E = static_cast<int>(hp.n_embd), D = static_cast<int>(c.head_dim), H = static_cast<int>(c.n_head), Q = static_cast<int>(c.q_lora_rank);
    const int HD = H * D, X = static_cast<int>(c.ix_dim), IH = static_cast<int>(c.ix_heads);
    const uint32_t ratio = L.compress_ratio;
    const int CW = (ratio == CompressedAttnConfig::kOverlapRatio ? 2 : 1) * D;  // compressor row width
    const int CS = 4 * D;                                                       // comp_ row: kv | score (widest)
    const int IS = 4 * X + IH * X + IH;                                         // ix_ row: kv | score | q | weights

    // x-round: every projection of the normed input in one pass over the weights' rows
    if (ratio == 0) {
        cx.matmul_group({{&w.wq_a, qa_.data(), Q}, {&w.wkv, kva_.data(), D}}, cx.xn(), E, n);
    } else if (ratio != CompressedAttnConfig::kOverlapRatio) {
        cx.matmul_group({{&w.wq_a, qa_.data(), Q}, {&w.wkv, kva_.data(), D}, {&w.comp.kv, comp_.data(), CS}, {&w.comp.gate, comp_.data() + CW, CS}},
                        cx.xn(), E, n);
    } else {
        cx.matmul_group({{&w.wq_a, qa_.data(), Q},
                         {&w.wkv, kva_.data(), D},
                         {&w.comp.kv, comp_.data(), CS},
                         {&w.comp.gate, comp_.data() + CW, CS},
                         {&w.ix_comp.kv, ix_.data(), IS},
                         {&w.ix_comp.gate, ix_.data() + 2 * X, IS},
                         {&w.ix_proj, ix_.data() + 4 * X + IH * X, IS}},
                        cx.xn(), E, n);
    }
    // qr-round: the normed q-LoRA latent into the heads' queries (and the indexer's)
    for (int t = 0; t < n; ++t) cx.fops().norm(&qa_[t * Q], w.q_a_norm.f32(), &qa_[t * Q], Q, hp.rms_eps);
    if (ratio == CompressedAttnConfig::kOverlapRatio)
        cx.matmul_group({{&w.wq_b, q_.data(), HD}, {&w.ix_q_b, ix_.data() + 4 * X, IS}}, qa_.data(), Q, n);
    else cx.matmul(w.wq_b, qa_.data(), Q, n, q_.data(), HD);

    const ParallelFor over_heads = [&cx](int64_t count, const std::function<void(int64_t, int64_t)>& fn) { cx.pool().parallel_for(count, fn); };
    const AttendKernels kernels{cx.attend_one_row(), cx.attend_tiled(), cx.fops().ik ? nullptr : kernels::attention_chunk_kernel(cx.options().flavor),
                                cx.attend_typed(), &cx.kv_kernels()};
    for (int t = 0; t < n; ++t) {
        CompressedAttnToken tok;
        tok.pos = cx.n_past() + t;
        tok.q = &q_[static_cast<size_t>(t) * HD];
        tok.kv = &kva_[static_cast<size_t>(t) * D];
        if (ratio) {
            tok.comp_kv = &comp_[static_cast<size_t>(t) * CS];
            tok.comp_score = &comp_[static_cast<size_t>(t) * CS + CW];
        }
        if (ratio == CompressedAttnConfig::kOverlapRatio) {
            float* row = &ix_[static_cast<size_t>(t) * IS];
            tok.ix_kv = row;
            tok.ix_score = row + 2 * X;
            tok.ix_q = row + 4 * X;
            tok.ix_w = row + 4 * X + IH * X;
        }
        compressed_attention_token(m, l, cx.fops(), cx.cache(), tok, cx.kernel_rows(n), cx.options().n_threads, &att_[static_cast<size_t>(t) * HD],
                                   step_, over_heads, &kernels);
    }

    // the output LoRA: each group of heads through its rows of attn_output_a, then attn_output_b
    const int G = static_cast<int>(c.out_groups), R = static_cast<int>(c.out_rank);
    cx.matmul_heads(w.wo_a, G, R, att_.data(), HD / G, HD, n, lora_.data(), R, G * R);
    cx.matmul(w.wo_b, lora_.data(), G * R, n, cx.out(), E);
}

using ref::Vec;

// DeepSeek-V4's compressed attention: the projections, the per-token step (compressed_attention.h), then the
// output LoRA per group of heads.
void reference_step(const ref::Context& c, uint32_t l, const Vec& xn, Vec& out) {
    const Hparams& hp = c.m.hp;
    const CompressedAttnConfig& cc = hp.csa;
    const Layer& L = c.m.layers[l];
    const CompressedAttnWeights& w = L.csa;
    const int D = static_cast<int>(cc.head_dim), HD = static_cast<int>(cc.n_head) * D, Q = static_cast<int>(cc.q_lora_rank);
    const int X = static_cast<int>(cc.ix_dim), IH = static_cast<int>(cc.ix_heads);
    const int G = static_cast<int>(cc.out_groups), R = static_cast<int>(cc.out_rank);
    const int CW = (L.compress_ratio == CompressedAttnConfig::kOverlapRatio ? 2 : 1) * D;
    Vec qr(Q), q(HD), kv(D), comp_kv(CW), comp_score(CW), ix_kv(2 * X), ix_score(2 * X), ix_q(IH * X), ix_w(IH), att(HD), lora(G * R);
    dense(c, w.wq_a, xn.data(), qr.data());
    c.fops.norm(qr.data(), w.q_a_norm.f32(), qr.data(), Q, hp.rms_eps);
    dense(c, w.wq_b, qr.data(), q.data());
    dense(c, w.wkv, xn.data(), kv.data());
    CompressedAttnToken t;
    t.pos = c.pos;
    t.q = q.data();
    t.kv = kv.data();
    if (L.compress_ratio) {
        dense(c, w.comp.kv, xn.data(), comp_kv.data());
        dense(c, w.comp.gate, xn.data(), comp_score.data());
        t.comp_kv = comp_kv.data();
        t.comp_score = comp_score.data();
    }
    if (L.compress_ratio == CompressedAttnConfig::kOverlapRatio) {
        dense(c, w.ix_comp.kv, xn.data(), ix_kv.data());
        dense(c, w.ix_comp.gate, xn.data(), ix_score.data());
        dense(c, w.ix_proj, xn.data(), ix_w.data());
        dense(c, w.ix_q_b, qr.data(), ix_q.data());
        t.ix_kv = ix_kv.data();
        t.ix_score = ix_score.data();
        t.ix_q = ix_q.data();
        t.ix_w = ix_w.data();
    }
    CompressedAttnScratch scratch;
    compressed_attention_token(c.m, l, c.fops, c.st.cache, t, c.batch.n_tok, c.batch.n_threads, att.data(), scratch);
    // each group of heads through its R rows of attn_output_a (a batched matmul over a permuted view)
    for (int g = 0; g < G; ++g)
        matvec(c, w.wo_a.row(static_cast<int64_t>(g) * R), w.wo_a.type, w.wo_a.row_bytes, R, HD / G, &att[g * (HD / G)], &lora[g * R], c.batch.n_tok,
               c.batch.index, true);
    dense(c, w.wo_b, lora.data(), out.data());
}

// The per-token step's buffers grow with the rows a token attends to (its window and the compressed rows, at
// most one per 4 positions) and the indexer's scores over them: counted at n_ctx.
uint64_t scratch_bytes(const Model& m, const RunnerOptions& opt) {
    const CompressedAttnConfig& c = m.hp.csa;
    const uint64_t compressed = static_cast<uint64_t>(opt.n_ctx) / 4 + 1, rows = c.window + compressed;
    const uint64_t step = rows * c.head_dim * 2                                           // kv16
                          + compressed * (uint64_t{c.ix_dim} * 4 + 4 + 4 + 4)             // keys, scores, picked, view index
                          + uint64_t{c.n_head} * (rows * 4 + uint64_t{c.head_dim} * 16);  // per head: scores, accumulators
    return unit_scratch_bytes<CompressedAttention>(m, opt) + step + 256 * 4;
}

}  // namespace

const AttentionKindInfo& compressed_attention() {
    static const AttentionKindInfo info{AttentionKind::Compressed, "compressed", scratch_bytes, make_unit<CompressedAttention>, reference_step};
    return info;
}

}  // namespace moe

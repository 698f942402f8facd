// Grouped-query attention (qwen3moe, glm4moe, qwen35moe's full layers, gpt-oss, minimax-m2/m3): q/k/v
// projections (+ biases), q/k RMSNorm per head (or across all heads: minimax-m2) where the model has it, RoPE on
// the first n_rot dims, the K/V cache (fp16 unless asked otherwise), flash attention (sliding-window layers over
// their last GqaConfig::window positions; gpt-oss's sinks add a logit per head to the softmax; MSA layers over
// the blocks their indexer picks, msa.h), an output gate where attn_q yields one (each head's q then its gate:
// out *= sigmoid(gate)), output projection (+ bias). A quantized cache is rotated as llama.cpp's build_attn does
// (attn_rot_k / attn_rot_v): q and k by a Walsh-Hadamard block before k is stored, v by a 64-block, the attention
// output by it again (undoing it).
#include <cmath>

#include "engine/forward/layer_unit.h"
#include "engine/forward/msa.h"
#include "engine/forward/reference_ops.h"
#include "engine/forward/runner.h"
#include "engine/kernels/kv_cache_types.h"

namespace moe {
namespace {

class GqaAttention final : public AttentionUnit {
public:
    explicit GqaAttention(const Model&) {}
    template <class Size>
    static void scratch(const Model& m, const RunnerOptions& opt, Size&& size) {
        const Hparams& hp = m.hp;
        const GqaConfig& g = hp.gqa;
        const size_t B = batch_rows(opt);
        const size_t qd = size_t{g.n_head} * g.head_dim, kvd = size_t{g.n_head_kv} * g.head_dim;
        size(&GqaAttention::q_, B * qd * (g.output_gate ? 2 : 1));
        size(&GqaAttention::att_, B * qd);
        size(&GqaAttention::k_, B * kvd);
        size(&GqaAttention::v_, B * kvd);
        if (const MsaConfig& msa = hp.msa; msa.top_k) {
            size(&GqaAttention::ixq_, B * g.n_head_kv * msa.head_dim);
            size(&GqaAttention::ixk_, B * msa.head_dim);
            size(&GqaAttention::key_sel_, B * g.n_head_kv * msa.top_k);
            size(&GqaAttention::key_sel_count_, B * g.n_head_kv);
            size(&GqaAttention::ixkf_, static_cast<size_t>(opt.n_ctx) * msa.head_dim);
        }
    }
    void forward(LayerContext& cx, uint32_t l, int n) override;
    bool splits_segments() const override { return true; }

private:
    void msa_select(LayerContext& cx, uint32_t l, int row0, int n);  // MSA indexer of a segment's rows: key_sel_ per kv head

    std::vector<float> q_, k_, v_, att_;        // projections (q: each head's query, then its gate where there is one), heads' output
    std::vector<float> ixq_, ixk_, ixkf_;       // MSA indexer: queries, new keys, the cached keys in f32
    std::vector<int> key_sel_, key_sel_count_;  // [n][kv heads][top_k] blocks each row may attend to, and how many
};

void GqaAttention::forward(LayerContext& cx, uint32_t l, int n) {
    const Model& m = cx.model();
    const Hparams& hp = m.hp;
    const GqaConfig& g = hp.gqa;
    const GqaWeights& w = m.layers[l].gqa;
    const int E = static_cast<int>(hp.n_embd), hd = static_cast<int>(g.head_dim);
    const int nh = static_cast<int>(g.n_head), nkv = static_cast<int>(g.n_head_kv);
    const int Qd = nh * hd, kv_dim = nkv * hd;
    const int q_head = g.output_gate ? 2 * hd : hd, q_row = nh * q_head;  // strides in q_

    cx.matmul_group({{&w.wq, q_.data(), q_row}, {&w.wk, k_.data(), kv_dim}, {&w.wv, v_.data(), kv_dim}}, cx.xn(), E, n);
    // Biases are separate adds in llama.cpp's graph (build_qkv), after the matmul.
    auto add_bias = [n](float* y, const Tensor& b, int width) {
        if (!b.present()) return;
        for (int t = 0; t < n; ++t)
            for (int i = 0; i < width; ++i) y[t * width + i] += b.f32()[i];
    };
    add_bias(q_.data(), w.bq, q_row);
    add_bias(k_.data(), w.bk, kv_dim);
    add_bias(v_.data(), w.bv, kv_dim);
    const bool msa = m.layers[l].msa;
    const int ixd = static_cast<int>(hp.msa.head_dim);
    // MSA's indexer reads the same normed input: one query head per kv head and one key per token.
    if (msa) cx.matmul_group({{&w.ix_q, ixq_.data(), nkv * ixd}, {&w.ix_k, ixk_.data(), ixd}}, cx.xn(), E, n);

    const int rot_k = kernels::kv_rotation_k(cx.options().cache_type_k, hd), rot_v = kernels::kv_rotation_v(cx.options().cache_type_v, hd);
    // Projections above ran for every row at once (the weights read once for all sequences of a decode
    // batch); each sequence's rows now meet its own cache at its own positions.
    const int keep = cx.sequence();
    for (const Segment& sg : cx.segments()) {
        cx.select_sequence(sg.seq);
        const int r0 = sg.row0, ns = sg.n;
        cx.pool().parallel_for(ns, [&](int64_t t0, int64_t t1) {
            std::vector<float> cs;
            for (int64_t ts = t0; ts < t1; ++ts) {
                const int64_t t = r0 + ts;
                const int pos = cx.n_past() + static_cast<int>(ts);
                ops::rope_cache(hp.rope, pos, cs);
                if (g.qk_norm_whole) {  // one RMS over the token's whole q row and whole k row
                    cx.fops().norm(&q_[t * q_row], w.q_norm.f32(), &q_[t * q_row], Qd, hp.rms_eps);
                    cx.fops().norm(&k_[t * kv_dim], w.k_norm.f32(), &k_[t * kv_dim], kv_dim, hp.rms_eps);
                }
                for (int h = 0; h < nh; ++h) {
                    float* qh = &q_[t * q_row + h * q_head];
                    if (w.q_norm.present() && !g.qk_norm_whole) cx.fops().norm(qh, w.q_norm.f32(), qh, hd, hp.rms_eps);
                    ops::rope(qh, hp.rope, cs);
                    for (int i = 0; rot_k && i < hd; i += rot_k) ops::hadamard(qh + i, rot_k);
                }
                for (int h = 0; h < nkv; ++h) {
                    float* kh = &k_[t * kv_dim + h * hd];
                    if (w.k_norm.present() && !g.qk_norm_whole) cx.fops().norm(kh, w.k_norm.f32(), kh, hd, hp.rms_eps);
                    ops::rope(kh, hp.rope, cs);
                    for (int i = 0; rot_k && i < hd; i += rot_k) ops::hadamard(kh + i, rot_k);
                }
                for (int i = 0; rot_v && i < kv_dim; i += rot_v) ops::hadamard(&v_[t * kv_dim + i], rot_v);
                cx.cache().store_k(l, pos, &k_[t * kv_dim]);
                cx.cache().store_v(l, pos, &v_[t * kv_dim]);
                if (msa) {
                    msa::prepare(hp, w, cx.fops(), cs, &ixq_[t * nkv * ixd], &ixk_[t * ixd]);
                    cx.cache().store_ix(l, pos, &ixk_[t * ixd]);
                }
            }
        });
        if (msa) msa_select(cx, l, r0, ns);
        // A sequence's single row (or rows computed as such) is llama.cpp's MSA decode, which gathers the blocks' rows;
        // longer runs mask.
        const KeySelection blocks{
            key_sel_.data(),        key_sel_count_.data(), static_cast<int>(hp.msa.top_k), nkv, static_cast<int>(hp.msa.block_size),
            cx.kernel_rows(ns) == 1};
        // Causal attention: token t sees positions 0..n_past+t; query head h reads kv head h / (nh/nkv).
        cx.attention_heads(cx.cache().view(l, hd, hd, &cx.kv_kernels()), q_.data() + static_cast<size_t>(r0) * q_row, q_row, q_head, nh, nkv, ns,
                           1.0f / std::sqrt(static_cast<float>(hd)), att_.data() + static_cast<size_t>(r0) * Qd, Qd, hd, msa ? &blocks : nullptr,
                           m.layers[l].sliding ? static_cast<int>(g.window) : 0, w.sinks.present() ? w.sinks.f32() : nullptr, cx.cache().ring[l]);
    }
    cx.select_sequence(keep);
    if (rot_v)
        for (int t = 0; t < n; ++t)
            for (int i = 0; i < Qd; i += rot_v) ops::hadamard(&att_[t * Qd + i], rot_v);
    if (g.output_gate)
        for (int t = 0; t < n; ++t)
            for (int h = 0; h < nh; ++h)
                for (int i = 0; i < hd; ++i) att_[t * Qd + h * hd + i] *= ops::sigmoid(q_[t * q_row + h * q_head + hd + i]);
    cx.matmul(w.wo, att_.data(), Qd, n, cx.out(), E);
    add_bias(cx.out(), w.bo, E);
}

// Rows [row0, row0 + n) of the selected sequence, their indexer keys cached: each row's blocks per kv head.
void GqaAttention::msa_select(LayerContext& cx, uint32_t l, int row0, int n) {
    const Model& m = cx.model();
    const MsaConfig& c = m.hp.msa;
    const int nkv = static_cast<int>(m.hp.gqa.n_head_kv), D = static_cast<int>(c.head_dim), used = cx.n_past() + n;
    cx.cache().load_ix(l, used, ixkf_.data());
    cx.pool().parallel_for(static_cast<int64_t>(n) * nkv, [&](int64_t i0, int64_t i1) {
        std::vector<float> scores;
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t t = i / nkv;
            key_sel_count_[i] = msa::select_blocks(c, cx.fops(), &ixq_[static_cast<size_t>(row0 * nkv + i) * D], ixkf_.data(),
                                                   cx.n_past() + static_cast<int>(t), scores, &key_sel_[static_cast<size_t>(i) * c.top_k]);
        }
    });
}

using ref::Vec;

// MSA's indexer for this token (msa.h): its key cached, then per kv head the blocks it picks.
std::vector<std::vector<int>> msa_blocks(const ref::Context& c, uint32_t l, const Vec& xn, const std::vector<float>& cs) {
    const Hparams& hp = c.m.hp;
    const GqaWeights& w = c.m.layers[l].gqa;
    const int D = static_cast<int>(hp.msa.head_dim), nkv = static_cast<int>(hp.gqa.n_head_kv);
    Vec q(static_cast<size_t>(nkv) * D), k(D), keys(static_cast<size_t>(c.pos + 1) * D), scores;
    dense(c, w.ix_q, xn.data(), q.data());
    dense(c, w.ix_k, xn.data(), k.data());
    msa::prepare(hp, w, c.fops, cs, q.data(), k.data());
    c.st.cache.store_ix(l, c.pos, k.data());
    c.st.cache.load_ix(l, c.pos + 1, keys.data());
    std::vector<std::vector<int>> blocks(nkv, std::vector<int>(hp.msa.top_k));
    for (int g = 0; g < nkv; ++g)
        blocks[g].resize(msa::select_blocks(hp.msa, c.fops, &q[static_cast<size_t>(g) * D], keys.data(), c.pos, scores, blocks[g].data()));
    return blocks;
}

// GQA: projections (+ biases), per-head q/k norm, RoPE, the K/V cache, attention per head (a sliding window,
// sinks and MSA's blocks where the model has them), output gate (qwen35moe: attn_q gives each head's query then its gate), output
// projection (+ bias).
void reference_step(const ref::Context& c, uint32_t l, const Vec& xn, Vec& out) {
    const Hparams& hp = c.m.hp;
    const GqaWeights& w = c.m.layers[l].gqa;
    const int hd = static_cast<int>(hp.gqa.head_dim), nh = static_cast<int>(hp.gqa.n_head), nkv = static_cast<int>(hp.gqa.n_head_kv);
    const int kv_dim = nkv * hd, qh = hp.gqa.output_gate ? 2 * hd : hd;  // q's per-head stride
    Vec qg(nh * qh), k(kv_dim), v(kv_dim), att(nh * hd), cs;
    dense(c, w.wq, xn.data(), qg.data());
    dense(c, w.wk, xn.data(), k.data());
    dense(c, w.wv, xn.data(), v.data());
    if (w.bq.present())
        for (int i = 0; i < nh * qh; ++i) qg[i] += w.bq.f32()[i];
    if (w.bk.present())
        for (int i = 0; i < kv_dim; ++i) k[i] += w.bk.f32()[i];
    if (w.bv.present())
        for (int i = 0; i < kv_dim; ++i) v[i] += w.bv.f32()[i];
    ops::rope_cache(hp.rope, c.pos, cs);
    const bool whole = hp.gqa.qk_norm_whole;  // minimax-m2: one RMS over all heads of q, and of k
    if (whole) {
        c.fops.norm(qg.data(), w.q_norm.f32(), qg.data(), nh * hd, hp.rms_eps);
        c.fops.norm(k.data(), w.k_norm.f32(), k.data(), kv_dim, hp.rms_eps);
    }
    for (int h = 0; h < nh; ++h) {
        if (w.q_norm.present() && !whole) c.fops.norm(&qg[h * qh], w.q_norm.f32(), &qg[h * qh], hd, hp.rms_eps);
        ops::rope(&qg[h * qh], hp.rope, cs);
    }
    for (int h = 0; h < nkv; ++h) {
        if (w.k_norm.present() && !whole) c.fops.norm(&k[h * hd], w.k_norm.f32(), &k[h * hd], hd, hp.rms_eps);
        ops::rope(&k[h * hd], hp.rope, cs);
    }
    // A quantized cache: q and k rotated by a Walsh-Hadamard block, v by a 64-block (undone on the output).
    const int rot_k = kernels::kv_rotation_k(c.st.cache.types.k, hd), rot_v = kernels::kv_rotation_v(c.st.cache.types.v, hd);
    for (int h = 0; rot_k && h < nh; ++h)
        for (int i = 0; i < hd; i += rot_k) ops::hadamard(&qg[h * qh + i], rot_k);
    for (int i = 0; rot_k && i < kv_dim; i += rot_k) ops::hadamard(&k[i], rot_k);
    for (int i = 0; rot_v && i < kv_dim; i += rot_v) ops::hadamard(&v[i], rot_v);
    c.st.cache.store_k(l, c.pos, k.data());
    c.st.cache.store_v(l, c.pos, v.data());
    const std::vector<std::vector<int>> blocks = c.m.layers[l].msa ? msa_blocks(c, l, xn, cs) : std::vector<std::vector<int>>{};
    std::vector<uint8_t> in_blocks, gathered;
    // Query head h reads kv head h / (nh / nkv).
    const ops::KvView layer_view = c.st.cache.view(l, hd, hd, &kernels::reference_table(c.st.flavor));
    // A sliding-window layer masks positions more than window - 1 before this one (llama.cpp's is_masked_swa).
    std::vector<uint8_t> in_window;
    if (c.m.layers[l].sliding)
        for (int p = 0; p <= c.pos; ++p) in_window.push_back(c.pos - p < static_cast<int>(hp.gqa.window) ? 1 : 0);
    for (int h = 0; h < nh; ++h) {
        ops::KvView kv = kv_view_head(layer_view, h / (nh / nkv));
        kv.n_kv = c.pos + 1;
        if (!in_window.empty()) kv.visible = in_window.data();
        if (!blocks.empty()) {
            // MSA: one token alone gathers its blocks' rows in the picked order (llama.cpp's decode); in a batch
            // the other blocks are masked.
            const std::vector<int>& b = blocks[h / (nh / nkv)];
            if (c.batch.n_tok == 1) {
                kv = gather_positions(kv, b.data(), static_cast<int>(b.size()), static_cast<int>(hp.msa.block_size), gathered);
            } else {
                in_blocks.resize(kv.n_kv);
                msa::mark_visible(hp.msa, b.data(), static_cast<int>(b.size()), kv.n_kv, in_blocks.data());
                kv.visible = in_blocks.data();
            }
        }
        if (w.sinks.present()) kv.sinks = w.sinks.f32() + h;
        attend(c, kv, &qg[h * qh], 1.0f / std::sqrt(static_cast<float>(hd)), &att[h * hd], blocks.empty());
        for (int i = 0; rot_v && i < hd; i += rot_v) ops::hadamard(&att[h * hd + i], rot_v);
        if (hp.gqa.output_gate)
            for (int i = 0; i < hd; ++i) att[h * hd + i] *= ops::sigmoid(qg[h * qh + hd + i]);
    }
    dense(c, w.wo, att.data(), out.data());
    if (w.bo.present())
        for (int i = 0; i < static_cast<int>(hp.n_embd); ++i) out[i] += w.bo.f32()[i];
}

}  // namespace

const AttentionKindInfo& gqa_attention() {
    static const AttentionKindInfo info{AttentionKind::Gqa, "gqa", unit_scratch_bytes<GqaAttention>, make_unit<GqaAttention>, reference_step};
    return info;
}

}  // namespace moe

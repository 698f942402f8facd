// Grouped-query attention (qwen3moe, glm4moe, qwen35moe's full layers, gpt-oss, minimax-m2/m3): q/k/v
// projections (+ biases), q/k RMSNorm per head (or across all heads: minimax-m2) where the model has it, RoPE on
// the first n_rot dims, the K/V cache (fp16 unless asked otherwise), flash attention (sliding-window layers over
// their last GqaConfig::window positions; gpt-oss's sinks add a logit per head to the softmax; MSA layers over
// the blocks their indexer picks, msa.h), an output gate where attn_q yields one (each head's q then its gate:
// out *= sigmoid(gate)), output projection (+ bias). A quantized cache is rotated as llama.cpp's build_attn does
// (attn_rot_k / attn_rot_v): q and k by a Walsh-Hadamard block before k is stored, v by a 64-block, the attention
// output by it again (undoing it).
#include "engine/forward/msa.h"
#include "engine/forward/runner.h"
#include "engine/kernels/kv_cache_types.h"

namespace moe {

void Runner::attention_gqa(uint32_t l, int n) {
    const Hparams& hp = m_.hp;
    const GqaConfig& g = hp.gqa;
    const GqaWeights& w = m_.layers[l].gqa;
    const int E = static_cast<int>(hp.n_embd), hd = static_cast<int>(g.head_dim);
    const int nh = static_cast<int>(g.n_head), nkv = static_cast<int>(g.n_head_kv);
    const int Qd = nh * hd, kv_dim = nkv * hd;
    const int q_head = g.output_gate ? 2 * hd : hd, q_row = nh * q_head;  // strides in q_

    matmul_group({{&w.wq, q_.data(), q_row}, {&w.wk, k_.data(), kv_dim}, {&w.wv, v_.data(), kv_dim}}, xn_.data(), E, n);
    // Biases are separate adds in llama.cpp's graph (build_qkv), after the matmul.
    auto add_bias = [n](std::vector<float>& y, const Tensor& b, int width) {
        if (!b.present()) return;
        for (int t = 0; t < n; ++t)
            for (int i = 0; i < width; ++i) y[t * width + i] += b.f32()[i];
    };
    add_bias(q_, w.bq, q_row);
    add_bias(k_, w.bk, kv_dim);
    add_bias(v_, w.bv, kv_dim);
    const bool msa = m_.layers[l].msa;
    const int ixd = static_cast<int>(hp.msa.head_dim);
    // MSA's indexer reads the same normed input: one query head per kv head and one key per token.
    if (msa) matmul_group({{&w.ix_q, ixq_.data(), nkv * ixd}, {&w.ix_k, ixk_.data(), ixd}}, xn_.data(), E, n);

    const int rot_k = kernels::kv_rotation_k(opt_.cache_type_k, hd), rot_v = kernels::kv_rotation_v(opt_.cache_type_v, hd);
    // Projections above ran for every row at once (the weights read once for all sequences of a decode
    // batch); each sequence's rows now meet its own cache at its own positions.
    const int keep = active_;
    for (const Segment& sg : segs_) {
        select_sequence(sg.seq);
        const int r0 = sg.row0, ns = sg.n;
        pool_.parallel_for(ns, [&](int64_t t0, int64_t t1) {
            std::vector<float> cs;
            for (int64_t ts = t0; ts < t1; ++ts) {
                const int64_t t = r0 + ts;
                const int pos = n_past_ + static_cast<int>(ts);
                ops::rope_cache(hp.rope, pos, cs);
                if (g.qk_norm_whole) {  // one RMS over the token's whole q row and whole k row
                    fops_.norm(&q_[t * q_row], w.q_norm.f32(), &q_[t * q_row], Qd, hp.rms_eps);
                    fops_.norm(&k_[t * kv_dim], w.k_norm.f32(), &k_[t * kv_dim], kv_dim, hp.rms_eps);
                }
                for (int h = 0; h < nh; ++h) {
                    float* qh = &q_[t * q_row + h * q_head];
                    if (w.q_norm.present() && !g.qk_norm_whole) fops_.norm(qh, w.q_norm.f32(), qh, hd, hp.rms_eps);
                    ops::rope(qh, hp.rope, cs);
                    for (int i = 0; rot_k && i < hd; i += rot_k) ops::hadamard(qh + i, rot_k);
                }
                for (int h = 0; h < nkv; ++h) {
                    float* kh = &k_[t * kv_dim + h * hd];
                    if (w.k_norm.present() && !g.qk_norm_whole) fops_.norm(kh, w.k_norm.f32(), kh, hd, hp.rms_eps);
                    ops::rope(kh, hp.rope, cs);
                    for (int i = 0; rot_k && i < hd; i += rot_k) ops::hadamard(kh + i, rot_k);
                }
                for (int i = 0; rot_v && i < kv_dim; i += rot_v) ops::hadamard(&v_[t * kv_dim + i], rot_v);
                cache_->store_k(l, pos, &k_[t * kv_dim]);
                cache_->store_v(l, pos, &v_[t * kv_dim]);
                if (msa) {
                    msa::prepare(hp, w, fops_, cs, &ixq_[t * nkv * ixd], &ixk_[t * ixd]);
                    cache_->store_ix(l, pos, &ixk_[t * ixd]);
                }
            }
        });
        if (msa) msa_select(l, r0, ns);
        // A sequence's single row (or rows computed as such) is llama.cpp's MSA decode, which gathers the blocks' rows;
        // longer runs mask.
        const KeySelection blocks{
            key_sel_.data(), key_sel_count_.data(), static_cast<int>(hp.msa.top_k), nkv, static_cast<int>(hp.msa.block_size), kernel_rows(ns) == 1};
        // Causal attention: token t sees positions 0..n_past+t; query head h reads kv head h / (nh/nkv).
        attention_heads(cache_->view(l, hd, hd, &kv_kt_), q_.data() + static_cast<size_t>(r0) * q_row, q_row, q_head, nh, nkv, ns,
                        1.0f / std::sqrt(static_cast<float>(hd)), att_.data() + static_cast<size_t>(r0) * Qd, Qd, hd, msa ? &blocks : nullptr,
                        m_.layers[l].sliding ? static_cast<int>(g.window) : 0, w.sinks.present() ? w.sinks.f32() : nullptr, cache_->ring[l]);
    }
    select_sequence(keep);
    if (rot_v)
        for (int t = 0; t < n; ++t)
            for (int i = 0; i < Qd; i += rot_v) ops::hadamard(&att_[t * Qd + i], rot_v);
    if (g.output_gate)
        for (int t = 0; t < n; ++t)
            for (int h = 0; h < nh; ++h)
                for (int i = 0; i < hd; ++i) att_[t * Qd + h * hd + i] *= ops::sigmoid(q_[t * q_row + h * q_head + hd + i]);
    matmul(w.wo, att_.data(), Qd, n, tmp_.data(), E);
    add_bias(tmp_, w.bo, E);
}

// Rows [row0, row0 + n) of the selected sequence, their indexer keys cached: each row's blocks per kv head.
void Runner::msa_select(uint32_t l, int row0, int n) {
    const MsaConfig& c = m_.hp.msa;
    const int nkv = static_cast<int>(m_.hp.gqa.n_head_kv), D = static_cast<int>(c.head_dim), used = n_past_ + n;
    if (ixkf_.size() < static_cast<size_t>(used) * D) ixkf_.resize(static_cast<size_t>(used) * D);
    cache_->load_ix(l, used, ixkf_.data());
    pool_.parallel_for(static_cast<int64_t>(n) * nkv, [&](int64_t i0, int64_t i1) {
        std::vector<float> scores;
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t t = i / nkv;
            key_sel_count_[i] = msa::select_blocks(c, fops_, &ixq_[static_cast<size_t>(row0 * nkv + i) * D], ixkf_.data(),
                                                   n_past_ + static_cast<int>(t), scores, &key_sel_[static_cast<size_t>(i) * c.top_k]);
        }
    });
}

}  // namespace moe

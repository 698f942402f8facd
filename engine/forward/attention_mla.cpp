// Multi-head latent attention (deepseek2, glm-dsa) in llama.cpp's absorbed form, and the DSA lightning indexer.
//
//   q      = q_b(RMSNorm(q_a(x)))                      (or attn_q(x)), per head [nope | rope]
//   kv     = kv_a_mqa(x) = [c_raw (kv_lora) | k_pe (rope)],  c = RMSNorm(c_raw)
//   q_abs  = k_b[h] . q_nope[h]                        per head, kv_lora values
//   cache  = [c | rope(k_pe)] per token (fp16, or the K cache type): one key for all heads (MQA), values = its first kv_lora
//   out[h] = v_b[h] . attention([q_abs | rope(q_pe)], cache)
//   y      = attn_output(concat heads)             (kimi-k3: concat heads * sigmoid(attn_gate(x)) first; no RoPE)
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/forward/layer_unit.h"
#include "engine/forward/reference_ops.h"
#include "engine/forward/runner.h"

namespace moe {
namespace {

class MlaAttention final : public AttentionUnit {
public:
    explicit MlaAttention(const Model&) {}
    template <class Size>
    static void scratch(const Model& m, const RunnerOptions& opt, Size&& size) {
        const Hparams& hp = m.hp;
        const MlaConfig& c = hp.mla;
        const size_t B = batch_rows(opt);
        const size_t H = c.n_head, qk = c.qk_nope + c.qk_rope, dk = c.kv_lora_rank + c.qk_rope;
        size(&MlaAttention::q_, B * H * qk);
        size(&MlaAttention::att_, B * H * c.v_head);
        size(&MlaAttention::qa_, B * std::max<uint32_t>(c.q_lora_rank, 1));
        size(&MlaAttention::kva_, B * dk);
        size(&MlaAttention::qabs_, B * H * dk);
        size(&MlaAttention::lat_, B * H * c.kv_lora_rank);
        if (std::any_of(m.layers.begin(), m.layers.end(), [](const Layer& L) { return L.mla.gate.present(); }))
            size(&MlaAttention::gate_, B * H * c.v_head);
        if (m.has_indexer()) {
            const IndexerConfig& ix = hp.indexer;
            size(&MlaAttention::ixq_, B * ix.n_head * ix.head_dim);
            size(&MlaAttention::ixk_, B * ix.head_dim);
            size(&MlaAttention::ixw_, B * ix.n_head);
            // One selection per sequence: the shared layers after a full one reuse it, and the sequences of a
            // decode batch run a layer one after another.
            const size_t seqs = static_cast<size_t>(std::max(opt.n_seq, 1));
            size(&MlaAttention::key_sel_, seqs * B * ix.top_k);
            size(&MlaAttention::key_sel_count_, seqs * B);
            size(&MlaAttention::ixkf_, static_cast<size_t>(opt.n_ctx) * ix.head_dim);
        }
    }
    void forward(LayerContext& cx, uint32_t l, int n) override;

private:
    void dsa_select(LayerContext& cx, uint32_t l, int n, const float* qr, int64_t qr_stride);  // DSA indexer: the sequence's key_sel_ rows
    // The selected sequence's first row of DSA selections in key_sel_ / key_sel_count_.
    size_t selection_offset(const LayerContext& cx) const { return static_cast<size_t>(cx.sequence()) * batch_rows(cx.options()); }

    std::vector<float> q_, att_;                 // per head [nope | rope] queries; the heads' outputs
    std::vector<float> qa_, kva_, qabs_, lat_;   // q-LoRA latent, kv_a output, absorbed queries, latent outputs
    std::vector<float> gate_;                    // kimi-k3's output gate
    std::vector<float> ixq_, ixk_, ixw_, ixkf_;  // DSA indexer: queries, new keys, head weights, cached keys in f32
    std::vector<int> key_sel_, key_sel_count_;   // per sequence [n][top_k] positions each row may attend to, and how many
};

void MlaAttention::forward(LayerContext& cx, uint32_t l, int n) {
    const Model& m = cx.model();
    const Hparams& hp = m.hp;
    const MlaConfig& c = hp.mla;
    const MlaWeights& w = m.layers[l].mla;
    const int E = static_cast<int>(hp.n_embd), H = static_cast<int>(c.n_head);
    const int nope = static_cast<int>(c.qk_nope), rope = static_cast<int>(c.qk_rope), qk = nope + rope;
    const int lora = static_cast<int>(c.kv_lora_rank), dk = lora + rope, vh = static_cast<int>(c.v_head);
    const int ql = static_cast<int>(c.q_lora_rank);

    // Queries: through the normed q-LoRA latent (which the DSA indexer reads too), or directly.
    if (ql) {
        cx.matmul_group({{&w.wq_a, qa_.data(), ql}, {&w.wkv_a, kva_.data(), dk}}, cx.xn(), E, n);
        for (int t = 0; t < n; ++t) ops::rms_norm(&qa_[t * ql], w.q_a_norm.f32(), &qa_[t * ql], ql, hp.rms_eps);
        cx.matmul(w.wq_b, qa_.data(), ql, n, q_.data(), H * qk);
    } else {
        cx.matmul_group({{&w.wq, q_.data(), H * qk}, {&w.wkv_a, kva_.data(), dk}}, cx.xn(), E, n);
    }

    cx.pool().parallel_for(n, [&](int64_t t0, int64_t t1) {
        std::vector<float> cs;
        for (int64_t t = t0; t < t1; ++t) {
            const int pos = cx.n_past() + static_cast<int>(t);
            ops::rope_cache(hp.rope, pos, cs);
            for (int h = 0; h < H; ++h) ops::rope(&q_[(t * H + h) * qk + nope], hp.rope, cs);
            float* kv = &kva_[t * dk];
            ops::rope(kv + lora, hp.rope, cs);
            ops::rms_norm(kv, w.kv_a_norm.f32(), kv, lora, hp.rms_eps);
            cx.cache().store_k(l, pos, kv);
            // The attention query: [absorbed nope part (filled below) | roped rope part].
            for (int h = 0; h < H; ++h) std::copy_n(&q_[(t * H + h) * qk + nope], rope, &qabs_[(t * H + h) * dk + lora]);
        }
    });
    cx.matmul_heads(w.wk_b, H, lora, q_.data(), qk, static_cast<int64_t>(H) * qk, n, qabs_.data(), dk, static_cast<int64_t>(H) * dk);

    if (m.has_indexer() && m.layers[l].indexer_full) dsa_select(cx, l, n, qa_.data(), ql);
    const KeySelection dsa{key_sel_.data() + selection_offset(cx) * hp.indexer.top_k, key_sel_count_.data() + selection_offset(cx),
                           static_cast<int>(hp.indexer.top_k), 1, 1};
    cx.attention_heads(cx.cache().view(l, dk, lora, &cx.kv_kernels()), qabs_.data(), static_cast<int64_t>(H) * dk, dk, H, 1, n, c.kq_scale,
                       lat_.data(), static_cast<int64_t>(H) * lora, lora, m.has_indexer() ? &dsa : nullptr);
    cx.matmul_heads(w.wv_b, H, vh, lat_.data(), lora, static_cast<int64_t>(H) * lora, n, att_.data(), vh, static_cast<int64_t>(H) * vh);
    if (w.gate.present()) {  // kimi-k3: the heads' output times sigmoid(gate . x)
        const int HV = H * vh;
        cx.matmul(w.gate, cx.xn(), E, n, gate_.data(), HV);
        for (int i = 0; i < n * HV; ++i) att_[i] *= ops::sigmoid(gate_[i]);
    }
    cx.matmul(w.wo, att_.data(), static_cast<int64_t>(H) * vh, n, cx.out(), E);
}

// The DSA lightning indexer of a full layer: per query, scores over the past positions
//   score[s] = sum_h w[h] * max(0, iq[h] . ik[s])
// with roped, Hadamard-rotated queries and keys (the keys cached in the K cache type), and the top_k positions kept. Shared
// layers that follow reuse this selection.
void MlaAttention::dsa_select(LayerContext& cx, uint32_t l, int n, const float* qr, int64_t qr_stride) {
    const Model& m = cx.model();
    const Hparams& hp = m.hp;
    const IndexerConfig& ic = hp.indexer;
    const MlaWeights& w = m.layers[l].mla;
    const int E = static_cast<int>(hp.n_embd), IH = static_cast<int>(ic.n_head), ID = static_cast<int>(ic.head_dim);
    const int top_k = static_cast<int>(ic.top_k);
    cx.matmul(w.ix_q_b, qr, qr_stride, n, ixq_.data(), static_cast<int64_t>(IH) * ID);
    cx.matmul_group({{&w.ix_k, ixk_.data(), ID}, {&w.ix_proj, ixw_.data(), IH}}, cx.xn(), E, n);
    const float w_scale = 1.0f / std::sqrt(static_cast<float>(ID * IH));
    cx.pool().parallel_for(n, [&](int64_t t0, int64_t t1) {
        std::vector<float> cs, normed(static_cast<size_t>(ID));
        for (int64_t t = t0; t < t1; ++t) {
            const int pos = cx.n_past() + static_cast<int>(t);
            ops::rope_cache(hp.rope, pos, cs);
            for (int h = 0; h < IH; ++h) {
                float* q = &ixq_[(t * IH + h) * ID];
                ops::rope(q, hp.rope, cs);  // [rope | nope]: the first n_rot dims
                ops::hadamard(q, ID);
            }
            float* k = &ixk_[t * ID];
            ops::layer_norm(cx.options().flavor, k, w.ix_k_norm.f32(), w.ix_k_norm_b.f32(), normed.data(), ID, 0.0f);
            ops::rope(normed.data(), hp.rope, cs);
            ops::hadamard(normed.data(), ID);
            cx.cache().store_ix(l, pos, normed.data());
            for (int h = 0; h < IH; ++h) ixw_[t * IH + h] *= w_scale;
        }
    });
    // Scores and top-k per query. llama.cpp sorts a row as long as its cache view (a multiple of 256 cells,
    // masked cells at -inf); the same row length keeps its choice among exact ties.
    const int used = cx.n_past() + n;
    const int view = std::max(256, (used + 255) / 256 * 256);
    const kernels::DotFn dot = cx.kernels().dot[static_cast<int>(GgmlType::F32)];  // ggml_vec_dot_f32
    const kernels::DotRowsFn dot_rows = cx.kernels().dot_rows[kernels::type_slot(GgmlType::F32)];
    // score[s] for the keys [s0, s1) of row t, their floats in ixkf_: each head's dots over a block of keys in one
    // rows call (the products commute, so k . q has dot(q, k)'s bits; a 4-row tile per head measured slower),
    // then the heads' relu-weighted sum in order.
    auto score_keys = [&](int64_t t, int64_t s0, int64_t s1, float* score) {
        constexpr int64_t kBlock = 64;
        thread_local std::vector<float> part;
        part.resize(static_cast<size_t>(IH) * kBlock);
        for (int64_t b = s0; b < s1; b += kBlock) {
            const int64_t m = std::min(s1, b + kBlock) - b;
            const float* kf = &ixkf_[static_cast<size_t>(b) * ID];
            for (int h = 0; h < IH; ++h) {
                const float* q = &ixq_[(t * IH + h) * ID];
                float* out = &part[static_cast<size_t>(h) * kBlock];
                if (dot_rows) dot_rows(ID, reinterpret_cast<const uint8_t*>(kf), static_cast<size_t>(ID) * 4, m, q, out);
                else
                    for (int64_t j = 0; j < m; ++j) out[j] = dot(ID, q, kf + j * ID);
            }
            cx.fops().indexer_sum(part.data(), kBlock, IH, &ixw_[t * IH], m, score + b);
        }
    };
    // Row t keeps the top_k of its row of view scores (visible positions, the rest -inf). Where every visible
    // position is among them the scores cannot change the choice and are not computed.
    auto select = [&](int64_t t, std::vector<float>& score, std::vector<int>& pick) {
        const int visible = cx.n_past() + static_cast<int>(t) + 1;
        int* sel = &key_sel_[(selection_offset(cx) + static_cast<size_t>(t)) * top_k];
        int count = 0;
        if (visible <= top_k) {
            for (int s = 0; s < visible; ++s) sel[count++] = s;
        } else {
            ops::top_k_set(score.data(), view, top_k, pick);
            for (int s : pick)
                if (s < visible) sel[count++] = s;
        }
        key_sel_count_[selection_offset(cx) + static_cast<size_t>(t)] = count;
    };
    if (used <= top_k) {  // every row sees fewer positions than it may keep
        std::vector<float> none;
        std::vector<int> pick;
        for (int t = 0; t < n; ++t) select(t, none, pick);
        return;
    }
    // The keys' to_float (as ggml's lightning indexer reads them) into ixkf_, positions [s0, s1).
    auto to_float = [&](int64_t s0, int64_t s1) {
        const size_t row = cx.cache().ix_row;
        kernels::dequantize_row(cx.cache().ix_type, cx.cache().ix[l].data() + static_cast<size_t>(s0) * row, &ixkf_[static_cast<size_t>(s0) * ID],
                                (s1 - s0) * ID);
    };
    if (n < cx.options().n_threads) {  // decoding: one row's positions over the threads, each block converted as it is scored
        std::vector<float> score(static_cast<size_t>(view));
        std::vector<int> pick;
        for (int t = 0; t < n; ++t) {
            const int visible = cx.n_past() + t + 1;
            std::fill(score.begin(), score.end(), -std::numeric_limits<float>::infinity());
            cx.pool().parallel_for(visible, [&](int64_t s0, int64_t s1) {
                constexpr int64_t kBlock = 64;
                for (int64_t b = s0; b < s1; b += kBlock) {
                    const int64_t e = std::min(s1, b + kBlock);
                    to_float(b, e);
                    score_keys(t, b, e, score.data());
                }
            });
            select(t, score, pick);
        }
        return;
    }
    cx.pool().parallel_for(used, to_float);
    cx.pool().parallel_for(n, [&](int64_t t0, int64_t t1) {
        std::vector<float> score(static_cast<size_t>(view));
        std::vector<int> pick;
        for (int64_t t = t0; t < t1; ++t) {
            const int visible = cx.n_past() + static_cast<int>(t) + 1;
            std::fill(score.begin(), score.end(), -std::numeric_limits<float>::infinity());
            score_keys(t, 0, visible, score.data());
            select(t, score, pick);
        }
    });
}

using ref::Vec;

// The DSA lightning indexer of a full layer: which past positions this token's attention may see.
std::vector<uint8_t> dsa_select(const ref::Context& c, uint32_t l, const Vec& xn, const Vec& qr) {
    const Hparams& hp = c.m.hp;
    const IndexerConfig& ic = hp.indexer;
    const MlaWeights& w = c.m.layers[l].mla;
    const int IH = static_cast<int>(ic.n_head), ID = static_cast<int>(ic.head_dim);
    Vec iq(IH * ID), ik(ID), hw(IH), normed(ID), cs, kf(ID);
    dense(c, w.ix_q_b, qr.data(), iq.data());
    dense(c, w.ix_k, xn.data(), ik.data());
    dense(c, w.ix_proj, xn.data(), hw.data());
    ops::rope_cache(hp.rope, c.pos, cs);
    // Queries and the key: RoPE on the first n_rot dims, then the Walsh-Hadamard rotation.
    for (int h = 0; h < IH; ++h) {
        ops::rope(&iq[h * ID], hp.rope, cs);
        ops::hadamard(&iq[h * ID], ID);
    }
    ops::layer_norm(c.fops.flavor, ik.data(), w.ix_k_norm.f32(), w.ix_k_norm_b.f32(), normed.data(), ID, 0.0f);
    ops::rope(normed.data(), hp.rope, cs);
    ops::hadamard(normed.data(), ID);
    c.st.cache.store_ix(l, c.pos, normed.data());
    const float w_scale = 1.0f / std::sqrt(static_cast<float>(ID * IH));
    for (float& x : hw) x *= w_scale;
    // score[s] = sum_h w[h] * relu(q[h] . k[s]) over positions 0..pos, in a row as long as llama.cpp's cache view.
    const int used = c.pos - c.batch.index + c.batch.n_tok;
    const int view = std::max(256, (used + 255) / 256 * 256);
    Vec score(view, -std::numeric_limits<float>::infinity()), keys(static_cast<size_t>(c.pos + 1) * ID);
    c.st.cache.load_ix(l, c.pos + 1, keys.data());  // each key's to_float
    for (int s = 0; s <= c.pos; ++s) {
        std::copy_n(&keys[static_cast<size_t>(s) * ID], ID, kf.data());
        float acc = 0.f;
        for (int h = 0; h < IH; ++h) acc = std::fma(std::max(c.fops.dot_f32(&iq[h * ID], kf.data(), ID), 0.0f), hw[h], acc);
        score[s] = acc + 0.0f;
    }
    const int k = std::min(view, static_cast<int>(ic.top_k));
    std::vector<int> pick(k);
    ops::top_k(score.data(), view, k, pick.data());
    std::vector<uint8_t> visible(c.pos + 1, 0);
    for (int p : pick)
        if (p <= c.pos) visible[p] = 1;
    return visible;
}

// MLA in the absorbed form (see forward/attention_mla.cpp for the equations).
void reference_step(const ref::Context& c, uint32_t l, const Vec& xn, Vec& out) {
    std::vector<uint8_t>& dsa_visible = *c.dsa_visible;
    const Hparams& hp = c.m.hp;
    const MlaConfig& mc = hp.mla;
    const MlaWeights& w = c.m.layers[l].mla;
    const int H = static_cast<int>(mc.n_head), nope = static_cast<int>(mc.qk_nope), rope = static_cast<int>(mc.qk_rope);
    const int qk = nope + rope, lora = static_cast<int>(mc.kv_lora_rank), dk = lora + rope, vh = static_cast<int>(mc.v_head);
    Vec q(H * qk), qr(std::max<uint32_t>(mc.q_lora_rank, 1)), kv(dk), qh(dk), lat(lora), att(H * vh), cs;
    // 1. queries, through the normed q-LoRA latent when there is one
    if (mc.q_lora_rank) {
        dense(c, w.wq_a, xn.data(), qr.data());
        ops::rms_norm(qr.data(), w.q_a_norm.f32(), qr.data(), static_cast<int>(mc.q_lora_rank), hp.rms_eps);
        dense(c, w.wq_b, qr.data(), q.data());
    } else {
        dense(c, w.wq, xn.data(), q.data());
    }
    // 2. the compressed KV: [latent | k_pe]; RoPE on q_pe and k_pe, RMSNorm on the latent; cached in the K cache type
    dense(c, w.wkv_a, xn.data(), kv.data());
    ops::rope_cache(hp.rope, c.pos, cs);
    for (int h = 0; h < H; ++h) ops::rope(&q[h * qk + nope], hp.rope, cs);
    ops::rope(&kv[lora], hp.rope, cs);
    ops::rms_norm(kv.data(), w.kv_a_norm.f32(), kv.data(), lora, hp.rms_eps);
    c.st.cache.store_k(l, c.pos, kv.data());
    // 3. DSA: a full layer picks the visible positions; a shared layer keeps the last full layer's pick
    if (c.m.has_indexer() && c.m.layers[l].indexer_full) dsa_visible = dsa_select(c, l, xn, qr);
    // 4. per head: absorb k_b into the query, attend over the latent cache (values: its first kv_lora), project
    //    through v_b
    for (int h = 0; h < H; ++h) {
        matvec(c, w.wk_b.row(static_cast<int64_t>(h) * lora), w.wk_b.type, w.wk_b.row_bytes, lora, nope, &q[h * qk], qh.data(), c.batch.n_tok,
               c.batch.index, true);
        std::copy_n(&q[h * qk + nope], rope, &qh[lora]);
        ops::KvView view = c.st.cache.view(l, dk, lora, &kernels::reference_table(c.st.flavor));
        view.n_kv = c.pos + 1;
        view.visible = c.m.has_indexer() ? dsa_visible.data() : nullptr;
        attend(c, view, qh.data(), mc.kq_scale, lat.data());
        matvec(c, w.wv_b.row(static_cast<int64_t>(h) * vh), w.wv_b.type, w.wv_b.row_bytes, vh, lora, lat.data(), &att[h * vh], c.batch.n_tok,
               c.batch.index, true);
    }
    // 5. kimi-k3: the heads' output gated by sigmoid(attn_gate . x)
    if (w.gate.present()) {
        Vec gate(H * vh);
        dense(c, w.gate, xn.data(), gate.data());
        for (int i = 0; i < H * vh; ++i) att[i] *= ops::sigmoid(gate[i]);
    }
    dense(c, w.wo, att.data(), out.data());
}

}  // namespace

const AttentionKindInfo& mla_attention() {
    static const AttentionKindInfo info{AttentionKind::Mla, "mla", unit_scratch_bytes<MlaAttention>, make_unit<MlaAttention>, reference_step};
    return info;
}

}  // namespace moe

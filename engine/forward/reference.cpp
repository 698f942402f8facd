// Reference forward, top to bottom like the papers (model.h has the tensor shapes). Each step names the
// llama.cpp graph node it reproduces.
#include "engine/forward/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/forward/compressed_attention.h"
#include "engine/forward/hyper_connection.h"
#include "engine/forward/msa.h"
#include "engine/forward/residual_mix.h"
#include "engine/forward/routing.h"
#include "engine/kernels/float_ops.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kv_cache_types.h"

namespace moe {
namespace {

using Vec = std::vector<float>;

struct Ctx {
    const Model& m;
    RefState& st;
    RefBatch batch;
    const kernels::KernelTable& kt;
    const ops::FloatOps& fops;
    int pos;
    int token;
};

// out[r] = W[r,:] . x for every row r, with x prepared as W's activation type (scalar kernels), summed in the
// order llama.cpp gives activation row `index` of `n_tok` (n_tok 0: an expert matmul, MUL_MAT_ID). `strided`:
// the activations are a strided view in llama.cpp's graph (F32 weights then keep the one-token order).
// `expert_tokens`: for an expert matmul, the tokens its batch routes to that expert (ik's per-expert switch).
void matvec(const Ctx& c, const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, float* out, int n_tok = 0,
            int index = 0, bool strided = false, int expert_tokens = 1) {
    std::vector<uint8_t> act(kernels::activation_bytes(type, cols));
    kernels::prepare_activations(type, x, act.data(), cols);
    const bool dense = n_tok > 0 && !(strided && type == GgmlType::F32);
    const kernels::MatmulDots dots = kernels::matmul_dots(c.kt, type, rows, cols,
                                                          dense       ? n_tok
                                                          : n_tok > 0 ? 1
                                                                      : std::max(expert_tokens, 1),
                                                          dense, c.batch.n_threads);
    if (dots.row_group > 1) return dots.single_rows(cols, w, row_bytes, rows, act.data(), out);  // ik's _R4: rows in fours
    auto dot = dots.at(index);
    for (int64_t r = 0; r < rows; ++r) out[r] = dot(cols, w + r * row_bytes, act.data());
}

// A dense matmul of the layer at this token's place in its batch.
void dense(const Ctx& c, const Tensor& t, const float* x, float* out) {
    matvec(c, t.data, t.type, t.row_bytes, t.ne1, t.ne0, x, out, c.batch.n_tok, c.batch.index);
}

// Attention of one query against this layer's cached positions 0..pos (those in `visible` when given). A lone
// row over an fp16 view of the cache's positions (whole_view: not MSA's gathered blocks; DSA's picks and a sliding
// window are masks over it) is split over the threads from 512 keys, as llama.cpp does (ops::split_kv_chunk).
void attend(const Ctx& c, const ops::KvView& kv, const float* q, float scale, float* out, bool whole_view = true) {
    ops::AttnScratch scratch;
    const bool tiled = ops::tiled_attention(c.fops.flavor, c.batch.n_tok, kv.dv);
    const bool lone_row = c.batch.n_tok == 1 && !c.fops.ik && !kv.typed() && whole_view && kv.n_kv == c.pos + 1;
    if (const int chunk = lone_row ? ops::split_kv_chunk(kv.n_kv, c.st.cache.n_ctx, c.batch.n_threads) : 0; chunk > 0)
        return ops::attend_split_causal(c.fops.flavor, q, kv, chunk, c.batch.n_threads, scale, out, scratch);
    (kv.typed() ? ops::attend_typed : tiled ? c.fops.attend_tiled : c.fops.attend)(q, kv, scale, out, scratch);
}

// MSA's indexer for this token (msa.h): its key cached, then per kv head the blocks it picks.
std::vector<std::vector<int>> msa_blocks(const Ctx& c, uint32_t l, const Vec& xn, const std::vector<float>& cs) {
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
void attention_gqa(const Ctx& c, uint32_t l, const Vec& xn, Vec& out) {
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

// Gated DeltaNet (see forward/attention_deltanet.cpp for the equations), one token: projections and gates, the
// causal conv over the cached window, SiLU, per-head L2 norms, the delta rule per v head, the gated RMSNorm,
// the output projection.
void attention_deltanet(const Ctx& c, uint32_t l, const Vec& xn, Vec& out) {
    const Hparams& hp = c.m.hp;
    const DeltaNetConfig& dc = hp.ssm;
    const DeltaNetWeights& w = c.m.layers[l].ssm;
    const int S = static_cast<int>(dc.state), K = static_cast<int>(dc.conv_kernel), Hk = static_cast<int>(dc.n_k_heads);
    const int Hv = static_cast<int>(dc.n_v_heads), C = static_cast<int>(dc.conv_dim()), V = S * Hv;
    Vec qkv(C), conv(C), z(V), beta(Hv), g(Hv), o(V), delta(S);
    dense(c, w.qkv, xn.data(), qkv.data());
    dense(c, w.z, xn.data(), z.data());
    dense(c, w.beta, xn.data(), beta.data());
    dense(c, w.alpha, xn.data(), g.data());
    for (int h = 0; h < Hv; ++h) {
        beta[h] = ops::sigmoid(beta[h]);
        g[h] = ops::softplus(g[h] + w.dt_bias.f32()[h]) * w.a.f32()[h];
    }
    float* window = c.st.cache.conv[l].data();
    for (int ch = 0; ch < C; ++ch) ops::causal_conv(window + ch * (K - 1), &qkv[ch], 1, w.conv1d.f32() + ch * K, K, 1, &conv[ch], 1);
    c.fops.silu(conv.data(), C);
    for (int h = 0; h < 2 * Hk; ++h) ops::l2_norm(&conv[h * S], S, hp.rms_eps);
    float* state = c.st.cache.ssm[l].data();
    for (int h = 0; h < Hv; ++h) {
        const int kh = h % Hk;  // the converter's tiled v-head order
        ops::gated_delta_step(state + static_cast<size_t>(h) * S * S, &conv[kh * S], &conv[(Hk + kh) * S], &conv[2 * Hk * S + h * S], g[h], beta[h],
                              &o[h * S], S, c.kt.dot[static_cast<int>(GgmlType::F32)], delta.data());
        ops::rms_norm(&o[h * S], w.norm.f32(), &o[h * S], S, hp.rms_eps);
        c.fops.silu(&z[h * S], S);
        for (int i = 0; i < S; ++i) o[h * S + i] *= z[h * S + i];
    }
    dense(c, w.out, o.data(), out.data());
}

// Kimi Delta Attention (see forward/attention_kda.cpp for the equations), one token: q, k, v through their
// own projections and convs, SiLU, per-head L2 norms; the per-channel decay and beta; the delta rule per head;
// the RMSNorm times the sigmoid gate; the output projection.
void attention_kda(const Ctx& c, uint32_t l, const Vec& xn, Vec& out) {
    const Hparams& hp = c.m.hp;
    const DeltaNetConfig& dc = hp.ssm;
    const KdaWeights& w = c.m.layers[l].kda;
    const int S = static_cast<int>(dc.state), K = static_cast<int>(dc.conv_kernel), H = static_cast<int>(dc.n_v_heads), V = S * H;
    Vec qkv(3 * V), conv(3 * V), gate(V), beta(H), low(S), g(V), o(V), delta(S);
    const Tensor* proj[3] = {&w.wq, &w.wk, &w.wv};
    const Tensor* taps[3] = {&w.conv_q, &w.conv_k, &w.conv_v};
    float* window = c.st.cache.conv[l].data();
    for (int part = 0; part < 3; ++part) {
        dense(c, *proj[part], xn.data(), &qkv[part * V]);
        for (int ch = 0; ch < V; ++ch)
            ops::causal_conv(window + (part * V + ch) * (K - 1), &qkv[part * V + ch], 1, taps[part]->f32() + ch * K, K, 1, &conv[part * V + ch], 1);
        c.fops.silu(&conv[part * V], V);
    }
    for (int h = 0; h < 2 * H; ++h) ops::l2_norm(&conv[h * S], S, hp.rms_eps);
    dense(c, w.f_a, xn.data(), low.data());
    dense(c, w.f_b, low.data(), g.data());
    for (int i = 0; i < V; ++i) g[i] = dc.kda_log_decay(g[i] + w.dt_bias.f32()[i], w.a.f32()[i / S]);
    dense(c, w.beta, xn.data(), beta.data());
    dense(c, w.g, xn.data(), gate.data());
    float* state = c.st.cache.ssm[l].data();
    for (int h = 0; h < H; ++h) {
        ops::kda_delta_step(state + static_cast<size_t>(h) * S * S, &conv[h * S], &conv[V + h * S], &conv[2 * V + h * S], &g[h * S],
                            ops::sigmoid(beta[h]), &o[h * S], S, c.kt.dot[static_cast<int>(GgmlType::F32)], delta.data());
        ops::rms_norm(&o[h * S], w.norm.f32(), &o[h * S], S, hp.rms_eps);
        for (int i = 0; i < S; ++i) o[h * S + i] *= ops::sigmoid(gate[h * S + i]);
    }
    dense(c, w.out, o.data(), out.data());
}

// The DSA lightning indexer of a full layer: which past positions this token's attention may see.
std::vector<uint8_t> dsa_select(const Ctx& c, uint32_t l, const Vec& xn, const Vec& qr) {
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
void attention_mla(const Ctx& c, uint32_t l, const Vec& xn, Vec& out, std::vector<uint8_t>& dsa_visible) {
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

// DeepSeek-V4's compressed attention: the projections, the per-token step (compressed_attention.h), then the
// output LoRA per group of heads.
void attention_compressed(const Ctx& c, uint32_t l, const Vec& xn, Vec& out) {
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

// Gated FFN: down(act(gate . x, up . x)), act the model's (silu(g) * u, or swiglu_oai; limit: SwigluClamped's).
void gated_ffn(const Ctx& c, const Tensor& gate, const Tensor& up, const Tensor& down, const Vec& xn, Vec& out, float limit = 0.f) {
    const int F = static_cast<int>(gate.ne1);
    Vec g(F), u(F);
    dense(c, up, xn.data(), u.data());
    dense(c, gate, xn.data(), g.data());
    ffn_activation(c.m.hp, c.fops, g.data(), u.data(), F, limit);
    dense(c, down, g.data(), out.data());
}

// MoE: route, run the chosen experts, sum their outputs weighted in routing order, add the shared expert. A
// latent MoE's experts read routed_down . x, and their sum goes through RMSNorm and routed_up.
void moe_ffn(const Ctx& c, uint32_t l, const Vec& xn, Vec& out, RefBatch router_batch) {
    const Hparams& hp = c.m.hp;
    const MoeWeights& w = c.m.layers[l].experts;
    const int E = static_cast<int>(hp.n_embd), X = static_cast<int>(hp.moe.n_expert), U = static_cast<int>(hp.moe.n_expert_used);
    Vec probs(X), weight(U);
    std::vector<int> sel(U);
    matvec(c, w.router.data, w.router.type, w.router.row_bytes, X, E, xn.data(), probs.data(), router_batch.n_tok, router_batch.index);
    route_token(hp.moe, w, c.fops, probs.data(), sel.data(), weight.data(), c.token);
    const int F = static_cast<int>(w.gate.n_out), D = hp.moe.n_latent ? static_cast<int>(hp.moe.n_latent) : E;
    Vec g(F), u(F), y(D), in = xn, routed(D);
    if (w.routed_down.present()) {
        in.resize(D);
        dense(c, w.routed_down, xn.data(), in.data());
    }
    for (int s = 0; s < U; ++s) {
        ExpertView ev = c.m.experts->get(l, static_cast<uint32_t>(sel[s]));  // released below
        const int tokens = c.batch.expert_tokens ? static_cast<int>(c.batch.expert_tokens[static_cast<size_t>(l) * X + sel[s]]) : 1;
        matvec(c, ev.gate, w.gate.type, w.gate.row_bytes, F, D, in.data(), g.data(), 0, 0, false, tokens);
        matvec(c, ev.up, w.up.type, w.up.row_bytes, F, D, in.data(), u.data(), 0, 0, false, tokens);
        expert_activation(hp, w, c.fops, static_cast<uint32_t>(sel[s]), g.data(), u.data(), F, c.m.layers[l].swiglu_limit);
        matvec(c, ev.down, w.down.type, w.down.row_bytes, D, F, g.data(), y.data(), 0, 0, false, tokens);
        expert_down_bias(w, static_cast<uint32_t>(sel[s]), y.data(), D);
        c.m.experts->release(l, static_cast<uint32_t>(sel[s]));
        // ik sums with one fused multiply-add per further expert (iqk_mul_multi_add as GCC contracts it).
        for (int i = 0; i < D; ++i)
            routed[i] = s == 0 ? y[i] * weight[s] : c.fops.ik ? std::fma(y[i], weight[s], routed[i]) : routed[i] + y[i] * weight[s];
    }
    if (w.routed_up.present()) {
        if (w.routed_norm.present()) c.fops.norm(routed.data(), w.routed_norm.f32(), routed.data(), D, hp.rms_eps);
        dense(c, w.routed_up, routed.data(), out.data());
    } else {
        std::copy_n(routed.begin(), E, out.begin());
    }
    if (w.gate_sh.present()) {
        Vec sh(E);
        gated_ffn(c, w.gate_sh, w.up_sh, w.down_sh, xn, sh, c.m.layers[l].swiglu_limit_sh);
        if (w.gate_inp_sh.present()) {  // qwen35moe: scaled by sigmoid(gate_inp_sh . x)
            float gate = 0.f;
            dense(c, w.gate_inp_sh, xn.data(), &gate);
            const float s = ops::sigmoid(gate);
            for (int i = 0; i < E; ++i) sh[i] *= s;
        }
        for (int i = 0; i < E; ++i) out[i] += sh[i];
    }
}

}  // namespace

RefState make_ref_state(const Model& m, int n_ctx, kernels::Flavor flavor, kernels::KvCacheTypes kv_types) {
    RefState st;
    st.flavor = m.ik_numerics ? kernels::Flavor::Avx2 : flavor;  // as Runner: ik files follow ik's AVX2 build
    st.cache = SequenceCache::make(m, n_ctx, kv_types);
    return st;
}

void forward_ref(const Model& m, RefState& st, int token, float* logits, RefBatch batch) {
    const Hparams& hp = m.hp;
    const int E = static_cast<int>(hp.n_embd);
    if (st.n_past >= st.cache.n_ctx) throw std::out_of_range("context full");
    if (token < 0 || token >= static_cast<int>(hp.n_vocab)) throw std::out_of_range("token id out of range");
    const Ctx c{m,
                st,
                batch,
                m.ik_numerics ? ik::kernel_table(kernels::reference_table(st.flavor)) : kernels::reference_table(st.flavor),
                m.ik_numerics ? ik::float_ops(ops::float_ops(st.flavor)) : ops::float_ops(st.flavor),
                st.n_past,
                token};

    Vec x(E), xn(E), out(E), mixed(E), scratch(E), banked;
    std::vector<uint8_t> dsa_visible;
    // The stream x, mixed with the banked layer inputs (residual attention, Hparams::res_block), then RMS-normed.
    auto mixed_norm = [&](const Tensor& score, const Tensor& norm) {
        if (hp.res_block)
            residual_mix(c.fops, banked.data(), static_cast<int>(banked.size() / E), static_cast<size_t>(E), x.data(), score.f32(), E, hp.rms_eps,
                         mixed.data(), scratch.data());
        c.fops.norm(hp.res_block ? mixed.data() : x.data(), norm.f32(), xn.data(), E, hp.rms_eps);
    };
    // Hyper-connections (deepseek4): the stream is n copies; before a sub-block their mix is its input x, after
    // it they are remixed with its output.
    const HyperConfig& hcc = hp.hyper;
    Vec hc(size_t{hcc.n} * E), hc_norm(hc.size()), mixes(hcc.n_mix());
    HyperMix mix;
    auto hyper_pre = [&](const HyperWeights& w) {
        hyper_norm(hcc, hc.data(), E, hp.rms_eps, hc_norm.data());
        dense(c, w.fn, hc_norm.data(), mixes.data());
        mix = hyper_mix(hcc, mixes.data(), w);
        hyper_collapse(hcc, mix, hc.data(), E, x.data());
    };
    // 1. token embedding (every copy of a hyper-connected stream)
    kernels::dequantize_row(m.tok_embd.type, m.tok_embd.row(token), x.data(), E);
    for (uint32_t h = 0; h < hcc.n; ++h) std::copy_n(x.begin(), E, hc.begin() + h * E);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const Layer& L = m.layers[l];
        // 2. attention block on the normed input, then the residual (a banking layer restarts the stream from
        //    the attention output)
        if (hcc.n) hyper_pre(L.hc_attn);
        mixed_norm(L.attn_res_score, L.attn_norm);
        const bool banks = hp.res_block && l % hp.res_block == 0;
        if (banks) banked.insert(banked.end(), x.begin(), x.end());
        if (L.attn == AttentionKind::Mla) attention_mla(c, l, xn, out, dsa_visible);
        else if (L.attn == AttentionKind::GatedDeltaNet) attention_deltanet(c, l, xn, out);
        else if (L.attn == AttentionKind::KimiDelta) attention_kda(c, l, xn, out);
        else if (L.attn == AttentionKind::Compressed) attention_compressed(c, l, xn, out);
        else attention_gqa(c, l, xn, out);
        if (hcc.n) hyper_expand(hcc, mix, out.data(), hc.data(), E, hc_norm.data());
        else
            for (int i = 0; i < E; ++i) x[i] = banks ? out[i] : x[i] + out[i];
        // 3. feed-forward block on the normed input, then the residual. llama.cpp keeps only the output rows
        //    for the last layer's feed-forward, so its dense matmuls see that batch.
        if (hcc.n) hyper_pre(L.hc_ffn);
        mixed_norm(L.ffn_res_score, L.ffn_norm);
        const bool last = l + 1 == hp.n_layer;
        Ctx fc = c;
        if (last && !hp.output_rows_after_norm)
            fc.batch = {batch.n_out, batch.out_index, batch.n_out, batch.out_index, batch.n_threads, batch.expert_tokens};
        if (L.moe) moe_ffn(fc, l, xn, out, fc.batch);
        else gated_ffn(fc, L.dense.gate, L.dense.up, L.dense.down, xn, out);
        if (hcc.n) hyper_expand(hcc, mix, out.data(), hc.data(), E, hc_norm.data());
        else
            for (int i = 0; i < E; ++i) x[i] += out[i];
    }
    // 4. hyper-connections: the copies' weighted sum (the output head's mixer sees the output rows' batch)
    if (hcc.n) {
        hyper_norm(hcc, hc.data(), E, hp.rms_eps, hc_norm.data());
        const Tensor& fn = m.output_hc.fn;
        matvec(c, fn.data, fn.type, fn.row_bytes, fn.ne1, fn.ne0, hc_norm.data(), mixes.data(), batch.n_out, batch.out_index);
        hyper_collapse(hcc, hyper_head_mix(hcc, mixes.data(), m.output_hc), hc.data(), E, x.data());
    }
    // 5. final norm (after the last residual mix) and output head
    mixed_norm(m.output_res_score, m.output_norm);
    matvec(c, m.output.data, m.output.type, m.output.row_bytes, m.output.ne1, m.output.ne0, xn.data(), logits, batch.n_out, batch.out_index);
    st.n_past++;
}

}  // namespace moe

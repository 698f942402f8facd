// Reference forward, top to bottom like the papers (model.h has the tensor shapes). Each step names the
// llama.cpp graph node it reproduces.
#include "engine/forward/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/forward/layer_unit.h"
#include "engine/forward/hyper_connection.h"
#include "engine/forward/reference_ops.h"
#include "engine/forward/residual_mix.h"
#include "engine/forward/routing.h"
#include "engine/kernels/float_ops.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kv_cache_types.h"

namespace moe {
namespace ref {

void matvec(const Context& c, const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, float* out, int n_tok,
            int index, bool strided, int expert_tokens) {
    std::vector<uint8_t> act(kernels::activation_bytes(type, cols));
    kernels::prepare_activations(type, x, act.data(), cols);
    const bool dense = n_tok > 0 && !(strided && type == GgmlType::F32);
    const kernels::MatmulDots dots = kernels::matmul_dots(c.kt, type, rows, cols,
                                                          dense       ? n_tok
                                                          : n_tok > 0 ? 1
                                                                      : std::max(expert_tokens, 1),
                                                          dense, c.batch.n_threads);
    if (dots.row_group > 1) {  // ik's _R4/_R8: rows in groups
        if (rows % dots.row_group != 0) throw std::invalid_argument("an interleaved form's row group cut by a matrix view");
        return dots.rows_at(index)(cols, w, row_bytes, rows, act.data(), out);
    }
    auto dot = dots.at(index);
    for (int64_t r = 0; r < rows; ++r) out[r] = dot(cols, w + r * row_bytes, act.data());
}

void dense(const Context& c, const Tensor& t, const float* x, float* out) {
    matvec(c, t.data, t.type, t.row_bytes, t.ne1, t.ne0, x, out, c.batch.n_tok, c.batch.index);
}

void attend(const Context& c, const ops::KvView& kv_in, const float* q, float scale, float* out, bool whole_view) {
    // (an f32 K or V cast to f16 first, as llama.cpp's graph does before its flash attention)
    std::vector<uint16_t> cast;
    const ops::KvView kv = c.fops.ik ? kv_in : cast_f32_parts_to_f16(kv_in, kv_in.n_kv, kv_in.dk, kv_in.dv, cast);
    ops::AttnScratch scratch;
    const bool tiled = ops::tiled_attention(c.fops.flavor, c.batch.n_tok, kv.dv);
    const bool lone_row = c.batch.n_tok == 1 && !c.fops.ik && !kv.typed() && whole_view && kv.n_kv == c.pos + 1;
    if (const int chunk = lone_row ? ops::split_kv_chunk(kv.n_kv, c.st.cache.n_ctx, c.batch.n_threads) : 0; chunk > 0)
        return ops::attend_split_causal(c.fops.flavor, q, kv, chunk, c.batch.n_threads, scale, out, scratch);
    (kv.typed() ? ops::attend_typed : tiled ? c.fops.attend_tiled : c.fops.attend)(q, kv, scale, out, scratch);
}

}  // namespace ref

namespace {

using ref::Vec;

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
    std::vector<uint8_t> dsa_visible;
    if (batch.index == 0 || batch.index != st.rank_index + 1)
        st.expert_rank.assign(static_cast<size_t>(hp.n_layer + hp.n_layer_nextn) * hp.moe.n_expert, 0);
    st.rank_index = batch.index;
    const ref::Context c{m,
                         st,
                         batch,
                         m.ik_numerics ? ik::kernel_table(kernels::reference_table(st.flavor)) : kernels::reference_table(st.flavor),
                         m.ik_numerics ? ik::float_ops(ops::float_ops(st.flavor)) : ops::float_ops(st.flavor),
                         st.n_past,
                         token,
                         &dsa_visible};

    Vec x(E), xn(E), out(E), mixed(E), scratch(E), banked;
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
        attention_kind_info(L.attn).reference(c, l, xn, out);
        if (hcc.n) hyper_expand(hcc, mix, out.data(), hc.data(), E, hc_norm.data());
        else
            for (int i = 0; i < E; ++i) x[i] = banks ? out[i] : x[i] + out[i];
        // 3. feed-forward block on the normed input, then the residual. llama.cpp keeps only the output rows
        //    for the last layer's feed-forward, so its dense matmuls see that batch.
        if (hcc.n) hyper_pre(L.hc_ffn);
        mixed_norm(L.ffn_res_score, L.ffn_norm);
        const bool last = l + 1 == hp.n_layer;
        ref::Context fc = c;
        if (last && !hp.output_rows_after_norm)
            fc.batch = {batch.n_out, batch.out_index, batch.n_out, batch.out_index, batch.n_threads, batch.expert_tokens};
        feed_forward_kind_info(L.ffn()).reference(fc, l, xn, out);
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

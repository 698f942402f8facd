// Reference qwen3moe forward, top to bottom like the paper (see qwen3moe.h for tensor shapes).
#include "engine/model/qwen3moe_ref.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "engine/kernels/kernels.h"
#include "engine/kernels/kernels_internal.h"
#include "engine/model/ops.h"

namespace moe {
namespace {

// out[r] = W[r,:] . x for every row r, with x prepared as W's activation type (scalar kernels), summed in the
// order llama.cpp gives activation row `index` of `n_tok` (n_tok 0: an expert matmul, MUL_MAT_ID).
void matvec(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, float* out,
            int n_tok = 0, int index = 0) {
    std::vector<uint8_t> act(kernels::activation_bytes(type, cols));
    kernels::prepare_activations(type, x, act.data(), cols);
    auto dot = kernels::matmul_dots(kernels::reference_table(), type, rows, cols, std::max(n_tok, 1), n_tok > 0).at(index);
    for (int64_t r = 0; r < rows; ++r) out[r] = dot(cols, w + r * row_bytes, act.data());
}

void matvec(const Tensor& t, const float* x, float* out, int n_tok, int index) {
    matvec(t.data, t.type, t.row_bytes, t.ne1, t.ne0, x, out, n_tok, index);
}

}  // namespace

RefState make_ref_state(const Qwen3MoeModel& m, int n_ctx) {
    RefState st;
    st.n_ctx = n_ctx;
    size_t per = static_cast<size_t>(m.hp.n_layer) * n_ctx * m.hp.n_head_kv * m.hp.head_dim;
    st.k_cache.assign(per, 0);
    st.v_cache.assign(per, 0);
    return st;
}

void forward_ref(const Qwen3MoeModel& m, RefState& st, int token, float* logits, RefBatch batch) {
    const auto& hp = m.hp;
    const int E = static_cast<int>(hp.n_embd), hd = static_cast<int>(hp.head_dim);
    const int nh = static_cast<int>(hp.n_head), nkv = static_cast<int>(hp.n_head_kv);
    const int kv_dim = nkv * hd, pos = st.n_past;
    if (pos >= st.n_ctx) throw std::out_of_range("context full");
    if (token < 0 || token >= static_cast<int>(hp.n_vocab)) throw std::out_of_range("token id out of range");

    std::vector<float> x(E), xn(E), q(nh * hd), k(kv_dim), v(kv_dim), att(nh * hd), tmp(E), cs;
    std::vector<uint16_t> q16, acc16;
    // 1. token embedding
    kernels::dequantize_row(m.tok_embd.type, m.tok_embd.row(token), x.data(), E);
    ops::rope_cache(pos, hd, hp.rope_freq_base, cs);

    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const Qwen3MoeLayer& L = m.layers[l];
        // 2. attention: norm, projections, per-head q/k norm, RoPE
        ops::rms_norm(x.data(), L.attn_norm.f32(), xn.data(), E, hp.rms_eps);
        matvec(L.wq, xn.data(), q.data(), batch.n_tok, batch.index);
        matvec(L.wk, xn.data(), k.data(), batch.n_tok, batch.index);
        matvec(L.wv, xn.data(), v.data(), batch.n_tok, batch.index);
        for (int h = 0; h < nh; ++h) {
            ops::rms_norm(&q[h * hd], L.q_norm.f32(), &q[h * hd], hd, hp.rms_eps);
            ops::rope_neox(&q[h * hd], hd, cs);
        }
        for (int h = 0; h < nkv; ++h) {
            ops::rms_norm(&k[h * hd], L.k_norm.f32(), &k[h * hd], hd, hp.rms_eps);
            ops::rope_neox(&k[h * hd], hd, cs);
        }
        // 3. append to the fp16 KV cache
        uint16_t* kc = &st.k_cache[(static_cast<size_t>(l) * st.n_ctx) * kv_dim];
        uint16_t* vc = &st.v_cache[(static_cast<size_t>(l) * st.n_ctx) * kv_dim];
        for (int i = 0; i < kv_dim; ++i) {
            kc[static_cast<size_t>(pos) * kv_dim + i] = fp32_to_fp16(k[i]);
            vc[static_cast<size_t>(pos) * kv_dim + i] = fp32_to_fp16(v[i]);
        }
        // 4. causal attention over positions 0..pos, query head h reads kv head h / (nh/nkv)
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (int h = 0; h < nh; ++h) {
            int kvh = h / (nh / nkv);
            if (ops::tiled_attention(batch.n_tok, hd))
                ops::attend_head_tiled(&q[h * hd], kc + kvh * hd, vc + kvh * hd, kv_dim, pos + 1, hd, scale, &att[h * hd]);
            else
                ops::attend_head(&q[h * hd], kc + kvh * hd, vc + kvh * hd, kv_dim, pos + 1, hd, scale, &att[h * hd], q16, acc16);
        }
        // 5. output projection and residual
        matvec(L.wo, att.data(), tmp.data(), batch.n_tok, batch.index);
        for (int i = 0; i < E; ++i) x[i] += tmp[i];

        // 6. MoE: router softmax, top-k, renormalised weights
        ops::rms_norm(x.data(), L.ffn_norm.f32(), xn.data(), E, hp.rms_eps);
        std::vector<float> probs(hp.n_expert);
        // llama.cpp keeps only the output rows for the last layer's feed-forward, so its router sees those.
        const bool last = l + 1 == hp.n_layer;
        matvec(L.gate_inp, xn.data(), probs.data(), last ? batch.n_out : batch.n_tok, last ? batch.out_index : batch.index);
        ops::softmax(probs.data(), static_cast<int>(hp.n_expert));
        std::vector<int> sel(hp.n_expert_used);
        ops::top_k(probs.data(), static_cast<int>(hp.n_expert), static_cast<int>(hp.n_expert_used), sel.data());
        double wsum = 0;
        for (int e : sel) wsum += probs[e];
        const float wnorm = std::max(static_cast<float>(wsum), 6.103515625e-5f);

        // 7. each selected expert: SwiGLU(gate, up) then down, weighted, summed in selection order
        const int F = static_cast<int>(hp.n_ff_exp);
        std::vector<float> g(F), u(F), y(E), moe_out(E, 0.f);
        for (size_t s = 0; s < sel.size(); ++s) {
            ExpertView ev = m.experts->get(l, static_cast<uint32_t>(sel[s]));  // released below
            matvec(ev.gate, L.gate_exps.type, L.gate_exps.row_bytes, F, E, xn.data(), g.data());
            matvec(ev.up, L.up_exps.type, L.up_exps.row_bytes, F, E, xn.data(), u.data());
            ops::swiglu(g.data(), u.data(), F);
            matvec(ev.down, L.down_exps.type, L.down_exps.row_bytes, E, F, g.data(), y.data());
            m.experts->release(l, static_cast<uint32_t>(sel[s]));
            const float w = probs[sel[s]] / wnorm;
            for (int i = 0; i < E; ++i) moe_out[i] = s == 0 ? y[i] * w : moe_out[i] + y[i] * w;
        }
        for (int i = 0; i < E; ++i) x[i] += moe_out[i];
    }
    // 8. final norm and output head
    ops::rms_norm(x.data(), m.output_norm.f32(), xn.data(), E, hp.rms_eps);
    matvec(m.output, xn.data(), logits, batch.n_out, batch.out_index);
    st.n_past++;
}

}  // namespace moe

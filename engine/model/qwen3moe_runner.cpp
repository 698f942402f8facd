#include "engine/model/qwen3moe_runner.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/kernels/attention.h"
#include "engine/model/ops.h"

namespace moe {

Qwen3MoeRunner::Qwen3MoeRunner(const Qwen3MoeModel& model, RunnerOptions opt)
    : m_(model), opt_(opt), pool_(opt.n_threads), kt_(kernels::active_table()) {
    const auto& hp = m_.hp;
    if (opt_.n_ctx <= 0) throw std::invalid_argument("context size must be positive");
    if (opt_.n_batch <= 0) opt_.n_batch = 256;
    const size_t kv_dim = size_t{hp.n_head_kv} * hp.head_dim;
    k_cache_.assign(size_t{hp.n_layer} * opt_.n_ctx * kv_dim, 0);
    v_cache_.assign(k_cache_.size(), 0);
    const size_t B = static_cast<size_t>(opt_.n_batch), E = hp.n_embd, Q = size_t{hp.n_head} * hp.head_dim;
    x_.resize(B * E);
    xn_.resize(B * E);
    tmp_.resize(B * E);
    q_.resize(B * Q);
    att_.resize(B * Q);
    k_.resize(B * kv_dim);
    v_.resize(B * kv_dim);
    probs_.resize(B * hp.n_expert);
    sel_.resize(B * hp.n_expert_used);
    sel_w_.resize(B * hp.n_expert_used);
    expert_out_.resize(B * hp.n_expert_used * E);
    gx_.resize(B * E);
    gg_.resize(B * hp.n_ff_exp);
    gu_.resize(B * hp.n_ff_exp);
    gy_.resize(B * E);
    selections_.assign(size_t{hp.n_layer} * hp.n_expert, 0);
}

void Qwen3MoeRunner::truncate(int n) {
    if (n < 0 || n > n_past_) throw std::out_of_range("truncate beyond the cached positions");
    n_past_ = n;
}

const float* Qwen3MoeRunner::logits(int i) const {
    if (logits_rows_ == 0) throw std::logic_error("no logits: eval() has not run");
    if (i < 0) i = logits_rows_ - 1;
    return logits_.data() + static_cast<size_t>(i) * m_.hp.n_vocab;
}

void Qwen3MoeRunner::matmul(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols,
                            const float* x, int64_t x_stride, int n_tok, float* out, int64_t out_stride, bool dense) {
    const size_t ab = kernels::activation_bytes(type, cols);
    if (act_.size() < ab * n_tok) act_.resize(ab * n_tok);
    for (int t = 0; t < n_tok; ++t) kernels::prepare_activations(type, x + t * x_stride, act_.data() + t * ab, cols);
    const kernels::MatmulDots dots = kernels::matmul_dots(kt_, type, rows, cols, n_tok, dense);
    const kernels::DotRowsFn dot_rows = dots.single_rows;
    const uint8_t* act = act_.data();
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        if (n_tok == 1 && dot_rows) {  // decode: the row loop inside the kernel
            dot_rows(cols, w + r0 * row_bytes, row_bytes, r1 - r0, act, out + r0);
            return;
        }
        for (int64_t r = r0; r < r1; ++r) {
            const uint8_t* row = w + r * row_bytes;
            for (int t = 0; t < n_tok; ++t) out[t * out_stride + r] = dots.at(t)(cols, row, act + t * ab);
        }
    });
}

// Three matmuls of the same input (q, k, v) as one parallel loop over their rows together.
void Qwen3MoeRunner::matmul3(const Tensor& a, float* oa, int64_t sa, const Tensor& b, float* ob, int64_t sb, const Tensor& c,
                             float* oc, int64_t sc, const float* x, int64_t x_stride, int n_tok) {
    const Tensor* w[3] = {&a, &b, &c};
    float* out[3] = {oa, ob, oc};
    const int64_t stride[3] = {sa, sb, sc};
    size_t ab[3], off[3], total = 0;
    for (int i = 0; i < 3; ++i) {
        ab[i] = kernels::activation_bytes(w[i]->type, w[i]->ne0);
        off[i] = total;
        total += ab[i] * static_cast<size_t>(n_tok);
    }
    if (act_.size() < total) act_.resize(total);
    for (int i = 0; i < 3; ++i)
        for (int t = 0; t < n_tok; ++t)
            kernels::prepare_activations(w[i]->type, x + t * x_stride, act_.data() + off[i] + t * ab[i], w[i]->ne0);
    const int64_t rows = a.ne1 + b.ne1 + c.ne1;
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            int i = 0;
            int64_t rr = r;
            while (rr >= w[i]->ne1) rr -= w[i++]->ne1;
            const kernels::MatmulDots dots = kernels::matmul_dots(kt_, w[i]->type, w[i]->ne1, w[i]->ne0, n_tok, true);
            const uint8_t* row = w[i]->row(rr);
            for (int t = 0; t < n_tok; ++t) out[i][t * stride[i] + rr] = dots.at(t)(w[i]->ne0, row, act_.data() + off[i] + t * ab[i]);
        }
    });
}

void Qwen3MoeRunner::eval(std::span<const int32_t> tokens, bool want_all_logits) {
    if (tokens.empty()) return;
    if (static_cast<int64_t>(n_past_) + static_cast<int64_t>(tokens.size()) > opt_.n_ctx)
        throw std::length_error("the prompt needs " + std::to_string(n_past_ + tokens.size()) +
                                " positions but the context holds " + std::to_string(opt_.n_ctx));
    for (int32_t t : tokens)
        if (t < 0 || t >= static_cast<int32_t>(m_.hp.n_vocab))
            throw std::out_of_range("token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                                    std::to_string(m_.hp.n_vocab - 1) + ")");
    const int total = static_cast<int>(tokens.size());
    logits_rows_ = want_all_logits ? total : 1;
    logits_.resize(static_cast<size_t>(logits_rows_) * m_.hp.n_vocab);
    for (int off = 0; off < total; off += opt_.n_batch) {
        const int n = std::min(opt_.n_batch, total - off);
        const bool last_chunk = off + n == total;
        if (want_all_logits || last_chunk) eval_chunk(tokens.data() + off, n, want_all_logits, want_all_logits ? off : -1);
        else eval_chunk(tokens.data() + off, n, false, -2);
    }
}

// out_base >= 0: write logits of all n tokens at row out_base; -1: last token only at row 0; -2: none.
void Qwen3MoeRunner::eval_chunk(const int32_t* tokens, int n, bool want_all_logits, int out_base) {
    const auto& hp = m_.hp;
    const int E = static_cast<int>(hp.n_embd), hd = static_cast<int>(hp.head_dim);
    const int nh = static_cast<int>(hp.n_head), nkv = static_cast<int>(hp.n_head_kv);
    const int Qd = nh * hd, kv_dim = nkv * hd;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

    for (int t = 0; t < n; ++t) kernels::dequantize_row(m_.tok_embd.type, m_.tok_embd.row(tokens[t]), &x_[t * E], E);
    last_layer_rows_ = want_all_logits ? n : (out_base == -2 ? 0 : 1);

    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const Qwen3MoeLayer& L = m_.layers[l];
        for (int t = 0; t < n; ++t) ops::rms_norm(&x_[t * E], L.attn_norm.f32(), &xn_[t * E], E, hp.rms_eps);
        matmul3(L.wq, q_.data(), Qd, L.wk, k_.data(), kv_dim, L.wv, v_.data(), kv_dim, xn_.data(), E, n);
        uint16_t* kc = &k_cache_[static_cast<size_t>(l) * opt_.n_ctx * kv_dim];
        uint16_t* vc = &v_cache_[static_cast<size_t>(l) * opt_.n_ctx * kv_dim];
        pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
            std::vector<float> cs;
            for (int64_t t = t0; t < t1; ++t) {
                const int pos = n_past_ + static_cast<int>(t);
                ops::rope_cache(pos, hd, hp.rope_freq_base, cs);
                for (int h = 0; h < nh; ++h) {
                    float* qh = &q_[t * Qd + h * hd];
                    ops::rms_norm(qh, L.q_norm.f32(), qh, hd, hp.rms_eps);
                    ops::rope_neox(qh, hd, cs);
                }
                for (int h = 0; h < nkv; ++h) {
                    float* kh = &k_[t * kv_dim + h * hd];
                    ops::rms_norm(kh, L.k_norm.f32(), kh, hd, hp.rms_eps);
                    ops::rope_neox(kh, hd, cs);
                }
                for (int i = 0; i < kv_dim; ++i) {
                    kc[static_cast<size_t>(pos) * kv_dim + i] = fp32_to_fp16(k_[t * kv_dim + i]);
                    vc[static_cast<size_t>(pos) * kv_dim + i] = fp32_to_fp16(v_[t * kv_dim + i]);
                }
            }
        });
        // Causal attention: token t sees positions 0..n_past+t. Work split over (token, head) pairs.
        const kernels::AttendFn attend = kernels::attention_kernel();
        const bool tiled = ops::tiled_attention(n, hd);  // as llama.cpp for a batch of n query rows
        const kernels::AttendTiledFn attend_tiled = kernels::tiled_attention_kernel();
        pool_.parallel_for(static_cast<int64_t>(n) * nh, [&](int64_t i0, int64_t i1) {
            std::vector<uint16_t> q16, acc16;
            for (int64_t i = i0; i < i1; ++i) {
                const int t = static_cast<int>(i / nh), h = static_cast<int>(i % nh), kvh = h / (nh / nkv);
                if (tiled)
                    attend_tiled(&q_[t * Qd + h * hd], kc + kvh * hd, vc + kvh * hd, kv_dim, n_past_ + t + 1, hd, scale,
                                 &att_[t * Qd + h * hd]);
                else
                    attend(&q_[t * Qd + h * hd], kc + kvh * hd, vc + kvh * hd, kv_dim, n_past_ + t + 1, hd, scale,
                           &att_[t * Qd + h * hd], q16, acc16);
            }
        });
        matmul(L.wo, att_.data(), Qd, n, tmp_.data(), E);
        for (int i = 0; i < n * E; ++i) x_[i] += tmp_[i];

        // As llama.cpp: the last layer's feed-forward runs only for the rows whose logits are wanted (moved to
        // the front): none in a middle chunk, else the last token, else all. Nothing else reads the others, and
        // the router's summation order depends on how many rows it sees.
        int n_ffn = n;
        if (l + 1 == hp.n_layer && !want_all_logits) {
            n_ffn = last_layer_rows_;
            if (n_ffn == 1 && n > 1) std::copy_n(&x_[static_cast<size_t>(n - 1) * E], E, x_.data());
        }
        for (int t = 0; t < n_ffn; ++t) ops::rms_norm(&x_[t * E], L.ffn_norm.f32(), &xn_[t * E], E, hp.rms_eps);
        if (n_ffn > 0) moe_ffn(l, n_ffn);
    }
    n_past_ += n;
    stats_.tokens_evaluated += static_cast<uint64_t>(n);
    if (out_base == -2) return;
    const int rows = want_all_logits ? n : 1;
    for (int t = 0; t < rows; ++t) ops::rms_norm(&x_[t * E], m_.output_norm.f32(), &xn_[t * E], E, hp.rms_eps);
    float* out = logits_.data() + static_cast<size_t>(std::max(0, out_base)) * hp.n_vocab;
    matmul(m_.output, xn_.data(), E, rows, out, hp.n_vocab);
}

// out[r] = W[r,:] . x on the calling thread (inside a parallel loop), activations prepared into `act`.
void Qwen3MoeRunner::matvec_serial(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
                                   float* out, uint8_t* act) const {
    kernels::prepare_activations(type, x, act, cols);
    const kernels::MatmulDots dots = kernels::matmul_dots(kt_, type, rows, cols, 1, false);
    if (dots.single_rows) {
        dots.single_rows(cols, w, row_bytes, rows, act, out);
        return;
    }
    const kernels::DotFn dot = dots.single;
    for (int64_t r = 0; r < rows; ++r) out[r] = dot(cols, w + r * row_bytes, act);
}

// Decode (a few tokens, every expert already in RAM): one parallel loop over the experts instead of three
// row-parallel matmuls per expert, each expert in its own scratch. Same kernels and expressions per row, so
// the results are the same bits as the row-parallel path.
void Qwen3MoeRunner::decode_experts_in_parallel(uint32_t l, const std::vector<uint32_t>& needed,
                                                const std::vector<std::vector<int>>& users) {
    const auto& hp = m_.hp;
    const Qwen3MoeLayer& L = m_.layers[l];
    const int E = static_cast<int>(hp.n_embd), F = static_cast<int>(hp.n_ff_exp), U = static_cast<int>(hp.n_expert_used);
    std::vector<std::pair<uint32_t, ExpertView>> ready;
    for (size_t k = 0; k < needed.size(); ++k) ready.push_back(m_.experts->next_ready(l));
    // Scratch per (expert, token) pair: hidden gate/up, output, and activation bytes.
    const size_t act_bytes = std::max(kernels::activation_bytes(L.gate_exps.type, E), kernels::activation_bytes(L.down_exps.type, F));
    size_t pairs = 0;
    for (const auto& [e, v] : ready) pairs += users[e].size();
    if (par_scratch_.size() < pairs * (2 * F + E)) par_scratch_.resize(pairs * (2 * F + E));
    if (par_act_.size() < pairs * act_bytes) par_act_.resize(pairs * act_bytes);
    std::vector<size_t> first(ready.size() + 1, 0);
    for (size_t k = 0; k < ready.size(); ++k) first[k + 1] = first[k] + users[ready[k].first].size();
    pool_.parallel_for(static_cast<int64_t>(ready.size()), [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
            const auto& [e, ev] = ready[k];
            const auto& who = users[e];
            for (size_t j = 0; j < who.size(); ++j) {
                const size_t slot = first[k] + j;
                float* g = &par_scratch_[slot * (2 * F + E)];
                float* u = g + F;
                float* y = u + F;
                uint8_t* act = &par_act_[slot * act_bytes];
                const float* x = &xn_[(who[j] / U) * E];
                matvec_serial(ev.gate, L.gate_exps.type, L.gate_exps.row_bytes, F, E, x, g, act);
                matvec_serial(ev.up, L.up_exps.type, L.up_exps.row_bytes, F, E, x, u, act);
                ops::swiglu(g, u, F);
                matvec_serial(ev.down, L.down_exps.type, L.down_exps.row_bytes, E, F, g, y, act);
                std::copy_n(y, E, &expert_out_[static_cast<size_t>(who[j]) * E]);
            }
        }
    });
    for (const auto& [e, v] : ready) {
        m_.experts->release(l, e);
        stats_.expert_loads++;
        stats_.expert_activations += users[e].size();
    }
}

// Speculative prefetch of layer l's experts: its router applied to the current residual stream (which changes
// slowly between layers), the union of every token's top-k.
void Qwen3MoeRunner::predict_and_prefetch(uint32_t l, int n) {
    const auto& hp = m_.hp;
    const Qwen3MoeLayer& L = m_.layers[l];
    const int E = static_cast<int>(hp.n_embd), X = static_cast<int>(hp.n_expert), U = static_cast<int>(hp.n_expert_used);
    // The last layer's feed-forward runs only for the rows whose logits are wanted (eval_chunk): the last ones.
    const int first = l + 1 == hp.n_layer ? n - std::min(n, last_layer_rows_) : 0;
    n -= first;
    if (n == 0) return;
    std::vector<float> norm(static_cast<size_t>(n) * E), logits(static_cast<size_t>(n) * X);
    for (int t = 0; t < n; ++t) ops::rms_norm(&x_[(first + t) * E], L.ffn_norm.f32(), &norm[t * E], E, hp.rms_eps);
    matmul(L.gate_inp, norm.data(), E, n, logits.data(), X);
    std::vector<char> chosen(static_cast<size_t>(X), 0);
    std::vector<int> top(static_cast<size_t>(U));
    for (int t = 0; t < n; ++t) {
        ops::top_k(&logits[t * X], X, U, top.data());  // softmax is monotonic: top-k of the logits
        for (int e : top) chosen[e] = 1;
    }
    predicted_.clear();
    for (int e = 0; e < X; ++e)
        if (chosen[e]) predicted_.push_back(static_cast<uint32_t>(e));
    predicted_layer_ = static_cast<int>(l);
    m_.experts->prefetch(l, predicted_);
}

// Router, top-k and experts for n tokens in xn_; adds the weighted expert outputs to x_.
void Qwen3MoeRunner::moe_ffn(uint32_t l, int n) {
    const auto& hp = m_.hp;
    const Qwen3MoeLayer& L = m_.layers[l];
    const int E = static_cast<int>(hp.n_embd), F = static_cast<int>(hp.n_ff_exp);
    const int X = static_cast<int>(hp.n_expert), U = static_cast<int>(hp.n_expert_used);
    matmul(L.gate_inp, xn_.data(), E, n, probs_.data(), X);
    for (int t = 0; t < n; ++t) {
        float* p = &probs_[t * X];
        ops::softmax(p, X);
        ops::top_k(p, X, U, &sel_[t * U]);
        double sum = 0;
        for (int s = 0; s < U; ++s) sum += p[sel_[t * U + s]];
        const float norm = std::max(static_cast<float>(sum), 6.103515625e-5f);
        for (int s = 0; s < U; ++s) sel_w_[t * U + s] = p[sel_[t * U + s]] / norm;
    }
    // Group (token, slot) pairs by expert: each expert's weights are fetched once for the whole batch.
    std::vector<std::vector<int>> users(X);
    for (int i = 0; i < n * U; ++i) {
        users[sel_[i]].push_back(i);
        selections_[static_cast<size_t>(l) * X + sel_[i]]++;
    }
    // Every expert this layer needs is requested at once; each is computed as soon as its bytes are in RAM
    // (completion order). The weighted sum below is in selection order, so the order here cannot change it.
    std::vector<uint32_t> needed;
    for (int e = 0; e < X; ++e)
        if (!users[e].empty()) needed.push_back(static_cast<uint32_t>(e));
    ExpertSource& src = *m_.experts;
    if (!predicted_.empty() && predicted_layer_ == static_cast<int>(l)) {
        for (uint32_t e : needed) stats_.prefetch_predicted_hits += std::count(predicted_.begin(), predicted_.end(), e) ? 1 : 0;
        stats_.prefetch_predicted_total += needed.size();
    }
    src.request(l, needed);
    if (src.streams() && l + 1 < hp.n_layer) predict_and_prefetch(l + 1, n);
    try {
        if (!src.streams() && n <= 4) {
            decode_experts_in_parallel(l, needed, users);
        } else {
            for (size_t k = 0; k < needed.size(); ++k) {
                auto [e, ev] = src.next_ready(l);
                const auto& who = users[e];
                const int c = static_cast<int>(who.size());
                for (int j = 0; j < c; ++j) std::copy_n(&xn_[(who[j] / U) * E], E, &gx_[j * E]);
                matmul(ev.gate, L.gate_exps.type, L.gate_exps.row_bytes, F, E, gx_.data(), E, c, gg_.data(), F, false);
                matmul(ev.up, L.up_exps.type, L.up_exps.row_bytes, F, E, gx_.data(), E, c, gu_.data(), F, false);
                for (int j = 0; j < c; ++j) ops::swiglu(&gg_[j * F], &gu_[j * F], F);
                matmul(ev.down, L.down_exps.type, L.down_exps.row_bytes, E, F, gg_.data(), F, c, gy_.data(), E, false);
                src.release(l, e);
                for (int j = 0; j < c; ++j) std::copy_n(&gy_[j * E], E, &expert_out_[static_cast<size_t>(who[j]) * E]);
                stats_.expert_loads++;
                stats_.expert_activations += static_cast<uint64_t>(c);
            }
        }
    } catch (...) {
        src.abandon();
        throw;
    }
    // Weighted sum in selection order, as llama.cpp adds the experts' views one after another.
    for (int t = 0; t < n; ++t) {
        for (int i = 0; i < E; ++i) {
            float acc = expert_out_[(static_cast<size_t>(t) * U) * E + i] * sel_w_[t * U];
            for (int s = 1; s < U; ++s) acc += expert_out_[(static_cast<size_t>(t) * U + s) * E + i] * sel_w_[t * U + s];
            x_[t * E + i] += acc;
        }
    }
}

}  // namespace moe

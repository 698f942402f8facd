// Feed-forward kinds: a dense gated FFN, and MoE (routing in routing.cpp; routed experts from the expert
// source, grouped by expert so each is fetched once per batch; an optional shared expert).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/forward/residual_mix.h"
#include "engine/forward/routing.h"
#include "engine/forward/runner.h"

namespace moe {

// build_ffn(SILU or SWIGLU_OAI, PAR): up and gate projections, the gated activation, down; out = that + x.
void Runner::ffn_dense(uint32_t l, int n) {
    const DenseFfnWeights& w = m_.layers[l].dense;
    const int E = static_cast<int>(m_.hp.n_embd), F = static_cast<int>(w.gate.ne1);
    matmul(w.up, xn_.data(), E, n, ffn_u_.data(), F);
    matmul(w.gate, xn_.data(), E, n, ffn_g_.data(), F);
    for (int t = 0; t < n; ++t) ffn_activation(m_.hp, fops_, &ffn_g_[t * F], &ffn_u_[t * F], F);
    matmul(w.down, ffn_g_.data(), F, n, tmp_.data(), E);
    for (int i = 0; i < n * E; ++i) x_[i] += tmp_[i];
}

// The shared expert: the same gated FFN as a dense layer over every token, into out.
void Runner::shared_expert(uint32_t l, int n, float* out) {
    const MoeWeights& w = m_.layers[l].experts;
    const int E = static_cast<int>(m_.hp.n_embd), F = static_cast<int>(w.gate_sh.ne1);
    matmul(w.up_sh, xn_.data(), E, n, ffn_u_.data(), F);
    matmul(w.gate_sh, xn_.data(), E, n, ffn_g_.data(), F);
    for (int t = 0; t < n; ++t) ffn_activation(m_.hp, fops_, &ffn_g_[t * F], &ffn_u_[t * F], F, m_.layers[l].swiglu_limit_sh);
    matmul(w.down_sh, ffn_g_.data(), F, n, out, E);
}

// out[r] = W[r,:] . x on the calling thread (inside a parallel loop), activations prepared into `act`.
void Runner::matvec_serial(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, float* out,
                           uint8_t* act) const {
    kernels::prepare_activations(type, x, act, cols);
    matvec_prepared(w, type, row_bytes, rows, cols, act, out);
}

void Runner::matvec_prepared(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const uint8_t* act, float* out) const {
    const kernels::MatmulDots dots = kernels::matmul_dots(kt_, type, rows, cols, 1, false);
    if (dots.single_rows) {
        dots.single_rows(cols, w, row_bytes, rows, act, out);
        return;
    }
    const kernels::DotFn dot = dots.single;
    for (int64_t r = 0; r < rows; ++r) out[r] = dot(cols, w + r * row_bytes, act);
}

// Every routed expert of a token reads the same input: the layer's n token inputs (xn_) quantized once here,
// per type of gate and up, not once per expert and matrix. The conversion is deterministic, so each expert
// gathers the same bytes it would have made itself.
Runner::ExpertInputs Runner::prepare_expert_inputs(const MoeWeights& L, int n_tok) {
    const int64_t E = expert_width();
    const float* rows = expert_rows(L);
    ExpertInputs in;
    in.width = E;
    in.ab_gate = kernels::activation_bytes(L.gate.type, E);
    in.ab_up = kernels::activation_bytes(L.up.type, E);
    const bool shared_act = L.up.type == L.gate.type;
    in_act_.resize(static_cast<size_t>(n_tok) * (in.ab_gate + (shared_act ? 0 : in.ab_up)));
    in.gate = in_act_.data();
    in.up = shared_act ? in.gate : in.gate + static_cast<size_t>(n_tok) * in.ab_gate;
    auto prepare = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            kernels::prepare_activations(L.gate.type, &rows[static_cast<size_t>(t) * E], in.gate + t * in.ab_gate, E);
            if (!shared_act) kernels::prepare_activations(L.up.type, &rows[static_cast<size_t>(t) * E], in.up + t * in.ab_up, E);
        }
    };
    if (n_tok > 8) pool_.parallel_for(n_tok, prepare);
    else prepare(0, n_tok);
    return in;
}

// The prepared inputs of the tokens `who` (token = who / U) one after another.
static void gather_inputs(const uint8_t* prepared, size_t ab, const std::vector<int>& who, int U, uint8_t* out) {
    for (size_t j = 0; j < who.size(); ++j) std::memcpy(out + j * ab, prepared + static_cast<size_t>(who[j] / U) * ab, ab);
}

// An expert's gate and up projections of its tokens `who` into gg_ and gu_, from the layer's prepared inputs:
// one parallel loop over both tensors' rows.
void Runner::expert_gate_up(const ExpertView& ev, const MoeWeights& L, const ExpertInputs& in, const std::vector<int>& who) {
    const int64_t E = in.width, F = L.gate.n_out;
    const int c = static_cast<int>(who.size()), U = static_cast<int>(m_.hp.moe.n_expert_used);
    const bool shared_act = in.up == in.gate;
    const size_t gate_bytes = in.ab_gate * static_cast<size_t>(c);
    if (act_.size() < gate_bytes + (shared_act ? 0 : in.ab_up * c)) act_.resize(gate_bytes + (shared_act ? 0 : in.ab_up * c));
    gather_inputs(in.gate, in.ab_gate, who, U, act_.data());
    if (!shared_act) gather_inputs(in.up, in.ab_up, who, U, act_.data() + gate_bytes);
    const kernels::MatmulDots gate_dots = kernels::matmul_dots(kt_, L.gate.type, F, E, kernel_rows(c), false);
    const kernels::MatmulDots up_dots = kernels::matmul_dots(kt_, L.up.type, F, E, kernel_rows(c), false);
    const uint8_t* gate_act = act_.data();
    const uint8_t* up_act = shared_act ? gate_act : gate_act + gate_bytes;
    parallel_rows(2 * F, std::max(gate_dots.row_group, up_dots.row_group), [&](int64_t r0, int64_t r1) {
        if (r0 < F) matmul_rows(gate_dots, ev.gate, L.gate.row_bytes, E, r0, std::min(r1, F), gate_act, in.ab_gate, c, gg_.data(), F);
        if (r1 > F) matmul_rows(up_dots, ev.up, L.up.row_bytes, E, std::max(r0, F) - F, r1 - F, up_act, in.ab_up, c, gu_.data(), F);
    });
}

// Decode (a few tokens, every expert already in RAM): one parallel loop over the experts instead of three
// row-parallel matmuls per expert, each expert in its own scratch. Same kernels and expressions per row, so
// the results are the same bits as the row-parallel path.
void Runner::decode_experts_in_parallel(uint32_t l, const std::vector<uint32_t>& needed, const std::vector<std::vector<int>>& users) {
    const MoeWeights& L = m_.layers[l].experts;
    const int E = static_cast<int>(expert_width()), F = static_cast<int>(L.gate.n_out), U = static_cast<int>(m_.hp.moe.n_expert_used);
    const float limit = m_.layers[l].swiglu_limit;
    std::vector<std::pair<uint32_t, ExpertView>> ready;
    for (size_t k = 0; k < needed.size(); ++k) ready.push_back(m_.experts->next_ready(l));
    const size_t act_bytes = std::max(kernels::activation_bytes(L.gate.type, E), kernels::activation_bytes(L.down.type, F));
    size_t pairs = 0;
    for (const auto& [e, v] : ready) pairs += users[e].size();
    if (par_scratch_.size() < pairs * (2 * F + E)) par_scratch_.resize(pairs * (2 * F + E));
    if (par_act_.size() < pairs * act_bytes) par_act_.resize(pairs * act_bytes);
    std::vector<size_t> first(ready.size() + 1, 0);
    for (size_t k = 0; k < ready.size(); ++k) first[k + 1] = first[k] + users[ready[k].first].size();
    int n_tok = 0;
    for (const auto& [e, v] : ready)
        for (int who : users[e]) n_tok = std::max(n_tok, who / U + 1);
    const ExpertInputs in = prepare_expert_inputs(L, n_tok);
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
                const int t = who[j] / U;
                matvec_prepared(ev.gate, L.gate.type, L.gate.row_bytes, F, E, in.gate + t * in.ab_gate, g);
                matvec_prepared(ev.up, L.up.type, L.up.row_bytes, F, E, in.up + t * in.ab_up, u);
                expert_activation(m_.hp, L, fops_, e, g, u, F, limit);
                matvec_serial(ev.down, L.down.type, L.down.row_bytes, E, F, g, y, act);
                expert_down_bias(L, e, y, E);
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

// A prompt batch with every expert in RAM: one parallel loop over the experts, each thread running whole
// experts over all their tokens with the tile kernels (one thread-pool round per layer instead of two per
// expert). The same kernels and orders per (row, token) as the row-parallel path, so the same bits.
void Runner::prompt_experts_in_parallel(uint32_t l, const std::vector<uint32_t>& needed, const std::vector<std::vector<int>>& users) {
    const MoeWeights& L = m_.layers[l].experts;
    const int64_t E = expert_width(), F = L.gate.n_out;
    const int U = static_cast<int>(m_.hp.moe.n_expert_used);
    const float limit = m_.layers[l].swiglu_limit;
    std::vector<std::pair<uint32_t, ExpertView>> ready;
    for (size_t k = 0; k < needed.size(); ++k) ready.push_back(m_.experts->next_ready(l));
    // Busiest experts first, one at a time: an expert's cost is its token count, so the threads end together
    // (each expert writes only its own tokens' rows: the order cannot change a result).
    std::stable_sort(ready.begin(), ready.end(), [&](const auto& a, const auto& b) { return users[a.first].size() > users[b.first].size(); });
    size_t most = 0;
    for (const auto& [e, v] : ready) most = std::max(most, users[e].size());
    int n_tok = 0;
    for (const auto& [e, v] : ready)
        for (int who : users[e]) n_tok = std::max(n_tok, who / U + 1);
    const ExpertInputs in = prepare_expert_inputs(L, n_tok);
    const size_t ab_down = kernels::activation_bytes(L.down.type, F);
    pool_.parallel_for(static_cast<int64_t>(ready.size()), 1, [&](int64_t k0, int64_t k1) {
        // Per thread, kept between calls (a range is one expert: allocating per range paged in fresh memory).
        thread_local std::vector<float> g, u, y;
        thread_local std::vector<uint8_t> act;
        g.resize(most * F);
        u.resize(most * F);
        y.resize(most * E);
        act.resize(most * std::max({in.ab_gate, in.ab_up, ab_down}));
        auto project = [&](const uint8_t* w, const ExpertTensor& t, int64_t rows, int64_t cols, size_t ab, int c, float* out) {
            matmul_rows(kernels::matmul_dots(kt_, t.type, rows, cols, kernel_rows(c), false), w, t.row_bytes, cols, 0, rows, act.data(), ab, c, out,
                        rows);
        };
        for (int64_t k = k0; k < k1; ++k) {
            const auto& [e, ev] = ready[k];
            const auto& who = users[e];
            const int c = static_cast<int>(who.size());
            gather_inputs(in.gate, in.ab_gate, who, U, act.data());
            project(ev.gate, L.gate, F, E, in.ab_gate, c, g.data());
            if (in.up != in.gate) gather_inputs(in.up, in.ab_up, who, U, act.data());
            project(ev.up, L.up, F, E, in.ab_up, c, u.data());
            for (int j = 0; j < c; ++j) expert_activation(m_.hp, L, fops_, e, &g[j * F], &u[j * F], static_cast<int>(F), limit);
            for (int j = 0; j < c; ++j) kernels::prepare_activations(L.down.type, &g[j * F], act.data() + j * ab_down, F);
            project(ev.down, L.down, E, F, ab_down, c, y.data());
            for (int j = 0; j < c; ++j) expert_down_bias(L, e, &y[j * E], static_cast<int>(E));
            for (int j = 0; j < c; ++j) std::copy_n(&y[j * E], E, &expert_out_[static_cast<size_t>(who[j]) * E]);
        }
    });
    for (const auto& [e, v] : ready) {
        m_.experts->release(l, e);
        stats_.expert_loads++;
        stats_.expert_activations += users[e].size();
    }
}

// Speculative prefetch of layer l's experts: its router applied to the current residual stream (which changes
// slowly between layers), the union of every token's selection.
void Runner::predict_and_prefetch(uint32_t l, int n, bool track) {
    const Hparams& hp = m_.hp;
    const Layer& L = m_.layers[l];
    if (!L.moe) return;
    const int E = static_cast<int>(hp.n_embd), X = static_cast<int>(hp.moe.n_expert), U = static_cast<int>(hp.moe.n_expert_used);
    // The last layer's feed-forward runs only for the rows whose logits are wanted (eval_chunk): the last ones.
    const int first = l + 1 == hp.n_layer && !hp.output_rows_after_norm ? n - std::min(n, last_layer_rows_) : 0;
    n -= first;
    if (n == 0) return;
    std::vector<float> norm(static_cast<size_t>(n) * E), logits(static_cast<size_t>(n) * X), w(static_cast<size_t>(U));
    // With residual attention the router reads a mixture of the banked inputs, not the stream alone (which a
    // banking layer restarts): the guess mixes with what is banked so far.
    const size_t banks = res_banks();
    std::vector<float> mixed(hp.res_block ? E : 0), scratch(mixed.size());
    for (int t = 0; t < n; ++t) {
        // (hyper-connections: x_ collects the feed-forward's output; its input is in hc_in_)
        const float* row = hp.hyper.n ? &hc_in_[(first + t) * E] : &x_[(first + t) * E];
        if (hp.res_block) {
            residual_mix(fops_, &res_banked_[(first + t) * banks * E], n_banked_, E, row, L.ffn_res_score.f32(), E, hp.rms_eps, mixed.data(),
                         scratch.data());
            row = mixed.data();
        }
        fops_.norm(row, L.ffn_norm.f32(), &norm[t * E], E, hp.rms_eps);
    }
    matmul(L.experts.router, norm.data(), E, n, logits.data(), X);
    std::vector<char> chosen(static_cast<size_t>(X), 0);
    std::vector<int> top(static_cast<size_t>(U));
    for (int t = 0; t < n; ++t) {
        route_token(hp.moe, L.experts, fops_, &logits[t * X], top.data(), w.data(), row_tokens_[first + t]);
        for (int e : top) chosen[e] = 1;
    }
    std::vector<uint32_t> guess;
    for (int e = 0; e < X; ++e)
        if (chosen[e]) guess.push_back(static_cast<uint32_t>(e));
    m_.experts->prefetch(l, guess);
    if (track) {
        predicted_ = std::move(guess);
        predicted_layer_ = static_cast<int>(l);
    }
}

// Router, selection and experts for n tokens in xn_; adds (routed + shared) to x_.
void Runner::ffn_moe(uint32_t l, int n) {
    const Hparams& hp = m_.hp;
    const MoeWeights& L = m_.layers[l].experts;
    const int E = static_cast<int>(hp.n_embd), F = static_cast<int>(L.gate.n_out), D = static_cast<int>(expert_width());
    const int X = static_cast<int>(hp.moe.n_expert), U = static_cast<int>(hp.moe.n_expert_used);
    if (L.gate_sh.present()) {
        shared_expert(l, n, sh_out_.data());  // before the routed experts reuse the scratch
        if (L.gate_inp_sh.present()) {        // qwen35moe: the shared expert scaled by sigmoid(gate_inp_sh . x)
            std::vector<float> gate(static_cast<size_t>(n));
            matmul(L.gate_inp_sh, xn_.data(), E, n, gate.data(), 1);
            for (int t = 0; t < n; ++t) {
                const float s = ops::sigmoid(gate[t]);
                for (int i = 0; i < E; ++i) sh_out_[t * E + i] *= s;
            }
        }
    }
    matmul(L.router, xn_.data(), E, n, probs_.data(), X);
    if (L.routed_down.present()) matmul(L.routed_down, xn_.data(), E, n, expert_in_.data(), D);  // latent MoE: the experts' input
    for (int t = 0; t < n; ++t) route_token(hp.moe, L, fops_, &probs_[t * X], &sel_[t * U], &sel_w_[t * U], row_tokens_[t]);
    // The hidden-state pass (hidden_all_rows) repeats the chunk's last layer: its routing is counted once.
    if (opt_.routing_trace && !hidden_pass_) opt_.routing_trace->route(l, n, U, sel_.data(), sel_w_.data());
    // Group (token, slot) pairs by expert: each expert's weights are fetched once for the whole batch.
    std::vector<std::vector<int>> users(X);
    for (int i = 0; i < n * U; ++i) {
        users[sel_[i]].push_back(i);
        if (!hidden_pass_) selections_[static_cast<size_t>(l) * X + sel_[i]]++;
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
    if (src.streams()) {
        // The next MoE layers' likely experts go in flight behind this layer's demand reads.
        int ahead = 0;
        for (uint32_t next = l + 1; next < hp.n_layer && ahead < opt_.prefetch_layers; ++next)
            if (m_.layers[next].moe) predict_and_prefetch(next, n, ahead++ == 0);
    }
    try {
        const ExpertInputs in = src.streams() ? prepare_expert_inputs(L, n) : ExpertInputs{};
        if (!src.streams() && n <= 4) {
            decode_experts_in_parallel(l, needed, users);
        } else if (!src.streams()) {
            prompt_experts_in_parallel(l, needed, users);
        } else {
            for (size_t k = 0; k < needed.size(); ++k) {
                auto [e, ev] = src.next_ready(l);
                const auto& who = users[e];
                const int c = static_cast<int>(who.size());
                expert_gate_up(ev, L, in, who);
                for (int j = 0; j < c; ++j) expert_activation(hp, L, fops_, e, &gg_[j * F], &gu_[j * F], F, m_.layers[l].swiglu_limit);
                matmul(ev.down, L.down.type, L.down.row_bytes, D, F, gg_.data(), F, c, gy_.data(), D, false);
                for (int j = 0; j < c; ++j) expert_down_bias(L, e, &gy_[j * D], D);
                src.release(l, e);
                for (int j = 0; j < c; ++j) std::copy_n(&gy_[j * D], D, &expert_out_[static_cast<size_t>(who[j]) * D]);
                stats_.expert_loads++;
                stats_.expert_activations += static_cast<uint64_t>(c);
            }
        }
    } catch (...) {
        src.abandon();
        throw;
    }
    // Weighted sum in selection order, as llama.cpp adds the experts' views one after another (latent MoE: then
    // RMSNorm and routed_up); then the shared expert; then the residual.
    float* routed = gy_.data();
    for (int t = 0; t < n; ++t) {
        for (int i = 0; i < D; ++i) {
            float acc = expert_out_[(static_cast<size_t>(t) * U) * D + i] * sel_w_[t * U];
            for (int s = 1; s < U; ++s) {
                const float y = expert_out_[(static_cast<size_t>(t) * U + s) * D + i];
                acc = fops_.ik ? std::fma(y, sel_w_[t * U + s], acc) : acc + y * sel_w_[t * U + s];  // ik: fused (iqk_mul_multi_add)
            }
            routed[t * D + i] = acc;
        }
    }
    if (L.routed_up.present()) {
        if (L.routed_norm.present())
            for (int t = 0; t < n; ++t) fops_.norm(&routed[t * D], L.routed_norm.f32(), &routed[t * D], D, hp.rms_eps);
        matmul(L.routed_up, routed, D, n, tmp_.data(), E);
        routed = tmp_.data();
    }
    const bool shared = L.gate_sh.present();
    for (int i = 0; i < n * E; ++i) x_[i] += shared ? routed[i] + sh_out_[i] : routed[i];
}

}  // namespace moe

// The MoE feed-forward kind: the router and selection (routing.cpp), the routed experts from the expert
// source (in RAM or streamed), grouped by expert so each is fetched once per batch and computed as its bytes
// arrive; an optional shared expert (gated_ffn.h) with qwen35moe's sigmoid gate; the latent MoE's projections.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/forward/gated_ffn.h"
#include "engine/forward/layer_unit.h"
#include "engine/forward/routing.h"
#include "engine/forward/runner.h"

namespace moe {
namespace {

class MoeFeedForward final : public FeedForwardUnit {
public:
    explicit MoeFeedForward(const Model&) {}
    template <class Size>
    static void scratch(const Model& m, const RunnerOptions& opt, Size&& size) {
        const Hparams& hp = m.hp;
        const MoeConfig& mc = hp.moe;
        const size_t B = batch_rows(opt), E = hp.n_embd;
        size(&MoeFeedForward::probs_, B * mc.n_expert);
        size(&MoeFeedForward::sel_, B * mc.n_expert_used);
        size(&MoeFeedForward::sel_w_, B * mc.n_expert_used);
        size(&MoeFeedForward::expert_out_, B * mc.n_expert_used * E);
        size(&MoeFeedForward::gg_, B * mc.n_ff_exp);
        size(&MoeFeedForward::gu_, B * mc.n_ff_exp);
        size(&MoeFeedForward::gy_, B * E);
        size(&MoeFeedForward::sh_out_, B * E);
        if (mc.n_ff_shexp) {
            size(&MoeFeedForward::sh_g_, B * mc.n_ff_shexp);
            size(&MoeFeedForward::sh_u_, B * mc.n_ff_shexp);
        }
        if (mc.n_latent) size(&MoeFeedForward::expert_in_, B * mc.n_latent);
    }
    void forward(LayerContext& cx, uint32_t l, int n) override;

private:
    struct ExpertInputs {  // the layer's token inputs quantized for the experts' gate and up (up == gate when their types agree)
        uint8_t* gate = nullptr;
        uint8_t* up = nullptr;
        size_t ab_gate = 0, ab_up = 0;
        int64_t width = 0;  // the experts' input and output width: n_embd, or the latent MoE's
    };
    ExpertInputs prepare_expert_inputs(LayerContext& cx, const MoeWeights& L, int n_tok);
    static int64_t expert_width(const Hparams& hp) { return hp.moe.n_latent ? hp.moe.n_latent : hp.n_embd; }
    // The experts' inputs: the normed rows, or (latent MoE) routed_down . them in expert_in_.
    const float* expert_rows(LayerContext& cx, const MoeWeights& L) { return L.routed_down.present() ? expert_in_.data() : cx.xn(); }
    void expert_gate_up(LayerContext& cx, const ExpertView& ev, const MoeWeights& L, const ExpertInputs& in, const std::vector<int>& who);
    void decode_experts_in_parallel(LayerContext& cx, uint32_t l, const std::vector<uint32_t>& needed, const std::vector<std::vector<int>>& users);
    void prompt_experts_in_parallel(LayerContext& cx, uint32_t l, const std::vector<uint32_t>& needed, const std::vector<std::vector<int>>& users);
    // One token of an expert's n_tok in this step: the kernels of a matmul of n_tok columns (ik's Q4_K_R4 /
    // Q6_K_R4 round a lone column otherwise than a batch's).
    void matvec_serial(const LayerContext& cx, const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
                       float* out, uint8_t* act, int n_tok) const;
    // The same on activations already prepared for `type` (kernels::prepare_activations).
    void matvec_prepared(const LayerContext& cx, const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const uint8_t* act,
                         float* out, int n_tok) const;

    std::vector<float> probs_;                 // [n][n_expert] router output
    std::vector<int> sel_;                     // [n][n_expert_used] chosen experts, llama.cpp's order
    std::vector<float> sel_w_;                 // [n][n_expert_used] their weights
    std::vector<float> expert_out_;            // [n][n_expert_used][width]
    std::vector<float> gg_, gu_, gy_;          // per-expert hidden / outputs
    std::vector<float> sh_g_, sh_u_, sh_out_;  // the shared expert's hidden and output
    std::vector<float> expert_in_;             // latent MoE: the experts' input rows
    std::vector<uint8_t> in_act_;              // each token's expert input quantized once per layer (gate, up types)
    std::vector<float> par_scratch_;           // decode_experts_in_parallel: per (expert, token) gate|up|out
    std::vector<uint8_t> par_act_;             // ... and its activation bytes
};

// out[r] = W[r,:] . x on the calling thread (inside a parallel loop), activations prepared into `act`.
void MoeFeedForward::matvec_serial(const LayerContext& cx, const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols,
                                   const float* x, float* out, uint8_t* act, int n_tok) const {
    kernels::prepare_activations(type, x, act, cols);
    matvec_prepared(cx, w, type, row_bytes, rows, cols, act, out, n_tok);
}

void MoeFeedForward::matvec_prepared(const LayerContext& cx, const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols,
                                     const uint8_t* act, float* out, int n_tok) const {
    const kernels::MatmulDots dots = kernels::matmul_dots(cx.kernels(), type, rows, cols, cx.kernel_rows(n_tok), false);
    if (const kernels::DotRowsFn rows_fn = dots.rows_at(0)) {
        rows_fn(cols, w, row_bytes, rows, act, out);
        return;
    }
    const kernels::DotFn dot = dots.at(0);
    for (int64_t r = 0; r < rows; ++r) out[r] = dot(cols, w + r * row_bytes, act);
}

// Every routed expert of a token reads the same input: the layer's n token inputs (xn_) quantized once here,
// per type of gate and up, not once per expert and matrix. The conversion is deterministic, so each expert
// gathers the same bytes it would have made itself.
MoeFeedForward::ExpertInputs MoeFeedForward::prepare_expert_inputs(LayerContext& cx, const MoeWeights& L, int n_tok) {
    const int64_t E = expert_width(cx.hp());
    const float* rows = expert_rows(cx, L);
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
    if (n_tok > 8) cx.pool().parallel_for(n_tok, prepare);
    else prepare(0, n_tok);
    return in;
}

// The prepared inputs of the tokens `who` (token = who / U) one after another.
void gather_inputs(const uint8_t* prepared, size_t ab, const std::vector<int>& who, int U, uint8_t* out) {
    for (size_t j = 0; j < who.size(); ++j) std::memcpy(out + j * ab, prepared + static_cast<size_t>(who[j] / U) * ab, ab);
}

// An expert's gate and up projections of its tokens `who` into gg_ and gu_, from the layer's prepared inputs:
// one parallel loop over both tensors' rows.
void MoeFeedForward::expert_gate_up(LayerContext& cx, const ExpertView& ev, const MoeWeights& L, const ExpertInputs& in,
                                    const std::vector<int>& who) {
    const int64_t E = in.width, F = L.gate.n_out;
    const int c = static_cast<int>(who.size()), U = static_cast<int>(cx.hp().moe.n_expert_used);
    const bool shared_act = in.up == in.gate;
    const size_t gate_bytes = in.ab_gate * static_cast<size_t>(c);
    uint8_t* act = cx.activations(gate_bytes + (shared_act ? 0 : in.ab_up * c));
    gather_inputs(in.gate, in.ab_gate, who, U, act);
    if (!shared_act) gather_inputs(in.up, in.ab_up, who, U, act + gate_bytes);
    const kernels::MatmulDots gate_dots = kernels::matmul_dots(cx.kernels(), L.gate.type, F, E, cx.kernel_rows(c), false);
    const kernels::MatmulDots up_dots = kernels::matmul_dots(cx.kernels(), L.up.type, F, E, cx.kernel_rows(c), false);
    const uint8_t* gate_act = act;
    const uint8_t* up_act = shared_act ? gate_act : gate_act + gate_bytes;
    cx.parallel_rows(2 * F, std::max(gate_dots.row_group, up_dots.row_group), [&](int64_t r0, int64_t r1) {
        if (r0 < F) matmul_rows(gate_dots, ev.gate, L.gate.row_bytes, E, r0, std::min(r1, F), gate_act, in.ab_gate, c, gg_.data(), F);
        if (r1 > F) matmul_rows(up_dots, ev.up, L.up.row_bytes, E, std::max(r0, F) - F, r1 - F, up_act, in.ab_up, c, gu_.data(), F);
    });
}

// Decode (a few tokens, every expert already in RAM): one parallel loop over the experts instead of three
// row-parallel matmuls per expert, each expert in its own scratch. Same kernels and expressions per row, so
// the results are the same bits as the row-parallel path.
void MoeFeedForward::decode_experts_in_parallel(LayerContext& cx, uint32_t l, const std::vector<uint32_t>& needed,
                                                const std::vector<std::vector<int>>& users) {
    const MoeWeights& L = cx.model().layers[l].experts;
    const int E = static_cast<int>(expert_width(cx.hp())), F = static_cast<int>(L.gate.n_out), U = static_cast<int>(cx.hp().moe.n_expert_used);
    const float limit = cx.model().layers[l].swiglu_limit;
    std::vector<std::pair<uint32_t, ExpertView>> ready;
    for (size_t k = 0; k < needed.size(); ++k) ready.push_back(cx.model().experts->next_ready(l));
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
    const ExpertInputs in = prepare_expert_inputs(cx, L, n_tok);
    cx.pool().parallel_for(static_cast<int64_t>(ready.size()), [&](int64_t k0, int64_t k1) {
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
                const int c = static_cast<int>(who.size());
                matvec_prepared(cx, ev.gate, L.gate.type, L.gate.row_bytes, F, E, in.gate + t * in.ab_gate, g, c);
                matvec_prepared(cx, ev.up, L.up.type, L.up.row_bytes, F, E, in.up + t * in.ab_up, u, c);
                expert_activation(cx.hp(), L, cx.fops(), e, g, u, F, limit);
                matvec_serial(cx, ev.down, L.down.type, L.down.row_bytes, E, F, g, y, act, c);
                expert_down_bias(L, e, y, E);
                std::copy_n(y, E, &expert_out_[static_cast<size_t>(who[j]) * E]);
            }
        }
    });
    for (const auto& [e, v] : ready) {
        cx.model().experts->release(l, e);
        cx.stats().expert_loads++;
        cx.stats().expert_activations += users[e].size();
    }
}

// A prompt batch with every expert in RAM: one parallel loop over the experts, each thread running whole
// experts over all their tokens with the tile kernels (one thread-pool round per layer instead of two per
// expert). The same kernels and orders per (row, token) as the row-parallel path, so the same bits.
void MoeFeedForward::prompt_experts_in_parallel(LayerContext& cx, uint32_t l, const std::vector<uint32_t>& needed,
                                                const std::vector<std::vector<int>>& users) {
    const MoeWeights& L = cx.model().layers[l].experts;
    const int64_t E = expert_width(cx.hp()), F = L.gate.n_out;
    const int U = static_cast<int>(cx.hp().moe.n_expert_used);
    const float limit = cx.model().layers[l].swiglu_limit;
    std::vector<std::pair<uint32_t, ExpertView>> ready;
    for (size_t k = 0; k < needed.size(); ++k) ready.push_back(cx.model().experts->next_ready(l));
    // Busiest experts first, one at a time: an expert's cost is its token count, so the threads end together
    // (each expert writes only its own tokens' rows: the order cannot change a result).
    std::stable_sort(ready.begin(), ready.end(), [&](const auto& a, const auto& b) { return users[a.first].size() > users[b.first].size(); });
    size_t most = 0;
    for (const auto& [e, v] : ready) most = std::max(most, users[e].size());
    int n_tok = 0;
    for (const auto& [e, v] : ready)
        for (int who : users[e]) n_tok = std::max(n_tok, who / U + 1);
    const ExpertInputs in = prepare_expert_inputs(cx, L, n_tok);
    const size_t ab_down = kernels::activation_bytes(L.down.type, F);
    cx.pool().parallel_for(static_cast<int64_t>(ready.size()), 1, [&](int64_t k0, int64_t k1) {
        // Per thread, kept between calls (a range is one expert: allocating per range paged in fresh memory).
        thread_local std::vector<float> g, u, y;
        thread_local std::vector<uint8_t> act;
        g.resize(most * F);
        u.resize(most * F);
        y.resize(most * E);
        act.resize(most * std::max({in.ab_gate, in.ab_up, ab_down}));
        auto project = [&](const uint8_t* w, const ExpertTensor& t, int64_t rows, int64_t cols, size_t ab, int c, float* out) {
            matmul_rows(kernels::matmul_dots(cx.kernels(), t.type, rows, cols, cx.kernel_rows(c), false), w, t.row_bytes, cols, 0, rows, act.data(),
                        ab, c, out, rows);
        };
        for (int64_t k = k0; k < k1; ++k) {
            const auto& [e, ev] = ready[k];
            const auto& who = users[e];
            const int c = static_cast<int>(who.size());
            gather_inputs(in.gate, in.ab_gate, who, U, act.data());
            project(ev.gate, L.gate, F, E, in.ab_gate, c, g.data());
            if (in.up != in.gate) gather_inputs(in.up, in.ab_up, who, U, act.data());
            project(ev.up, L.up, F, E, in.ab_up, c, u.data());
            for (int j = 0; j < c; ++j) expert_activation(cx.hp(), L, cx.fops(), e, &g[j * F], &u[j * F], static_cast<int>(F), limit);
            for (int j = 0; j < c; ++j) kernels::prepare_activations(L.down.type, &g[j * F], act.data() + j * ab_down, F);
            project(ev.down, L.down, E, F, ab_down, c, y.data());
            for (int j = 0; j < c; ++j) expert_down_bias(L, e, &y[j * E], static_cast<int>(E));
            for (int j = 0; j < c; ++j) std::copy_n(&y[j * E], E, &expert_out_[static_cast<size_t>(who[j]) * E]);
        }
    });
    for (const auto& [e, v] : ready) {
        cx.model().experts->release(l, e);
        cx.stats().expert_loads++;
        cx.stats().expert_activations += users[e].size();
    }
}

// Router, selection and experts for the chunk's n rows; adds (routed + shared) to the stream.
void MoeFeedForward::forward(LayerContext& cx, uint32_t l, int n) {
    const Hparams& hp = cx.hp();
    const MoeWeights& L = cx.model().layers[l].experts;
    const int E = static_cast<int>(hp.n_embd), F = static_cast<int>(L.gate.n_out), D = static_cast<int>(expert_width(cx.hp()));
    const int X = static_cast<int>(hp.moe.n_expert), U = static_cast<int>(hp.moe.n_expert_used);
    if (L.gate_sh.present()) {
        gated_ffn_rows(cx, L.gate_sh, L.up_sh, L.down_sh, cx.xn(), n, cx.model().layers[l].swiglu_limit_sh, sh_g_.data(), sh_u_.data(),
                       sh_out_.data());
        if (L.gate_inp_sh.present()) {  // qwen35moe: the shared expert scaled by sigmoid(gate_inp_sh . x)
            std::vector<float> gate(static_cast<size_t>(n));
            cx.matmul(L.gate_inp_sh, cx.xn(), E, n, gate.data(), 1);
            for (int t = 0; t < n; ++t) {
                const float s = ops::sigmoid(gate[t]);
                for (int i = 0; i < E; ++i) sh_out_[t * E + i] *= s;
            }
        }
    }
    cx.matmul(L.router, cx.xn(), E, n, probs_.data(), X);
    if (L.routed_down.present()) cx.matmul(L.routed_down, cx.xn(), E, n, expert_in_.data(), D);  // latent MoE: the experts' input
    for (int t = 0; t < n; ++t) route_token(hp.moe, L, cx.fops(), &probs_[t * X], &sel_[t * U], &sel_w_[t * U], cx.row_tokens()[t]);
    // The hidden-state pass (hidden_all_rows) repeats the chunk's last layer: its routing is counted once.
    cx.count_routing(l, n, U, sel_.data(), sel_w_.data());
    // Group (token, slot) pairs by expert: each expert's weights are fetched once for the whole batch.
    std::vector<std::vector<int>> users(X);
    for (int i = 0; i < n * U; ++i) { users[sel_[i]].push_back(i); }
    // Every expert this layer needs is requested at once; each is computed as soon as its bytes are in RAM
    // (completion order). The weighted sum below is in selection order, so the order here cannot change it.
    std::vector<uint32_t> needed;
    for (int e = 0; e < X; ++e)
        if (!users[e].empty()) needed.push_back(static_cast<uint32_t>(e));
    ExpertSource& src = *cx.model().experts;
    cx.score_prefetch(l, needed);
    src.request(l, needed);
    if (src.streams()) {
        // The next MoE layers' likely experts go in flight behind this layer's demand reads.
        cx.prefetch_ahead(l, n);
    }
    try {
        const ExpertInputs in = src.streams() ? prepare_expert_inputs(cx, L, n) : ExpertInputs{};
        if (!src.streams() && n <= 4) {
            decode_experts_in_parallel(cx, l, needed, users);
        } else if (!src.streams()) {
            prompt_experts_in_parallel(cx, l, needed, users);
        } else {
            for (size_t k = 0; k < needed.size(); ++k) {
                auto [e, ev] = src.next_ready(l);
                const auto& who = users[e];
                const int c = static_cast<int>(who.size());
                expert_gate_up(cx, ev, L, in, who);
                for (int j = 0; j < c; ++j) expert_activation(hp, L, cx.fops(), e, &gg_[j * F], &gu_[j * F], F, cx.model().layers[l].swiglu_limit);
                cx.matmul_expert(ev.down, L.down.type, L.down.row_bytes, D, F, gg_.data(), F, c, gy_.data(), D);
                for (int j = 0; j < c; ++j) expert_down_bias(L, e, &gy_[j * D], D);
                src.release(l, e);
                for (int j = 0; j < c; ++j) std::copy_n(&gy_[j * D], D, &expert_out_[static_cast<size_t>(who[j]) * D]);
                cx.stats().expert_loads++;
                cx.stats().expert_activations += static_cast<uint64_t>(c);
            }
        }
    } catch (...) {
        src.abandon();
        throw;
    }
    // Weighted sum in selection order, as llama.cpp adds the experts' views one after another (latent MoE: then
    // RMSNorm and routed_up); then the shared expert; then the residual.
    float* routed = gy_.data();
    const bool ik = cx.fops().ik;
    for (int t = 0; t < n; ++t) {
        for (int i = 0; i < D; ++i) {
            float acc = expert_out_[(static_cast<size_t>(t) * U) * D + i] * sel_w_[t * U];
            for (int s = 1; s < U; ++s) {
                const float y = expert_out_[(static_cast<size_t>(t) * U + s) * D + i];
                acc = ik ? std::fma(y, sel_w_[t * U + s], acc) : acc + y * sel_w_[t * U + s];  // ik: fused (iqk_mul_multi_add)
            }
            routed[t * D + i] = acc;
        }
    }
    if (L.routed_up.present()) {
        if (L.routed_norm.present())
            for (int t = 0; t < n; ++t) cx.fops().norm(&routed[t * D], L.routed_norm.f32(), &routed[t * D], D, hp.rms_eps);
        cx.matmul(L.routed_up, routed, D, n, cx.out(), E);
        routed = cx.out();
    }
    const bool shared = L.gate_sh.present();
    float* x = cx.stream();
    for (int i = 0; i < n * E; ++i) x[i] += shared ? routed[i] + sh_out_[i] : routed[i];
}

using ref::Vec;

// MoE: route, run the chosen experts, sum their outputs weighted in routing order, add the shared expert. A
// latent MoE's experts read routed_down . x, and their sum goes through RMSNorm and routed_up.
void reference_step(const ref::Context& c, uint32_t l, const Vec& xn, Vec& out) {
    const RefBatch& router_batch = c.batch;
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
        const size_t at = static_cast<size_t>(l) * X + static_cast<size_t>(sel[s]);
        // (expert_tokens counts the trunk's layers only)
        const int tokens = c.batch.expert_tokens && l < hp.n_layer ? static_cast<int>(c.batch.expert_tokens[at]) : 1;
        // this token's place among the expert's (a stale count, past the batch's, keeps the last place)
        const int rank = at < c.st.expert_rank.size() ? std::min(static_cast<int>(c.st.expert_rank[at]++), tokens - 1) : 0;
        matvec(c, ev.gate, w.gate.type, w.gate.row_bytes, F, D, in.data(), g.data(), 0, rank, false, tokens);
        matvec(c, ev.up, w.up.type, w.up.row_bytes, F, D, in.data(), u.data(), 0, rank, false, tokens);
        expert_activation(hp, w, c.fops, static_cast<uint32_t>(sel[s]), g.data(), u.data(), F, c.m.layers[l].swiglu_limit);
        matvec(c, ev.down, w.down.type, w.down.row_bytes, D, F, g.data(), y.data(), 0, rank, false, tokens);
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
        ref::gated_ffn(c, w.gate_sh, w.up_sh, w.down_sh, xn, sh, c.m.layers[l].swiglu_limit_sh);
        if (w.gate_inp_sh.present()) {  // qwen35moe: scaled by sigmoid(gate_inp_sh . x)
            float gate = 0.f;
            dense(c, w.gate_inp_sh, xn.data(), &gate);
            const float s = ops::sigmoid(gate);
            for (int i = 0; i < E; ++i) sh[i] *= s;
        }
        for (int i = 0; i < E; ++i) out[i] += sh[i];
    }
}

// Grown on first use, counted at their largest: each token's expert inputs, the decode path's per-(expert,
// token) rows and the in-RAM prompt path's per-thread rows of one expert's tokens (f32 bounds).
uint64_t scratch_bytes(const Model& m, const RunnerOptions& opt) {
    const MoeConfig& mc = m.hp.moe;
    const uint64_t B = uint64_t{batch_rows(opt)}, threads = static_cast<uint64_t>(std::max(opt.n_threads, 1));
    const uint64_t width = mc.n_latent ? mc.n_latent : m.hp.n_embd, F = mc.n_ff_exp;
    return unit_scratch_bytes<MoeFeedForward>(m, opt) + B * 2 * width * 4 + 4 * uint64_t{mc.n_expert_used} * (2 * F + width) * 4 * 2 +
           threads * B * (2 * F + width + std::max(F, width)) * 4;
}

}  // namespace

const FeedForwardKindInfo& moe_feed_forward() {
    static const FeedForwardKindInfo info{FeedForwardKind::Moe, "moe", scratch_bytes, make_unit<MoeFeedForward>, reference_step};
    return info;
}

}  // namespace moe

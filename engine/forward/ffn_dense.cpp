// The dense feed-forward kind (leading dense layers): a gated FFN over every row, added to the stream. Its
// gated FFN is also MoE's shared expert (gated_ffn.h).
#include <algorithm>

#include "engine/forward/gated_ffn.h"
#include "engine/forward/layer_unit.h"
#include "engine/forward/routing.h"
#include "engine/forward/runner.h"

namespace moe {

void gated_ffn_rows(LayerContext& cx, const Tensor& gate, const Tensor& up, const Tensor& down, const float* x, int n, float limit, float* g,
                    float* u, float* out) {
    const int E = static_cast<int>(cx.hp().n_embd), F = static_cast<int>(gate.ne1);
    cx.matmul(up, x, E, n, u, F);
    cx.matmul(gate, x, E, n, g, F);
    for (int t = 0; t < n; ++t) ffn_activation(cx.hp(), cx.fops(), &g[t * F], &u[t * F], F, limit);
    cx.matmul(down, g, F, n, out, E);
}

namespace ref {
void gated_ffn(const Context& c, const Tensor& gate, const Tensor& up, const Tensor& down, const Vec& xn, Vec& out, float limit) {
    const int F = static_cast<int>(gate.ne1);
    Vec g(F), u(F);
    dense(c, up, xn.data(), u.data());
    dense(c, gate, xn.data(), g.data());
    ffn_activation(c.m.hp, c.fops, g.data(), u.data(), F, limit);
    dense(c, down, g.data(), out.data());
}
}  // namespace ref

namespace {

class DenseFeedForward final : public FeedForwardUnit {
public:
    explicit DenseFeedForward(const Model&) {}
    template <class Size>
    static void scratch(const Model& m, const RunnerOptions& opt, Size&& size) {
        const size_t B = batch_rows(opt);
        size_t F = m.hp.n_ff_dense;
        for (const Layer& L : m.layers)
            if (!L.moe) F = std::max(F, static_cast<size_t>(L.dense.gate.ne1));
        size(&DenseFeedForward::g_, B * F);
        size(&DenseFeedForward::u_, B * F);
    }
    // The output goes through the runner's row buffer (the attention's, consumed by now), then onto the stream.
    void forward(LayerContext& cx, uint32_t l, int n) override {
        const DenseFfnWeights& w = cx.model().layers[l].dense;
        gated_ffn_rows(cx, w.gate, w.up, w.down, cx.xn(), n, 0.f, g_.data(), u_.data(), cx.out());
        float* x = cx.stream();
        const float* y = cx.out();
        for (size_t i = 0; i < static_cast<size_t>(n) * cx.hp().n_embd; ++i) x[i] += y[i];
    }

private:
    std::vector<float> g_, u_;  // [n][n_ff] gate (then the activation), up
};

void reference_step(const ref::Context& c, uint32_t l, const ref::Vec& xn, ref::Vec& out) {
    const DenseFfnWeights& w = c.m.layers[l].dense;
    ref::gated_ffn(c, w.gate, w.up, w.down, xn, out);
}

}  // namespace

const FeedForwardKindInfo& dense_feed_forward() {
    static const FeedForwardKindInfo info{FeedForwardKind::Dense, "dense", unit_scratch_bytes<DenseFeedForward>, make_unit<DenseFeedForward>,
                                          reference_step};
    return info;
}

}  // namespace moe

// The delta rule of both recurrent kinds (ops::gated_delta_step, ops::kda_delta_step) against a plain
// restatement in double on random inputs, many tokens in a row: the state decays (per head, or per key channel
// for KDA), takes the rank-1 update k (beta (v - S^T k))^T, and the output reads S^T q / sqrt(S).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/kernels/float_ops.h"
#include "engine/kernels/kernels.h"

namespace moe {
namespace {

// S[i][j] (i: key channel, j: value channel); one token.
void plain_step(std::vector<double>& S, const float* q, const float* k, const float* v, const float* g, float beta, double* out, int n) {
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) S[i * n + j] *= std::exp(static_cast<double>(g[i]));
    for (int j = 0; j < n; ++j) {
        double sk = 0;
        for (int i = 0; i < n; ++i) sk += S[i * n + j] * k[i];
        const double d = beta * (v[j] - sk);
        for (int i = 0; i < n; ++i) S[i * n + j] += k[i] * d;
    }
    for (int j = 0; j < n; ++j) {
        double o = 0;
        for (int i = 0; i < n; ++i) o += S[i * n + j] * q[i];
        out[j] = o / std::sqrt(static_cast<double>(n));
    }
}

TEST(DeltaRule, PerChannelAndPerHeadDecayMatchAPlainRestatement) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uni(-1.f, 1.f), decay(-2.f, 0.f), b(0.f, 1.f);
    const kernels::DotFn dot = kernels::reference_table(kernels::Flavor::Avx2).dot[static_cast<int>(GgmlType::F32)];
    for (int n : {8, 32}) {
        std::vector<float> M(static_cast<size_t>(n) * n, 0.f), M_scalar = M, delta(n), q(n), k(n), v(n), g(n), out(n), out_scalar(n);
        std::vector<double> S(static_cast<size_t>(n) * n, 0.0), S_scalar = S, want(n);
        double worst = 0, worst_scalar = 0;
        for (int t = 0; t < 40; ++t) {
            float knorm = 0;
            for (int i = 0; i < n; ++i) q[i] = uni(rng), k[i] = uni(rng), v[i] = uni(rng), g[i] = decay(rng), knorm += k[i] * k[i];
            for (float& x : k) x /= std::sqrt(knorm);  // L2-normed keys, as both layers feed them
            const float beta = b(rng);
            ops::kda_delta_step(M.data(), q.data(), k.data(), v.data(), g.data(), beta, out.data(), n, dot, delta.data());
            plain_step(S, q.data(), k.data(), v.data(), g.data(), beta, want.data(), n);
            for (int j = 0; j < n; ++j) worst = std::max(worst, std::fabs(out[j] - want[j]));
            // The per-head form is the per-channel one with every channel's decay equal.
            const std::vector<float> g_head(n, g[0]);
            ops::gated_delta_step(M_scalar.data(), q.data(), k.data(), v.data(), g[0], beta, out_scalar.data(), n, dot, delta.data());
            plain_step(S_scalar, q.data(), k.data(), v.data(), g_head.data(), beta, want.data(), n);
            for (int j = 0; j < n; ++j) worst_scalar = std::max(worst_scalar, std::fabs(out_scalar[j] - want[j]));
        }
        EXPECT_LT(worst, 1e-4) << "kda, n " << n;
        EXPECT_LT(worst_scalar, 1e-4) << "gated, n " << n;
        // And the decay really is per channel: one head-wide decay gives another state.
        EXPECT_NE(M, M_scalar);
    }
}

}  // namespace
}  // namespace moe

// MiniMax Sparse Attention's block selection (engine/forward/msa.h) against a plain restatement on random
// queries and keys: block scores as the best causal q.k in double, the local blocks first, the top_k set, and
// ggml_top_k's order (best first, then its first two swapped) that llama.cpp's decode gathers in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "engine/forward/msa.h"
#include "engine/forward/sequence_cache.h"

namespace moe {
namespace {

std::vector<int> plain_selection(const MsaConfig& c, const std::vector<float>& q, const std::vector<float>& keys, int pos) {
    const int D = static_cast<int>(c.head_dim), B = static_cast<int>(c.block_size), n_blocks = pos / B + 1;
    std::vector<std::pair<double, int>> scored;  // (score, block), local blocks above every score
    for (int b = 0; b < n_blocks; ++b) {
        double best = -1e300;
        for (int j = b * B; j <= std::min(pos, (b + 1) * B - 1); ++j) {
            double s = 0;
            for (int d = 0; d < D; ++d) s += static_cast<double>(q[d]) * keys[static_cast<size_t>(j) * D + d];
            best = std::max(best, s);
        }
        if (b >= n_blocks - static_cast<int>(c.local_blocks)) best = 1e300;
        scored.push_back({best, b});
    }
    std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<int> out;
    for (int i = 0; i < std::min<int>(c.top_k, n_blocks); ++i) out.push_back(scored[i].second);
    if (out.size() > 1) std::swap(out[0], out[1]);
    return out;
}

TEST(Msa, BlockSelectionMatchesAPlainRestatement) {
    const ops::FloatOps& fops = ops::float_ops(kernels::Flavor::Avx2);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    int checked = 0;
    for (const MsaConfig c : {MsaConfig{32, 4, 4, 1}, MsaConfig{64, 3, 16, 2}, MsaConfig{16, 1, 8, 1}, MsaConfig{32, 6, 3, 0}}) {
        const int D = static_cast<int>(c.head_dim);
        for (int pos : {0, 1, 3, 4, 15, 16, 17, 63, 100, 257}) {
            std::vector<float> q(D), keys(static_cast<size_t>(pos + 1) * D);
            for (float& x : q) x = nd(rng);
            for (float& x : keys) x = nd(rng);
            std::vector<float> scratch;
            std::vector<int> blocks(c.top_k);
            blocks.resize(msa::select_blocks(c, fops, q.data(), keys.data(), pos, scratch, blocks.data()));
            EXPECT_EQ(blocks, plain_selection(c, q, keys, pos)) << "top_k " << c.top_k << " block " << c.block_size << " pos " << pos;
            // The query's own block is always among them (local_blocks >= 1), and nothing past it.
            if (c.local_blocks) { EXPECT_NE(std::find(blocks.begin(), blocks.end(), pos / static_cast<int>(c.block_size)), blocks.end()); }
            for (int b : blocks) EXPECT_LE(b, pos / static_cast<int>(c.block_size));
            ++checked;
        }
    }
    EXPECT_EQ(checked, 40);
}

// The gathered view holds the chosen positions' rows in the listed order, cut at the view's end.
TEST(Msa, GatheredRowsFollowTheListedBlocks) {
    const int dk = 8, dv = 8, n_kv = 11, stride = 2 * dk;  // two kv heads per row
    std::vector<uint16_t> k(static_cast<size_t>(n_kv) * stride), v(static_cast<size_t>(n_kv) * stride);
    for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint16_t>(i), v[i] = static_cast<uint16_t>(10000 + i);
    ops::KvView base;
    base.k = k.data(), base.v = v.data(), base.k_stride = base.v_stride = stride, base.dk = dk, base.dv = dv, base.n_kv = n_kv;
    const ops::KvView head1 = kv_view_head(base, 1);
    const int blocks[] = {1, 2, 0};  // block 2 holds positions 8..11, of which 8..10 exist
    std::vector<uint8_t> buf;
    const ops::KvView g = gather_positions(head1, blocks, 3, 4, buf);
    const int want[] = {4, 5, 6, 7, 8, 9, 10, 0, 1, 2, 3};
    ASSERT_EQ(g.n_kv, 11);
    for (int r = 0; r < g.n_kv; ++r) {
        EXPECT_EQ(g.k[static_cast<size_t>(r) * g.k_stride], k[static_cast<size_t>(want[r]) * stride + dk]) << r;
        EXPECT_EQ(g.v[static_cast<size_t>(r) * g.v_stride + dv - 1], v[static_cast<size_t>(want[r]) * stride + dk + dv - 1]) << r;
    }
}

// The linear-time pick is top_k's set: on random rows, rows padded with -inf, rows with ties across the k-th
// place (where it falls back to top_k) and rows holding a NaN.
TEST(TopKSet, TheSameSetAsTopK) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uni(-4.f, 4.f);
    for (int trial = 0; trial < 400; ++trial) {
        const int n = 1 + static_cast<int>(rng() % 700), k = 1 + static_cast<int>(rng() % (n + 3));
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = uni(rng);
        if (trial % 4 == 1)  // few distinct values: ties everywhere
            for (float& x : v) x = std::round(x);
        if (trial % 4 == 2)  // a padded row: the tail masked
            std::fill(v.begin() + n / 2, v.end(), -std::numeric_limits<float>::infinity());
        if (trial % 8 == 3) v[rng() % n] = std::numeric_limits<float>::quiet_NaN();
        const int kk = std::min(k, n);
        std::vector<int> want(static_cast<size_t>(kk)), got;
        ops::top_k(v.data(), n, kk, want.data());
        std::sort(want.begin(), want.end());
        ops::top_k_set(v.data(), n, k, got);
        EXPECT_EQ(got, want) << "trial " << trial << " n " << n << " k " << k;
    }
}

}  // namespace
}  // namespace moe

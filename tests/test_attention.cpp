// Flash attention: the one-row and tiled paths of each llama.cpp build, their SIMD variants against the scalar
// reference (bit for bit), MLA's shape (values aliasing the keys' first dims) and DSA's sparse masks.
#include <gtest/gtest.h>

#include <random>

#include "engine/kernels/attention.h"
#include "engine/kernels/kernels.h"

namespace moe {
namespace {

using kernels::Flavor;

struct Cache {
    int dk, dv, n_kv;
    std::vector<uint16_t> k, v;
    Cache(int dk_, int dv_, int n, std::mt19937& rng) : dk(dk_), dv(dv_), n_kv(n) {
        std::normal_distribution<float> nd;
        k.resize(static_cast<size_t>(n) * dk);
        v.resize(static_cast<size_t>(n) * dv);
        for (auto& x : k) x = fp32_to_fp16(nd(rng));
        for (auto& x : v) x = fp32_to_fp16(nd(rng));
    }
    ops::KvView view(int n, const uint8_t* visible = nullptr) const {
        return {k.data(), v.data(), static_cast<size_t>(dk), static_cast<size_t>(dv), dk, dv, n, visible};
    }
    // MLA: the values are the first dv dims of each key row.
    ops::KvView latent_view(int n, const uint8_t* visible = nullptr) const {
        return {k.data(), k.data(), static_cast<size_t>(dk), static_cast<size_t>(dk), dk, dv, n, visible};
    }
};

TEST(Attention, TiledPathRoundsDifferentlyFromOneRowPath) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    Cache c(64, 64, 150, rng);
    std::vector<float> q(64), a(64), b(64);
    ops::AttnScratch s;
    for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
        int differ = 0;
        for (int rep = 0; rep < 20; ++rep) {
            for (auto& x : q) x = nd(rng);
            ops::float_ops(f).attend(q.data(), c.view(150), 0.125f, a.data(), s);
            ops::float_ops(f).attend_tiled(q.data(), c.view(150), 0.125f, b.data(), s);
            for (int d = 0; d < 64; ++d) {
                EXPECT_NEAR(a[d], b[d], 2e-2) << d;
                differ += a[d] != b[d];
            }
        }
        EXPECT_GT(differ, 0) << kernels::flavor_name(f);
    }
    EXPECT_TRUE(ops::tiled_attention(Flavor::Avx512, 64, 128));
    EXPECT_FALSE(ops::tiled_attention(Flavor::Avx512, 63, 128));
    EXPECT_FALSE(ops::tiled_attention(Flavor::Avx512, 64, 72));
    EXPECT_TRUE(ops::tiled_attention(Flavor::Avx2, 64, 72));
    EXPECT_FALSE(ops::tiled_attention(Flavor::Avx2, 64, 68));
}

// The two builds sum K.Q in different orders: over a long head the results differ somewhere.
TEST(Attention, FlavorsDifferInTheirDotOrder) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    Cache c(576, 512, 40, rng);
    std::vector<float> q(576), a(512), b(512);
    ops::AttnScratch s;
    int differ = 0;
    for (int rep = 0; rep < 10; ++rep) {
        for (auto& x : q) x = nd(rng);
        ops::float_ops(Flavor::Avx512).attend(q.data(), c.latent_view(40), 0.05f, a.data(), s);
        ops::float_ops(Flavor::Avx2).attend(q.data(), c.latent_view(40), 0.05f, b.data(), s);
        for (int d = 0; d < 512; ++d) differ += a[d] != b[d];
    }
    EXPECT_GT(differ, 0);
}

// A masked position contributes nothing: attending with a mask equals attending to the visible rows alone.
TEST(Attention, MaskedPositionsAreSkipped) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    Cache c(96, 64, 90, rng);
    std::vector<uint8_t> visible(90, 0);
    std::vector<int> keep;
    for (int j = 0; j < 90; ++j)
        if (j % 3 == 0 || j == 89) { visible[j] = 1; keep.push_back(j); }
    Cache packed = c;
    packed.n_kv = static_cast<int>(keep.size());
    for (size_t i = 0; i < keep.size(); ++i) std::copy_n(&c.k[keep[i] * 96], 96, &packed.k[i * 96]);
    std::vector<float> q(96), a(96), b(96);
    for (auto& x : q) x = nd(rng);
    ops::AttnScratch s;
    for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
        ops::float_ops(f).attend(q.data(), c.latent_view(90, visible.data()), 0.1f, a.data(), s);
        ops::float_ops(f).attend(q.data(), packed.latent_view(packed.n_kv), 0.1f, b.data(), s);
        for (int d = 0; d < 64; ++d) EXPECT_EQ(a[d], b[d]) << d;
    }
}

// The SIMD variants give the reference's bits: both builds, both paths, head sizes with and without a tail of
// eight, MLA's aliased values, sparse masks, and tiles cut by the end of the visible range.
TEST(Attention, SimdEqualsReference) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/F16C on this CPU for the SIMD variants";
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    std::bernoulli_distribution coin(0.3);
    for (auto [dk, dv, latent] : {std::tuple{64, 64, false}, {72, 72, false}, {56, 40, true}, {96, 64, true}}) {
        Cache c(dk, latent ? dk : dv, 150, rng);
        c.dv = dv;
        std::vector<float> q(dk), a(dv), b(dv);
        std::vector<uint8_t> visible(150);
        ops::AttnScratch s1, s2;
        for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
            for (int n : {1, 7, 64, 65, 150}) {
                for (bool masked : {false, true}) {
                    for (auto& v : visible) v = coin(rng);
                    visible[n - 1] = 1;
                    for (auto& x : q) x = nd(rng);
                    const ops::KvView kv = latent ? c.latent_view(n, masked ? visible.data() : nullptr) : c.view(n, masked ? visible.data() : nullptr);
                    for (bool tiled : {false, true}) {
                        (tiled ? ops::float_ops(f).attend_tiled : ops::float_ops(f).attend)(q.data(), kv, 0.125f, a.data(), s1);
                        (tiled ? kernels::attend_tiled_f16c(f) : kernels::attend_f16c(f))(q.data(), kv, 0.125f, b.data(), s2);
                        for (int d = 0; d < dv; ++d)
                            ASSERT_EQ(a[d], b[d]) << kernels::flavor_name(f) << " dk " << dk << " n_kv " << n << " masked " << masked
                                                  << " tiled " << tiled << " d " << d;
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace moe

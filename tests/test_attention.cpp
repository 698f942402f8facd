// Flash attention: the one-row and tiled paths of each llama.cpp build, their SIMD variants against the scalar
// reference (bit for bit), MLA's shape (values aliasing the keys' first dims) and DSA's sparse masks.
// (ik_llama.cpp's attention: test_attention_ik.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <tuple>

#include "engine/kernels/attention.h"
#include "engine/kernels/ggml_numerics.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"
#include "tests/attention_cache.h"

namespace moe {
namespace {

using kernels::Flavor;
using Cache = test::AttentionCache;

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
        if (j % 3 == 0 || j == 89) {
            visible[j] = 1;
            keep.push_back(j);
        }
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

// A sparse view (deepseek4's window rows and picked rows, KvView::positions) on the tiled path gives exactly what
// the whole view with the other positions masked gives, which is what llama.cpp computes; the F16C forms give
// the reference's bits (random positions spread over a few tiles or packed in one, head sizes with a tail of
// eight, sinks).
TEST(Attention, SparseViewTilesByPositions) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    for (int round = 0; round < 24; ++round) {
        const int dk = round % 3 == 0 ? 72 : 64, view = 64 * (1 + round % 6);
        Cache whole(dk, dk, view, rng);
        std::vector<uint8_t> visible(static_cast<size_t>(view), 0);
        std::vector<int> positions;
        for (int p = 0; p < view; ++p)
            if (rng() % (round % 2 ? 3u : 11u) == 0) {
                visible[p] = 1;
                positions.push_back(p);
            }
        if (positions.empty()) positions.push_back(view - 1), visible[view - 1] = 1;
        Cache sparse = whole;
        sparse.n_kv = static_cast<int>(positions.size());
        for (size_t i = 0; i < positions.size(); ++i) {
            std::copy_n(&whole.k[static_cast<size_t>(positions[i]) * dk], dk, &sparse.k[i * dk]);
            std::copy_n(&whole.v[static_cast<size_t>(positions[i]) * dk], dk, &sparse.v[i * dk]);
        }
        std::vector<float> q(static_cast<size_t>(dk)), want(static_cast<size_t>(dk)), got(static_cast<size_t>(dk));
        for (auto& x : q) x = nd(rng);
        const float sink = round % 4 == 1 ? 3.f : 0.25f;
        for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
            ops::AttnScratch s1, s2;
            ops::KvView masked = whole.view(view, visible.data());
            ops::KvView packed = sparse.view(sparse.n_kv);
            packed.positions = positions.data();
            if (round % 2) masked.sinks = packed.sinks = &sink;
            ops::float_ops(f).attend_tiled(q.data(), masked, 0.125f, want.data(), s1);
            ops::float_ops(f).attend_tiled(q.data(), packed, 0.125f, got.data(), s2);
            for (int d = 0; d < dk; ++d) ASSERT_EQ(want[d], got[d]) << "round " << round << " d " << d;
            if (!kernels::table_for(kernels::Isa::Avx2)) continue;  // no F16C here: the reference is what runs
            for (ops::AttendFn fn : {kernels::attend_tiled_f16c(f), kernels::attend_tiled_avx512(f)}) {
                if (!fn) continue;
                std::fill(got.begin(), got.end(), 0.f);
                fn(q.data(), packed, 0.125f, got.data(), s2);
                for (int d = 0; d < dk; ++d) ASSERT_EQ(want[d], got[d]) << "simd round " << round << " d " << d;
            }
        }
    }
}

// The SIMD variants give the reference's bits: both builds, both paths, head sizes with and without a tail of
// eight, MLA's aliased values, sparse masks, and tiles cut by the end of the visible range.
TEST(Attention, SimdEqualsReference) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/F16C on this CPU for the SIMD variants";
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    std::bernoulli_distribution coin(0.3);
    for (auto [dk, dv, latent] : {std::tuple{64, 64, false}, {72, 72, false}, {56, 40, true}, {96, 64, true}, {136, 200, false}}) {
        Cache c(dk, latent ? dk : dv, 150, rng);
        c.dv = dv;
        std::vector<float> q(dk), a(dv), b(dv);
        std::vector<uint8_t> visible(150);
        ops::AttnScratch s1, s2;
        for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
            for (int n : {1, 7, 64, 65, 150}) {
                // Masks: none, random, a causal prefix (whole tiles masked after it), a masked tile between visible ones.
                for (int mode : {0, 1, 2, 3}) {
                    const bool masked = mode != 0;
                    for (int j = 0; j < 150; ++j) visible[j] = mode == 1 ? coin(rng) : mode == 2 ? j <= n / 3 : mode == 3 ? (j < 64 || j >= 128) : 1;
                    visible[n - 1] = 1;
                    for (auto& x : q) x = nd(rng);
                    const ops::KvView kv = latent ? c.latent_view(n, masked ? visible.data() : nullptr)
                                                  : c.view(n, masked ? visible.data() : nullptr);
                    for (bool tiled : {false, true}) {
                        (tiled ? ops::float_ops(f).attend_tiled : ops::float_ops(f).attend)(q.data(), kv, 0.125f, a.data(), s1);
                        (tiled ? kernels::attend_tiled_f16c(f) : kernels::attend_f16c(f))(q.data(), kv, 0.125f, b.data(), s2);
                        for (int d = 0; d < dv; ++d)
                            ASSERT_EQ(a[d], b[d]) << kernels::flavor_name(f) << " dk " << dk << " n_kv " << n << " mask " << mode << " tiled "
                                                  << tiled << " d " << d;
                    }
                    // The tiled kernel again from the batch's f32 copies of keys and values.
                    std::vector<float> k_tiles(static_cast<size_t>((n + 63) / 64 * 64 * dk)), v_f32(static_cast<size_t>(n * dv));
                    ops::convert_kv_for_tiles(kv, k_tiles.data(), v_f32.data());
                    ops::KvView kv32 = kv;
                    kv32.k_tiles = k_tiles.data();
                    kv32.v_f32 = v_f32.data();
                    ops::float_ops(f).attend_tiled(q.data(), kv, 0.125f, a.data(), s1);
                    // Three query rows through the group kernel (fp16 view and f32 copies, 256- and 512-bit loops):
                    // each row equals the reference for that row alone.
                    {
                        std::vector<float> qs(3 * static_cast<size_t>(dk) + 5), outs(3 * static_cast<size_t>(dv) + 7), want(dv);
                        for (auto& x : qs) x = nd(rng);
                        for (bool wide : {false, true}) {
                            const ops::AttendGroupFn group = kernels::attend_tiled_group(f, wide);
                            if (!group) continue;
                            for (const ops::KvView* view : {&kv, static_cast<const ops::KvView*>(&kv32)}) {
                                group(qs.data(), dk + 2, 3, *view, 0.125f, outs.data(), dv + 3, s2);
                                for (int r = 0; r < 3; ++r) {
                                    ops::float_ops(f).attend_tiled(qs.data() + r * (dk + 2), kv, 0.125f, want.data(), s1);
                                    for (int d = 0; d < dv; ++d)
                                        ASSERT_EQ(outs[r * (dv + 3) + d], want[d])
                                            << kernels::flavor_name(f) << " group row " << r << " wide " << wide << " f32 " << (view == &kv32)
                                            << " dk " << dk << " n_kv " << n << " mask " << mode << " d " << d;
                                }
                            }
                        }
                    }
                    for (ops::AttendFn fn : {kernels::attend_tiled_f16c(f), kernels::attend_tiled_avx512(f)}) {
                        if (!fn) continue;  // no AVX-512 on this CPU
                        fn(q.data(), kv32, 0.125f, b.data(), s2);
                        for (int d = 0; d < dv; ++d)
                            ASSERT_EQ(a[d], b[d]) << kernels::flavor_name(f) << " f32 copies, dk " << dk << " n_kv " << n << " mask " << mode
                                                  << " wide " << (fn == kernels::attend_tiled_avx512(f)) << " d " << d;
                    }
                }
            }
        }
    }
}

// Attention sinks (gpt-oss): a per-head logit that joins the softmax's sum with no value. Every kernel against
// softmax attention computed in double with the sink in the denominator (sinks far below, near and far above the
// scores, so both of ggml's branches run), and each SIMD kernel against its scalar reference bit for bit.
// A one-row view split into chunks (deepseek4's windows of 512+ keys on several threads): the F16C chunk gives
// the reference chunk's bits, with and without a sink, for any partition; the merged result is the softmax.
TEST(Attention, SplitChunksSimdEqualReference) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/F16C on this CPU for the SIMD variants";
    std::mt19937 rng(23);
    std::normal_distribution<float> nd;
    for (int dk : {64, 72, 256}) {
        Cache c(dk, dk, 700, rng);
        std::vector<float> q(dk), a(dk), b(dk);
        std::vector<int> chunk_of(700);
        ops::AttnScratch s1, s2;
        for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
            for (int n : {1, 9, 520, 700}) {
                for (int chunks : {1, 2, 3}) {
                    for (bool sink : {false, true}) {
                        for (auto& x : q) x = nd(rng);
                        const int per = (n + chunks - 1) / chunks;
                        for (int j = 0; j < n; ++j) chunk_of[j] = j / per;
                        const float sink_logit = 0.5f;
                        ops::KvView kv = c.view(n);
                        if (sink) kv.sinks = &sink_logit;
                        ops::attend_split(f, q.data(), kv, chunk_of.data(), chunks, 0.125f, a.data(), s1);
                        ops::attend_split(f, q.data(), kv, chunk_of.data(), chunks, 0.125f, b.data(), s2, kernels::attend_chunk_f16c(f));
                        ASSERT_EQ(a, b) << kernels::flavor_name(f) << " dk " << dk << " n " << n << " chunks " << chunks << " sink " << sink;
                        // Against the softmax in double.
                        std::vector<double> sc(static_cast<size_t>(n));
                        double mx = sink ? sink_logit : -1e30;
                        for (int j = 0; j < n; ++j) {
                            double dot = 0;
                            for (int d = 0; d < dk; ++d) dot += static_cast<double>(q[d]) * fp16_to_fp32(c.k[static_cast<size_t>(j) * dk + d]);
                            sc[static_cast<size_t>(j)] = dot * 0.125;
                            mx = std::max(mx, sc[static_cast<size_t>(j)]);
                        }
                        double z = sink ? std::exp(sink_logit - mx) : 0.0;
                        for (double x : sc) z += std::exp(x - mx);
                        for (int d = 0; d < dk; d += 7) {
                            double o = 0;
                            for (int j = 0; j < n; ++j)
                                o += std::exp(sc[static_cast<size_t>(j)] - mx) / z * fp16_to_fp32(c.v[static_cast<size_t>(j) * dk + d]);
                            ASSERT_NEAR(a[d], o, 3e-3 * (1 + std::fabs(o))) << "n " << n << " chunks " << chunks << " d " << d;
                        }
                    }
                }
            }
        }
    }
}

// The group chunk kernel (the query heads of one kv head, or MLA's heads, over each chunk together) gives every
// row the reference's split bits: GQA views and MLA's aliased values, masks, per-head sinks, empty chunks.
TEST(Attention, GroupChunksGiveEachRowTheSplitBits) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/F16C on this CPU for the SIMD variants";
    std::mt19937 rng(29);
    std::normal_distribution<float> nd;
    // Under emulation (tests/cpu_models/run.sh) this took 71 s on an Intel host: there two lengths (one position;
    // 700, whose chunks end in a partial block) and groups of 1, 3, 4 and 9 rows (every row count a pass leaves).
    const bool emulated = std::getenv("MOESTREAM_EMULATED_CPU") != nullptr;
    if (emulated) std::printf("[ note     ] emulated CPU: lengths 1 and 700, groups of 1, 3, 4 and 9 (300, 900 and 5 run natively)\n");
    const std::vector<int> lengths = emulated ? std::vector<int>{1, 700} : std::vector<int>{1, 300, 700, 900};
    const std::vector<int> groups = emulated ? std::vector<int>{1, 3, 4, 9} : std::vector<int>{1, 3, 4, 5, 9};
    // Value widths with and without a tail of the 512-bit loops (72, 48: 16-lane steps and an 8-lane one), wide
    // and narrow heads; groups of 1 to 9 rows (the heads of one kv head, MLA's heads).
    for (const auto& [dk, dv, latent] : {std::tuple{64, 64, false}, std::tuple{72, 72, false}, std::tuple{96, 64, true}, std::tuple{128, 128, false},
                                         std::tuple{32, 32, false}, std::tuple{48, 48, false}, std::tuple{144, 144, false}}) {
        Cache c(dk, latent ? dk : dv, 900, rng);
        for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
            for (int n : lengths) {
                for (int G : groups) {
                    for (bool masked : {false, true}) {
                        std::vector<float> q(static_cast<size_t>(G) * dk), sinks(static_cast<size_t>(G));
                        for (auto& x : q) x = nd(rng);
                        for (auto& x : sinks) x = nd(rng);
                        std::vector<uint8_t> visible(static_cast<size_t>(n));
                        for (auto& x : visible) x = rng() % 3 != 0;
                        ops::KvView kv = latent ? c.latent_view(n, masked ? visible.data() : nullptr) : c.view(n, masked ? visible.data() : nullptr);
                        kv.dv = dv;
                        const bool with_sinks = G != 3;
                        const int threads = 3, chunk = (n + threads - 1) / threads;
                        std::vector<float> partials(static_cast<size_t>(threads) * G * (dv + 2)), got(static_cast<size_t>(dv)),
                            want(static_cast<size_t>(dv));
                        ops::AttnScratch s;
                        for (bool wide : {false, true}) {
                            const ops::AttendChunkGroupFn fn = kernels::attend_chunk_group_f16c(f, wide);
                            if (!fn) continue;  // no AVX-512F here
                            for (int ch = 0; ch < threads; ++ch) {
                                ops::KvView group = kv;
                                if (with_sinks) group.sinks = sinks.data();
                                ops::attend_split_chunk_group(q.data(), dk, G, 1, group, chunk, ch, 0.125f,
                                                              &partials[static_cast<size_t>(ch) * G * (dv + 2)], s, fn);
                            }
                            for (int g = 0; g < G; ++g) {
                                ops::merge_split_partials(&partials[static_cast<size_t>(g) * (dv + 2)], threads, static_cast<size_t>(G) * (dv + 2),
                                                          dv, got.data());
                                ops::KvView one = kv;
                                if (with_sinks) one.sinks = &sinks[g];
                                ops::attend_split_causal(f, &q[static_cast<size_t>(g) * dk], one, chunk, threads, 0.125f, want.data(), s);
                                ASSERT_EQ(got, want) << kernels::flavor_name(f) << " dk " << dk << " n " << n << " G " << G << " row " << g
                                                     << " masked " << masked << " wide " << wide;
                            }
                        }
                    }
                }
            }
        }
    }
}

// Several kv heads through the group chunk kernel at once (their rows side by side in each position's row, as
// the cache keeps them): every row gets the bits of the split path over its own head's view alone.
TEST(Attention, GroupChunksOverSeveralKvHeadsGiveEachRowItsHeadsBits) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/F16C on this CPU for the SIMD variants";
    std::mt19937 rng(31);
    std::normal_distribution<float> nd;
    for (const auto& [dk, dv] : {std::pair{64, 64}, std::pair{128, 128}, std::pair{72, 48}}) {
        for (int H : {2, 3}) {
            const int n = 700, G = 4, R = H * G, threads = 2, chunk = (n + threads - 1) / threads;
            std::vector<uint16_t> k(static_cast<size_t>(n) * H * dk), v(static_cast<size_t>(n) * H * dv);
            for (auto& x : k) x = fp32_to_fp16(nd(rng));
            for (auto& x : v) x = fp32_to_fp16(nd(rng));
            std::vector<float> q(static_cast<size_t>(R) * dk), sinks(static_cast<size_t>(R));
            for (auto& x : q) x = nd(rng);
            for (auto& x : sinks) x = nd(rng);
            std::vector<uint8_t> visible(static_cast<size_t>(n));
            for (auto& x : visible) x = rng() % 4 != 0;
            for (Flavor f : {Flavor::Avx512, Flavor::Avx2})
                for (bool wide : {false, true})
                    for (bool masked : {false, true}) {
                        const ops::AttendChunkGroupFn fn = kernels::attend_chunk_group_f16c(f, wide);
                        if (!fn) continue;  // no AVX-512F here
                        ops::KvView kv;
                        kv.k = k.data(), kv.v = v.data(), kv.k_stride = static_cast<size_t>(H) * dk, kv.v_stride = static_cast<size_t>(H) * dv;
                        kv.dk = dk, kv.dv = dv, kv.n_kv = n, kv.visible = masked ? visible.data() : nullptr;
                        kv.sinks = sinks.data();
                        std::vector<float> partials(static_cast<size_t>(threads) * R * (dv + 2)), got(static_cast<size_t>(dv)),
                            want(static_cast<size_t>(dv));
                        ops::AttnScratch s;
                        for (int ch = 0; ch < threads; ++ch)
                            ops::attend_split_chunk_group(q.data(), dk, G, H, kv, chunk, ch, 0.125f,
                                                          &partials[static_cast<size_t>(ch) * R * (dv + 2)], s, fn);
                        for (int r = 0; r < R; ++r) {
                            ops::merge_split_partials(&partials[static_cast<size_t>(r) * (dv + 2)], threads, static_cast<size_t>(R) * (dv + 2), dv,
                                                      got.data());
                            ops::KvView one = kv;
                            one.k += static_cast<size_t>(r / G) * dk, one.v += static_cast<size_t>(r / G) * dv, one.sinks = &sinks[r];
                            ops::attend_split_causal(f, &q[static_cast<size_t>(r) * dk], one, chunk, threads, 0.125f, want.data(), s);
                            ASSERT_EQ(got, want) << kernels::flavor_name(f) << " dk " << dk << " H " << H << " row " << r << " masked " << masked
                                                 << " wide " << wide;
                        }
                    }
        }
    }
}

// Where llama.cpp splits a lone row: its view is the cells in use padded to 256 (at least 256, at most the
// cache), split from 512 keys into one chunk of ceil(view / threads) per thread; attend_split_causal then chunks
// consecutive positions by that size.
TEST(Attention, SplitKvChunkFollowsLlamaCppsView) {
    EXPECT_EQ(ops::split_kv_chunk(256, 4096, 2), 0);    // a 256-cell view: one row's path
    EXPECT_EQ(ops::split_kv_chunk(257, 4096, 2), 256);  // 512 cells over 2 threads
    EXPECT_EQ(ops::split_kv_chunk(600, 4096, 3), 256);  // 768 cells over 3
    EXPECT_EQ(ops::split_kv_chunk(600, 4096, 1), 0);    // one thread never splits
    EXPECT_EQ(ops::split_kv_chunk(300, 300, 2), 256);   // the cache's 300 cells padded to 512
    EXPECT_EQ(ops::split_kv_chunk(200, 256, 2), 0);     // a 256-cell cache
    EXPECT_EQ(ops::split_kv_chunk(1000, 700, 2), 384);  // capped at the cache (768)
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    Cache c(64, 64, 600, rng);
    std::vector<float> q(64), a(64), b(64);
    for (auto& x : q) x = nd(rng);
    std::vector<int> chunk_of(600);
    for (int j = 0; j < 600; ++j) chunk_of[j] = j / 384;
    ops::AttnScratch s1, s2;
    ops::attend_split_causal(Flavor::Avx2, q.data(), c.view(600), 384, 2, 0.125f, a.data(), s1);
    ops::attend_split(Flavor::Avx2, q.data(), c.view(600), chunk_of.data(), 2, 0.125f, b.data(), s2);
    EXPECT_EQ(a, b);
    ops::attend_split_causal(Flavor::Avx2, q.data(), c.view(600), 600, 1, 0.125f, b.data(), s2);
    EXPECT_NE(a, b) << "one chunk of 600 keys rounds its fp16 accumulator otherwise than two";
    // A mask over the view (DSA's picked positions): masked keys skipped in every chunk, by each chunk kernel.
    std::vector<uint8_t> picked(600);
    for (int j = 0; j < 600; ++j) picked[j] = (j * 7) % 5 < 2;
    ops::KvView masked = c.view(600);
    masked.visible = picked.data();
    for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
        ops::attend_split_causal(f, q.data(), masked, 384, 2, 0.125f, a.data(), s1);
        if (kernels::table_for(kernels::Isa::Avx2)) {
            ops::attend_split_causal(f, q.data(), masked, 384, 2, 0.125f, b.data(), s2, kernels::attend_chunk_f16c(f));
            EXPECT_EQ(a, b) << kernels::flavor_name(f);
        }
        // Against the softmax in double over the picked keys only.
        double mx = -1e30;
        std::vector<double> sc(600);
        for (int j = 0; j < 600; ++j) {
            double dot = 0;
            for (int d = 0; d < 64; ++d) dot += static_cast<double>(q[d]) * fp16_to_fp32(c.k[static_cast<size_t>(j) * 64 + d]);
            sc[j] = dot * 0.125;
            if (picked[j]) mx = std::max(mx, sc[j]);
        }
        double z = 0, o = 0;
        for (int j = 0; j < 600; ++j)
            if (picked[j]) z += std::exp(sc[j] - mx), o += std::exp(sc[j] - mx) * fp16_to_fp32(c.v[static_cast<size_t>(j) * 64]);
        EXPECT_NEAR(a[0], o / z, 3e-3 * (1 + std::fabs(o / z)));
    }
}

TEST(Attention, SinksJoinTheSoftmaxInEveryKernel) {
    std::mt19937 rng(29);
    std::normal_distribution<float> nd;
    const bool simd = kernels::table_for(kernels::Isa::Avx2) != nullptr;
    int compared = 0;
    for (int n : {1, 9, 70}) {
        Cache c(64, 64, n, rng);
        std::vector<float> q(64), a(64), b(64);
        for (auto& x : q) x = nd(rng);
        // The scores in double, their max and sum.
        std::vector<double> sc(static_cast<size_t>(n));
        double mx = -1e300;
        for (int j = 0; j < n; ++j) {
            double dot = 0;
            for (int d = 0; d < 64; ++d) dot += static_cast<double>(q[d]) * fp16_to_fp32(c.k[static_cast<size_t>(j) * 64 + d]);
            sc[static_cast<size_t>(j)] = dot * 0.125;
            mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        for (float offset : {-30.f, -1.f, 0.5f, 4.f, 40.f}) {
            const float sink = static_cast<float>(mx) + offset;
            ops::KvView kv = c.view(n);
            kv.sinks = &sink;
            double z = std::exp(static_cast<double>(sink) - mx);
            for (double x : sc) z += std::exp(x - mx);
            auto check_plain = [&](const std::vector<float>& out, const char* what) {
                for (int d = 0; d < 64; ++d) {
                    double o = 0;
                    for (int j = 0; j < n; ++j)
                        o += std::exp(sc[static_cast<size_t>(j)] - mx) / z * fp16_to_fp32(c.v[static_cast<size_t>(j) * 64 + d]);
                    ASSERT_NEAR(out[d], o, 2e-3 * (1 + std::fabs(o))) << what << " n " << n << " sink offset " << offset << " d " << d;
                }
                ++compared;
            };
            for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
                ops::AttnScratch s1, s2;
                ops::float_ops(f).attend(q.data(), kv, 0.125f, a.data(), s1);
                check_plain(a, "one-row");
                if (simd) {
                    kernels::attend_f16c(f)(q.data(), kv, 0.125f, b.data(), s2);
                    ASSERT_EQ(a, b) << "one-row f16c, n " << n << " offset " << offset;
                }
                ops::float_ops(f).attend_tiled(q.data(), kv, 0.125f, a.data(), s1);
                check_plain(a, "tiled");
                if (simd) {
                    kernels::attend_tiled_f16c(f)(q.data(), kv, 0.125f, b.data(), s2);
                    ASSERT_EQ(a, b) << "tiled f16c, n " << n << " offset " << offset;
                    // Two rows of a group call, each with its own sink: row r uses sinks[r % n_sinks].
                    const float two[2] = {sink, sink - 3.f};
                    std::vector<float> qs(128), outs(128), want(64);
                    std::copy(q.begin(), q.end(), qs.begin());
                    std::copy(q.begin(), q.end(), qs.begin() + 64);
                    ops::KvView g = c.view(n);
                    g.sinks = two, g.n_sinks = 2;
                    kernels::attend_tiled_group(f, false)(qs.data(), 64, 2, g, 0.125f, outs.data(), 64, s2);
                    for (int r = 0; r < 2; ++r) {
                        ops::KvView one = c.view(n);
                        one.sinks = &two[r];
                        ops::float_ops(f).attend_tiled(q.data(), one, 0.125f, want.data(), s1);
                        ASSERT_TRUE(std::equal(want.begin(), want.end(), outs.begin() + 64 * r)) << "group row " << r << " n " << n;
                    }
                }
            }
            // ik's attention, scalar and SIMD.
            ik::attend_ik(q.data(), kv, 0.125f, a.data(), *std::make_unique<ops::AttnScratch>());
            check_plain(a, "ik");
            if (simd) {
                ops::AttnScratch s;
                ik::attend_ik_simd()(q.data(), kv, 0.125f, b.data(), s);
                ASSERT_EQ(a, b) << "ik simd, n " << n << " offset " << offset;
            }
        }
    }
    EXPECT_EQ(compared, 3 * 5 * 5);
}

// The group kernel's row blocks (R rows per full tile, their keys and values loaded once): many rows, each
// seeing one more position per two rows (a prompt block's causal prefixes), tiles full for some rows and not
// others, DSA masks, and a tile with an infinite value (the blocks' value sums must then fall back to the
// row-by-row path, which skips zero weights). Every row equals the reference for that row alone.
TEST(Attention, GroupRowBlocksEqualReference) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/F16C on this CPU for the SIMD variants";
    std::mt19937 rng(23);
    std::normal_distribution<float> nd;
    std::bernoulli_distribution coin(0.25);
    constexpr int kRows = 11, kPerPosition = 2;
    for (auto [dk, dv, latent] : {std::tuple{64, 64, false}, {128, 128, false}, {96, 64, true}, {64, 32, true}}) {
        for (int n_kv : {60, 130, 200}) {
            Cache c(dk, latent ? dk : dv, n_kv + kRows, rng);
            c.dv = dv;
            for (int mode : {0, 1, 2}) {  // 0: plain, 1: random DSA mask, 2: an infinite value in the second tile
                Cache cm = c;
                if (mode == 2) cm.v[static_cast<size_t>(70) * (latent ? dk : dv) + 3] = fp32_to_fp16(std::numeric_limits<float>::infinity());
                if (mode == 2 && latent) cm.k = cm.v;
                std::vector<uint8_t> visible(static_cast<size_t>(n_kv + kRows));
                for (auto& v : visible) v = mode == 1 ? coin(rng) : 1;
                const int most = n_kv + (kRows - 1) / kPerPosition;
                ops::KvView kv = latent ? cm.latent_view(n_kv, mode == 1 ? visible.data() : nullptr)
                                        : cm.view(n_kv, mode == 1 ? visible.data() : nullptr);
                std::vector<float> k_tiles(static_cast<size_t>((most + 63) / 64 * 64 * dk)), v_f32(static_cast<size_t>(most) * dv);
                ops::KvView full = kv;
                full.n_kv = most;
                ops::convert_kv_for_tiles(full, k_tiles.data(), v_f32.data());
                // The last tile's keys past the copied positions are NaN: a kernel that scores a partial tile
                // whole must mask them, not use them.
                for (int pos = most; pos < (most + 63) / 64 * 64; ++pos)
                    for (int d = 0; d < dk; ++d)
                        k_tiles[static_cast<size_t>(pos / 64 * dk + d) * 64 + pos % 64] = std::numeric_limits<float>::quiet_NaN();
                kv.k_tiles = k_tiles.data();
                kv.v_f32 = v_f32.data();
                kv.rows_per_position = kPerPosition;
                std::vector<float> qs(static_cast<size_t>(kRows) * dk), outs(static_cast<size_t>(kRows) * dv), want(dv);
                for (auto& x : qs) x = nd(rng);
                ops::AttnScratch s1, s2;
                for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
                    for (bool wide : {false, true}) {
                        const ops::AttendGroupFn group = kernels::attend_tiled_group(f, wide);
                        if (!group) continue;
                        group(qs.data(), dk, kRows, kv, 0.3f, outs.data(), dv, s2);
                        for (int r = 0; r < kRows; ++r) {
                            ops::KvView one = latent ? cm.latent_view(n_kv + r / kPerPosition, kv.visible)
                                                     : cm.view(n_kv + r / kPerPosition, kv.visible);
                            ops::float_ops(f).attend_tiled(qs.data() + static_cast<size_t>(r) * dk, one, 0.3f, want.data(), s1);
                            for (int d = 0; d < dv; ++d)
                                ASSERT_EQ(std::memcmp(&outs[static_cast<size_t>(r) * dv + d], &want[d], 4), 0)
                                    << kernels::flavor_name(f) << " wide " << wide << " dk " << dk << " n_kv " << n_kv << " mode " << mode << " row "
                                    << r << " d " << d << ": " << outs[static_cast<size_t>(r) * dv + d] << " vs " << want[d];
                        }
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace moe

// ik_llama.cpp's flash attention (ik files): its SIMD forms (AVX2, and AVX-512 where the CPU has it) against the
// scalar statement, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"
#include "tests/attention_cache.h"

namespace moe {
namespace {

using Cache = test::AttentionCache;

// The SIMD forms of ik's attention this CPU runs (AVX2, and AVX-512 where it has it), labelled for messages.
template <class Fn>
std::vector<std::pair<const char*, Fn>> ik_forms(Fn avx2, Fn avx512, const char* what) {
    std::vector<std::pair<const char*, Fn>> forms = {{"avx2", avx2}};
    if (kernels::table_for(kernels::Isa::Avx512)) forms.emplace_back("avx512", avx512);
    else std::printf("[ note     ] no AVX-512 on this CPU: ik's 512-bit %s not run\n", what);
    return forms;
}

// ik_llama.cpp's flash attention (ik files): the AVX2 form against the scalar one, bit for bit, over one and several
// 128-key blocks (a later block's larger maximum rescales), partial blocks, masked keys, MLA's aliased values,
// large and small scores; and against plain float softmax attention within float rounding.
TEST(Attention, IkFlashAttentionSimdMatchesScalar) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar form runs";
    std::mt19937 rng(17);
    std::normal_distribution<float> nd;
    const auto forms = ik_forms(ik::attend_ik_simd(), ik::attend_ik_avx512(), "attention");
    ops::AttnScratch s;
    int compared = 0;
    for (const auto& [form, simd] : forms)
        for (auto [dk, dv] : {std::pair{128, 128}, std::pair{64, 64}, std::pair{576, 512}}) {
            for (int n : {1, 7, 128, 129, 300}) {
                Cache c(dk, dv, n, rng);
                std::vector<uint8_t> visible(static_cast<size_t>(n), 1);
                for (int j = 0; j < n; j += 5) visible[static_cast<size_t>(j)] = 0;
                visible[0] = 1;
                for (float mag : {1.f, 30.f}) {
                    std::vector<float> q(static_cast<size_t>(dk)), a(static_cast<size_t>(dv)), b(static_cast<size_t>(dv));
                    for (auto& x : q) x = mag * nd(rng);
                    for (const uint8_t* vis : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(visible.data())}) {
                        const ops::KvView kv = dk == 576 ? c.latent_view(n, vis) : c.view(n, vis);
                        ik::attend_ik(q.data(), kv, 0.1f, a.data(), s);
                        simd(q.data(), kv, 0.1f, b.data(), s);
                        ASSERT_EQ(a, b) << form << " " << dk << "/" << dv << " n=" << n << " mag " << mag;
                        // plain softmax attention in double
                        std::vector<double> w(static_cast<size_t>(n), 0.0);
                        double mx = -1e300, z = 0;
                        for (int j = 0; j < n; ++j) {
                            if (vis && !vis[j]) continue;
                            double sc = 0;
                            for (int d = 0; d < dk; ++d)
                                sc += static_cast<double>(q[d]) * fp16_to_fp32(kv.k[static_cast<size_t>(j) * kv.k_stride + d]);
                            w[static_cast<size_t>(j)] = sc * 0.1;
                            mx = std::max(mx, w[static_cast<size_t>(j)]);
                        }
                        for (int j = 0; j < n; ++j)
                            w[static_cast<size_t>(j)] = (vis && !vis[j]) ? 0 : std::exp(w[static_cast<size_t>(j)] - mx),
                            z += w[static_cast<size_t>(j)];
                        for (int d = 0; d < dv; ++d) {
                            double o = 0;
                            for (int j = 0; j < n; ++j)
                                o += w[static_cast<size_t>(j)] / z * fp16_to_fp32(kv.v[static_cast<size_t>(j) * kv.v_stride + d]);
                            ASSERT_NEAR(a[d], o, 1e-3 * (1 + std::fabs(o))) << dk << " n=" << n << " d=" << d;
                        }
                        ++compared;
                    }
                }
            }
        }
    EXPECT_GT(compared, 0);
}

// ik's group form (the heads of a kv head, a block of consecutive tokens) gives each row the bits of the one-row
// form at that row's causal prefix: prefixes ending mid-block, on a block edge, and blocks wholly past some rows;
// a single token's heads with masked keys; MLA's aliased values.
TEST(Attention, IkFlashAttentionGroupMatchesOneRow) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar form runs";
    std::mt19937 rng(29);
    std::normal_distribution<float> nd;
    const auto forms = ik_forms(ik::attend_ik_group_simd(), ik::attend_ik_group_avx512(), "group attention");
    ops::AttnScratch s, s1;
    int compared = 0;
    for (const auto& [form, group] : forms)
        for (auto [dk, dv] : {std::pair{128, 128}, std::pair{64, 72}, std::pair{576, 512}, std::pair{32, 152}}) {
            for (int n_first : {1, 120, 128, 250}) {
                for (int per_position : {0, 1, 3, 4}) {
                    const int tokens = per_position ? 16 : 1, heads = per_position ? per_position : 3,
                              rows = per_position ? tokens * per_position : heads;
                    Cache c(dk, dv, n_first + tokens, rng);
                    std::vector<uint8_t> visible(static_cast<size_t>(c.n_kv), 1);
                    for (int j = 1; j < c.n_kv; j += 3) visible[static_cast<size_t>(j)] = 0;
                    const uint8_t* vis = per_position ? nullptr : visible.data();
                    std::vector<float> q(static_cast<size_t>(rows) * dk), a(static_cast<size_t>(rows) * dv, -1.f), b(static_cast<size_t>(dv));
                    for (auto& x : q) x = 4.f * nd(rng);
                    ops::KvView kv = dk == 576 ? c.latent_view(n_first, vis) : c.view(n_first, vis);
                    kv.rows_per_position = per_position;
                    group(q.data(), dk, rows, kv, 0.1f, a.data(), dv, s);
                    for (int r = 0; r < rows; ++r) {
                        ops::KvView one = kv;
                        one.rows_per_position = 0;
                        one.n_kv = per_position ? n_first + r / per_position : n_first;
                        ik::attend_ik(q.data() + static_cast<size_t>(r) * dk, one, 0.1f, b.data(), s1);
                        ASSERT_EQ(0, std::memcmp(a.data() + static_cast<size_t>(r) * dv, b.data(), 4 * static_cast<size_t>(dv)))
                            << form << " " << dk << "/" << dv << " first prefix " << n_first << " rows per position " << per_position << " row " << r;
                    }
                    ++compared;
                }
            }
        }
    EXPECT_GT(compared, 0);
}

// An inf or NaN value the scalar form never adds (a key past a row's causal prefix, or masked out) leaves that row's
// output as it is: the 512-bit form adds unseen keys with p = 0 only where a block's values are all finite.
TEST(Attention, IkFlashAttentionGroupIgnoresUnseenNonFiniteValues) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar form runs";
    const auto forms = ik_forms(ik::attend_ik_group_simd(), ik::attend_ik_group_avx512(), "group attention");
    std::mt19937 rng(31);
    std::normal_distribution<float> nd;
    ops::AttnScratch s, s1;
    const int dk = 64, dv = 64, n_first = 100;
    // 16 tokens of two rows (a prompt block: values converted once for the passes), and 4 tokens of one row (four
    // rows, one pass: values read straight from the fp16 cache)
    for (const auto& [tokens, per_position, seen_from] : {std::tuple{16, 2, 7}, std::tuple{4, 1, 3}})
        for (const auto& [form, group] : forms) {
            const int rows = tokens * per_position;
            for (uint16_t special : {uint16_t{0x7C00}, uint16_t{0xFC00}, uint16_t{0x7E00}}) {  // +inf, -inf, NaN
                Cache c(dk, dv, n_first + tokens, rng);
                const int at = n_first + seen_from - 1;  // seen by the tokens from seen_from on (in a four-row pass with the one before)
                c.v[static_cast<size_t>(at) * dv + 3] = special;
                std::vector<float> q(static_cast<size_t>(rows) * dk), a(static_cast<size_t>(rows) * dv), b(static_cast<size_t>(dv));
                for (auto& x : q) x = nd(rng);
                ops::KvView kv = c.view(n_first);
                kv.rows_per_position = per_position;
                group(q.data(), dk, rows, kv, 0.1f, a.data(), dv, s);
                int unseen = 0;
                for (int r = 0; r < rows; ++r) {
                    ops::KvView one = c.view(n_first + r / per_position);
                    ik::attend_ik(q.data() + static_cast<size_t>(r) * dk, one, 0.1f, b.data(), s1);
                    const float* got = a.data() + static_cast<size_t>(r) * dv;
                    if (one.n_kv <= at) {
                        ASSERT_EQ(0, std::memcmp(got, b.data(), 4 * static_cast<size_t>(dv))) << form << " row " << r << " value " << special;
                        ++unseen;
                    } else {
                        EXPECT_FALSE(std::isfinite(got[3])) << form << " row " << r;
                        EXPECT_FALSE(std::isfinite(b[3]));
                    }
                }
                EXPECT_EQ(unseen, seen_from * per_position);
            }
        }
}

}  // namespace
}  // namespace moe

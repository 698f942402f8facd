// The vector exp / silu kernels behind attention's softmax and the FFN activations: each SIMD lane against libm
// or the scalar reference, bit for bit where the arithmetic allows (split from test_attention.cpp).

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

namespace moe {
namespace {

using kernels::Flavor;

// The attention's exps eight at a time give libm's expf bits: a spread of every float (every 61st bit pattern,
// both signs: the softmax's arguments are <= 0, the special lanes are the rest), and the softmax range densely.
TEST(VectorExp, LibmLanesGiveLibmsBits) {
    if (!kernels::attend_chunk_group_f16c(Flavor::Avx512, true)) GTEST_SKIP() << "no AVX-512F on this CPU: the lanes serve the 512-bit kernels only";
    if (!kernels::libm_expf_lanes_match()) GTEST_SKIP() << "this process's expf is not glibc's __expf_fma: the kernels call it instead of the lanes";
    std::vector<float> x(1 << 16), y(x.size());
    uint64_t checked = 0, differ = 0;
    auto check = [&](size_t n) {
        kernels::libm_expf_for_tests(x.data(), y.data(), static_cast<int>(n));
        for (size_t i = 0; i < n; ++i) {
            const float want = std::exp(x[i]);
            differ += std::memcmp(&want, &y[i], 4) != 0 && !(std::isnan(want) && std::isnan(y[i]));
        }
        checked += n;
    };
    size_t n = 0;
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 61) {
        const uint32_t bits = static_cast<uint32_t>(b);
        std::memcpy(&x[n++], &bits, 4);
        if (n == x.size()) check(n), n = 0;
    }
    for (float v = -104.f; v <= 0.f; v += 0.0003f) {
        x[n++] = v;
        if (n == x.size()) check(n), n = 0;
    }
    check(n);
    EXPECT_EQ(differ, 0u) << "of " << checked;
}

// The vector exp of both builds stays within 2 ulp of exp over its whole range, across the boundary where the
// AVX-512 build's power of two stops being a normal float (results down to subnormals, and 0 / inf beyond).
TEST(VectorExp, WithinTwoUlpOfExpAcrossTheRange) {
    auto ulp_distance = [](float a, float b) {
        int32_t ia, ib;
        std::memcpy(&ia, &a, 4);
        std::memcpy(&ib, &b, 4);
        return std::abs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
    };
    int checked = 0;
    for (float x = -103.0f; x < 88.5f; x += 0.0173f) {
        const float want = std::exp(x);
        for (float got : {ggml::expf_v<kernels::Flavor::Avx512>(x), ggml::expf_v<kernels::Flavor::Avx2>(x)}) {
            if (want < std::numeric_limits<float>::min()) {  // subnormal: compare absolutely
                EXPECT_NEAR(got, want, 2 * std::numeric_limits<float>::denorm_min()) << x;
            } else {
                EXPECT_LE(ulp_distance(got, want), 2) << "x " << x << " got " << got << " want " << want;
            }
            ++checked;
        }
    }
    EXPECT_EQ(ggml::expf_v<kernels::Flavor::Avx512>(-200.f), 0.f);
    EXPECT_TRUE(std::isinf(ggml::expf_v<kernels::Flavor::Avx512>(200.f)));
    EXPECT_GT(checked, 10000);
}

// The tiled path's softmax step on registers against ggml_numerics.h's statement of it, bit for bit, on tiles
// whose scores span the vector exp's whole range: results down to subnormals and 0, the AVX-512 build's
// lanes where 2^n stops being a normal float (the registers that take the scalar form), masked -inf entries,
// a running max that grows (the accumulator's rescale) and one that does not.
TEST(VectorExp, SoftmaxStepEqualsReference) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/FMA on this CPU for the SIMD softmax step";
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> spread(-200.f, 0.f), near_edge(-104.f, -86.f);
    std::bernoulli_distribution coin(0.2);
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    int checked = 0;
    for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
        const ops::SoftmaxStepFn simd = kernels::tiled_softmax_step_f16c(f);
        ASSERT_NE(simd, nullptr);
        for (int trial = 0; trial < 400; ++trial) {
            const int kind = trial % 4;  // 0: small scores, 1: whole range, 2: near the subnormal edge, 3: all masked
            std::vector<float> kq(64), acc(72);
            for (float& x : kq) {
                x = kind == 0 ? spread(rng) / 50.f : kind == 1 ? spread(rng) : near_edge(rng);
                if (coin(rng) || kind == 3) x = kNegInf;
            }
            if (kind == 2) kq[trial % 64] = 0.f;  // the max, so the others' exps land near the edge
            for (float& a : acc) a = spread(rng);
            std::vector<float> kq2 = kq, acc2 = acc;
            const float m0 = trial % 3 == 0 ? kNegInf : (trial % 3 == 1 ? -300.f : 300.f);
            float M1 = m0, S1 = 1.5f, M2 = m0, S2 = 1.5f;
            const bool r1 = (f == Flavor::Avx512 ? &ggml::tiled_softmax_step<Flavor::Avx512>
                                                 : &ggml::tiled_softmax_step<Flavor::Avx2>)(kq.data(), M1, S1, acc.data(), 72);
            const bool r2 = simd(kq2.data(), M2, S2, acc2.data(), 72);
            ASSERT_EQ(r1, r2) << kernels::flavor_name(f) << " trial " << trial;
            ASSERT_EQ(std::memcmp(&M1, &M2, 4), 0) << kernels::flavor_name(f) << " trial " << trial;
            ASSERT_EQ(std::memcmp(&S1, &S2, 4), 0) << kernels::flavor_name(f) << " trial " << trial << " " << S1 << " " << S2;
            ASSERT_EQ(std::memcmp(kq.data(), kq2.data(), 64 * 4), 0) << kernels::flavor_name(f) << " trial " << trial;
            ASSERT_EQ(std::memcmp(acc.data(), acc2.data(), 72 * 4), 0) << kernels::flavor_name(f) << " trial " << trial;
            checked += r1;
        }
    }
    EXPECT_GT(checked, 400);  // most trials had a visible score
}

// SwiGLU and SiLU on registers against the reference, bit for bit, for both builds: gate values across the
// exp's range (saturating to 0 and to x, the subnormal edge), lengths with and without a tail.
TEST(VectorExp, SwigluAndSiluEqualReference) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/FMA on this CPU for the SIMD activations";
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> wide(-120.f, 120.f);
    std::normal_distribution<float> nd(0.f, 3.f);
    for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
        const ops::FloatOps& simd = kernels::simd_float_ops(f);
        const ops::FloatOps& ref = ops::float_ops(f);
        ASSERT_NE(simd.swiglu, ref.swiglu) << "the SIMD table is in use on an AVX2 CPU";
        for (int n : {1, 7, 8, 16, 17, 64, 100, 515}) {
            for (int kind = 0; kind < 2; ++kind) {
                std::vector<float> g(n), u(n);
                for (int i = 0; i < n; ++i) {
                    g[i] = kind == 0 ? nd(rng) : wide(rng);
                    u[i] = nd(rng);
                }
                if (n > 5) g[5] = 88.7f, g[2] = -87.5f, g[3] = -104.f;
                std::vector<float> g1 = g, g2 = g, s1 = g, s2 = g;
                ref.swiglu(g1.data(), u.data(), n);
                simd.swiglu(g2.data(), u.data(), n);
                ref.silu(s1.data(), n);
                simd.silu(s2.data(), n);
                ASSERT_EQ(std::memcmp(g1.data(), g2.data(), 4 * static_cast<size_t>(n)), 0)
                    << kernels::flavor_name(f) << " swiglu n " << n << " kind " << kind;
                ASSERT_EQ(std::memcmp(s1.data(), s2.data(), 4 * static_cast<size_t>(n)), 0)
                    << kernels::flavor_name(f) << " silu n " << n << " kind " << kind;
            }
        }
    }
}

// The DSA indexer's relu-weighted head sums on registers against ops::relu_weighted_sum, bit for bit: negative,
// -0, NaN and infinite dots, 1 to 32 heads, key counts with and without a tail.
TEST(VectorExp, IndexerSumsEqualReference) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2/FMA on this CPU for the SIMD indexer sums";
    std::mt19937 rng(12);
    std::normal_distribution<float> nd(0.f, 4.f);
    const float special[] = {
        -0.f, 0.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), -1e-40f};
    for (Flavor f : {Flavor::Avx512, Flavor::Avx2}) {
        const ops::FloatOps& simd = kernels::simd_float_ops(f);
        ASSERT_NE(simd.relu_weighted_sum, nullptr) << "the SIMD table is in use on an AVX2 CPU";
        for (int heads : {1, 4, 32}) {
            for (int m : {1, 7, 8, 64, 67}) {
                const int64_t stride = m + 3;
                std::vector<float> part(static_cast<size_t>(heads * stride)), w(static_cast<size_t>(heads)), a(static_cast<size_t>(m)),
                    b(static_cast<size_t>(m));
                for (auto& x : part) x = rng() % 9 == 0 ? special[rng() % std::size(special)] : nd(rng);
                for (auto& x : w) x = nd(rng);
                ops::relu_weighted_sum(part.data(), stride, heads, w.data(), m, a.data());
                simd.indexer_sum(part.data(), stride, heads, w.data(), m, b.data());
                ASSERT_EQ(std::memcmp(a.data(), b.data(), 4 * static_cast<size_t>(m)), 0)
                    << kernels::flavor_name(f) << " heads " << heads << " m " << m;
            }
        }
    }
}

}  // namespace
}  // namespace moe

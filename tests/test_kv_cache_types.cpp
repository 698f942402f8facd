// KV cache types (kernels/kv_cache_types.h, ops::attend_typed): rows written as llama.cpp writes them, the
// Walsh-Hadamard sizes it picks, typed attention's SIMD dots against the scalar reference (bit for bit) and
// against plain double-precision attention, and the model checks that refuse what llama.cpp refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "cli/commands.h"
#include "engine/forward/runner.h"
#include "engine/forward/sequence_cache.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/blocks.h"
#include "engine/kernels/float_ops.h"
#include "engine/kernels/iq_tables.h"
#include "engine/kernels/kernels.h"
#include "engine/kernels/kv_cache_types.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "tests/test_support.h"

namespace moe {
namespace {

using kernels::KvCacheTypes;

std::vector<float> dequantized(GgmlType t, const std::vector<uint8_t>& row, int n) {
    std::vector<float> out(static_cast<size_t>(n));
    kernels::dequantize_row(t, row.data(), out.data(), n);
    return out;
}
std::vector<uint8_t> stored(GgmlType t, const std::vector<float>& x) {
    std::vector<uint8_t> row(*row_bytes(t, x.size()));
    kernels::store_kv_row(t, x.data(), row.data(), static_cast<int64_t>(x.size()));
    return row;
}

TEST(KvCacheTypes, NamesAsLlamaCpp) {
    EXPECT_EQ(kernels::parse_kv_cache_type("q8_0"), GgmlType::Q8_0);
    EXPECT_EQ(kernels::parse_kv_cache_type("IQ4_NL"), GgmlType::IQ4_NL);
    EXPECT_EQ(kernels::parse_kv_cache_type("bf16"), GgmlType::BF16);
    EXPECT_FALSE(kernels::parse_kv_cache_type("q8"));
    EXPECT_FALSE(kernels::parse_kv_cache_type("q6_0"));  // ik_llama.cpp's, not mainline's
    EXPECT_FALSE(kernels::parse_kv_cache_type("q4_K"));  // a weight type, not a cache type
    EXPECT_EQ(kernels::kv_cache_type_list(), "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1");
}

// Each type's stored row reads back within its resolution; zero rows stay exactly zero.
TEST(KvCacheTypes, RowsReadBackWithinTheTypesResolution) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    const std::pair<GgmlType, double> bounds[] = {{GgmlType::F32, 0},       {GgmlType::F16, 1e-3},    {GgmlType::BF16, 8e-3},
                                                  {GgmlType::Q8_0, 1.2e-2}, {GgmlType::Q5_0, 6.5e-2}, {GgmlType::Q5_1, 6e-2},
                                                  {GgmlType::Q4_0, 0.16},   {GgmlType::Q4_1, 0.16},   {GgmlType::IQ4_NL, 0.16}};
    for (const auto& [t, bound] : bounds) {
        for (int rep = 0; rep < 50; ++rep) {
            std::vector<float> x(128);
            for (auto& v : x) v = nd(rng) * (rep % 5 == 0 ? 1e-3f : rep % 5 == 1 ? 300.f : 1.f);
            if (rep % 7 == 0) x[rep % 128] *= 40;  // an outlier
            const auto back = dequantized(t, stored(t, x), 128);
            for (int b = 0; b < 4; ++b) {  // per block of 32: error relative to the block's largest value
                float amax = 0, err = 0;
                for (int j = 32 * b; j < 32 * b + 32; ++j) {
                    amax = std::max(amax, std::fabs(x[j]));
                    err = std::max(err, std::fabs(back[j] - x[j]));
                }
                EXPECT_LE(err, bound * amax) << kernels::kv_cache_type_name(t) << " rep " << rep << " block " << b;
            }
        }
        const std::vector<float> zeros(64, 0.f);
        for (float v : dequantized(t, stored(t, zeros), 64)) EXPECT_EQ(v, 0.f) << kernels::kv_cache_type_name(t);
    }
}

// The exact formulas: q4_0's d = signed max / -8 and q = min(15, trunc(x/d + 8.5)); q8_0's halves to even.
TEST(KvCacheTypes, Q4_0AndQ8_0RowsAreLlamaCppsBytes) {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j % 16) - 8.f + (j >= 16 ? 0.5f : 0.f);  // -8 .. 7.5
    const auto q4 = stored(GgmlType::Q4_0, x);
    const auto* b4 = reinterpret_cast<const BlockQ4_0*>(q4.data());
    EXPECT_EQ(fp16_to_fp32(b4->d), 1.0f);  // max |x| is the -8: d = -8 / -8
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(b4->qs[j] & 0xF, j) << j;                   // trunc(j - 8 + 8.5) = j
        EXPECT_EQ(b4->qs[j] >> 4, std::min(15, j + 1)) << j;  // trunc(j - 7.5 + 8.5) = j + 1, capped at 15
    }
    std::vector<float> y(32, 0.f);
    y[0] = 127.f;
    y[1] = 2.5f;   // x * 127/127 = 2.5: to even, 2
    y[2] = 3.5f;   // 4
    y[3] = -2.5f;  // -2
    const auto q8 = stored(GgmlType::Q8_0, y);
    const auto* b8 = reinterpret_cast<const BlockQ8_0*>(q8.data());
    EXPECT_EQ(b8->qs[0], 127);
    EXPECT_EQ(b8->qs[1], 2);
    EXPECT_EQ(b8->qs[2], 4);
    EXPECT_EQ(b8->qs[3], -2);
}

// IQ4_NL refits its scale by least squares on the levels it picked, so it is never worse than the first guess.
TEST(KvCacheTypes, Iq4NlScaleIsTheLeastSquaresFit) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    for (int rep = 0; rep < 100; ++rep) {
        std::vector<float> x(32);
        for (auto& v : x) v = nd(rng);
        const auto row = stored(GgmlType::IQ4_NL, x);
        const auto* b = reinterpret_cast<const BlockIQ4_NL*>(row.data());
        double sxq = 0, sqq = 0;
        for (int j = 0; j < 32; ++j) {
            const int l = j < 16 ? b->qs[j] & 0xF : b->qs[j - 16] >> 4;
            const double q = iq::kValuesIq4nl[l], w = static_cast<double>(x[j]) * x[j];
            sxq += w * q * x[j];
            sqq += w * q * q;
        }
        EXPECT_NEAR(fp16_to_fp32(b->d), sxq / sqq, std::fabs(sxq / sqq) * 1e-3) << rep;
    }
}

TEST(KvCacheTypes, RotationSizesAsLlamaCpp) {
    EXPECT_EQ(kernels::kv_rotation_k(GgmlType::Q8_0, 64), 64);
    EXPECT_EQ(kernels::kv_rotation_k(GgmlType::Q8_0, 128), 128);
    EXPECT_EQ(kernels::kv_rotation_k(GgmlType::Q4_0, 192), 64);
    EXPECT_EQ(kernels::kv_rotation_k(GgmlType::Q4_0, 256), 256);
    EXPECT_EQ(kernels::kv_rotation_k(GgmlType::Q8_0, 96), 0);  // not a multiple of 64
    EXPECT_EQ(kernels::kv_rotation_k(GgmlType::F16, 128), 0);  // not quantized
    EXPECT_EQ(kernels::kv_rotation_k(GgmlType::BF16, 128), 0);
    EXPECT_EQ(kernels::kv_rotation_v(GgmlType::Q5_1, 256), 64);  // V: always 64-blocks
    EXPECT_EQ(kernels::kv_rotation_v(GgmlType::F16, 256), 0);
}

// A typed cache of n positions with random contents.
struct TypedCache {
    GgmlType kt, vt;
    int dk, dv, n;
    std::vector<uint8_t> k, v;
    size_t k_row, v_row;
    TypedCache(GgmlType kt_, GgmlType vt_, int dk_, int dv_, int n_, std::mt19937& rng, float spread)
        : kt(kt_), vt(vt_), dk(dk_), dv(dv_), n(n_), k_row(*row_bytes(kt_, dk_)), v_row(*row_bytes(vt_, dv_)) {
        std::normal_distribution<float> nd;
        k.resize(k_row * n);
        v.resize(v_row * n);
        std::vector<float> row(static_cast<size_t>(std::max(dk, dv)));
        for (int p = 0; p < n; ++p) {
            for (int d = 0; d < dk; ++d) row[d] = nd(rng) * spread;
            kernels::store_kv_row(kt, row.data(), &k[p * k_row], dk);
            for (int d = 0; d < dv; ++d) row[d] = nd(rng);
            kernels::store_kv_row(vt, row.data(), &v[p * v_row], dv);
        }
    }
    ops::KvView view(const kernels::KernelTable& table, const uint8_t* visible) const {
        ops::KvView kv;
        kv.dk = dk, kv.dv = dv, kv.n_kv = n, kv.visible = visible;
        kv.k_raw = k.data(), kv.v_raw = v.data(), kv.k_row = k_row, kv.v_row = v_row, kv.k_type = kt, kv.v_type = vt, kv.table = &table;
        return kv;
    }
};

// The fastest table's dots give the reference table's bits; both are near double-precision attention over the
// stored (dequantized) keys and values, with the query rounded as K's dot type rounds it.
TEST(KvCacheTypes, TypedAttentionMatchesTheScalarReferenceAndPlainAttention) {
    std::mt19937 rng(21);
    std::normal_distribution<float> nd;
    const std::pair<GgmlType, GgmlType> pairs[] = {
        {GgmlType::Q8_0, GgmlType::Q8_0}, {GgmlType::Q4_0, GgmlType::Q4_0},     {GgmlType::Q4_1, GgmlType::Q4_1}, {GgmlType::Q5_0, GgmlType::Q5_0},
        {GgmlType::Q5_1, GgmlType::Q5_1}, {GgmlType::IQ4_NL, GgmlType::IQ4_NL}, {GgmlType::BF16, GgmlType::BF16}, {GgmlType::F32, GgmlType::F32},
        {GgmlType::Q8_0, GgmlType::F16},  {GgmlType::F16, GgmlType::Q8_0}};
    for (kernels::Flavor f : {kernels::Flavor::Avx2, kernels::Flavor::Avx512}) {
        const kernels::KernelTable& ref = kernels::reference_table(f);
        const kernels::KernelTable& fast = kernels::active_table(f);
        for (const auto& [kt, vt] : pairs) {
            for (int n : {1, 7, 64, 130}) {
                const float spread = n == 130 ? 30.f : 1.f;  // large scores: one key dominates, exp underflows
                TypedCache c(kt, vt, 64, 64, n, rng, spread);
                std::vector<uint8_t> visible(static_cast<size_t>(n), 1);
                for (int j = 0; j < n; j += 3) visible[j] = n > 1 ? 0 : 1;
                std::vector<float> q(64), a(64), b(64);
                for (auto& x : q) x = nd(rng);
                ops::AttnScratch s;
                ops::attend_typed(q.data(), c.view(ref, visible.data()), 0.125f, a.data(), s);
                ops::attend_typed(q.data(), c.view(fast, visible.data()), 0.125f, b.data(), s);
                std::vector<float> simd(64);
                kernels::typed_attention_kernel(f)(q.data(), c.view(fast, visible.data()), 0.125f, simd.data(),
                                                   s);  // F16C/FMA where the CPU has them
                const std::string what = kernels::kv_cache_type_name(kt) + "/" + kernels::kv_cache_type_name(vt) + " n " + std::to_string(n);
                for (int d = 0; d < 64; ++d) {
                    ASSERT_EQ(std::memcmp(&a[d], &b[d], 4), 0) << what << " dim " << d;
                    ASSERT_EQ(std::memcmp(&a[d], &simd[d], 4), 0) << what << " dim " << d << " (SIMD kernel)";
                }
                {  // an attention sink (gpt-oss) scales every output down, in both kernels alike
                    const float sink = 0.5f;
                    ops::KvView va = c.view(ref, visible.data()), vb = c.view(fast, visible.data());
                    va.sinks = vb.sinks = &sink;
                    std::vector<float> sa(64), sb(64);
                    ops::attend_typed(q.data(), va, 0.125f, sa.data(), s);
                    kernels::typed_attention_kernel(f)(q.data(), vb, 0.125f, sb.data(), s);
                    ASSERT_EQ(std::memcmp(sa.data(), sb.data(), sizeof(float) * 64), 0) << what << " with a sink";
                    for (int d = 0; d < 64; ++d) ASSERT_LT(std::fabs(sa[d]), std::fabs(a[d]) + 1e-6f) << what << " with a sink, dim " << d;
                }
                // Plain attention in double over what the cache holds.
                std::vector<float> kf(64), vf(64), qd(64);
                std::vector<uint8_t> qa(kernels::activation_bytes(kt, 64));
                kernels::prepare_activations(kt, q.data(), qa.data(), 64);
                if (kernels::activation_type(kt) == GgmlType::Q8_1) {  // d, d * sum, 32 int8 per block
                    for (int bl = 0; bl < 2; ++bl) {
                        const auto* b = reinterpret_cast<const BlockQ8_1*>(qa.data()) + bl;
                        for (int j = 0; j < 32; ++j) qd[32 * bl + j] = fp16_to_fp32(b->d) * b->qs[j];
                    }
                } else {
                    kernels::dequantize_row(kernels::activation_type(kt), qa.data(), qd.data(), 64);
                }
                std::vector<double> w, o(64, 0.0);
                double mx = -1e300;
                for (int j = 0; j < n; ++j) {
                    if (!visible[j]) {
                        w.push_back(0);
                        continue;
                    }
                    kernels::dequantize_row(kt, &c.k[j * c.k_row], kf.data(), 64);
                    double sc = 0;
                    for (int d = 0; d < 64; ++d) sc += static_cast<double>(qd[d]) * kf[d];
                    w.push_back(sc * 0.125);
                    mx = std::max(mx, sc * 0.125);
                }
                double z = 0;
                for (int j = 0; j < n; ++j) {
                    if (!visible[j]) continue;
                    const double e = std::exp(w[j] - mx);
                    z += e;
                    kernels::dequantize_row(vt, &c.v[j * c.v_row], vf.data(), 64);
                    for (int d = 0; d < 64; ++d) o[d] += e * vf[d];
                }
                for (int d = 0; d < 64; ++d) EXPECT_NEAR(a[d], o[d] / z, 5e-3 + 2e-3 * std::fabs(o[d] / z)) << what << " dim " << d;
            }
        }
    }
}

// The group form (the query heads of one kv head through one call, the cache read once for all of them) gives every
// row the scalar reference's bits for that row alone: each type pair, 1 to 9 rows, masks with runs and gaps
// (blocks of consecutive positions and scattered ones), per-row sinks, a prompt block's causal rows (row r sees
// n_kv + r / rows_per_position positions), and values narrower than keys (MLA's latent, 576 / 512).
TEST(KvCacheTypes, TypedGroupGivesEachRowTheOneRowBits) {
    std::mt19937 rng(33);
    std::normal_distribution<float> nd;
    const std::pair<GgmlType, GgmlType> pairs[] = {
        {GgmlType::Q8_0, GgmlType::Q8_0}, {GgmlType::Q4_0, GgmlType::Q4_0}, {GgmlType::Q5_1, GgmlType::Q5_1}, {GgmlType::IQ4_NL, GgmlType::IQ4_NL},
        {GgmlType::BF16, GgmlType::BF16}, {GgmlType::F32, GgmlType::F32},   {GgmlType::Q8_0, GgmlType::F16},  {GgmlType::F16, GgmlType::Q8_0}};
    // Under emulation (tests/cpu_models/run.sh) the scalar reference of MLA's 576-wide rows alone took 7 minutes
    // on an Intel host: there the widths that cover the AVX2 kernel's remainders run, and two lengths.
    const bool emulated = std::getenv("MOESTREAM_EMULATED_CPU") != nullptr;
    if (emulated) std::printf("[ note     ] emulated CPU: head widths up to 192 and lengths 1 and 300 (576 and 70 run natively)\n");
    std::vector<std::pair<int, int>> widths = {{64, 64}, {96, 64}, {192, 160}, {576, 512}};
    std::vector<int> lengths = {1, 70, 300};
    if (emulated) widths.pop_back(), lengths = {1, 300};
    for (kernels::Flavor f : {kernels::Flavor::Avx2, kernels::Flavor::Avx512}) {
        const ops::AttendGroupFn group = kernels::typed_attention_group_kernel(f);
        if (!group) GTEST_SKIP() << "no AVX2/F16C on this CPU: typed rows run one by one";
        const kernels::KernelTable& ref = kernels::reference_table(f);
        const kernels::KernelTable& fast = kernels::active_table(f);
        for (const auto& [kt, vt] : pairs) {
            // 160 and 512 values: the 512-bit accumulator chunks of 128 and their 256-bit remainder
            for (const auto& [dk, dv] : widths) {
                for (int n : lengths) {
                    for (int G : {1, 4, 9}) {
                        for (int mode : {0, 1, 2, 3}) {  // 0: all visible, 1: scattered mask, 2: sinks, 3: causal prompt rows
                            const int per_position = mode == 3 ? 2 : 0, span = n + (per_position ? (G - 1) / per_position : 0);
                            TypedCache c(kt, vt, dk, dv, span, rng, n == 300 ? 8.f : 1.f);
                            std::vector<uint8_t> visible(static_cast<size_t>(span), 1);
                            if (mode == 1)
                                for (int j = 0; j < span; ++j) visible[j] = j % 7 == 3 || (j / 50) % 2 == 1 ? 0 : 1;
                            std::vector<float> q(static_cast<size_t>(G) * (dk + 3)), sinks(static_cast<size_t>(G)),
                                out(static_cast<size_t>(G) * (dv + 5)), want(static_cast<size_t>(dv));
                            for (auto& x : q) x = nd(rng);
                            for (auto& x : sinks) x = nd(rng);
                            ops::KvView kv = c.view(fast, mode == 1 ? visible.data() : nullptr);
                            kv.n_kv = n;
                            kv.rows_per_position = per_position;
                            if (mode == 2) kv.sinks = sinks.data(), kv.n_sinks = G;
                            ops::AttnScratch s1, s2;
                            group(q.data(), dk + 3, G, kv, 0.125f, out.data(), dv + 5, s1);
                            for (int g = 0; g < G; ++g) {
                                ops::KvView one = c.view(ref, mode == 1 ? visible.data() : nullptr);
                                one.n_kv = n + (per_position ? g / per_position : 0);
                                if (mode == 2) one.sinks = &sinks[g], one.n_sinks = 1;
                                ops::attend_typed(q.data() + static_cast<size_t>(g) * (dk + 3), one, 0.125f, want.data(), s2);
                                ASSERT_EQ(std::memcmp(&out[static_cast<size_t>(g) * (dv + 5)], want.data(), sizeof(float) * dv), 0)
                                    << kernels::flavor_name(f) << " " << kernels::kv_cache_type_name(kt) << "/" << kernels::kv_cache_type_name(vt)
                                    << " dk " << dk << " n " << n << " G " << G << " mode " << mode << " row " << g;
                            }
                        }
                    }
                }
            }
        }
    }
}

// Several kv heads through one call (a decode step's heads side by side in each position's row): every row gets
// the scalar reference's bits over its own head's view alone, with and without scattered masks and sinks.
TEST(KvCacheTypes, TypedHeadsTogetherGiveEachRowItsHeadsBits) {
    std::mt19937 rng(35);
    std::normal_distribution<float> nd;
    const std::pair<GgmlType, GgmlType> pairs[] = {{GgmlType::Q8_0, GgmlType::Q8_0}, {GgmlType::Q4_0, GgmlType::Q4_0},
                                                   {GgmlType::BF16, GgmlType::BF16}, {GgmlType::F32, GgmlType::F32},
                                                   {GgmlType::Q8_0, GgmlType::F16},  {GgmlType::F16, GgmlType::Q8_0}};
    for (kernels::Flavor f : {kernels::Flavor::Avx2, kernels::Flavor::Avx512}) {
        const kernels::AttendTypedHeadsFn heads_fn = kernels::typed_attention_heads_kernel(f);
        if (!heads_fn) GTEST_SKIP() << "no AVX2/F16C on this CPU: typed rows run one by one";
        const kernels::KernelTable& ref = kernels::reference_table(f);
        const kernels::KernelTable& fast = kernels::active_table(f);
        for (const auto& [kt, vt] : pairs)
            for (const auto& [dk, dv] : {std::pair{64, 64}, std::pair{128, 128}})
                for (int H : {2, 4}) {
                    const int n = 300, G = 3, R = H * G;
                    TypedCache c(kt, vt, H * dk, H * dv, n, rng, 4.f);  // each position's row: H heads side by side
                    const size_t head_k = *row_bytes(kt, dk), head_v = *row_bytes(vt, dv);
                    std::vector<uint8_t> visible(static_cast<size_t>(n));
                    for (int j = 0; j < n; ++j) visible[j] = j % 5 == 2 || (j / 40) % 3 == 1 ? 0 : 1;
                    for (int mode : {0, 1, 2}) {  // 0: all visible, 1: scattered mask, 2: sinks
                        std::vector<float> q(static_cast<size_t>(R) * dk), sinks(static_cast<size_t>(R)), out(static_cast<size_t>(R) * dv),
                            want(static_cast<size_t>(dv));
                        for (auto& x : q) x = nd(rng);
                        for (auto& x : sinks) x = nd(rng);
                        ops::KvView kv = c.view(fast, mode == 1 ? visible.data() : nullptr);
                        kv.dk = dk, kv.dv = dv;
                        if (mode == 2) kv.sinks = sinks.data(), kv.n_sinks = R;
                        ops::AttnScratch s1, s2;
                        heads_fn(q.data(), dk, G, H, kv, 0.125f, out.data(), dv, s1);
                        for (int r = 0; r < R; ++r) {
                            ops::KvView one = c.view(ref, mode == 1 ? visible.data() : nullptr);
                            one.dk = dk, one.dv = dv;
                            one.k_raw += (r / G) * head_k, one.v_raw += (r / G) * head_v;
                            if (mode == 2) one.sinks = &sinks[r], one.n_sinks = 1;
                            ops::attend_typed(q.data() + static_cast<size_t>(r) * dk, one, 0.125f, want.data(), s2);
                            ASSERT_EQ(std::memcmp(&out[static_cast<size_t>(r) * dv], want.data(), sizeof(float) * dv), 0)
                                << kernels::flavor_name(f) << " " << kernels::kv_cache_type_name(kt) << "/" << kernels::kv_cache_type_name(vt)
                                << " dk " << dk << " H " << H << " mode " << mode << " row " << r;
                        }
                    }
                }
    }
}

TEST(KvCacheTypes, AllMaskedRowGivesZeros) {
    std::mt19937 rng(1);
    TypedCache c(GgmlType::Q8_0, GgmlType::Q4_0, 32, 32, 5, rng, 1.f);
    std::vector<uint8_t> none(5, 0);
    std::vector<float> q(32, 1.f), out(32, 7.f);
    ops::AttnScratch s;
    ops::attend_typed(q.data(), c.view(kernels::active_table(), none.data()), 1.f, out.data(), s);
    for (float x : out) EXPECT_EQ(x, 0.f);
}

// GQA: head size head_dim; MLA: a latent of 64 + the RoPE part (qk-rope head_dim: 32 makes the row 96, 16 makes 80).
std::string make_model(const test::TempDir& dir, const std::string& arch, const std::string& head_dim) {
    const std::string out = dir / (arch + head_dim + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--arch",     arch, "--layers",        "2",      "--embd",    "64",    "--heads",
                                     "2",       "--kv-heads", "1",  "--head-dim",      head_dim, "--experts", "4",     "--experts-used",
                                     "2",       "--ffn",      "32", "--vocab-builtin", "--seed", "3",         "--out", out};
    if (arch == "deepseek2") args.insert(args.end(), {"--qk-rope", head_dim});
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

// llama.cpp's refusals, one line each, and the memory each type saves as the engine allocates it.
TEST(KvCacheTypes, ModelsRefuseWhatLlamaCppRefusesAndCountTheirBytes) {
    test::TempDir dir;
    auto gqa = load_model(open_gguf_model(make_model(dir, "qwen3moe", "64")));
    auto mla = load_model(open_gguf_model(make_model(dir, "deepseek2", "32")));
    EXPECT_EQ(kv_cache_types_problem(*gqa, {GgmlType::Q8_0, GgmlType::F16}), "");
    EXPECT_EQ(kv_cache_types_problem(*gqa, {GgmlType::Q8_0, GgmlType::BF16}), "");
    const std::string wrong_mix = kv_cache_types_problem(*mla, {GgmlType::Q8_0, GgmlType::F16});
    EXPECT_NE(wrong_mix.find("--cache-type-k q8_0 and --cache-type-v f16 must be the same"), std::string::npos) << wrong_mix;
    EXPECT_EQ(kv_cache_types_problem(*mla, {GgmlType::Q4_0, GgmlType::Q4_0}), "");  // latent row 64 + 32
    auto mla80 = load_model(open_gguf_model(make_model(dir, "deepseek2", "16")));
    EXPECT_NE(kv_cache_types_problem(*mla80, {GgmlType::Q8_0, GgmlType::Q8_0}).find("do not divide the MLA latent row (80)"), std::string::npos);
    EXPECT_EQ(kv_cache_types_problem(*mla80, {GgmlType::BF16, GgmlType::BF16}), "");
    // head size 40: a block of 32 does not divide it
    auto odd = load_model(open_gguf_model(make_model(dir, "qwen3moe", "40")));
    const std::string blocks = kv_cache_types_problem(*odd, {GgmlType::Q8_0, GgmlType::Q8_0});
    EXPECT_NE(blocks.find("--cache-type-k q8_0 stores blocks of 32 values, which do not divide the attention head size (40)"), std::string::npos)
        << blocks;
    EXPECT_THROW(SequenceCache::make(*odd, 8, {GgmlType::Q8_0, GgmlType::Q8_0}), std::invalid_argument);
    EXPECT_NO_THROW(SequenceCache::make(*odd, 8, {GgmlType::BF16, GgmlType::F32}));
    // Bytes: what the facts predict is what the cache allocates, for each type.
    for (const auto& path : {dir / "qwen3moe64.gguf", dir / "deepseek232.gguf"}) {
        GgufModel file = open_gguf_model(path);
        auto m = load_model(file);
        const ModelFacts f = model_facts(file);
        for (GgmlType t : kernels::kKvCacheTypes) {
            const SequenceCache c = SequenceCache::make(*m, 64, {t, t});
            EXPECT_EQ(f.kv_bytes(64, {t, t}, 0), c.bytes()) << path << " " << kernels::kv_cache_type_name(t);
        }
        EXPECT_EQ(f.kv_bytes(64, {GgmlType::Q8_0, GgmlType::Q8_0}, 0) * 32, f.kv_bytes(64, {}, 0) * 17);  // 34 bytes per 32 vs 64
    }
}

// The command line: -ctk/-ctv as llama.cpp spells them, a clear line for a bad type or a refused pair.
TEST(KvCacheTypes, CommandLineTakesLlamaCppsFlags) {
    test::TempDir dir;
    const std::string gqa = make_model(dir, "qwen3moe", "32"), mla = make_model(dir, "deepseek2", "32");
    auto [rc, out] = test::run_moestream("run --model " + gqa + " --prompt hello --n-predict 4 -ctk q8_0 -ctv q4_0");
    EXPECT_EQ(rc, 0) << out;
    // An f32 cache runs, and the log says what it buys (llama.cpp attends it as f16).
    std::tie(rc, out) = test::run_moestream("run --model " + gqa + " --prompt hello --n-predict 4 -ctk f32 -ctv f32");
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("KV cache f32/f32 (f32 is attended as f16"), std::string::npos) << out;
    std::tie(rc, out) = test::run_moestream("run --model " + gqa + " --prompt hello --n-predict 4 --cache-type-k q6_k");
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("--cache-type-k q6_k is not a cache type (f32, f16, bf16, q8_0"), std::string::npos) << out;
    std::tie(rc, out) = test::run_moestream("run --model " + mla + " --prompt hello --n-predict 4 -ctk q8_0");
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("must be the same type"), std::string::npos) << out;
    // DeepSeek-V4 keeps one cache (K is V): one type for both, as llama.cpp requires, in any type.
    const std::string ds4 = dir / "ds4.gguf";
    const std::vector<std::string> args = {"mkmodel", "--arch",        "deepseek4", "--layers",        "2",     "--embd",   "64", "--heads",
                                           "2",       "--experts",     "4",         "--experts-used",  "2",     "--ffn",    "32", "--compress-ratios",
                                           "0,4",     "--head-dim",    "32",        "--rope-dims",     "8",     "--q-lora", "32", "--window",
                                           "4",       "--indexer-dim", "32",        "--vocab-builtin", "--out", ds4};
    ASSERT_EQ(cli::dispatch(args), 0);
    std::tie(rc, out) = test::run_moestream("run --model " + ds4 + " --prompt hello --n-predict 4 -ctk q8_0 -ctv f16");
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(
        out.find("(DeepSeek-V4 compressed attention) keeps V inside the K cache, so --cache-type-k q8_0 and --cache-type-v f16 must be the same"),
        std::string::npos)
        << out;
    std::tie(rc, out) = test::run_moestream("run --model " + ds4 + " --prompt hello --n-predict 4 -ctk q4_1 -ctv q4_1");
    EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace moe

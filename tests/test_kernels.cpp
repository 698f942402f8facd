// Every SIMD dot product against the scalar reference on seeded random and edge inputs, and the
// reference itself against float math on dequantized weights, each with a named error budget.
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "engine/kernels/kernels.h"
#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/ik/ik_blocks.h"
#include <cstring>
#include "engine/kernels/kernels_internal.h"
#include "engine/kernels/cpu_choice.h"
#include "tests/kernel_cases.h"
#include "tests/test_support.h"

namespace moe {
namespace {

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

enum class Fill { Random, Zeros, Large, Tiny, OneHot };

std::vector<float> make(size_t n, Fill f, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        switch (f) {
            case Fill::Random: v[i] = nd(rng); break;
            case Fill::Zeros: v[i] = 0.f; break;
            case Fill::Large: v[i] = 6e4f * (i % 2 ? 1.f : -1.f) * (0.5f + 0.5f * std::fabs(nd(rng)) / 4.f); break;
            case Fill::Tiny: v[i] = 1e-6f * nd(rng); break;
            case Fill::OneHot: v[i] = i == n / 3 ? 3.f : 0.f; break;
        }
    }
    return v;
}

struct Prepared {
    std::vector<uint8_t> w, a;
};

Prepared prepare(GgmlType t, const std::vector<float>& w, const std::vector<float>& a) {
    Prepared p;
    p.w.resize(*row_bytes(t, w.size()));
    kernels::quantize_row(t, w.data(), p.w.data(), static_cast<int64_t>(w.size()));
    p.a.resize(kernels::activation_bytes(t, static_cast<int64_t>(a.size())));
    kernels::prepare_activations(t, a.data(), p.a.data(), static_cast<int64_t>(a.size()));
    return p;
}

// Lengths per type: floats also off the 16- and 64-element steps (tails), the others in whole blocks.
std::vector<size_t> lengths_of(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16: return {3, 48, 96, 256, 4096};
        case GgmlType::Q8_0:
        case GgmlType::Q4_0: return {32, 96, 256, 4096};
        default: return {256, 512, 4096};
    }
}

// Every kernel slot (llama.cpp's one-token, batched and repacked orders) against the scalar reference's.
TEST(Kernels, SimdMatchesScalarReference) {
    REQUIRE_SIMD_TABLE();
    std::mt19937 rng(1234);
    int compared = 0;
    for (const test::SimdCase& c : test::simd_cases()) {
        const kernels::KernelTable* t = c.table;
        const kernels::KernelTable& ref = *c.ref;
        for (GgmlType type : kTypes) {
            const int id = static_cast<int>(type);
            const std::pair<const char*, kernels::DotFn const*> slots[] = {
                {"dot", t->dot}, {"batch", t->dot_batch}, {"repacked", t->dot_repacked}, {"repacked-gemm", t->dot_repacked_gemm}};
            const kernels::DotFn* ref_slots[] = {ref.dot, ref.dot_batch, ref.dot_repacked, ref.dot_repacked_gemm};
            for (size_t k = 0; k < 4; ++k) {
                const kernels::DotFn got_fn = slots[k].second[id], ref_fn = ref_slots[k][id];
                ASSERT_EQ(got_fn == nullptr, ref_fn == nullptr) << c.label << " " << type_name(id) << " " << slots[k].first;
                if (!got_fn) continue;
                for (Fill fw : {Fill::Random, Fill::Zeros, Fill::Large, Fill::Tiny, Fill::OneHot}) {
                    for (size_t n : lengths_of(type)) {
                        auto w = make(n, fw, rng), a = make(n, Fill::Random, rng);
                        Prepared p = prepare(type, w, a);
                        const float want = ref_fn(static_cast<int64_t>(n), p.w.data(), p.a.data());
                        const float got = got_fn(static_cast<int64_t>(n), p.w.data(), p.a.data());
                        // Exact integer sums and the reference's float order (for BF16 on this CPU's AVX-512 table,
                        // the VDPBF16PS instruction itself against the reference's emulation): bit-identical.
                        EXPECT_EQ(got, want) << c.label << " " << type_name(id) << " " << slots[k].first << " n=" << n
                                             << " fill=" << static_cast<int>(fw);
                        ++compared;
                    }
                }
            }
        }
    }
    EXPECT_GT(compared, 0) << "no SIMD table on this CPU to compare";
}

// The orders differ from each other (else the slots would be pointless): on random data the batched and
// repacked sums of a long row land on other bits than the one-token sum at least sometimes.
// fp16 rows to f32 (SIMD where the CPU has F16C): every half, and a tail shorter than a register, as the scalar
// conversion gives it (NaNs stay NaNs).
TEST(Kernels, F16RowsConvertAsTheScalarReference) {
    std::vector<uint16_t> h(65536 + 13);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 40503u);  // odd multiplier: every value once, then a few
    std::vector<float> y(h.size());
    for (size_t off : {size_t{0}, size_t{3}}) {
        kernels::dequantize_row(GgmlType::F16, h.data() + off, y.data(), static_cast<int64_t>(h.size() - off));
        for (size_t i = 0; i + off < h.size(); ++i) {
            const float want = fp16_to_fp32(h[i + off]);
            if (std::isnan(want)) EXPECT_TRUE(std::isnan(y[i])) << i;
            else ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want)) << "half " << h[i + off];
        }
    }
}

// Q8_0 and BF16 rows to f32 (SIMD where the CPU has AVX2; the quantized caches' keys the DSA indexer reads back):
// every bf16 value, and Q8_0 blocks with every int8 and scales from zero, subnormal, huge, inf and NaN halves, as
// the scalar expressions give them.
TEST(Kernels, Q8_0AndBf16RowsConvertAsTheScalarReference) {
    std::vector<uint16_t> h(65536 + 5);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 40503u);
    std::vector<float> y(h.size());
    kernels::dequantize_row(GgmlType::BF16, h.data(), y.data(), static_cast<int64_t>(h.size()));
    for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), static_cast<uint32_t>(h[i]) << 16) << "bf16 " << h[i];

    const uint16_t scales[] = {0x0000, 0x0001, 0x3C00, 0xBC00, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x2E66};
    std::mt19937 rng(9);
    std::vector<BlockQ8_0> blocks(64);
    for (size_t b = 0; b < blocks.size(); ++b) {
        blocks[b].d = scales[b % std::size(scales)];
        for (int j = 0; j < 32; ++j)
            blocks[b].qs[j] = static_cast<int8_t>(b < 8 ? static_cast<int>(32 * b) + j - 128 : static_cast<int>(rng() % 256) - 128);
    }
    std::vector<float> q(blocks.size() * 32);
    kernels::dequantize_row(GgmlType::Q8_0, blocks.data(), q.data(), static_cast<int64_t>(q.size()));
    for (size_t b = 0; b < blocks.size(); ++b)
        for (int j = 0; j < 32; ++j) {
            const float want = fp16_to_fp32(blocks[b].d) * static_cast<float>(blocks[b].qs[j]);
            const float got = q[b * 32 + static_cast<size_t>(j)];
            if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << b << " " << j;
            else ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "block " << b << " element " << j;
        }
}

TEST(Kernels, LlamaCppOrdersAreDistinct) {
    std::mt19937 rng(77);
    for (kernels::Flavor f : {kernels::Flavor::Avx2, kernels::Flavor::Avx512}) {
        const kernels::KernelTable& ref = kernels::reference_table(f);
        for (auto [type, slot] : {std::pair{GgmlType::F32, ref.dot_batch}, std::pair{GgmlType::F16, ref.dot_batch},
                                  std::pair{GgmlType::BF16, ref.dot_batch}, std::pair{GgmlType::Q4_0, ref.dot_repacked},
                                  std::pair{GgmlType::Q4_K, ref.dot_repacked}, std::pair{GgmlType::Q4_K, ref.dot_repacked_gemm}}) {
            const int id = static_cast<int>(type);
            int differ = 0;
            for (int rep = 0; rep < 50; ++rep) {
                auto w = make(4096, Fill::Random, rng), a = make(4096, Fill::Random, rng);
                Prepared p = prepare(type, w, a);
                differ += slot[id](4096, p.w.data(), p.a.data()) != ref.dot[id](4096, p.w.data(), p.a.data());
            }
            EXPECT_GT(differ, 0) << kernels::flavor_name(f) << " " << type_name(id);
        }
    }
}

// The table and numerics chosen from a CPU's features, with the reason: the CPUs users have, and overrides.
TEST(Kernels, ChoiceFromCpuFeatures) {
    using kernels::CpuFeatures, kernels::Isa, kernels::Flavor;
    CpuFeatures ivy_bridge;  // AVX and F16C, no AVX2/FMA
    ivy_bridge.f16c = true;
    CpuFeatures haswell = ivy_bridge;
    haswell.avx2 = haswell.fma = haswell.bmi2 = true;
    CpuFeatures skylake_x = haswell;  // AVX-512 without VNNI or BF16
    skylake_x.avx512f = skylake_x.avx512dq = skylake_x.avx512bw = skylake_x.avx512vl = true;
    CpuFeatures zen5 = skylake_x;
    zen5.avx512vnni = zen5.avx512bf16 = true;

    auto k = kernels::choose_kernels(ivy_bridge);
    EXPECT_EQ(k.isa, Isa::Scalar);
    EXPECT_EQ(k.flavor, Flavor::Avx2);
    EXPECT_NE(k.why.find("lacks avx2 fma bmi2"), std::string::npos) << k.why;
    k = kernels::choose_kernels(haswell);
    EXPECT_EQ(k.isa, Isa::Avx2);
    EXPECT_EQ(k.flavor, Flavor::Avx2);
    k = kernels::choose_kernels(skylake_x);
    EXPECT_EQ(k.isa, Isa::Avx2);  // the avx512 table's integer sums are VPDPBUSD
    EXPECT_EQ(k.flavor, Flavor::Avx512);
    EXPECT_NE(k.why.find("without avx512_vnni"), std::string::npos) << k.why;
    EXPECT_NE(k.why.find("emulated"), std::string::npos) << k.why;
    k = kernels::choose_kernels(zen5);
    EXPECT_EQ(k.isa, Isa::Avx512);
    EXPECT_EQ(k.flavor, Flavor::Avx512);
    EXPECT_EQ(k.why.find("emulated"), std::string::npos) << k.why;
    EXPECT_NE(k.why.find("no VBMI"), std::string::npos) << k.why;  // (Cascade Lake: VNNI without VBMI)
    zen5.avx512vbmi = true;
    EXPECT_NE(kernels::choose_kernels(zen5).why.find("IQ2_KL and IQ6_K by VPERMB"), std::string::npos);

    k = kernels::choose_kernels(haswell, "avx512", "avx512");  // a table the CPU cannot run is refused, visibly
    EXPECT_EQ(k.isa, Isa::Avx2);
    EXPECT_EQ(k.flavor, Flavor::Avx512);
    EXPECT_NE(k.why.find("MOESTREAM_ISA=avx512 ignored: this CPU lacks avx512f avx512bw avx512vl avx512_vnni"), std::string::npos) << k.why;
    k = kernels::choose_kernels(zen5, "scalar", "avx3");
    EXPECT_EQ(k.isa, Isa::Scalar);
    EXPECT_EQ(k.flavor, Flavor::Avx512);
    EXPECT_NE(k.why.find("avx3 is not avx512 or avx2: ignored"), std::string::npos) << k.why;
    // What this process runs is what active_table() returns.
    EXPECT_EQ(kernels::active_table().isa, kernels::active_kernel_choice().isa);
}

// The multi-row entry points give exactly the per-row dot for every row (rows not a multiple of 8 included).
TEST(Kernels, DotRowsEqualsDotPerRow) {
    REQUIRE_SIMD_TABLE();
    std::mt19937 rng(5);
    int compared = 0;
    for (const test::SimdCase& c : test::simd_cases()) {
        const kernels::KernelTable* t = c.table;
        for (GgmlType type : kTypes) {
            const int id = static_cast<int>(type);
            for (auto [rows_fn, dot_fn] : {std::pair{t->dot_rows[id], t->dot[id]}, std::pair{t->dot_rows_repacked[id], t->dot_repacked[id]},
                                           std::pair{t->dot_rows_repacked_gemm[id], t->dot_repacked_gemm[id]}}) {
                if (!rows_fn) continue;
                for (int64_t rows : {1, 7, 8, 19}) {
                    for (size_t n : {256u, 512u}) {  // Q8_0's 8-row path takes short rows; also check a 64-wide row below
                        const size_t rb = *row_bytes(type, n);
                        std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
                        for (int64_t r = 0; r < rows; ++r) {
                            auto vals = make(n, r % 5 == 4 ? Fill::Zeros : Fill::Random, rng);
                            kernels::quantize_row(type, vals.data(), w.data() + r * rb, static_cast<int64_t>(n));
                        }
                        auto a = make(n, Fill::Random, rng);
                        std::vector<uint8_t> act(kernels::activation_bytes(type, static_cast<int64_t>(n)));
                        kernels::prepare_activations(type, a.data(), act.data(), static_cast<int64_t>(n));
                        std::vector<float> out(static_cast<size_t>(rows));
                        rows_fn(static_cast<int64_t>(n), w.data(), rb, rows, act.data(), out.data());
                        for (int64_t r = 0; r < rows; ++r)
                            EXPECT_EQ(out[r], dot_fn(static_cast<int64_t>(n), w.data() + r * rb, act.data()))
                                << c.label << " " << type_name(static_cast<uint32_t>(id)) << " row " << r << " of " << rows;
                        ++compared;
                    }
                }
            }
        }
    }
    EXPECT_GT(compared, 0);
}

TEST(Kernels, Q8_0RowsOfSixtyFourMatchPerRow) {
    std::mt19937 rng(8);
    const size_t n = 64, rb = *row_bytes(GgmlType::Q8_0, n);
    REQUIRE_SIMD_TABLE();
    for (const test::SimdCase& c : test::simd_cases())
        for (int64_t rows : {8, 13, 64}) {
            const kernels::KernelTable* t = c.table;
            std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
            for (int64_t r = 0; r < rows; ++r) {
                auto vals = make(n, Fill::Random, rng);
                kernels::quantize_row(GgmlType::Q8_0, vals.data(), w.data() + r * rb, static_cast<int64_t>(n));
            }
            auto a = make(n, Fill::Random, rng);
            std::vector<uint8_t> act(kernels::activation_bytes(GgmlType::Q8_0, static_cast<int64_t>(n)));
            kernels::prepare_activations(GgmlType::Q8_0, a.data(), act.data(), static_cast<int64_t>(n));
            std::vector<float> out(static_cast<size_t>(rows));
            t->dot_rows[8](static_cast<int64_t>(n), w.data(), rb, rows, act.data(), out.data());
            for (int64_t r = 0; r < rows; ++r)
                EXPECT_EQ(out[r], c.ref->dot[8](static_cast<int64_t>(n), w.data() + r * rb, act.data())) << c.label << " row " << r;
        }
}

// The reference dot (with quantized activations) against exact float math on the dequantized weights:
// what the activation quantization costs, per type.
TEST(Kernels, ReferenceDotWithinQuantizationBudget) {
    std::mt19937 rng(99);
    struct Budget {
        GgmlType t;
        double rel;
    };
    // Absolute, per sqrt(n) with unit-variance data: F32 exact; F16/BF16 activation rounding; 8-bit
    // activations (step amax/127 ~ 0.03) give ~0.015 per element, so 4e-2 leaves ~3 sigma.
    const Budget budgets[] = {{GgmlType::F32, 1e-6},  {GgmlType::F16, 2e-3},  {GgmlType::BF16, 1.5e-2}, {GgmlType::Q8_0, 4e-2},
                              {GgmlType::Q4_0, 4e-2}, {GgmlType::Q4_K, 4e-2}, {GgmlType::Q5_K, 4e-2},   {GgmlType::Q6_K, 4e-2}};
    for (auto [type, rel] : budgets) {
        for (int rep = 0; rep < 20; ++rep) {
            const size_t n = 1024;
            auto w = make(n, Fill::Random, rng), a = make(n, Fill::Random, rng);
            Prepared p = prepare(type, w, a);
            std::vector<float> wd(n);
            kernels::dequantize_row(type, p.w.data(), wd.data(), static_cast<int64_t>(n));
            double exact = 0;
            for (size_t i = 0; i < n; ++i) exact += static_cast<double>(wd[i]) * a[i];
            float got = kernels::reference_table().dot[static_cast<int>(type)](static_cast<int64_t>(n), p.w.data(), p.a.data());
            EXPECT_NEAR(got, exact, rel * std::sqrt(static_cast<double>(n))) << type_name(static_cast<uint32_t>(type));
        }
    }
}

TEST(Kernels, WeightQuantizersRoundTripWithinBudget) {
    std::mt19937 rng(7);
    struct Budget {
        GgmlType t;
        double rms;
    };
    const Budget budgets[] = {{GgmlType::F32, 0},       {GgmlType::F16, 1e-3},      {GgmlType::BF16, 8e-3},     {GgmlType::Q8_0, 1e-2},
                              {GgmlType::Q6_K, 5e-2},   {GgmlType::Q5_K, 8e-2},     {GgmlType::Q4_K, 1.6e-1},   {GgmlType::Q4_0, 1.6e-1},
                              {GgmlType::Q4_1, 1.3e-1}, {GgmlType::Q5_0, 8e-2},     {GgmlType::Q5_1, 7e-2},     {GgmlType::Q2_K, 4.5e-1},
                              {GgmlType::Q3_K, 3e-1},   {GgmlType::IQ4_NL, 1.6e-1}, {GgmlType::IQ4_XS, 1.6e-1}, {GgmlType::MXFP4, 2.5e-1},
                              {GgmlType::TQ1_0, 6e-1},  {GgmlType::TQ2_0, 6e-1}};
    for (auto [type, budget] : budgets) {
        auto x = make(4096, Fill::Random, rng);
        std::vector<uint8_t> q(*row_bytes(type, x.size()));
        std::vector<float> y(x.size());
        kernels::quantize_row(type, x.data(), q.data(), static_cast<int64_t>(x.size()));
        kernels::dequantize_row(type, q.data(), y.data(), static_cast<int64_t>(x.size()));
        double err = 0;
        for (size_t i = 0; i < x.size(); ++i) err += (x[i] - y[i]) * (x[i] - y[i]);
        EXPECT_LE(std::sqrt(err / x.size()), budget) << type_name(static_cast<uint32_t>(type));
        std::printf("[ quantize ] %-7s rms error %.3f (budget %.3f)\n", std::string(type_info(type).name).c_str(), std::sqrt(err / x.size()), budget);
    }
}

// ik's Q8_K and Q8_2_X4 activations through AVX2 give the scalar statements' bytes: random rows of several
// magnitudes, rows with ties at .5 after scaling, zeros, a lone large value, and rows holding inf or NaN; Q8_2_X4
// also at a length with blocks past its last group of four.
TEST(Kernels, IkActivationsSimdMatchScalar) {
    if (!kernels::table_for(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar form runs";
    using Quantize = void (*)(const float*, void*, int64_t);
    struct Form {
        const char* name;
        GgmlType weights;  // a type whose activations these are
        int n;
        Quantize scalar, simd;
    };
    const Form forms[] = {{"q8_K", GgmlType::IQ4_KS, 1024, ik::quantize_q8_K, ik::quantize_q8_K_avx2},
                          {"q8_2_x4", GgmlType::IQ2_KT, 1024, ik::quantize_q8_2_x4, ik::quantize_q8_2_x4_avx2},
                          {"q8_2_x4 with a tail", GgmlType::Q6_0, 1056, ik::quantize_q8_2_x4, ik::quantize_q8_2_x4_avx2}};
    std::mt19937 rng(41);
    std::normal_distribution<float> nd;
    int compared = 0;
    for (const Form& f : forms) {
        const int n = f.n;
        std::vector<uint8_t> a(kernels::activation_bytes(f.weights, n)), b(a.size());
        for (int c = 0; c < 12; ++c) {
            std::vector<float> x(static_cast<size_t>(n));
            for (auto& v : x) v = nd(rng) * (c % 3 == 0 ? 1e-3f : c % 3 == 1 ? 1.f : 300.f);
            if (c == 3) std::fill(x.begin(), x.begin() + 256, 0.f);  // blocks of zeros
            if (c == 4)
                for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 255 - 127) + (i % 2 ? 0.5f : -0.5f);  // halves
            if (c == 5) x[300] = 1e30f;
            if (c == 6) x[17] = std::numeric_limits<float>::infinity();
            if (c == 7) x[600] = std::numeric_limits<float>::quiet_NaN();
            if (c == 8) x[0] = -std::numeric_limits<float>::infinity();
            if (c == 9) x[static_cast<size_t>(n - 1)] = std::numeric_limits<float>::quiet_NaN();  // (Q8_2_X4's tail block)
            // rows so small that the inverse scale overflows (1e-38; subnormal 1e-40): zeros, where a cast of inf was undefined
            if (c >= 10)
                for (auto& v : x) v = nd(rng) * (c == 10 ? 1e-38f : 1e-40f);
            f.scalar(x.data(), a.data(), n);
            f.simd(x.data(), b.data(), n);
            ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << f.name << " case " << c;
            if (c >= 10)
                for (int blk = 0; blk < n / 32; ++blk) {
                    const int8_t* q = f.weights == GgmlType::IQ4_KS ? reinterpret_cast<const ik::BlockQ8K*>(a.data())[blk / 8].qs + 32 * (blk % 8)
                                                                    : ik::q8_2_block(a.data(), n, blk).qs;
                    for (int i = 0; i < 32; ++i) ASSERT_EQ(q[i], 0) << f.name << " case " << c << " block " << blk;
                }
            ++compared;
        }
    }
    EXPECT_EQ(compared, 36);
}

TEST(Kernels, Q8KActivationsKeepBlockSums) {
    std::mt19937 rng(3);
    auto x = make(512, Fill::Random, rng);
    std::vector<uint8_t> buf(kernels::activation_bytes(GgmlType::Q4_K, 512));
    kernels::quantize_q8_K(x.data(), buf.data(), 512);
    const auto* blocks = reinterpret_cast<const BlockQ8_K*>(buf.data());
    for (int b = 0; b < 2; ++b)
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += blocks[b].qs[g * 16 + i];
            EXPECT_EQ(sum, blocks[b].bsums[g]);
        }
}

}  // namespace
}  // namespace moe

#include <immintrin.h>

namespace moe {
namespace {

__attribute__((target("f16c"))) uint16_t hardware_fp16(float f) { return static_cast<uint16_t>(_cvtss_sh(f, 0)); }

// The portable fp32 -> fp16 conversion (KV cache, F16 activations) against the F16C instruction llama.cpp uses:
// every exponent, both signs, random mantissas, the rounding ties and the tiny values that round to zero (a
// shift count overflow there once turned 1e-11 into garbage in the KV cache).
TEST(Fp16, ConversionMatchesF16cEverywhere) {
    if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU to compare with";
    std::mt19937 rng(16);
    int checked = 0;
    for (uint32_t exp = 0; exp < 256; ++exp)
        for (uint32_t sign : {0u, 1u})
            for (int k = 0; k < 64; ++k) {
                uint32_t mant = k < 4 ? (k == 0 ? 0u : k == 1 ? 0x7fffffu : k == 2 ? 0x001000u : 0x002000u) : (rng() & 0x7fffffu);
                const uint32_t bits = (sign << 31) | (exp << 23) | mant;
                float f;
                std::memcpy(&f, &bits, 4);
                if (std::isnan(f)) continue;
                ASSERT_EQ(fp32_to_fp16(f), hardware_fp16(f)) << "bits 0x" << std::hex << bits;
                ++checked;
            }
    EXPECT_GT(checked, 30000);
}

}  // namespace
}  // namespace moe

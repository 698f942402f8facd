// RoPE and YaRN against the formulas written out independently in double precision (HF transformers'
// DeepseekV3YarnRotaryEmbedding: a linear ramp between the correction dims mixes interpolated and
// extrapolated frequencies; softmax scale times mscale^2), and the loader's reading of rope.scaling.* keys.
#include <cmath>

#include "cli/commands.h"
#include "engine/kernels/float_ops.h"
#include "engine/model/loader.h"
#include "tests/test_support.h"

namespace moe {
namespace {

// HF's yarn_find_correction_dim / range (floor and ceil, clamped to the rotated dims).
double correction_dim(double rot, int dim, double base, int max_pos) { return (dim * std::log(max_pos / (rot * 2 * M_PI))) / (2 * std::log(base)); }

TEST(Rope, YarnAnglesMatchTheFormula) {
    // DeepSeek-V3's shape: 64 rope dims, base 1e4, factor 40 over an original context of 4096.
    ops::RopeParams p;
    p.n_rot = 64;
    p.neox = false;
    p.freq_base = 10000.f;
    p.freq_scale = 1.f / 40.f;
    p.ext_factor = 1.f;
    p.attn_factor = 1.f / (1.f + 0.1f * std::log(40.f));  // llama.cpp cancels RoPE's own magnitude correction
    ops::rope_yarn_corr_dims(p.n_rot, 4096, p.freq_base, 32.f, 1.f, p.corr_dims);
    const double low = std::max(0.0, std::floor(correction_dim(32, 64, 1e4, 4096)));
    const double high = std::min(63.0, std::ceil(correction_dim(1, 64, 1e4, 4096)));
    EXPECT_EQ(p.corr_dims[0], low);
    EXPECT_EQ(p.corr_dims[1], high);
    std::vector<float> cs;
    for (int pos : {0, 1, 7, 1000, 30000}) {
        ops::rope_cache(p, pos, cs);
        for (int i = 0; i < 32; ++i) {
            const double inv_freq = std::pow(1e4, -2.0 * i / 64);
            const double ramp = std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
            const double mix = 1 - ramp;  // 1: extrapolate (keep the frequency), 0: interpolate (divide by 40)
            const double theta = pos * inv_freq * ((1 - mix) / 40.0 + mix);
            // Relative tolerance for the float recurrence theta *= theta_scale over 32 pairs.
            EXPECT_NEAR(cs[2 * i], std::cos(theta), 2e-4 * std::max(1.0, std::fabs(theta))) << "pos " << pos << " pair " << i;
            EXPECT_NEAR(cs[2 * i + 1], std::sin(theta), 2e-4 * std::max(1.0, std::fabs(theta))) << "pos " << pos << " pair " << i;
        }
    }
}

TEST(Rope, NormAndNeoxPairTheRightDims) {
    ops::RopeParams p;
    p.n_rot = 8;
    std::vector<float> cs;
    ops::rope_cache(p, 3, cs);
    std::vector<float> x(12), y;
    for (int i = 0; i < 12; ++i) x[i] = static_cast<float>(i + 1);
    y = x;
    p.neox = false;
    ops::rope(y.data(), p, cs);  // pairs (0,1), (2,3) ...; dims 8.. untouched
    EXPECT_NEAR(y[0], x[0] * cs[0] - x[1] * cs[1], 1e-5);
    EXPECT_NEAR(y[3], x[2] * cs[3] + x[3] * cs[2], 1e-5);
    for (int i = 8; i < 12; ++i) EXPECT_EQ(y[i], x[i]);
    y = x;
    p.neox = true;
    ops::rope(y.data(), p, cs);  // pairs (0,4), (1,5) ...
    EXPECT_NEAR(y[0], x[0] * cs[0] - x[4] * cs[1], 1e-5);
    EXPECT_NEAR(y[5], x[1] * cs[3] + x[5] * cs[2], 1e-5);
    for (int i = 8; i < 12; ++i) EXPECT_EQ(y[i], x[i]);
}

// A deepseek2 file with YaRN keys, as DeepSeek-V3 and Kimi-K2 carry them: the attention scale is
// mscale^2 / sqrt(qk_nope + qk_rope) with mscale = 1 + 0.1 * mscale_all_dim * ln(factor); RoPE's own magnitude
// stays 1.
TEST(Rope, DeepSeekYarnKeysGiveTheAttentionScale) {
    test::TempDir dir;
    for (float mscale_all_dim : {1.0f, 0.707f}) {
        const std::string out = dir / "yarn.gguf";
        ASSERT_EQ(cli::dispatch({"mkmodel",
                                 "--arch",
                                 "deepseek2",
                                 "--layers",
                                 "1",
                                 "--embd",
                                 "128",
                                 "--heads",
                                 "4",
                                 "--experts",
                                 "4",
                                 "--experts-used",
                                 "2",
                                 "--ffn",
                                 "64",
                                 "--qk-nope",
                                 "128",
                                 "--qk-rope",
                                 "64",
                                 "--kv-lora",
                                 "64",
                                 "--yarn-factor",
                                 "40",
                                 "--yarn-orig-ctx",
                                 "4096",
                                 "--yarn-log-mul",
                                 std::to_string(0.1f * mscale_all_dim),
                                 "--vocab-builtin",
                                 "--out",
                                 out}),
                  0);
        auto m = load_model(open_gguf_model(out));
        const double mscale = 1 + 0.1 * mscale_all_dim * std::log(40.0);
        EXPECT_NEAR(m->hp.mla.kq_scale, mscale * mscale / std::sqrt(192.0), 1e-6) << mscale_all_dim;
        EXPECT_FLOAT_EQ(m->hp.rope.freq_scale, 1.f / 40.f);
        EXPECT_EQ(m->hp.rope.ext_factor, 1.f);
        // cos/sin magnitude: attn_factor * (1 + 0.1 ln 40) = 1.
        std::vector<float> cs;
        ops::rope_cache(m->hp.rope, 5, cs);
        for (int i = 0; i < 32; ++i) EXPECT_NEAR(cs[2 * i] * cs[2 * i] + cs[2 * i + 1] * cs[2 * i + 1], 1.0, 1e-5);
    }
}

}  // namespace
}  // namespace moe

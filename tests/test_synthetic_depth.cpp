// A sequence taken to a depth with random cache rows instead of a prompt (bench --depth-fill synthetic): every
// positional row the depth needs is written, nothing past it, a recurrent state stays the evaluated token's, and
// the next token decodes at the depth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/forward/runner.h"
#include "engine/forward/sequence_cache.h"
#include "engine/forward/synthetic_depth.h"
#include "engine/model/cache_shape.h"
#include "engine/model/loader.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::string make_model(const test::TempDir& dir, const std::string& arch) {
    const std::string path = dir / (arch + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--arch",     arch, "--layers",        "4",      "--embd",    "128",   "--heads",
                                     "4",       "--kv-heads", "2",  "--head-dim",      "32",     "--experts", "8",     "--experts-used",
                                     "2",       "--ffn",      "64", "--vocab-builtin", "--seed", "5",         "--out", path};
    if (arch == "glm-dsa") args.insert(args.end(), {"--indexer-top-k", "4", "--indexer-types", "1010"});
    EXPECT_EQ(cli::dispatch(args), 0);
    return path;
}

bool row_is_zero(const SequenceCache::Rows& rows, size_t row_bytes, uint64_t r) {
    const auto* p = rows.data() + r * row_bytes;
    return std::all_of(p, p + row_bytes, [](uint8_t b) { return b == 0; });
}

// How many rows of a layer's buffer are written (not all zero bytes).
uint64_t written_rows(const SequenceCache::Rows& rows, size_t row_bytes) {
    uint64_t n = 0;
    for (uint64_t r = 0; r < rows.size() / row_bytes; ++r) n += !row_is_zero(rows, row_bytes, r);
    return n;
}

class SyntheticDepth : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticDepth, WritesEveryRowTheDepthNeedsAndDecodesThere) {
    const std::string param = GetParam();
    const std::string arch = param.substr(0, param.find(':'));
    const GgmlType type = param.ends_with(":q8_0") ? GgmlType::Q8_0 : GgmlType::F16;
    test::TempDir dir;
    const GgufModel file = open_gguf_model(make_model(dir, arch));
    auto model = load_model(file);
    const int depth = 700;
    Runner r(*model, {.n_ctx = 1024, .n_threads = 2, .n_batch = 64, .cache_type_k = type, .cache_type_v = type});
    EXPECT_NE(synthetic_depth_problem(r, depth), "") << "before the one evaluated token";
    const int32_t first = 3;
    r.eval(std::span<const int32_t>(&first, 1));
    EXPECT_NE(synthetic_depth_problem(r, 1024), "") << "the next token would fall past the context";
    EXPECT_EQ(synthetic_depth_problem(r, 1023), "");
    EXPECT_EQ(synthetic_depth_problem(r, depth), "");
    const std::vector<float> state = r.mark().state;

    fill_synthetic_depth(r, depth);
    EXPECT_EQ(r.n_past(), depth);
    EXPECT_EQ(r.mark().state, state) << "the recurrent state stays the evaluated token's";
    const SequenceCache& c = r.sequence_cache();
    const std::vector<LayerCacheShape> shape = cache_shape(*model);
    int positional = 0;
    for (size_t l = 0; l < c.k.size(); ++l) {
        if (c.k[l].empty()) continue;
        ++positional;
        const uint64_t per_row = std::max<uint32_t>(1, shape[l].positions_per_row);
        const uint64_t capacity = c.k[l].size() / c.k_row[l];
        const uint64_t want = c.ring[l] ? std::min<uint64_t>(c.ring[l], depth) : (depth + per_row - 1) / per_row;
        ASSERT_LE(want, capacity) << "layer " << l;
        for (uint64_t row = 0; row < want; ++row) ASSERT_FALSE(row_is_zero(c.k[l], c.k_row[l], row)) << "layer " << l << " K row " << row;
        EXPECT_EQ(written_rows(c.k[l], c.k_row[l]), want) << "layer " << l << ": rows past the depth stay unwritten";
        if (!c.v[l].empty()) { EXPECT_EQ(written_rows(c.v[l], c.v_row[l]), want) << "layer " << l << " V"; }
        if (l < c.ix.size() && !c.ix[l].empty()) { EXPECT_EQ(written_rows(c.ix[l], c.ix_row), want) << "layer " << l << " indexer keys"; }
    }
    EXPECT_GT(positional, 0);

    const int32_t next = 5;
    r.eval(std::span<const int32_t>(&next, 1));
    EXPECT_EQ(r.n_past(), depth + 1);
    const float* logits = r.logits();
    EXPECT_TRUE(std::all_of(logits, logits + model->hp.n_vocab, [](float x) { return std::isfinite(x); }));
    EXPECT_THROW(fill_synthetic_depth(r, depth), std::invalid_argument) << "only right after the one token";
}

INSTANTIATE_TEST_SUITE_P(Archs, SyntheticDepth,
                         ::testing::Values("qwen3moe", "qwen3moe:q8_0", "glm-dsa", "qwen35moe", "gpt-oss:q8_0", "deepseek4", "gpt-oss", "kimi-k3"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (char& ch : n)
                                 if (ch == ':' || ch == '-') ch = '_';
                             return n;
                         });

// The bench flag: decode figures at the depth, no prompt figures (no prompt ran), the slot section skipped, and
// bad values refused in one line.
TEST(SyntheticDepthCli, BenchDecodesAtTheDepthWithoutAPrompt) {
    test::TempDir dir;
    const std::string model = make_model(dir, "qwen3moe");
    const auto [rc, out] = test::run_moestream(
        "bench --model " + model + " --prompt-tokens 20000 --tokens 8 --no-fio --depth-fill synthetic -ctk q8_0 -ctv q8_0 --json", false);
    ASSERT_EQ(rc, 0) << out;
    const auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["depth_fill"], "synthetic");
    EXPECT_GT(j["gen_tokens_per_s"].get<double>(), 0);
    EXPECT_FALSE(j.contains("prompt_tokens_per_s"));
    EXPECT_FALSE(j.contains("parallel_slots"));
    EXPECT_TRUE(j.contains("parallel_slots_note"));

    const auto [bad, msg] = test::run_moestream("bench --model " + model + " --depth-fill fake");
    EXPECT_NE(bad, 0);
    EXPECT_NE(msg.find("--depth-fill 'fake'"), std::string::npos) << msg;
    const auto [drafted, msg2] = test::run_moestream("bench --model " + model + " --depth-fill synthetic --draft lookup --no-fio");
    EXPECT_NE(drafted, 0);
    EXPECT_NE(msg2.find("--draft"), std::string::npos) << msg2;
}

}  // namespace
}  // namespace moe

// The fast forward against the plain reference on synthetic models of every supported type, and the
// model loader's errors for unsupported or inconsistent files.
#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/kernels.h"
#include "engine/forward/reference.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::string make_model(const test::TempDir& dir, const std::string& type, const std::vector<std::string>& extra = {}) {
    std::string out = dir / ("m-" + type + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--layers", "2", "--embd", "256", "--heads", "8", "--kv-heads", "2",
                                     "--head-dim", "32", "--experts", "8", "--experts-used", "3", "--ffn", "256",
                                     "--vocab-builtin", "--type", type, "--seed", "5", "--out", out};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

class FastVsReference : public ::testing::TestWithParam<std::string> {};

TEST_P(FastVsReference, SameLogits) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, GetParam(), {"--tie-output"}));
    auto m = load_model(file);
    std::vector<int32_t> toks = {1, 17, 200, 42, 99, 3, 250, 7, 7, 64};
    // Integer block sums are exact and float expressions follow the reference: bit-identical, in each of
    // llama.cpp's orders.
    const double budget = 0.0;
    {  // prompt processing: batches of 4 cross chunk edges (4, 4, 2), every token's logits
        Runner fast(*m, {.n_ctx = 64, .n_threads = 2, .n_batch = 4});
        fast.eval(toks, true);
        RefState st = make_ref_state(*m, 64);
        std::vector<float> ref(m->hp.n_vocab);
        double worst = 0;
        for (size_t i = 0; i < toks.size(); ++i) {
            const int n = i < 8 ? 4 : 2, index = static_cast<int>(i % 4);
            forward_ref(*m, st, toks[i], ref.data(), {.n_tok = n, .index = index, .n_out = n, .out_index = index});
            for (uint32_t v = 0; v < m->hp.n_vocab; ++v)
                worst = std::max(worst, static_cast<double>(std::fabs(ref[v] - fast.logits(static_cast<int>(i))[v])));
        }
        EXPECT_LE(worst, budget) << GetParam() << " batched";
    }
    {  // a 70-token prompt: llama.cpp's tiled flash attention (64 or more query rows)
        std::vector<int32_t> long_toks;
        for (int i = 0; i < 70; ++i) long_toks.push_back((i * 37 + 11) % 256);
        Runner fast(*m, {.n_ctx = 128, .n_threads = 2});
        fast.eval(long_toks, true);
        RefState st = make_ref_state(*m, 128);
        std::vector<float> ref(m->hp.n_vocab);
        double worst = 0;
        for (int i = 0; i < 70; ++i) {
            forward_ref(*m, st, long_toks[i], ref.data(), {.n_tok = 70, .index = i, .n_out = 70, .out_index = i});
            for (uint32_t v = 0; v < m->hp.n_vocab; ++v) worst = std::max(worst, static_cast<double>(std::fabs(ref[v] - fast.logits(i)[v])));
        }
        EXPECT_LE(worst, budget) << GetParam() << " tiled attention";
    }
    {  // decoding: one token at a time
        Runner fast(*m, {.n_ctx = 64, .n_threads = 2, .n_batch = 4});
        RefState st = make_ref_state(*m, 64);
        std::vector<float> ref(m->hp.n_vocab);
        double worst = 0;
        for (int32_t t : toks) {
            fast.eval(std::span<const int32_t>(&t, 1), false);
            forward_ref(*m, st, t, ref.data());
            for (uint32_t v = 0; v < m->hp.n_vocab; ++v) worst = std::max(worst, static_cast<double>(std::fabs(ref[v] - fast.logits(-1)[v])));
        }
        EXPECT_LE(worst, budget) << GetParam() << " one token at a time";
    }
}

INSTANTIATE_TEST_SUITE_P(Types, FastVsReference,
                         ::testing::Values("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m"));

TEST(ModelErrors, UnsupportedTypeNamesTypeAndTensor) {
    test::TempDir dir;
    std::string path = make_model(dir, "f32");
    GgufFile f = read_gguf_header(path);
    // Rewrite one tensor as q4_1, which the engine has no kernel for.
    std::vector<std::pair<std::string, GgufValue>> kv = f.kv;
    std::vector<GgufTensorData> tensors;
    for (const auto& t : f.tensors) {
        GgufTensorData d{t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)};
        if (t.name == "blk.0.attn_q.weight") {
            d.type = GgmlType::Q4_1;
            d.bytes.resize(*row_bytes(GgmlType::Q4_1, t.ne[0]) * t.ne[1]);
        }
        tensors.push_back(std::move(d));
    }
    write_gguf(dir / "bad.gguf", kv, tensors);
    try {
        load_model(open_gguf_model(dir / "bad.gguf"));
        FAIL() << "accepted";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("q4_1"), std::string::npos) << e.what();
    }
}

TEST(ModelErrors, ShapeDisagreeingWithMetadataNamesBoth) {
    test::TempDir dir;
    GgufFile f = read_gguf_header(make_model(dir, "f32"));
    auto kv = f.kv;
    for (auto& [k, v] : kv)
        if (k == "qwen3moe.attention.head_count") v = GgufValue::u32(16);
    std::vector<GgufTensorData> tensors;
    for (const auto& t : f.tensors) tensors.push_back({t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)});
    write_gguf(dir / "bad.gguf", kv, tensors);
    try {
        load_model(open_gguf_model(dir / "bad.gguf"));
        FAIL() << "accepted";
    } catch (const ModelError& e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("attn_q.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find("head_count 16"), std::string::npos) << msg;
    }
}

TEST(ModelErrors, UnsupportedArchitecture) {
    test::TempDir dir;
    GgufFile f = read_gguf_header(make_model(dir, "f32"));
    auto kv = f.kv;
    for (auto& [k, v] : kv)
        if (k == "general.architecture") v = GgufValue::string("mamba");
    write_gguf(dir / "arch.gguf", kv, {});
    try {
        load_model(open_gguf_model(dir / "arch.gguf"));
        FAIL() << "accepted";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("'mamba'"), std::string::npos) << e.what();
    }
}

TEST(ModelErrors, PromptLongerThanContext) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "q8_0"));
    auto m = load_model(file);
    Runner r(*m, {.n_ctx = 8, .n_threads = 1, .n_batch = 4});
    std::vector<int32_t> toks(9, 1);
    EXPECT_THROW(r.eval(toks), std::length_error);
    std::vector<int32_t> bad = {1, 100000};
    EXPECT_THROW(r.eval(bad), std::out_of_range);
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// A byte vocabulary's tokens 0x80..0xFF are fragments of UTF-8 characters: run's JSON carries their exact bytes
// beside the text (with U+FFFD for invalid bytes) instead of failing to print them.
TEST(RunJson, ByteFragmentPiecesCarryTheirBytes) {
    test::TempDir dir;
    const std::string model = make_model(dir, "q8_0");
    auto [rc, out] = test::run_moestream("run --model " + model + " --tokens 1,2,3 -n 2 --json --top 256", false);
    ASSERT_EQ(rc, 0) << out;
    auto j = nlohmann::json::parse(out);
    int fragments = 0;
    for (const auto& step : j["steps"])
        for (const auto& e : step["top"]) {
            const auto bytes = e["bytes"].get<std::vector<int>>();
            ASSERT_FALSE(bytes.empty());
            if (bytes.size() == 1 && bytes[0] >= 0x80) {
                ++fragments;
                EXPECT_EQ(e["piece"].get<std::string>(), "\xEF\xBF\xBD") << e.dump();
            }
        }
    EXPECT_GT(fragments, 0) << "no byte-fragment token among the top 256";
    auto [rc2, scored] = test::run_moestream("run --model " + model + " --tokens 1,2,3 --score --top 256", false);
    ASSERT_EQ(rc2, 0) << scored;
    EXPECT_EQ(nlohmann::json::parse(scored)["positions"].size(), 3u);
}

}  // namespace
}  // namespace moe

// ModelFacts from the header alone agree with what the loader builds, for every architecture: cache bytes
// per token (GQA K/V, MLA latent, DSA indexer keys), expert and resident bytes, NextN blocks counted apart;
// and a file the engine cannot run is still planned for llama-server, with the reason in check's FAIL row.
#include <algorithm>
#include <fstream>

#include "cli/commands.h"
#include "engine/forward/sequence_cache.h"
#include "engine/model/loader.h"
#include "engine/model/cache_shape.h"
#include "engine/model/model_facts.h"
#include "tests/test_support.h"
#include "tune/check.h"

namespace moe {
namespace {

std::string make_model(const test::TempDir& dir, const std::string& name, std::vector<std::string> options) {
    std::string out = dir / (name + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--vocab-builtin", "--embd", "256",    "--heads", "8",      "--experts", "8",     "--experts-used",
                                     "3",       "--ffn",           "128",    "--seed", "3",       "--type", "q8_0",      "--out", out};
    args.insert(args.end(), options.begin(), options.end());
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

class FactsVsLoader : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(FactsVsLoader, HeaderFactsMatchTheLoadedModel) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "m", GetParam()));
    const ModelFacts f = model_facts(file);
    auto m = load_model(file);
    EXPECT_TRUE(f.supported) << f.unsupported_reason;
    EXPECT_EQ(f.n_layer, m->hp.n_layer);
    EXPECT_EQ(f.n_layer_nextn, m->hp.n_layer_nextn);
    // A context longer than a sliding-window ring (gpt-oss), with the runner's default batch.
    constexpr int kCtx = 2048;
    const SequenceCache cache = SequenceCache::make(*m, kCtx, {}, kDefaultRingBatch);
    EXPECT_EQ(cache.has_ring(), f.ring_rows > 0) << f.cache_layout;
    EXPECT_EQ(f.state_bytes, cache.recurrent_bytes());
    EXPECT_EQ(f.kv_bytes(kCtx, 0), cache.bytes()) << f.cache_layout;
    // Checkpoints of the recurrent state and of the sliding windows.
    EXPECT_EQ(f.kv_bytes(kCtx, 3), cache.bytes() + 3 * (cache.recurrent_bytes() + cache.window_bytes()));
    for (kernels::KvCacheTypes types :
         {kernels::KvCacheTypes{GgmlType::Q8_0, GgmlType::Q8_0}, kernels::KvCacheTypes{GgmlType::BF16, GgmlType::Q4_0}}) {
        if (!kv_cache_types_problem(*m, types).empty()) continue;
        const SequenceCache typed = SequenceCache::make(*m, kCtx, types, kDefaultRingBatch);
        EXPECT_EQ(f.kv_bytes(kCtx, types, 2), typed.bytes() + 2 * (typed.recurrent_bytes() + typed.window_bytes())) << f.cache_layout;
    }
    EXPECT_EQ(f.expert_bytes, m->experts->bytes_in_ram());
    // The arena pads each tensor to 64 bytes.
    EXPECT_LE(f.resident_bytes, m->resident->bytes());
    EXPECT_GT(f.resident_bytes + 64 * f.tensor_count, m->resident->bytes());
    EXPECT_EQ(f.nextn_bytes > 0, m->hp.n_layer_nextn > 0);
    uint32_t dense = 0;
    for (const Layer& L : m->layers) dense += L.moe ? 0 : 1;
    EXPECT_EQ(f.first_moe_layer, dense);
    EXPECT_EQ(f.moe_layers, m->hp.n_layer - dense);
    EXPECT_EQ(f.shared_expert_bytes > 0, m->hp.moe.n_ff_shexp > 0);
}

INSTANTIATE_TEST_SUITE_P(Archs, FactsVsLoader,
                         ::testing::Values(std::vector<std::string>{"--arch", "qwen3moe", "--layers", "2", "--kv-heads", "2", "--head-dim", "64"},
                                           std::vector<std::string>{"--arch", "glm4moe", "--layers", "3", "--kv-heads", "2", "--dense-layers", "1",
                                                                    "--shared-experts", "1", "--nextn", "1"},
                                           std::vector<std::string>{"--arch", "deepseek2", "--layers", "3", "--dense-layers", "1", "--shared-experts",
                                                                    "2", "--nextn", "1"},
                                           std::vector<std::string>{"--arch", "glm-dsa", "--layers", "4", "--indexer-types", "1010", "--indexer-dim",
                                                                    "128", "--nextn", "1"},
                                           std::vector<std::string>{"--arch", "qwen35moe", "--layers", "6", "--kv-heads", "2", "--head-dim", "64",
                                                                    "--full-attention-interval", "3", "--shared-experts", "1", "--nextn", "1"},
                                           std::vector<std::string>{"--arch", "gpt-oss", "--layers", "2", "--kv-heads", "2", "--head-dim", "32"},
                                           std::vector<std::string>{"--arch", "minimax-m2", "--layers", "2", "--kv-heads", "2", "--head-dim", "32"},
                                           std::vector<std::string>{"--arch", "minimax-m3", "--layers", "3", "--kv-heads", "2", "--head-dim", "32",
                                                                    "--dense-layers", "1", "--shared-experts", "1", "--msa-dim", "16"},
                                           std::vector<std::string>{"--arch", "kimi-k3", "--layers", "4", "--full-attention-interval", "3",
                                                                    "--dense-layers", "1", "--shared-experts", "1", "--latent", "32"}),
                         [](const auto& info) {
                             std::string n = info.param[1];
                             std::replace(n.begin(), n.end(), '-', '_');
                             return n;
                         });

// GLM-5-like cache arithmetic: the latent and the indexer keys, per token.
TEST(ModelFacts, MlaCacheIsTheLatentPlusIndexerKeys) {
    test::TempDir dir;
    const ModelFacts f = read_model_facts(make_model(
        dir, "x", {"--arch", "glm-dsa", "--layers", "4", "--kv-lora", "64", "--qk-rope", "16", "--indexer-dim", "128", "--indexer-types", "1010"}));
    EXPECT_EQ(f.cache_bytes_per_token, 4u * (64 + 16) * 2 + 2u * 128 * 2);
    EXPECT_NE(f.cache_layout.find("MLA latent (64 + 16)"), std::string::npos) << f.cache_layout;
    EXPECT_NE(f.cache_layout.find("DSA keys 128 fp16 x 2 layers"), std::string::npos) << f.cache_layout;
}

// kimi-k3: the MLA layers' latent row per token; each KDA layer's fixed state (three conv windows, a matrix per head).
TEST(ModelFacts, KimiK3CacheIsTheLatentPlusKdaState) {
    test::TempDir dir;
    const ModelFacts f = read_model_facts(make_model(
        dir, "k",
        {"--arch", "kimi-k3", "--layers", "4", "--full-attention-interval", "3", "--kv-lora", "64", "--qk-rope", "16", "--ssm-state", "32"}));
    EXPECT_EQ(f.cache_bytes_per_token, (64u + 16) * 2);              // layer 2 is MLA
    EXPECT_EQ(f.recurrent_layers, 3u);                               // K K M K
    EXPECT_EQ(f.state_bytes, 3u * 4 * (3 * 3 * 256 + 8 * 32 * 32));  // conv (K-1) x 3 x 8 heads x 32; 8 states of 32 x 32
    EXPECT_NE(f.cache_layout.find("MLA latent (64 + 16)"), std::string::npos) << f.cache_layout;
}

// deepseek4: llama.cpp's dsv4 cache from the keys (the engine's own is smaller: its window has no ubatch rows). Per token a compressed row and
// an indexer key per 4 positions on ratio-4 layers and a row per 128 on ratio-128 ones; per sequence every
// layer's window (sliding_window + a 512 ubatch, in blocks of 256 rows) and the compressors' f32 state.
TEST(ModelFacts, DeepSeekV4CacheIsCompressedRowsPlusWindows) {
    test::TempDir dir;
    const std::string a = "deepseek4.";
    std::vector<std::pair<std::string, GgufValue>> kv = {{"general.architecture", GgufValue::string("deepseek4")},
                                                         {a + "block_count", GgufValue::u32(4)},
                                                         {a + "embedding_length", GgufValue::u32(64)},
                                                         {a + "attention.head_count", GgufValue::u32(4)},
                                                         {a + "attention.head_count_kv", GgufValue::u32(1)},
                                                         {a + "attention.key_length", GgufValue::u32(512)},
                                                         {a + "attention.sliding_window", GgufValue::u32(128)},
                                                         {a + "attention.indexer.key_length", GgufValue::u32(128)},
                                                         {a + "attention.compress_ratios", GgufValue::i32_array_of({0, 4, 128, 4})}};
    write_gguf(dir / "v4.gguf", kv, {GgufTensorData{"token_embd.weight", {64, 8}, GgmlType::F32, std::vector<uint8_t>(64 * 8 * 4)}});
    const ModelFacts f = read_model_facts(dir / "v4.gguf");
    EXPECT_TRUE(f.supported) << f.unsupported_reason;
    EXPECT_EQ(f.cache_bytes_per_token, 2u * (2 * (512 + 128) / 4 + 512 / 128));
    const uint64_t windows = 4ull * 768 * 512 * 2, states = 2 * (4ull * 2 * 8 * (2 * 512 + 2 * 128)) + 4ull * 2 * 128 * 512;
    EXPECT_EQ(f.kv_bytes(0, 0), windows + states);
    EXPECT_EQ(f.kv_bytes(1048576), f.cache_bytes_per_token * 1048576 + windows + states);  // no checkpoints of it
    const uint64_t q8_per_token = (2 * (512 + 128) / 4 + 512 / 128 + 31) / 32 * 34;        // K's blocks of 32 values in 34 bytes
    EXPECT_EQ(f.kv_bytes(4096, {GgmlType::Q8_0, GgmlType::Q8_0}, 0), q8_per_token * 4096 + windows / 2 / 32 * 34 + states);
    EXPECT_NE(f.cache_layout.find("2 layers of ratio 4"), std::string::npos) << f.cache_layout;
}

// A hybrid file in a type without a kernel (for llama-server only) still gets its recurrent state and its
// full-attention layers counted from the layout, as the same file in a computable type.
TEST(ModelFacts, LayoutCountsTheStateOfAFileWithoutKernels) {
    test::TempDir dir;
    const std::string path = make_model(
        dir, "h", {"--arch", "qwen35moe", "--layers", "4", "--kv-heads", "2", "--head-dim", "64", "--full-attention-interval", "2"});
    const ModelFacts want = read_model_facts(path);
    GgufFile g = read_gguf_header(path);
    std::vector<GgufTensorData> tensors;
    for (const auto& t : g.tensors) {
        GgufTensorData d{t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)};
        if (t.name == "blk.0.ffn_up_exps.weight") {
            d.type = static_cast<GgmlType>(99);  // ik_llama.cpp's Q8_2_X4 (an activation format)
            d.bytes.resize(*row_bytes(d.type, t.ne[0]) * t.ne[1] * t.ne[2]);
        }
        tensors.push_back(std::move(d));
    }
    write_gguf(dir / "h-ik-type.gguf", g.kv, tensors);
    const ModelFacts f = read_model_facts(dir / "h-ik-type.gguf");
    EXPECT_FALSE(f.supported);
    EXPECT_EQ(f.recurrent_layers, 2u);
    EXPECT_GT(f.state_bytes, 0u);
    EXPECT_EQ(f.state_bytes, want.state_bytes);
    EXPECT_EQ(f.cache_bytes_per_token, want.cache_bytes_per_token);
    EXPECT_EQ(f.cache_layout, want.cache_layout);
}

// A weight type without a kernel: facts still read (llama-server can run it), check fails the engine row
// with the reason and the fix, and planning for the engine names the tensor.
TEST(ModelFacts, UnsupportedTypeIsAFailRowAndAnEnginePlanError) {
    test::TempDir dir;
    const std::string path = make_model(dir, "q", {"--layers", "2"});
    GgufFile g = read_gguf_header(path);
    std::vector<GgufTensorData> tensors;
    for (const auto& t : g.tensors) {
        GgufTensorData d{t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)};
        if (t.name == "blk.1.ffn_gate_exps.weight") {
            d.type = static_cast<GgmlType>(99);  // ik_llama.cpp's Q8_2_X4 (an activation format), which the engine does not compute
            d.bytes.resize(*row_bytes(d.type, t.ne[0]) * t.ne[1] * t.ne[2]);
        }
        tensors.push_back(std::move(d));
    }
    write_gguf(dir / "ik-type.gguf", g.kv, tensors);
    const ModelFacts f = read_model_facts(dir / "ik-type.gguf");
    EXPECT_FALSE(f.supported);
    EXPECT_NE(f.unsupported_reason.find("blk.1.ffn_gate_exps.weight"), std::string::npos) << f.unsupported_reason;
    EXPECT_NE(f.unsupported_reason.find("q8_2_x4"), std::string::npos) << f.unsupported_reason;
    auto [rc, out] = test::run_moestream("check --model " + dir / "ik-type.gguf" + " --no-fio --no-storage --json", false);
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find("\"engine_support\""), std::string::npos) << out;
    EXPECT_NE(out.find("--target ik-llama-server"), std::string::npos) << out;  // mainline llama.cpp cannot load it either
    auto [pc, host] = test::run_moestream("probe --yaml --root " + std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/hosts/laptop-1node-smt",
                                          false);
    ASSERT_EQ(pc, 0) << host;
    { std::ofstream(dir / "host.yaml") << host; }
    auto [rc2, out2] = test::run_moestream("plan --model " + dir / "ik-type.gguf" + " --host " + dir / "host.yaml" + " --out " + dir / "plan");
    EXPECT_EQ(rc2, 2) << out2;
    EXPECT_NE(out2.find("blk.1.ffn_gate_exps.weight"), std::string::npos) << out2;
    auto [rc3, out3] = test::run_moestream("plan --model " + dir / "ik-type.gguf" + " --host " + dir / "host.yaml" +
                                           " --target llama-server --gpu-mem 0=1G --out " + dir / "plan2");
    EXPECT_EQ(rc3, 2) << out3;
    EXPECT_NE(out3.find("tensor blk.1.ffn_gate_exps.weight (q8_2_x4) is an ik_llama.cpp type (plan with --target ik-llama-server)"),
              std::string::npos)
        << out3;
    auto [rc4, out4] = test::run_moestream("plan --model " + dir / "ik-type.gguf" + " --host " + dir / "host.yaml" +
                                           " --target ik-llama-server --gpu-mem 0=1G --out " + dir / "plan3");
    EXPECT_EQ(rc4, 0) << out4;
}

}  // namespace
}  // namespace moe

// Forms of the same model that users' files come in: MLA's unsplit attn_kv_b (older conversions, and
// ik_llama.cpp files made from them), attention's q, k and v fused into one attn_qkv (newer conversions), split files whose first part holds only metadata (how large uploads are
// cut), and each must give the same logits as the form the engine reads natively.
#include <gtest/gtest.h>

#include <cstring>

#include "cli/commands.h"
#include "engine/forward/runner.h"
#include "engine/kernels/kernels.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::string mkmodel(const test::TempDir& dir, const std::string& name, std::vector<std::string> options) {
    const std::string out = dir / (name + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--vocab-builtin", "--layers", "2",     "--embd", "128",    "--heads", "4",     "--experts",
                                     "4",       "--experts-used",  "2",        "--ffn", "64",     "--seed", "11",      "--out", out};
    args.insert(args.end(), options.begin(), options.end());
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

using test::read_tensors;

std::vector<float> logits_of(const std::string& path, const std::vector<int32_t>& prompt) {
    GgufModel file = open_gguf_model(path);
    auto model = load_model(file);
    Runner r(*model, {.n_ctx = 64, .n_threads = 2});
    r.eval(prompt);
    std::vector<float> out(r.logits(), r.logits() + model->hp.n_vocab);
    const int32_t next = 7;
    r.eval(std::span<const int32_t>(&next, 1));
    out.insert(out.end(), r.logits(), r.logits() + model->hp.n_vocab);
    return out;
}

// An unsplit attn_kv_b is split at load as ik_llama.cpp splits it: in F32 that is an exact transposition, so
// the file gives the logits of the same weights written as attn_k_b / attn_v_b.
TEST(FileForms, UnsplitMlaKvBGivesTheSplitFormsLogits) {
    test::TempDir dir;
    const std::string unsplit = mkmodel(dir, "kvb", {"--arch", "deepseek2", "--type", "f32", "--mla-kv-b"});
    const GgufFile f = read_gguf_header(unsplit);
    const uint32_t H = 4, L = 64, K = 32, V = 32;  // mkmodel's MLA defaults: kv_lora 64, qk_nope 32, v_head 32
    std::vector<GgufTensorData> tensors;
    for (auto& t : read_tensors(unsplit)) {
        if (t.name.find("attn_kv_b") == std::string::npos) {
            tensors.push_back(std::move(t));
            continue;
        }
        ASSERT_EQ(t.ne, (std::vector<uint64_t>{L, H * (K + V)})) << t.name;
        const std::string p = t.name.substr(0, t.name.find("attn_kv_b"));
        const auto* in = reinterpret_cast<const float*>(t.bytes.data());
        std::vector<float> kb(static_cast<size_t>(K) * L * H), vb(static_cast<size_t>(L) * V * H);
        for (uint32_t h = 0; h < H; ++h) {
            for (uint32_t i = 0; i < L; ++i)
                for (uint32_t j = 0; j < K; ++j) kb[(h * L + i) * K + j] = in[(h * (K + V) + j) * L + i];
            std::memcpy(&vb[static_cast<size_t>(h) * V * L], in + static_cast<size_t>(h * (K + V) + K) * L, sizeof(float) * V * L);
        }
        auto bytes = [](const std::vector<float>& v) {
            std::vector<uint8_t> b(v.size() * 4);
            std::memcpy(b.data(), v.data(), b.size());
            return b;
        };
        tensors.push_back({p + "attn_k_b.weight", {K, L, H}, GgmlType::F32, bytes(kb)});
        tensors.push_back({p + "attn_v_b.weight", {L, V, H}, GgmlType::F32, bytes(vb)});
    }
    auto kv = f.kv;
    for (auto& [k, v] : kv) {
        if (k == "deepseek2.attention.head_count_kv") v = GgufValue::u32(1);
        if (k == "deepseek2.attention.key_length") v = GgufValue::u32(L + 16);
        if (k == "deepseek2.attention.value_length") v = GgufValue::u32(L);
    }
    kv.emplace_back("deepseek2.attention.key_length_mla", GgufValue::u32(K + 16));
    kv.emplace_back("deepseek2.attention.value_length_mla", GgufValue::u32(V));
    const std::string split = dir / "split.gguf";
    write_gguf(split, kv, tensors);
    const std::vector<int32_t> prompt = {1, 50, 60, 70, 80, 90};
    EXPECT_EQ(logits_of(unsplit, prompt), logits_of(split, prompt));

    // Quantized: attn_k_b becomes Q8_0 (ik's choice), attn_v_b keeps the rows; the forward pass and its reference
    // agree on it, and the result stays near the float model's.
    const std::string q = mkmodel(dir, "kvbq", {"--arch", "deepseek2", "--type", "q8_0", "--mla-kv-b"});
    GgufModel file = open_gguf_model(q);
    auto model = load_model(file);
    EXPECT_EQ(model->layers[0].mla.wk_b.type, GgmlType::Q8_0);
    EXPECT_EQ(model->layers[0].mla.wv_b.type, GgmlType::Q8_0);
    EXPECT_EQ(model->layers[0].mla.wk_b.ne0, K);
}

// Newer converters write an attention layer's q, k and v (and their biases) as one attn_qkv, which llama.cpp's
// create_tensor_qkv takes before the separate tensors: the same weights so fused give the same logits, prompt
// and decode, in every architecture whose attention layers are GQA (glm4moe's and gpt-oss's with biases,
// qwen35moe's gated q), and the same resident bytes.
TEST(FileForms, FusedQkvGivesTheSeparateFormsLogits) {
    test::TempDir dir;
    const std::vector<int32_t> prompt = {1, 2, 3, 40, 50, 60, 70, 80, 90, 100, 110, 120};
    for (const char* arch : {"qwen3moe", "glm4moe", "qwen35moe", "gpt-oss", "minimax-m2"}) {
        SCOPED_TRACE(arch);
        std::vector<std::string> shape = {"--arch", arch, "--type", "q8_0", "--kv-heads", "2", "--head-dim", "32"};
        if (std::string(arch) == "qwen35moe") shape.insert(shape.end(), {"--full-attention-interval", "2"});
        const std::string separate = mkmodel(dir, std::string(arch) + "-separate", shape);
        shape.push_back("--fused-qkv");
        const std::string fused = mkmodel(dir, std::string(arch) + "-fused", shape);
        const GgufModel before = open_gguf_model(separate), after = open_gguf_model(fused);
        size_t n_fused = 0;
        for (const auto& t : after.tensors) {
            EXPECT_EQ(t.name.find("attn_q.weight"), std::string::npos) << t.name;
            n_fused += t.name.ends_with("attn_qkv.weight") && !before.find_tensor(t.name);
        }
        EXPECT_GT(n_fused, 0u);
        EXPECT_EQ(logits_of(fused, prompt), logits_of(separate, prompt));
        EXPECT_EQ(model_facts(open_gguf_model(fused)).resident_bytes, model_facts(open_gguf_model(separate)).resident_bytes);
    }
    // A fused tensor whose rows are not q + 2 kv is named with what the metadata implies.
    const std::string fused = mkmodel(dir, "short", {"--type", "q8_0", "--kv-heads", "2", "--head-dim", "32", "--fused-qkv"});
    auto tensors = read_tensors(fused);
    for (auto& t : tensors)
        if (t.name == "blk.1.attn_qkv.weight") {
            t.ne[1] -= 32;
            t.bytes.resize(t.bytes.size() / (t.ne[1] + 32) * t.ne[1]);
        }
    write_gguf(dir / "short-edited.gguf", read_gguf_header(fused).kv, tensors);
    try {
        load_model(open_gguf_model(dir / "short-edited.gguf"));
        ADD_FAILURE() << "a short attn_qkv loaded";
    } catch (const ModelError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("blk.1.attn_qkv.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[128, 224]"), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
}

// A split model whose first file holds only the metadata (no tensors) loads and runs like the single file.
TEST(FileForms, MetadataOnlyFirstSplit) {
    test::TempDir dir;
    const std::string whole = mkmodel(dir, "whole", {"--arch", "qwen3moe", "--type", "q8_0", "--kv-heads", "2", "--head-dim", "32"});
    const GgufFile f = read_gguf_header(whole);
    auto tensors = read_tensors(whole);
    auto meta = [&](uint16_t no) {
        auto kv = f.kv;
        kv.emplace_back("split.count", test::gguf_u16(3));
        kv.emplace_back("split.no", test::gguf_u16(no));
        kv.emplace_back("split.tensors.count", GgufValue::i32(static_cast<int32_t>(tensors.size())));
        return kv;
    };
    const size_t half = tensors.size() / 2;
    write_gguf(dir / "m-00001-of-00003.gguf", meta(0), {});
    write_gguf(dir / "m-00002-of-00003.gguf", meta(1), std::vector<GgufTensorData>(tensors.begin(), tensors.begin() + half));
    write_gguf(dir / "m-00003-of-00003.gguf", meta(2), std::vector<GgufTensorData>(tensors.begin() + half, tensors.end()));
    const std::vector<int32_t> prompt = {1, 2, 3, 40, 50};
    EXPECT_EQ(logits_of(dir / "m-00001-of-00003.gguf", prompt), logits_of(whole, prompt));
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// deepseek4's grouped output LoRA multiplies each group's output_lora_rank rows on its own: a file whose
// attn_output_a is an interleaved form with the rank not a multiple of its rows per group would have groups cut
// in two, so it is refused at load, naming the tensor and both numbers.
TEST(FileForms, InterleavedOutputLoraMustKeepItsRowGroupsWhole) {
    test::TempDir dir;
    const std::string path = mkmodel(dir, "ds4-r8",
                                     {"--arch",          "deepseek4", "--compress-ratios", "0,4", "--head-dim",      "64", "--rope-dims",   "16",
                                      "--q-lora",        "64",        "--window",          "5",   "--indexer-heads", "4",  "--indexer-dim", "64",
                                      "--indexer-top-k", "3",         "--out-groups",      "4",   "--out-rank",      "18", "--type",        "q8_0_r8",
                                      "--random-blocks"});
    try {
        load_model(open_gguf_model(path));
        ADD_FAILURE() << "a Q8_0_R8 output LoRA of rank 18 loaded";
    } catch (const ModelError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("attn_output_a.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find("groups of 8"), std::string::npos) << msg;
        EXPECT_NE(msg.find("output_lora_rank 18"), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
}

}  // namespace
}  // namespace moe

// The model loader's refusals: unsupported architectures and types, and files whose metadata contradicts
// their tensors. Each is one ModelError naming the file, the key or tensor and both values, before any
// weights are read; the CLI turns it into one line and exit code 2.
#include <filesystem>
#include <algorithm>
#include <functional>

#include "cli/commands.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::string make_model(const test::TempDir& dir, const std::string& name, std::vector<std::string> options) {
    std::string out = dir / (name + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--vocab-builtin", "--embd", "256",    "--heads", "8",     "--experts", "8", "--experts-used",
                                     "3",       "--ffn",           "256",    "--seed", "5",       "--out", out};
    args.insert(args.end(), options.begin(), options.end());
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

using KvEdit = std::function<void(std::vector<std::pair<std::string, GgufValue>>&)>;
using TensorEdit = std::function<bool(GgufTensorData&)>;  // false: drop the tensor

// Writes a copy of `path` with edited metadata and tensors (data zero-filled, `extra` appended) and loads it;
// returns the error.
std::string load_error(const test::TempDir& dir, const std::string& path, const KvEdit& kv_edit, const TensorEdit& tensor_edit = {},
                       std::vector<GgufTensorData> extra = {}) {
    GgufFile f = read_gguf_header(path);
    auto kv = f.kv;
    if (kv_edit) kv_edit(kv);
    std::vector<GgufTensorData> tensors;
    for (const auto& t : f.tensors) {
        GgufTensorData d{t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)};
        if (tensor_edit && !tensor_edit(d)) continue;
        tensors.push_back(std::move(d));
    }
    for (auto& t : extra) tensors.push_back(std::move(t));
    const std::string out = dir / "edited.gguf";
    write_gguf(out, kv, tensors);
    try {
        load_model(open_gguf_model(out));
    } catch (const ModelError& e) { return e.what(); }
    return "(accepted)";
}

KvEdit set_key(const std::string& key, GgufValue v) {
    return [key, v](auto& kv) {
        for (auto& [k, val] : kv)
            if (k == key) {
                val = v;
                return;
            }
        kv.emplace_back(key, v);
    };
}

void expect_mentions(const std::string& msg, std::initializer_list<const char*> parts) {
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(ModelErrors, UnsupportedTypeNamesTypeAndTensor) {
    test::TempDir dir;
    const std::string path = make_model(dir, "q", {"--layers", "2", "--kv-heads", "2", "--head-dim", "32"});
    const std::string msg = load_error(dir, path, {}, [](GgufTensorData& d) {
        if (d.name == "blk.0.attn_q.weight") {  // ik_llama.cpp's Q8_2_X4 (id 99): sizes known, no kernel
            d.type = static_cast<GgmlType>(99);
            d.bytes.resize(*row_bytes(d.type, d.ne[0]) * d.ne[1]);
        }
        return true;
    });
    expect_mentions(msg, {"blk.0.attn_q.weight", "q8_2_x4", "ik_llama.cpp"});
}

TEST(ModelErrors, ShapeDisagreeingWithMetadataNamesBoth) {
    test::TempDir dir;
    const std::string path = make_model(dir, "q", {"--layers", "2", "--kv-heads", "2", "--head-dim", "32"});
    expect_mentions(load_error(dir, path, set_key("qwen3moe.attention.head_count", GgufValue::u32(16))), {"attn_q.weight", "head_count 16"});
}

TEST(ModelErrors, UnsupportedArchitectureListsTheSupportedOnes) {
    test::TempDir dir;
    const std::string path = make_model(dir, "q", {"--layers", "2"});
    expect_mentions(load_error(dir, path, set_key("general.architecture", GgufValue::string("mamba"))),
                    {"'mamba'", "qwen3moe", "glm4moe", "deepseek2", "glm-dsa", "gpt-oss", "minimax-m2", "minimax-m3"});
}

TEST(ModelErrors, MoeKeysThatContradictEachOther) {
    test::TempDir dir;
    const std::string path = make_model(dir, "g", {"--arch", "glm4moe", "--layers", "2", "--kv-heads", "2", "--head-dim", "32"});
    expect_mentions(load_error(dir, path, set_key("glm4moe.expert_used_count", GgufValue::u32(9))),
                    {"glm4moe.expert_used_count = 9", "expert_count = 8"});
    expect_mentions(load_error(dir, path,
                               [](auto& kv) {
                                   set_key("glm4moe.expert_group_count", GgufValue::u32(3))(kv);
                                   set_key("glm4moe.expert_group_used_count", GgufValue::u32(1))(kv);
                               }),
                    {"expert_group_count = 3", "expert_count = 8"});
    expect_mentions(load_error(dir, path, set_key("glm4moe.expert_gating_func", GgufValue::u32(7))), {"expert_gating_func = 7"});
}

TEST(ModelErrors, MlaDimensionsThatContradictTheTensors) {
    test::TempDir dir;
    const std::string path = make_model(dir, "d", {"--arch", "deepseek2", "--layers", "2"});
    // kv_lora_rank against attn_kv_a_mqa's shape: the tensor and both values named.
    expect_mentions(load_error(dir, path,
                               [](auto& kv) {
                                   set_key("deepseek2.attention.kv_lora_rank", GgufValue::u32(48))(kv);
                                   set_key("deepseek2.attention.key_length", GgufValue::u32(64))(kv);
                                   set_key("deepseek2.attention.value_length", GgufValue::u32(48))(kv);
                               }),
                    {"attn_kv_a_mqa.weight", "[256, 80]", "kv_lora_rank 48"});
    // The absorbed-form keys against the split ones.
    expect_mentions(load_error(dir, path, set_key("deepseek2.attention.key_length", GgufValue::u32(99))),
                    {"deepseek2.attention.key_length = 99", "kv_lora_rank 64", "= 80"});
    // The split form's keys missing, with no attn_kv_b to derive the split from either.
    expect_mentions(load_error(dir, path,
                               [](auto& kv) {
                                   kv.erase(
                                       std::remove_if(kv.begin(), kv.end(), [](auto& p) { return p.first == "deepseek2.attention.key_length_mla"; }),
                                       kv.end());
                               }),
                    {"key_length_mla", "attn_kv_b"});
    // An unsplit attn_kv_b whose rows contradict the heads' key and value lengths.
    const std::string unsplit = make_model(dir, "u", {"--arch", "deepseek2", "--layers", "2", "--mla-kv-b"});
    expect_mentions(load_error(dir, unsplit, set_key("deepseek2.attention.value_length", GgufValue::u32(16))), {"attn_kv_b.weight", "value 16"});
    expect_mentions(load_error(dir, path, set_key("deepseek2.nextn_predict_layers", GgufValue::u32(2))),
                    {"nextn_predict_layers = 2", "block_count 2"});
}

TEST(ModelErrors, IndexerTensorsAndKeys) {
    test::TempDir dir;
    const std::string path = make_model(dir, "x", {"--arch", "glm-dsa", "--layers", "2"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& d) { return d.name != "blk.1.indexer.proj.weight"; }),
                    {"blk.1.indexer.proj.weight", "missing"});
    expect_mentions(load_error(dir, path, set_key("glm-dsa.attention.indexer.key_length", GgufValue::u32(96))),
                    {"glm-dsa.attention.indexer.key_length = 96", "power of two"});
    GgufValue types;
    types.type = GgufValueType::ARRAY;
    types.elem_type = GgufValueType::BOOL;
    types.count = 3;
    types.raw = {1, 0, 1};
    expect_mentions(load_error(dir, path, set_key("glm-dsa.attention.indexer.types", types)),
                    {"glm-dsa.attention.indexer.types", "3 entries", "2 layers"});
    types.count = 2;
    types.raw = {0, 1};
    expect_mentions(load_error(dir, path, set_key("glm-dsa.attention.indexer.types", types)), {"layer 0", "full"});
}

TEST(ModelErrors, DeltaNetStateAndLayerPattern) {
    test::TempDir dir;
    // 4 layers: DeltaNet, DeltaNet, DeltaNet, full attention; S 32, 2 k heads, 4 v heads.
    const std::string path = make_model(dir, "h", {"--arch", "qwen35moe", "--layers", "4", "--kv-heads", "2", "--head-dim", "64"});
    EXPECT_EQ(load_error(dir, path, {}), "(accepted)");
    expect_mentions(load_error(dir, path, set_key("qwen35moe.ssm.state_size", GgufValue::u32(16))),
                    {"qwen35moe.ssm.inner_size = 128", "ssm.state_size 16"});
    expect_mentions(load_error(dir, path,
                               [](auto& kv) {
                                   set_key("qwen35moe.ssm.state_size", GgufValue::u32(16))(kv);
                                   set_key("qwen35moe.ssm.inner_size", GgufValue::u32(64))(kv);
                               }),
                    {"blk.0.attn_qkv.weight", "[256, 256]", "[256, 128]"});
    expect_mentions(load_error(dir, path, set_key("qwen35moe.ssm.time_step_rank", GgufValue::u32(3))),
                    {"qwen35moe.ssm.inner_size = 128", "time_step_rank 3"});
    expect_mentions(load_error(dir, path,
                               [](auto& kv) {
                                   set_key("qwen35moe.ssm.time_step_rank", GgufValue::u32(3))(kv);
                                   set_key("qwen35moe.ssm.inner_size", GgufValue::u32(96))(kv);
                               }),
                    {"time_step_rank = 3", "not a multiple", "group_count = 2"});
    expect_mentions(load_error(dir, path, set_key("qwen35moe.ssm.conv_kernel", GgufValue::u32(9))), {"blk.0.ssm_conv1d.weight", "conv_kernel 9"});
    // The layer pattern: a different interval makes layer 1 full attention, whose tensors are not there: its
    // DeltaNet attn_qkv is read as a fused q/k/v (as llama.cpp's create_tensor_qkv would) and has not their rows.
    expect_mentions(load_error(dir, path, set_key("qwen35moe.full_attention_interval", GgufValue::u32(2))),
                    {"blk.1.attn_qkv.weight", "[256, 256]", "implies [256, 1280]"});
    GgufValue flags;
    flags.type = GgufValueType::ARRAY;
    flags.elem_type = GgufValueType::BOOL;
    flags.count = 3;
    flags.raw = {1, 1, 1};
    expect_mentions(load_error(dir, path, set_key("qwen35moe.attention.recurrent_layers", flags)),
                    {"qwen35moe.attention.recurrent_layers", "3 entries", "4 layers"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.2.ssm_a"; }), {"blk.2.ssm_a", "missing"});
}

// gpt-oss: keys that contradict its tensors or each other, a missing sink or bias, a quantized bias.
TEST(ModelErrors, GptOssKeysAndTensors) {
    test::TempDir dir;
    const std::string path = make_model(dir, "o", {"--arch", "gpt-oss", "--layers", "2", "--kv-heads", "2", "--head-dim", "32", "--window", "8"});
    EXPECT_EQ(load_error(dir, path, {}), "(accepted)");
    expect_mentions(load_error(dir, path, set_key("gpt-oss.rope.dimension_count", GgufValue::u32(16))), {"key_length 32", "rope.dimension_count 16"});
    expect_mentions(load_error(dir, path, set_key("gpt-oss.attention.sliding_window", GgufValue::u32(0))), {"gpt-oss.attention.sliding_window"});
    expect_mentions(load_error(dir, path, set_key("gpt-oss.rope.freq_base_swa", GgufValue::f32(1e4f))),
                    {"gpt-oss.rope.freq_base_swa", "rope.freq_base"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.1.attn_sinks.weight"; }),
                    {"blk.1.attn_sinks.weight", "missing"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.0.ffn_up_exps.bias"; }),
                    {"blk.0.ffn_up_exps.bias", "missing"});
    expect_mentions(load_error(dir, path, set_key("gpt-oss.attention.head_count", GgufValue::u32(6))), {"head_count 6", "attn_q.weight"});
    // A per-expert bias stored quantized: named with its type.
    expect_mentions(load_error(dir, path, {},
                               [](GgufTensorData& t) {
                                   if (t.name == "blk.0.ffn_down_exps.bias") t.type = GgmlType::F16, t.bytes.resize(t.bytes.size() / 2);
                                   return true;
                               }),
                    {"blk.0.ffn_down_exps.bias", "f16", "f32"});
}

// minimax-m3: MSA keys that contradict the attention or each other, a missing indexer tensor or key.
TEST(ModelErrors, MinimaxM3KeysAndTensors) {
    test::TempDir dir;
    const std::string path = make_model(
        dir, "m", {"--arch", "minimax-m3", "--layers", "2", "--dense-layers", "1", "--kv-heads", "2", "--head-dim", "32", "--shared-experts", "1"});
    EXPECT_EQ(load_error(dir, path, {}), "(accepted)");
    expect_mentions(load_error(dir, path, set_key("minimax-m3.attention.indexer.head_count", GgufValue::u32(4))),
                    {"minimax-m3.attention.indexer.head_count", "4", "head_count_kv 2"});
    expect_mentions(load_error(dir, path, set_key("minimax-m3.attention.indexer.key_length", GgufValue::u32(8))),
                    {"minimax-m3.attention.indexer.key_length", "8", "rope.dimension_count 16"});
    expect_mentions(load_error(dir, path, set_key("minimax-m3.attention.indexer.local_blocks", GgufValue::u32(5))),
                    {"minimax-m3.attention.indexer.local_blocks", "5", "top_k 4"});
    expect_mentions(load_error(dir, path, set_key("minimax-m3.attention.indexer.block_size", GgufValue::u32(0))),
                    {"minimax-m3.attention.indexer.block_size"});
    expect_mentions(
        load_error(dir, path, [](auto& kv) { std::erase_if(kv, [](const auto& e) { return e.first == "minimax-m3.attention.indexer.top_k"; }); }),
        {"minimax-m3.attention.indexer.top_k"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.1.indexer.k_norm.weight"; }),
                    {"blk.1.indexer.k_norm.weight", "missing"});
    expect_mentions(load_error(dir, path, set_key("minimax-m3.leading_dense_block_count", GgufValue::u32(3))),
                    {"leading_dense_block_count 3", "2 layers"});
}

// kimi-k3: a latent width above the embedding or contradicting the experts, a layer pattern of the wrong
// length, missing situ / residual-attention keys, a missing KDA tensor, a decay bound that is not negative.
TEST(ModelErrors, KimiK3KeysAndTensors) {
    test::TempDir dir;
    const std::string path = make_model(dir, "k3",
                                        {"--arch", "kimi-k3", "--layers", "3", "--full-attention-interval", "3", "--dense-layers", "1",
                                         "--shared-experts", "1", "--latent", "128", "--type", "q8_0"});
    EXPECT_EQ(load_error(dir, path, {}), "(accepted)");
    expect_mentions(load_error(dir, path, set_key("kimi-k3.expert_latent_length", GgufValue::u32(512))),
                    {"kimi-k3.expert_latent_length", "512", "embedding_length 256"});
    expect_mentions(load_error(dir, path, set_key("kimi-k3.expert_latent_length", GgufValue::u32(64))),
                    {"blk.1.ffn_gate_exps.weight", "expert_latent_length 64"});
    expect_mentions(load_error(dir, path, set_key("kimi-k3.attention.head_count_kv", GgufValue::i32_array_of({0, 1}))),
                    {"kimi-k3.attention.head_count_kv", "3 integers"});
    for (const char* key : {"kimi-k3.activation.situ_beta", "kimi-k3.attn_res.block_size"})
        expect_mentions(load_error(dir, path, [key](auto& kv) { std::erase_if(kv, [key](const auto& e) { return e.first == key; }); }),
                        {key, "missing"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.1.ssm_f_b.weight"; }),
                    {"blk.1.ssm_f_b.weight", "missing"});
    expect_mentions(load_error(dir, path, set_key("kimi-k3.kda.gate_lower_bound", GgufValue::f32(2.f))), {"kimi-k3.kda.gate_lower_bound", "2"});
}

// deepseek4: a compression ratio of 1, a ratio list shorter than the blocks, more than one key/value head, a
// hyper-connection count the graph does not take (0, 2), a hash-routed layer without its table, a gating function
// llama.cpp refuses for it, a missing compressor tensor, an output LoRA that does not split the heads.
TEST(ModelErrors, DeepSeekV4KeysAndTensors) {
    test::TempDir dir;
    const std::string path = make_model(dir, "v4",
                                        {"--arch", "deepseek4", "--layers", "3", "--compress-ratios", "0,4,128", "--head-dim", "64", "--rope-dims",
                                         "16", "--q-lora", "64", "--window", "8", "--shared-experts", "1", "--type", "q8_0"});
    EXPECT_EQ(load_error(dir, path, {}), "(accepted)");
    expect_mentions(load_error(dir, path, set_key("deepseek4.attention.compress_ratios", GgufValue::i32_array_of({0, 1, 128}))),
                    {"deepseek4.attention.compress_ratios[1]", "1"});
    expect_mentions(load_error(dir, path, set_key("deepseek4.attention.compress_ratios", GgufValue::i32_array_of({0, 4}))),
                    {"deepseek4.attention.compress_ratios", "has 2 integers", "at least 3"});
    expect_mentions(load_error(dir, path, set_key("deepseek4.attention.head_count_kv", GgufValue::u32(2))),
                    {"deepseek4.attention.head_count_kv", "2"});
    for (uint32_t hc : {0u, 2u})
        expect_mentions(load_error(dir, path, set_key("deepseek4.hyper_connection.count", GgufValue::u32(hc))),
                        {"deepseek4.hyper_connection.count", ("= " + std::to_string(hc) + " ").c_str()});
    // a hash-routed layer without its token-to-expert table: the tensor and the key that asks for it, with its value
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.1.ffn_gate_tid2eid.weight"; }),
                    {"blk.1.ffn_gate_tid2eid.weight", "missing", "deepseek4.hash_layer_count = 2"});
    expect_mentions(load_error(dir, path, set_key("deepseek4.hash_layer_count", GgufValue::u32(3))),
                    {"blk.2.ffn_gate_tid2eid.weight", "deepseek4.hash_layer_count = 3"});
    expect_mentions(load_error(dir, path, set_key("deepseek4.expert_gating_func", GgufValue::u32(3))), {"deepseek4.expert_gating_func", "3"});
    expect_mentions(load_error(dir, path, set_key("deepseek4.attention.output_group_count", GgufValue::u32(3))),
                    {"deepseek4.attention.output_group_count", "3"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.2.attn_compressor_ape.weight"; }),
                    {"blk.2.attn_compressor_ape.weight", "missing"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.1.indexer.proj.weight"; }),
                    {"blk.1.indexer.proj.weight", "missing"});
}

// A deepseek4 file converted without its NextN/MTP block that kept nextn_predict_layers: every block is a trunk
// layer, for the loader and for ModelFacts alike, as llama.cpp's deepseek4 loader decides; other architectures
// take the key as it is (llama.cpp's loaders do), and a file with its block still skips it.
TEST(ModelErrors, DeepSeekV4NextnKeyWithoutItsBlockKeepsEveryLayer) {
    test::TempDir dir;
    for (const auto& [arch, options] :
         {std::pair<std::string, std::vector<std::string>>{"deepseek4",
                                                           {"--arch", "deepseek4", "--layers", "3", "--compress-ratios", "0,4,128", "--head-dim",
                                                            "64", "--rope-dims", "16", "--q-lora", "64", "--window", "8", "--type", "q8_0"}},
          {"qwen3moe", {"--arch", "qwen3moe", "--layers", "3", "--kv-heads", "2", "--head-dim", "32"}}}) {
        const std::string path = make_model(dir, arch, options);
        GgufFile f = read_gguf_header(path);
        auto kv = f.kv;
        set_key(arch + ".nextn_predict_layers", GgufValue::u32(1))(kv);
        std::vector<GgufTensorData> tensors;
        for (const auto& t : f.tensors) tensors.push_back({t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)});
        const std::string out = dir / (arch + "-key-only.gguf");
        write_gguf(out, kv, tensors);
        const GgufModel file = open_gguf_model(out);
        const auto m = load_model(file);
        const uint32_t trunk = arch == "deepseek4" ? 3 : 2;
        EXPECT_EQ(m->hp.n_layer, trunk) << arch;
        EXPECT_EQ(m->hp.n_layer_nextn, 3 - trunk) << arch;
        EXPECT_EQ(model_facts(file).n_layer, trunk) << arch;
        EXPECT_EQ(model_facts(file).nextn_bytes > 0, trunk == 2) << arch;
    }
    const GgufModel with_block = open_gguf_model(make_model(dir, "glm", {"--arch", "glm4moe", "--layers", "3", "--kv-heads", "2", "--nextn", "1"}));
    EXPECT_EQ(load_model(with_block)->hp.n_layer_nextn, 1u);
    EXPECT_EQ(model_facts(with_block).n_layer_nextn, 1u);
    EXPECT_GT(model_facts(with_block).nextn_bytes, 0u);
}

// minimax-m2: per-head q/k norms where it normalises whole rows, a missing selection bias, a shared expert.
TEST(ModelErrors, MinimaxM2KeysAndTensors) {
    test::TempDir dir;
    const std::string path = make_model(dir, "m2", {"--arch", "minimax-m2", "--layers", "2", "--kv-heads", "2", "--head-dim", "32"});
    EXPECT_EQ(load_error(dir, path, {}), "(accepted)");
    expect_mentions(load_error(dir, path, {},
                               [](GgufTensorData& t) {
                                   if (t.name == "blk.1.attn_k_norm.weight") t.ne = {32}, t.bytes.resize(32 * 4);
                                   return true;
                               }),
                    {"blk.1.attn_k_norm.weight", "[32]", "[64]"});
    expect_mentions(load_error(dir, path, {}, [](GgufTensorData& t) { return t.name != "blk.0.exp_probs_b.bias"; }),
                    {"blk.0.exp_probs_b.bias", "missing"});
    expect_mentions(load_error(dir, path, set_key("minimax-m2.expert_shared_count", GgufValue::u32(1))), {"minimax-m2.expert_shared_count"});
}

TEST(ModelErrors, TensorsNoArchitectureClaims) {
    test::TempDir dir;
    const std::string path = make_model(dir, "q", {"--layers", "2"});
    expect_mentions(load_error(dir, path, {}, {}, {{"blk.5.attn_norm.weight", {256}, GgmlType::F32, std::vector<uint8_t>(1024)}}),
                    {"blk.5.attn_norm.weight", "beyond block_count 2"});
    expect_mentions(load_error(dir, path, {}, {}, {{"blk.1.attn_gate.weight", {256}, GgmlType::F32, std::vector<uint8_t>(1024)}}),
                    {"blk.1.attn_gate.weight", "not used by architecture qwen3moe"});
}

TEST(ModelErrors, CliSaysOneLineAndExits2) {
    test::TempDir dir;
    const std::string path = make_model(dir, "d", {"--arch", "deepseek2", "--layers", "2"});
    GgufFile f = read_gguf_header(path);
    auto kv = f.kv;
    set_key("deepseek2.expert_used_count", GgufValue::u32(12))(kv);
    std::vector<GgufTensorData> tensors;
    for (const auto& t : f.tensors) tensors.push_back({t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)});
    write_gguf(dir / "bad.gguf", kv, tensors);
    auto [rc, out] = test::run_moestream("run -m " + dir / "bad.gguf" + " -p hi -n 1");
    EXPECT_EQ(rc, 2) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_NE(out.find("expert_used_count = 12"), std::string::npos) << out;
}

// mkmodel writes the types with a plain quantizer; the lattice i-quants need an importance matrix, and asking for
// one says so in a line (no file written).
TEST(ModelErrors, MkmodelRefusesImatrixOnlyTypesWithTheReason) {
    test::TempDir dir;
    for (const char* type : {"iq2_xxs", "IQ1_S", "iq3_s"}) {
        auto [rc, out] = test::run_moestream(
            std::string("mkmodel --vocab-builtin --layers 2 --embd 256 --heads 4 --experts 4 --experts-used 2 --ffn 256 --type ") + type + " --out " +
            dir / "x.gguf");
        EXPECT_NE(rc, 0) << out;
        EXPECT_NE(out.find("importance matrix"), std::string::npos) << out;
        EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
        EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
    }
}

TEST(ModelErrors, PromptLongerThanContext) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "q", {"--layers", "2", "--type", "q8_0"}));
    auto m = load_model(file);
    Runner r(*m, {.n_ctx = 8, .n_threads = 1, .n_batch = 4});
    std::vector<int32_t> toks(9, 1);
    EXPECT_THROW(r.eval(toks), std::length_error);
    std::vector<int32_t> bad = {1, 100000};
    EXPECT_THROW(r.eval(bad), std::out_of_range);
}

}  // namespace
}  // namespace moe

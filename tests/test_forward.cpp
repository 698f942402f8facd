// The fast forward against the plain reference on synthetic models of every architecture, attention and
// feed-forward kind and every weight type mkmodel writes, in both llama.cpp builds' arithmetic: bit for bit.
#include <algorithm>
#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "engine/runtime/expert_cache.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/kernels.h"
#include "engine/forward/reference.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "tests/test_support.h"

namespace moe {
namespace {

using kernels::Flavor;

// A synthetic model for a case: the case's own options, and a common shape for those it does not set.
std::string make_model(const test::TempDir& dir, const std::string& name, const std::vector<std::string>& options) {
    std::string out = dir / (name + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--vocab-builtin", "--seed", "5", "--out", out};
    args.insert(args.end(), options.begin(), options.end());
    for (auto [flag, value] : {std::pair{"--embd", "256"}, {"--heads", "8"}, {"--experts", "8"}, {"--experts-used", "3"}, {"--ffn", "256"}})
        if (std::find(options.begin(), options.end(), flag) == options.end()) args.insert(args.end(), {flag, value});
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

struct ArchCase {
    std::string name;
    Flavor flavor;
    std::vector<std::string> options;
    kernels::KvCacheTypes kv{};  // the caches' types (-ctk / -ctv)
};
void PrintTo(const ArchCase& c, std::ostream* os) { *os << c.name << " (" << kernels::flavor_name(c.flavor) << ")"; }

std::vector<std::string> qwen3(const std::string& type) {
    return {"--arch", "qwen3moe", "--layers", "2", "--kv-heads", "2", "--head-dim", "32", "--tie-output", "--type", type};
}
// A type mkmodel has no encoder for (ik_llama.cpp's, the lattice i-quants): random well-formed blocks.
std::vector<std::string> qwen3_random(const std::string& type) {
    auto o = qwen3(type);
    o.push_back("--random-blocks");
    return o;
}

// Every weight type on qwen3moe; every attention and feed-forward kind on the others, in both llama.cpp builds.
const ArchCase kArchCases[] = {
    {"qwen3moe-f32", Flavor::Avx512, qwen3("f32")},
    {"qwen3moe-f32", Flavor::Avx2, qwen3("f32")},
    {"qwen3moe-f16", Flavor::Avx512, qwen3("f16")},
    {"qwen3moe-f16", Flavor::Avx2, qwen3("f16")},
    {"qwen3moe-bf16", Flavor::Avx512, qwen3("bf16")},
    {"qwen3moe-bf16", Flavor::Avx2, qwen3("bf16")},
    {"qwen3moe-q8_0", Flavor::Avx2, qwen3("q8_0")},
    {"qwen3moe-q4_0", Flavor::Avx512, qwen3("q4_0")},
    {"qwen3moe-q4_k", Flavor::Avx512, qwen3("q4_k")},
    {"qwen3moe-q5_k", Flavor::Avx2, qwen3("q5_k")},
    {"qwen3moe-q6_k", Flavor::Avx512, qwen3("q6_k")},
    {"qwen3moe-q4_k_m", Flavor::Avx2, qwen3("q4_k_m")},
    {"qwen3moe-q4_1", Flavor::Avx2, qwen3("q4_1")},
    // ik_llama.cpp's types (random well-formed blocks: mkmodel has no encoder for them), computed with ik's graph:
    // a table type, an offset-kernel one, a trellis one, Q6_0 and the interleaved forms (fours and eights).
    {"qwen3moe-iq4_ks", Flavor::Avx2, qwen3_random("iq4_ks")},
    {"qwen3moe-iq5_ks", Flavor::Avx2, qwen3_random("iq5_ks")},
    {"qwen3moe-iq3_k", Flavor::Avx2, qwen3_random("iq3_k")},
    {"qwen3moe-iq2_kt", Flavor::Avx2, qwen3_random("iq2_kt")},
    {"qwen3moe-q6_0", Flavor::Avx2, qwen3_random("q6_0")},
    {"qwen3moe-iq4_ks_r4", Flavor::Avx2, qwen3_random("iq4_ks_r4")},
    {"qwen3moe-iq2_k_r4", Flavor::Avx2, qwen3_random("iq2_k_r4")},
    {"qwen3moe-iq4_k_r4", Flavor::Avx2, qwen3_random("iq4_k_r4")},
    {"qwen3moe-iq5_ks_r4", Flavor::Avx2, qwen3_random("iq5_ks_r4")},
    {"qwen3moe-q8_0_r8", Flavor::Avx2, qwen3_random("q8_0_r8")},
    {"qwen3moe-q4_k_r4", Flavor::Avx2, qwen3_random("q4_k_r4")},
    {"qwen3moe-q6_k_r4", Flavor::Avx2, qwen3_random("q6_k_r4")},
    {"qwen3moe-q4_0_r8", Flavor::Avx2, qwen3_random("q4_0_r8")},
    {"qwen3moe-q5_0_r4", Flavor::Avx2, qwen3_random("q5_0_r4")},
    {"qwen3moe-q6_0_r4", Flavor::Avx2, qwen3_random("q6_0_r4")},
    {"qwen3moe-iq4_nl_r4", Flavor::Avx2, qwen3_random("iq4_nl_r4")},
    {"qwen3moe-q5_k_r4", Flavor::Avx2, qwen3_random("q5_k_r4")},
    {"qwen3moe-q2_k_r4", Flavor::Avx2, qwen3_random("q2_k_r4")},
    {"qwen3moe-q3_k_r4", Flavor::Avx2, qwen3_random("q3_k_r4")},
    {"qwen3moe-iq2_xxs_r4", Flavor::Avx2, qwen3_random("iq2_xxs_r4")},
    {"qwen3moe-iq2_xs_r4", Flavor::Avx2, qwen3_random("iq2_xs_r4")},
    {"qwen3moe-iq3_xxs_r4", Flavor::Avx2, qwen3_random("iq3_xxs_r4")},
    {"qwen3moe-iq2_s_r4", Flavor::Avx2, qwen3_random("iq2_s_r4")},
    {"qwen3moe-iq3_s_r4", Flavor::Avx2, qwen3_random("iq3_s_r4")},
    {"qwen3moe-iq1_m_r4", Flavor::Avx2, qwen3_random("iq1_m_r4")},
    {"qwen3moe-iq4_xs_r8", Flavor::Avx2, qwen3_random("iq4_xs_r8")},
    // ik's wide forms: Q8_KV (mkmodel quantizes it as ik does), the 8-bit and MXFP4 row groups, BF16_R16 in both builds
    {"qwen3moe-q8_kv", Flavor::Avx2, qwen3("q8_kv")},
    {"qwen3moe-q8_kv_r8", Flavor::Avx2, qwen3_random("q8_kv_r8")},
    {"qwen3moe-q8_k_r8", Flavor::Avx2, qwen3_random("q8_k_r8")},
    {"qwen3moe-bf16_r16", Flavor::Avx512, qwen3_random("bf16_r16")},
    {"qwen3moe-bf16_r16", Flavor::Avx2, qwen3_random("bf16_r16")},
    // and its ternary (BitNet) forms
    {"qwen3moe-iq1_bn", Flavor::Avx2, qwen3_random("iq1_bn")},
    {"qwen3moe-iq2_bn", Flavor::Avx2, qwen3_random("iq2_bn")},
    {"qwen3moe-iq2_bn_r4", Flavor::Avx2, qwen3_random("iq2_bn_r4")},
    // The lattice i-quants (no plain quantizer: random well-formed blocks), prompt tiles against the reference.
    {"qwen3moe-iq2_xs", Flavor::Avx2, qwen3_random("iq2_xs")},
    {"qwen3moe-iq2_s", Flavor::Avx512, qwen3_random("iq2_s")},
    {"qwen3moe-iq1_s", Flavor::Avx512, qwen3_random("iq1_s")},
    {"qwen3moe-iq1_m", Flavor::Avx2, qwen3_random("iq1_m")},
    {"qwen3moe-q5_0", Flavor::Avx512, qwen3("q5_0")},
    {"qwen3moe-q5_1", Flavor::Avx2, qwen3("q5_1")},
    {"qwen3moe-q2_k", Flavor::Avx512, qwen3("q2_k")},  // AVX-512 builds repack Q2_K
    {"qwen3moe-q2_k", Flavor::Avx2, qwen3("q2_k")},
    {"qwen3moe-q3_k", Flavor::Avx2, qwen3("q3_k")},
    {"qwen3moe-iq4_nl", Flavor::Avx2, qwen3("iq4_nl")},
    // 5 heads of 34: attn_q has 170 rows, not repacked, so batches take llamafile's IQ4_NL GEMM
    {"qwen3moe-iq4_nl-odd-rows",
     Flavor::Avx2,
     {"--arch", "qwen3moe", "--layers", "2", "--heads", "5", "--kv-heads", "1", "--head-dim", "34", "--tie-output", "--type", "iq4_nl"}},
    {"qwen3moe-iq4_xs", Flavor::Avx512, qwen3("iq4_xs")},
    {"qwen3moe-mxfp4", Flavor::Avx2, qwen3("mxfp4")},
    {"qwen3moe-tq1_0", Flavor::Avx2, qwen3("tq1_0")},
    {"qwen3moe-tq2_0", Flavor::Avx512, qwen3("tq2_0")},
    {"qwen3moe-dynamic", Flavor::Avx2, {"--arch", "qwen3moe", "--layers", "3", "--kv-heads", "2", "--head-dim", "32", "--type", "dynamic"}},
    // GQA with biases, partial RoPE, q/k norm; a dense first layer; sigmoid routing with a bias, norm and scale;
    // a shared expert.
    {"glm4moe-q8_0", Flavor::Avx2, {"--arch",          "glm4moe", "--layers",       "3",   "--kv-heads",       "2", "--head-dim",   "32",
                                    "--rope-dims",     "16",      "--dense-layers", "1",   "--shared-experts", "1", "--probs-bias", "--norm-weights",
                                    "--weights-scale", "2.5",     "--type",         "q8_0"}},
    {"glm4moe-f16",
     Flavor::Avx512,
     {"--arch", "glm4moe", "--layers", "2", "--kv-heads", "4", "--head-dim", "64", "--shared-experts", "2", "--type", "f16"}},
    // MLA with q-LoRA, groups of experts, sigmoid + bias, and a NextN block.
    {"deepseek2-f16",
     Flavor::Avx2,
     {"--arch",           "deepseek2", "--layers", "3", "--experts",     "16", "--experts-used", "4",       "--dense-layers", "1",
      "--shared-experts", "1",         "--groups", "4", "--groups-used", "2",  "--gating",       "sigmoid", "--probs-bias",   "--norm-weights",
      "--weights-scale",  "2.5",       "--nextn",  "1", "--type",        "f16"}},
    // MLA without q-LoRA, softmax routing, YaRN (DeepSeek-V2's mscale), F32 per-head matmuls.
    {"deepseek2-f32-yarn",
     Flavor::Avx512,
     {"--arch", "deepseek2", "--layers", "2", "--q-lora", "0", "--yarn-factor", "40", "--yarn-orig-ctx", "16", "--yarn-log-mul", "0.0707", "--type",
      "f32"}},
    {"deepseek2-q4_k_m",
     Flavor::Avx2,
     {"--arch", "deepseek2", "--layers", "2", "--q-lora", "256", "--kv-lora", "256", "--qk-nope", "128", "--qk-rope", "64", "--v-head", "128",
      "--shared-experts", "1", "--type", "q4_k_m"}},
    // The DSA indexer with a top-k far below the prompt, full and shared indexer layers.
    {"glm-dsa-f16",
     Flavor::Avx2,
     {"--arch", "glm-dsa", "--layers", "4", "--dense-layers", "1", "--shared-experts", "1", "--indexer-top-k", "5", "--indexer-types", "1011",
      "--probs-bias", "--norm-weights", "--nextn", "1", "--type", "f16"}},
    {"glm-dsa-q8_0",
     Flavor::Avx512,
     {"--arch", "glm-dsa", "--layers", "3", "--indexer-heads", "4", "--indexer-dim", "128", "--indexer-top-k", "7", "--indexer-types", "110",
      "--type", "q8_0"}},
    // Hybrid: gated DeltaNet layers (tiled v heads, conv window, recurrent state across chunks) and gated full
    // attention with partial interleaved RoPE; the shared expert behind its sigmoid gate; an MTP block.
    {"qwen35moe-q8_0",
     Flavor::Avx2,
     {"--arch", "qwen35moe", "--layers", "4", "--kv-heads", "2", "--head-dim", "64", "--shared-experts", "1", "--type", "q8_0"}},
    {"qwen35moe-f32",
     Flavor::Avx512,
     {"--arch",
      "qwen35moe",
      "--layers",
      "4",
      "--kv-heads",
      "4",
      "--head-dim",
      "32",
      "--ssm-state",
      "64",
      "--ssm-k-heads",
      "2",
      "--ssm-v-heads",
      "8",
      "--ssm-conv",
      "3",
      "--full-attention-interval",
      "2",
      "--shared-experts",
      "2",
      "--nextn",
      "1",
      "--type",
      "f32"}},
    {"qwen35moe-q4_k_m",
     Flavor::Avx2,
     {"--arch",
      "qwen35moe",
      "--layers",
      "3",
      "--kv-heads",
      "2",
      "--head-dim",
      "64",
      "--ssm-state",
      "128",
      "--ssm-k-heads",
      "1",
      "--ssm-v-heads",
      "2",
      "--full-attention-interval",
      "3",
      "--shared-experts",
      "1",
      "--type",
      "q4_k_m"}},
    // gpt-oss: sinks, sliding-window layers (a window far below the prompts: tiles and one-row views cut by it),
    // biased router and experts, softmax over the chosen logits, swiglu_oai's clamps; YaRN.
    {"gpt-oss-q8_0",
     Flavor::Avx2,
     {"--arch", "gpt-oss", "--layers", "3", "--kv-heads", "2", "--head-dim", "32", "--window", "5", "--yarn-factor", "4", "--yarn-orig-ctx", "32",
      "--type", "q8_0"}},
    {"gpt-oss-mxfp4",
     Flavor::Avx512,
     {"--arch", "gpt-oss", "--layers", "2", "--kv-heads", "4", "--head-dim", "64", "--window", "3", "--experts", "16", "--experts-used", "4",
      "--type", "mxfp4"}},
    {"gpt-oss-mxfp4_r8",
     Flavor::Avx2,
     {"--arch", "gpt-oss", "--layers", "2", "--kv-heads", "4", "--head-dim", "64", "--window", "3", "--experts", "16", "--experts-used", "4",
      "--type", "mxfp4_r8", "--random-blocks"}},
    {"gpt-oss-iq4_ks",
     Flavor::Avx2,
     {"--arch", "gpt-oss", "--layers", "2", "--kv-heads", "2", "--head-dim", "32", "--window", "4", "--type", "iq4_ks",
      "--random-blocks"}},  // ik's attention and routing with sinks and windows
    // minimax-m3: MSA with blocks far below the prompts (masked batches, gathered single tokens, two local
    // blocks), per-head q/k norms, partial RoPE, a dense layer and a shared expert, swiglu_oai in all three.
    {"minimax-m3-q8_0", Flavor::Avx2, {"--arch",           "minimax-m3",
                                       "--layers",         "3",
                                       "--kv-heads",       "2",
                                       "--head-dim",       "32",
                                       "--dense-layers",   "1",
                                       "--shared-experts", "1",
                                       "--probs-bias",     "--norm-weights",
                                       "--weights-scale",  "2.5",
                                       "--msa-block",      "2",
                                       "--msa-top-k",      "3",
                                       "--msa-local",      "2",
                                       "--type",           "q8_0"}},
    // minimax-m2: q and k normed across all heads at once, partial RoPE, sigmoid routing with a selection bias.
    {"minimax-m2-q8_0",
     Flavor::Avx2,
     {"--arch", "minimax-m2", "--layers", "2", "--kv-heads", "2", "--head-dim", "32", "--norm-weights", "--type", "q8_0"}},
    {"minimax-m3-f16",
     Flavor::Avx512,
     {"--arch", "minimax-m3", "--layers", "2", "--kv-heads", "1", "--head-dim", "64", "--shared-experts", "1", "--msa-block", "4", "--msa-top-k", "2",
      "--msa-dim", "32", "--type", "f16"}},
    // kimi-k3: KDA layers (a decay per key channel; three convs) beside nope-only gated MLA, residual
    // attention banking every second layer, a dense lead, the latent MoE with a shared expert, situ.
    {"kimi-k3-q8_0",
     Flavor::Avx2,
     {"--arch",
      "kimi-k3",
      "--layers",
      "5",
      "--full-attention-interval",
      "3",
      "--dense-layers",
      "1",
      "--shared-experts",
      "1",
      "--latent",
      "128",
      "--ssm-state",
      "32",
      "--kv-lora",
      "64",
      "--norm-weights",
      "--weights-scale",
      "2.5",
      "--type",
      "q8_0"}},
    // ... experts at full width, a plain attn_q, banking every third layer, kimi-linear's softplus decay, situ
    // without its up cap.
    {"kimi-k3-f16",
     Flavor::Avx512,
     {"--arch",
      "kimi-k3",
      "--layers",
      "4",
      "--full-attention-interval",
      "2",
      "--q-lora",
      "0",
      "--res-block",
      "3",
      "--kda-lower-bound",
      "0",
      "--situ-linear-beta",
      "0",
      "--ssm-state",
      "64",
      "--ssm-conv",
      "3",
      "--type",
      "f16"}},
    // deepseek4: hyper-connections, compressed attention with a window far below the prompts, ratio-4 rows
    // (overlap, the indexer picking 3 of them) and ratio-8 rows (all visible ones), hash-routed layers, the
    // output LoRA, clamped SwiGLU; YaRN on the compressed layers.
    {"deepseek4-q8_0",
     Flavor::Avx2,
     {"--arch",           "deepseek4", "--layers",      "4", "--compress-ratios", "0,4,8,4", "--head-dim",    "64",  "--rope-dims",     "16",
      "--q-lora",         "64",        "--window",      "5", "--indexer-heads",   "4",       "--indexer-dim", "64",  "--indexer-top-k", "3",
      "--shared-experts", "1",         "--yarn-factor", "4", "--yarn-orig-ctx",   "64",      "--type",        "q8_0"}},
    {"deepseek4-f16",
     Flavor::Avx512,
     {"--arch",          "deepseek4", "--layers",     "3",  "--compress-ratios", "4,0,16", "--hash-layers",   "1", "--head-dim",    "32",
      "--rope-dims",     "8",         "--q-lora",     "32", "--window",          "7",      "--indexer-heads", "2", "--indexer-dim", "64",
      "--indexer-top-k", "2",         "--out-groups", "4",  "--out-rank",        "16",     "--swiglu-limit",  "0", "--type",        "f16"}},
    // its caches quantized: window, compressed rows and indexer keys stored as q4_0 rows, rotated (a head of 64)
    {"deepseek4-kv-q4_0",
     Flavor::Avx2,
     {"--arch",          "deepseek4", "--layers",     "3",  "--compress-ratios", "4,0,16", "--hash-layers",   "1",   "--head-dim",    "64",
      "--rope-dims",     "8",         "--q-lora",     "32", "--window",          "7",      "--indexer-heads", "2",   "--indexer-dim", "32",
      "--indexer-top-k", "2",         "--out-groups", "4",  "--out-rank",        "16",     "--type",          "q8_0"},
     {GgmlType::Q4_0, GgmlType::Q4_0}},
};

class FastVsReference : public ::testing::TestWithParam<ArchCase> {};

TEST_P(FastVsReference, SameLogits) {
    const ArchCase& c = GetParam();
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, c.name, c.options));
    auto m = load_model(file);
    const uint32_t V = m->hp.n_vocab;
    std::vector<int32_t> toks = {1, 17, 200, 42, 99, 3, 250, 7, 7, 64};
    // Integer block sums are exact and float expressions follow the reference: bit-identical, in each of
    // llama.cpp's orders.
    auto worst_of = [V](const std::vector<float>& ref, const float* fast) {
        double w = 0;
        for (uint32_t v = 0; v < V; ++v) w = std::max(w, static_cast<double>(std::fabs(ref[v] - fast[v])));
        return w;
    };
    {  // prompt processing: batches of 4 cross chunk edges (4, 4, 2), every token's logits, each expert's matmul
        // knowing how many of its batch's tokens it takes (ik's Q4_K_R4 / Q6_K_R4 round one otherwise than several)
        Runner fast(*m, {.n_ctx = 64, .n_threads = 2, .n_batch = 4, .flavor = c.flavor, .cache_type_k = c.kv.k, .cache_type_v = c.kv.v});
        RefState st = make_ref_state(*m, 64, c.flavor, c.kv);
        std::vector<float> ref(V);
        double worst = 0;
        for (size_t first = 0; first < toks.size(); first += 4) {
            const int n = static_cast<int>(std::min<size_t>(4, toks.size() - first));
            const std::vector<uint64_t> before = fast.expert_selections();  // (the runner counts from its start)
            fast.eval(std::span<const int32_t>(toks.data() + first, static_cast<size_t>(n)), true);
            std::vector<uint64_t> chunk = fast.expert_selections();
            for (size_t e = 0; e < chunk.size(); ++e) chunk[e] -= before[e];
            for (int index = 0; index < n; ++index) {
                forward_ref(*m, st, toks[first + static_cast<size_t>(index)], ref.data(),
                            {.n_tok = n, .index = index, .n_out = n, .out_index = index, .n_threads = 2, .expert_tokens = chunk.data()});
                worst = std::max(worst, worst_of(ref, fast.logits(index)));
            }
        }
        EXPECT_EQ(worst, 0.0) << c.name << " batched";
    }
    {  // a 70-token prompt: llama.cpp's tiled flash attention (64 or more query rows)
        std::vector<int32_t> long_toks;
        for (int i = 0; i < 70; ++i) long_toks.push_back((i * 37 + 11) % 256);
        Runner fast(*m, {.n_ctx = 128, .n_threads = 2, .flavor = c.flavor, .cache_type_k = c.kv.k, .cache_type_v = c.kv.v});
        fast.eval(long_toks, true);
        RefState st = make_ref_state(*m, 128, c.flavor, c.kv);
        std::vector<float> ref(V);
        double worst = 0;
        for (int i = 0; i < 70; ++i) {
            forward_ref(*m, st, long_toks[i], ref.data(),
                        {.n_tok = 70, .index = i, .n_out = 70, .out_index = i, .n_threads = 2, .expert_tokens = fast.expert_selections().data()});
            worst = std::max(worst, worst_of(ref, fast.logits(i)));
        }
        EXPECT_EQ(worst, 0.0) << c.name << " tiled attention";
    }
    {  // decoding: one token at a time, after a prompt
        Runner fast(*m, {.n_ctx = 64, .n_threads = 2, .n_batch = 4, .flavor = c.flavor, .cache_type_k = c.kv.k, .cache_type_v = c.kv.v});
        RefState st = make_ref_state(*m, 64, c.flavor, c.kv);
        std::vector<float> ref(V);
        double worst = 0;
        for (int32_t t : toks) {
            fast.eval(std::span<const int32_t>(&t, 1), false);
            forward_ref(*m, st, t, ref.data(), {.n_threads = 2});
            worst = std::max(worst, worst_of(ref, fast.logits(-1)));
        }
        EXPECT_EQ(worst, 0.0) << c.name << " one token at a time";
    }
    // Decoding past 256 positions: llama.cpp's view of the cache is then 512 cells (padded to 256), and it
    // splits each lone row's keys over its 2 threads (ik_llama.cpp's attention does not).
    if (!m->ik_numerics) {
        std::vector<int32_t> prompt;
        for (int i = 0; i < 270; ++i) prompt.push_back((i * 29 + 5) % 256);
        Runner fast(*m, {.n_ctx = 512, .n_threads = 2, .n_batch = 200, .flavor = c.flavor, .cache_type_k = c.kv.k, .cache_type_v = c.kv.v});
        fast.eval(prompt);
        RefState st = make_ref_state(*m, 512, c.flavor, c.kv);
        std::vector<float> ref(V);
        for (size_t i = 0; i < prompt.size(); ++i) {
            const int n = i < 200 ? 200 : static_cast<int>(prompt.size()) - 200;
            forward_ref(*m, st, prompt[i], ref.data(), {.n_tok = n, .index = static_cast<int>(i % 200), .n_threads = 2});
        }
        double worst = 0;
        for (int32_t t : {7, 250}) {
            fast.eval(std::span<const int32_t>(&t, 1));
            forward_ref(*m, st, t, ref.data(), {.n_threads = 2});
            worst = std::max(worst, worst_of(ref, fast.logits(-1)));
        }
        EXPECT_EQ(worst, 0.0) << c.name << " decoding past 256 positions";
    }
}

INSTANTIATE_TEST_SUITE_P(Archs, FastVsReference, ::testing::ValuesIn(kArchCases),
                         [](const auto& info) { return test::test_name(info.param.name + "_" + kernels::flavor_name(info.param.flavor)); });

// A recurrent model's prompt at once, in two parts and token by token: the state carries over every boundary.
// Parts of two or more tokens give the same bits; single tokens differ where llama.cpp's summation order
// depends on the batch (GEMM against one-row dots), by float rounding.
// The recurrent architectures: qwen35moe (gated DeltaNet beside GQA) and kimi-k3 (KDA beside MLA, with residual
// attention and the latent MoE). F32 weights: with 8-bit activations a last-bit difference can flip a rounding
// and move logits by 0.05.
class HybridModel : public ::testing::TestWithParam<std::vector<std::string>> {};

INSTANTIATE_TEST_SUITE_P(Archs, HybridModel,
                         ::testing::Values(std::vector<std::string>{"--arch", "qwen35moe", "--layers", "4", "--kv-heads", "2", "--head-dim", "64",
                                                                    "--shared-experts", "1", "--type", "f32"},
                                           std::vector<std::string>{"--arch", "kimi-k3", "--layers", "4", "--full-attention-interval", "2",
                                                                    "--dense-layers", "1", "--shared-experts", "1", "--latent", "128", "--type",
                                                                    "f32"}),
                         [](const auto& info) {
                             std::string n = info.param[1];
                             std::replace(n.begin(), n.end(), '-', '_');
                             return n;
                         });

TEST_P(HybridModel, PromptAtOnceInPartsAndTokenByTokenAgree) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "h", GetParam()));
    auto m = load_model(file);
    std::vector<int32_t> toks;
    for (int i = 0; i < 23; ++i) toks.push_back((i * 53 + 7) % 256);
    const uint32_t V = m->hp.n_vocab;
    Runner once(*m, {.n_ctx = 64});
    once.eval(toks);
    std::vector<float> want(once.logits(), once.logits() + V);
    auto worst = [&](const float* got) {
        double w = 0;
        for (uint32_t v = 0; v < V; ++v) w = std::max(w, static_cast<double>(std::fabs(got[v] - want[v])));
        return w;
    };
    Runner parts(*m, {.n_ctx = 64});
    parts.eval(std::span<const int32_t>(toks.data(), 9));
    parts.eval(std::span<const int32_t>(toks.data() + 9, toks.size() - 9));
    EXPECT_EQ(worst(parts.logits()), 0.0);  // as llama.cpp: parts of two or more tokens keep the batch's orders
    std::printf("[ hybrid   ] two parts: %.2e, token by token: ", worst(parts.logits()));
    Runner single(*m, {.n_ctx = 64});
    for (int32_t t : toks) single.eval(std::span<const int32_t>(&t, 1));
    EXPECT_LT(worst(single.logits()), 5e-3);  // kimi-k3: 1.8e-3, its residual mixtures carry the rounding to every layer
    std::printf("%.2e (largest logit difference to the prompt at once)\n", worst(single.logits()));
    // And a different prompt gives different logits (the comparison can fail).
    Runner other(*m, {.n_ctx = 64});
    toks[3] ^= 1;
    other.eval(toks);
    EXPECT_GT(worst(other.logits()), 1e-2);
}

// Newer converters write the experts' gate and up as one ffn_gate_up_exps tensor: the same weights give the
// same logits, from RAM and streamed from disk.
TEST(FusedGateUp, SameLogitsAsSeparateTensorsInRamAndStreamed) {
    test::TempDir dir;
    const std::vector<std::string> shape = {"--arch",     "qwen35moe", "--layers",         "4", "--kv-heads", "2",
                                            "--head-dim", "64",        "--shared-experts", "1", "--type",     "q8_0"};
    std::vector<std::string> fused_shape = shape;
    fused_shape.push_back("--fused-gate-up");
    GgufModel separate = open_gguf_model(make_model(dir, "separate", shape));
    GgufModel fused = open_gguf_model(make_model(dir, "fused", fused_shape));
    ASSERT_NE(fused.find_tensor("blk.0.ffn_gate_up_exps.weight"), nullptr);
    ASSERT_EQ(fused.find_tensor("blk.0.ffn_gate_exps.weight"), nullptr);
    StreamingOptions so;
    so.cache_bytes = model_facts(fused).expert_bytes / 4;
    so.read_size = 64 << 10;
    auto a = load_model(separate);
    auto b = load_model(fused);
    auto c = load_model(fused, {.experts = cli::streaming_experts(so)});
    EXPECT_EQ(model_facts(fused).expert_bytes, model_facts(separate).expert_bytes);
    std::vector<int32_t> toks = {1, 17, 200, 42, 99, 3, 250, 7};
    std::vector<std::vector<float>> out;
    for (const Model* m : {a.get(), b.get(), c.get()}) {
        Runner r(*m, {.n_ctx = 32});
        r.eval(toks);
        int32_t next = 5;
        r.eval(std::span<const int32_t>(&next, 1));
        out.emplace_back(r.logits(), r.logits() + m->hp.n_vocab);
    }
    EXPECT_EQ(out[0], out[1]);
    EXPECT_EQ(out[0], out[2]);
}

// Streaming reads expert byte ranges that follow from each type's block size: every type mkmodel writes (the
// dynamic mix changes type from tensor to tensor and layer to layer) gives the in-RAM logits when streamed
// through a cache of a quarter of the experts.
TEST(StreamedTypes, SameLogitsAsInRamForEveryWritableType) {
    test::TempDir dir;
    for (const char* type : {"q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "iq4_nl", "iq4_xs", "mxfp4", "tq1_0", "tq2_0", "dynamic"}) {
        GgufModel file = open_gguf_model(make_model(dir, type, {"--layers", "3", "--kv-heads", "2", "--head-dim", "32", "--type", type}));
        StreamingOptions so;
        so.cache_bytes = model_facts(file).expert_bytes / 4;
        so.read_size = 64 << 10;
        auto ram = load_model(file);
        auto streamed = load_model(file, {.experts = cli::streaming_experts(so)});
        std::vector<int32_t> toks = {1, 17, 200, 42, 99, 3, 250, 7};
        std::vector<std::vector<float>> out;
        for (const Model* m : {ram.get(), streamed.get()}) {
            Runner r(*m, {.n_ctx = 32});
            r.eval(toks);
            for (int32_t next : {5, 77, 130}) r.eval(std::span<const int32_t>(&next, 1));
            out.emplace_back(r.logits(), r.logits() + m->hp.n_vocab);
        }
        EXPECT_EQ(out[0], out[1]) << type;
    }
}

// Prefix reuse on a recurrent model: truncate() can only go back to a checkpoint; re-evaluating from there
// gives exactly what a fresh runner with the same batches gives.
TEST_P(HybridModel, TruncateRestoresTheNewestCheckpointAtOrBelow) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "h", GetParam()));
    auto m = load_model(file);
    std::vector<int32_t> a;
    for (int i = 0; i < 30; ++i) a.push_back((i * 29 + 3) % 256);
    Runner r(*m, {.n_ctx = 64, .max_checkpoints = 2});
    ASSERT_TRUE(r.has_recurrent_state());
    r.eval(std::span<const int32_t>(a.data(), 8));
    r.checkpoint();  // at 8
    r.eval(std::span<const int32_t>(a.data() + 8, 8));
    r.checkpoint();  // at 16
    r.eval(std::span<const int32_t>(a.data() + 16, 4));
    r.checkpoint();  // at 20: the one at 8 is dropped (max 2)
    r.eval(std::span<const int32_t>(a.data() + 20, 10));
    EXPECT_EQ(r.checkpoint_count(), 2u);
    EXPECT_EQ(r.truncate(30), 30);  // nothing to cut
    EXPECT_EQ(r.truncate(18), 16);  // newest checkpoint at or below 18
    EXPECT_EQ(r.checkpoint_count(), 1u);
    std::vector<int32_t> b(a.begin(), a.begin() + 16);
    for (int i = 0; i < 6; ++i) b.push_back((i * 7 + 100) % 256);  // a different continuation
    r.eval(std::span<const int32_t>(b.data() + 16, b.size() - 16));
    Runner fresh(*m, {.n_ctx = 64});
    fresh.eval(std::span<const int32_t>(b.data(), 8));
    fresh.eval(std::span<const int32_t>(b.data() + 8, 8));
    fresh.eval(std::span<const int32_t>(b.data() + 16, b.size() - 16));
    for (uint32_t v = 0; v < m->hp.n_vocab; ++v) ASSERT_EQ(r.logits()[v], fresh.logits()[v]) << v;
    EXPECT_EQ(r.truncate(5), 0);  // below every checkpoint: back to the start
    EXPECT_EQ(r.checkpoint_count(), 0u);
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// A byte vocabulary's tokens 0x80..0xFF are fragments of UTF-8 characters: run's JSON carries their exact bytes
// beside the text (with U+FFFD for invalid bytes) instead of failing to print them.
TEST(RunJson, ByteFragmentPiecesCarryTheirBytes) {
    test::TempDir dir;
    const std::string model = make_model(dir, "bytes", qwen3("q8_0"));
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

// `run --ref` follows the fast path's batches and its threads: a decoded row whose attention view reaches 512
// keys is split into one chunk per thread (deepseek4 after a prompt: the window's cells plus its compressed
// rows), so the reference must be told the thread count too, or its decode differs from the fast path's.
TEST(RunJson, ReferenceDecodesAfterAPromptAsTheFastPathDoes) {
    test::TempDir dir;
    const std::string model = make_model(
        dir, "ds4", {"--arch",   "deepseek4", "--layers", "3", "--compress-ratios", "0,4,8", "--head-dim",    "32", "--rope-dims",     "8",
                     "--q-lora", "32",        "--window", "5", "--indexer-heads",   "2",     "--indexer-dim", "64", "--indexer-top-k", "2",
                     "--type",   "q8_0"});
    std::string prompt;
    for (int i = 0; i < 20; ++i) prompt += (i ? "," : "") + std::to_string((i * 37 + 11) % 256);
    const std::string args = "run --model " + model + " --tokens " + prompt + " -n 6 -t 2 --json --top 8";
    auto [rc, fast] = test::run_moestream(args, false);
    ASSERT_EQ(rc, 0) << fast;
    auto [rc2, ref] = test::run_moestream(args + " --ref", false);
    ASSERT_EQ(rc2, 0) << ref;
    const auto f = nlohmann::json::parse(fast), r = nlohmann::json::parse(ref);
    ASSERT_EQ(f["tokens"], r["tokens"]);
    ASSERT_EQ(f["steps"].size(), 6u);
    for (size_t s = 0; s < 6; ++s)
        for (size_t k = 0; k < 8; ++k) {
            EXPECT_EQ(f["steps"][s]["top"][k]["id"], r["steps"][s]["top"][k]["id"]) << "step " << s;
            EXPECT_EQ(f["steps"][s]["top"][k]["logit"].get<double>(), r["steps"][s]["top"][k]["logit"].get<double>()) << "step " << s;
        }
}

}  // namespace
}  // namespace moe

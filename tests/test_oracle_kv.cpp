// The engine against llama.cpp with quantized and other KV cache types (-ctk / -ctv), on the reference files of
// ../shared/oracle/README-kv.md: teacher-forced top-5 logits and free greedy decoding, as for the f16 caches.
// Every file there was recorded by llama.cpp's AVX2 CPU build, which the engine follows (Flavor::Avx2) on any
// host; the flavor only changes which dot orders the kernels take.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/forward/reference.h"
#include "engine/forward/runner.h"
#include "engine/forward/sequence_cache.h"
#include "engine/model/loader.h"
#include "tests/oracle_runs.h"
#include "tests/test_support.h"

namespace moe {
namespace {

using kernels::Flavor;

struct KvCase {
    std::string model, k, v;
    std::string file() const { return model + ".kv-" + k + "-" + v; }
};

// README-kv.md's table: every recorded pair of every model.
std::vector<KvCase> kv_cases() {
    std::vector<KvCase> out;
    const std::pair<const char*, std::vector<std::pair<const char*, const char*>>> models[] = {
        {"shared-qwen-s64-Q8_0",
         {{"q8_0", "q8_0"}, {"q4_0", "q4_0"}, {"q8_0", "f16"}, {"q5_1", "q5_1"}, {"iq4_nl", "iq4_nl"}, {"bf16", "bf16"}, {"f16", "f16"}}},
        {"shared-deepseek2-gpt2-s64-Q8_0", {{"q8_0", "q8_0"}, {"q4_0", "q4_0"}, {"q5_1", "q5_1"}, {"iq4_nl", "iq4_nl"}, {"bf16", "bf16"}}},
        {"shared-glm-dsa-gpt2-s64-Q8_0", {{"q8_0", "q8_0"}, {"q4_0", "q4_0"}, {"q5_1", "q5_1"}, {"iq4_nl", "iq4_nl"}, {"bf16", "bf16"}}},
        {"shared-qwen35moe-spm-s64-Q8_0",
         {{"q8_0", "q8_0"}, {"q4_0", "q4_0"}, {"q8_0", "f16"}, {"q5_1", "q5_1"}, {"iq4_nl", "iq4_nl"}, {"bf16", "bf16"}}},
    };
    for (const auto& [model, pairs] : models)
        for (const auto& [k, v] : pairs) out.push_back({model, k, v});
    return out;
}

kernels::KvCacheTypes types_of(const KvCase& c) { return {*kernels::parse_kv_cache_type(c.k), *kernels::parse_kv_cache_type(c.v)}; }

class OracleKv : public ::testing::TestWithParam<KvCase> {};

// The same tolerance as the f16 references: the cache types' roundings, the query's Q8_0/Q8_1 conversion, the
// accumulator types and the Hadamard rotation are all reproduced, so only float rounding may differ.
TEST_P(OracleKv, MatchesLlamaCpp) {
    REQUIRE_ORACLE();
    const KvCase c = GetParam();
    const auto expected = nlohmann::json::parse(std::ifstream(test::oracle_dir() + "/expected/" + c.file() + ".json"));
    ASSERT_EQ(expected["runs"][0]["context"]["kv_cache_type"].get<std::string>(), "k=" + c.k + ",v=" + c.v);
    GgufModel file = open_gguf_model(test::oracle_dir() + "/models/" + c.model + ".gguf");
    auto model = load_model(file);
    test::OracleTally t;
    constexpr double kTol = 1e-4;
    for (const auto& run : test::oracle_runs(expected)) {
        test::check_teacher_forced(*model, run, Flavor::Avx2, kTol, c.file(), t, types_of(c));
        test::check_greedy(*model, run, Flavor::Avx2, kTol, c.file(), "llama.cpp", t, types_of(c));
    }
    std::printf("[ oracle   ] %s: greedy %d/%d tokens match, worst top-5 logit difference %.1e over %d steps (tolerance %.0e)\n", c.file().c_str(),
                t.greedy_match, t.greedy_total, t.worst_logit, t.steps, kTol);
}

// The plain reference forward and the fast path agree on every cache type (prompt and decode rows).
TEST_P(OracleKv, FastPathEqualsReference) {
    REQUIRE_ORACLE();
    const KvCase c = GetParam();
    GgufModel file = open_gguf_model(test::oracle_dir() + "/models/" + c.model + ".gguf");
    auto model = load_model(file);
    const std::vector<int32_t> prompt = {1, 17, 42, 99, 7, 3, 250, 11, 5};
    Runner r(*model,
             {.n_ctx = 64, .n_threads = 2, .n_batch = 1, .flavor = Flavor::Avx2, .cache_type_k = types_of(c).k, .cache_type_v = types_of(c).v});
    RefState st = make_ref_state(*model, 64, Flavor::Avx2, types_of(c));
    std::vector<float> ref(model->hp.n_vocab);
    for (int32_t tok : prompt) {
        r.eval(std::span<const int32_t>(&tok, 1));
        forward_ref(*model, st, tok, ref.data());
        for (uint32_t i = 0; i < model->hp.n_vocab; ++i)
            ASSERT_EQ(r.logits()[i], ref[i]) << c.file() << " position " << st.n_past - 1 << " logit " << i;
    }
}

void PrintTo(const KvCase& c, std::ostream* os) { *os << c.file(); }

INSTANTIATE_TEST_SUITE_P(Oracle, OracleKv, ::testing::ValuesIn(kv_cases()), [](const auto& info) { return test::test_name(info.param.file()); });

// DeepSeek-V4 (compressed attention: raw window, compressed rows and indexer keys all in -ctk's type, rotated,
// attended through flash attention's one-row path) against llama.cpp's own runs of the oracle's model with each
// cache type (tests/fixtures/llama_peer/README.md: recorded by its AVX-512 build, so Flavor::Avx512 here).
class PeerKvDeepseek4 : public ::testing::TestWithParam<std::string> {};

TEST_P(PeerKvDeepseek4, MatchesLlamaCpp) {
    REQUIRE_ORACLE();
    const std::string type = GetParam(), model_name = "shared-deepseek4-gpt2-1k-s64-Q8_0";
    const std::string name = model_name + ".kv-" + type + "-" + type;
    const auto expected = nlohmann::json::parse(std::ifstream(std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/llama_peer/" + name + ".json"));
    ASSERT_EQ(expected["runs"][0]["context"]["kv_cache_type"].get<std::string>(), "k=" + type + ",v=" + type);
    GgufModel file = open_gguf_model(test::oracle_dir() + "/models/" + model_name + ".gguf");
    auto model = load_model(file);
    const kernels::KvCacheTypes types{*kernels::parse_kv_cache_type(type), *kernels::parse_kv_cache_type(type)};
    test::OracleTally t;
    constexpr double kTol = 1e-4;
    for (const auto& run : test::oracle_runs(expected)) {
        test::check_teacher_forced(*model, run, Flavor::Avx512, kTol, name, t, types);
        test::check_greedy(*model, run, Flavor::Avx512, kTol, name, "llama.cpp", t, types);
    }
    std::printf("[ peer     ] %s: greedy %d/%d tokens match, worst top-5 logit difference %.1e over %d steps (tolerance %.0e)\n", name.c_str(),
                t.greedy_match, t.greedy_total, t.worst_logit, t.steps, kTol);
}

INSTANTIATE_TEST_SUITE_P(Peer, PeerKvDeepseek4, ::testing::Values("q8_0", "q4_0", "q5_1", "iq4_nl", "bf16", "f32"));

// Past 256 positions, where llama.cpp splits a decoding step's keys over its threads (f16 and f32 caches whose K
// and V share the type; an f32 part is cast to f16 first): llama.cpp's own runs of oracle models (GQA; gpt-oss's
// sinks and sliding-window layers; MLA) after a 300-token prompt, 32 greedy steps, and GQA with an f32 part
// beside a quantized one (tests/fixtures/llama_peer/README.md).
struct LongPeerCase {
    std::string model, k, v, record = "long300";
};
class PeerLongKv : public ::testing::TestWithParam<LongPeerCase> {};

TEST_P(PeerLongKv, MatchesLlamaCppPastTheSplit) {
    REQUIRE_ORACLE();
    const auto& [model_name, k, v, record] = GetParam();
    const std::string name = model_name + "." + record + ".kv-" + k + "-" + v;
    const auto expected = nlohmann::json::parse(std::ifstream(std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/llama_peer/" + name + ".json"));
    ASSERT_EQ(expected["runs"][0]["context"]["kv_cache_type"].get<std::string>(), "k=" + k + ",v=" + v);
    const int threads = expected["runs"][0]["context"]["n_threads"].get<int>();  // the split's chunks follow the thread count
    GgufModel file = open_gguf_model(test::oracle_dir() + "/models/" + model_name + ".gguf");
    auto model = load_model(file);
    const kernels::KvCacheTypes types{*kernels::parse_kv_cache_type(k), *kernels::parse_kv_cache_type(v)};
    test::OracleTally t;
    constexpr double kTol = 1e-7;  // the records print 9 digits
    for (const auto& run : test::oracle_runs(expected)) {
        test::check_teacher_forced(*model, run, Flavor::Avx512, kTol, name, t, types, threads);
        test::check_greedy(*model, run, Flavor::Avx512, kTol, name, "llama.cpp", t, types, threads);
    }
    std::printf("[ peer     ] %s: greedy %d/%d tokens match, worst top-5 logit difference %.1e over %d steps (tolerance %.0e)\n", name.c_str(),
                t.greedy_match, t.greedy_total, t.worst_logit, t.steps, kTol);
}

INSTANTIATE_TEST_SUITE_P(
    Peer, PeerLongKv,
    ::testing::Values(LongPeerCase{"shared-qwen-s64-Q8_0", "f32", "f32"}, LongPeerCase{"shared-qwen-s64-Q8_0", "f16", "f16"},
                      LongPeerCase{"shared-qwen-s64-Q8_0", "q8_0", "f32"}, LongPeerCase{"shared-qwen-s64-Q8_0", "f32", "q8_0"},
                      LongPeerCase{"shared-gpt-oss-gpt2-1k-s64-Q8_0", "f32", "f32"}, LongPeerCase{"shared-gpt-oss-gpt2-1k-s64-Q8_0", "f16", "f16"},
                      LongPeerCase{"shared-deepseek2-spm-s64-F16", "f32", "f32"}, LongPeerCase{"shared-deepseek2-spm-s64-F16", "f16", "f16"},
                      LongPeerCase{"shared-qwen-s64-Q8_0", "q8_0", "q8_0"}, LongPeerCase{"shared-qwen-s64-Q8_0", "q4_0", "q4_0"},
                      LongPeerCase{"shared-gpt-oss-gpt2-1k-s64-Q8_0", "q8_0", "q8_0"},
                      LongPeerCase{"shared-qwen-s64-Q8_0", "f16", "f16", "long300-t3"}, LongPeerCase{"shared-qwen-s64-Q8_0", "f16", "f16", "long700"},
                      LongPeerCase{"shared-qwen-s64-Q8_0", "q8_0", "q8_0", "long700"},
                      LongPeerCase{"shared-gpt-oss-gpt2-1k-s64-Q8_0", "f16", "f16", "long800"},
                      LongPeerCase{"shared-gpt-oss-gpt2-1k-s64-Q8_0", "q8_0", "q8_0", "long800"},
                      LongPeerCase{"shared-qwen35moe-spm-s64-Q8_0", "f16", "f16"}, LongPeerCase{"shared-glm4moe-gpt2-s64-Q8_0", "f16", "f16"},
                      LongPeerCase{"shared-spm-s64-F32", "f16", "f16"}, LongPeerCase{"shared-gpt2-s256-Q4_K_M", "f16", "f16"},
                      LongPeerCase{"shared-mix-udlike", "f16", "f16"}, LongPeerCase{"shared-qtype-BF16", "f16", "f16"},
                      LongPeerCase{"shared-qtype-F16", "f16", "f16"}, LongPeerCase{"shared-qtype-IQ1_M", "f16", "f16"},
                      LongPeerCase{"shared-qtype-IQ1_S", "f16", "f16"}, LongPeerCase{"shared-qtype-IQ2_S", "f16", "f16"},
                      LongPeerCase{"shared-qtype-IQ2_XS", "f16", "f16"}, LongPeerCase{"shared-qtype-IQ2_XXS", "f16", "f16"},
                      LongPeerCase{"shared-qtype-IQ3_S", "f16", "f16"}, LongPeerCase{"shared-qtype-IQ3_XXS", "f16", "f16"},
                      LongPeerCase{"shared-qtype-IQ4_NL", "f16", "f16"}, LongPeerCase{"shared-qtype-IQ4_XS", "f16", "f16"},
                      LongPeerCase{"shared-qtype-MXFP4", "f16", "f16"}, LongPeerCase{"shared-qtype-Q2_K", "f16", "f16"},
                      LongPeerCase{"shared-qtype-Q3_K", "f16", "f16"}, LongPeerCase{"shared-qtype-Q4_0", "f16", "f16"},
                      LongPeerCase{"shared-qtype-Q4_1", "f16", "f16"}, LongPeerCase{"shared-qtype-Q4_K", "f16", "f16"},
                      LongPeerCase{"shared-qtype-Q5_0", "f16", "f16"}, LongPeerCase{"shared-qtype-Q5_1", "f16", "f16"},
                      LongPeerCase{"shared-qtype-Q5_K", "f16", "f16"}, LongPeerCase{"shared-qtype-Q6_K", "f16", "f16"},
                      LongPeerCase{"shared-qtype-Q8_0", "f16", "f16"}, LongPeerCase{"shared-qtype-TQ1_0", "f16", "f16"},
                      LongPeerCase{"shared-qtype-TQ2_0", "f16", "f16"}),
    [](const auto& info) { return test::test_name(info.param.model + "_" + info.param.k + "_" + info.param.v + "_" + info.param.record); });

}  // namespace
}  // namespace moe

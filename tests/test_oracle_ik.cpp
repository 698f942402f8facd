// The engine against ik_llama.cpp's outputs on files in its own quantization types
// (../shared/oracle/README-ik.md): prompt tokenization, teacher-forced top-5 logits and probabilities per step, and
// free greedy decoding, which may part from ik only at a recorded near-tie (none at this precision).
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/engine_setup.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "engine/sampler/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/oracle_runs.h"
#include "tests/test_support.h"

namespace moe {
namespace {

struct IkCase {
    std::string name;
};

// The engine follows ik's arithmetic to the bit (its kernels' lanes and float steps, its flash attention, routing,
// expert sum and norms: docs/correctness.md), so the logits agree to the printed precision, as for the llama.cpp
// files; a margin over the worst difference measured (5e-8).
constexpr double kLogitTol = 1e-4;
const IkCase kIkCases[] = {
    {"shared-ik-IQ2_K"},  {"shared-ik-IQ3_K"},  {"shared-ik-IQ4_K"},    {"shared-ik-IQ5_K"},     {"shared-ik-IQ6_K"},
    {"shared-ik-IQ2_KS"}, {"shared-ik-IQ3_KS"}, {"shared-ik-IQ4_KS"},   {"shared-ik-IQ5_KS"},    {"shared-ik-IQ4_KSS"},
    {"shared-ik-IQ2_KL"}, {"shared-ik-Q6_0"},   {"shared-ik-IQ1_KT"},   {"shared-ik-IQ2_KT"},    {"shared-ik-IQ3_KT"},
    {"shared-ik-IQ4_KT"}, {"shared-ik-mix"},    {"shared-ik-IQ1_S_R4"}, {"shared-ik-IQ4_KS_R4"},
};

class IkOracleModel : public ::testing::TestWithParam<IkCase> {};

TEST_P(IkOracleModel, MatchesIkLlamaCpp) {
    REQUIRE_ORACLE();
    const IkCase c = GetParam();
    const nlohmann::json expected = nlohmann::json::parse(std::ifstream(test::oracle_dir() + "/expected/" + c.name + ".json"));
    GgufModel file = open_gguf_model(test::oracle_dir() + "/models/" + c.name + ".gguf");
    auto model = load_model(file);
    auto tok = Tokenizer::from_gguf(file.meta());
    test::OracleTally t;
    for (const auto& run : test::oracle_runs(expected)) {
        const auto want_prompt = run["prompt_tokens"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok->encode(run["prompt"].get<std::string>(), true, true), want_prompt) << run["prompt"];
        test::check_teacher_forced(*model, run, kernels::Flavor::Avx2, kLogitTol, c.name, t);
        std::printf("[ ik oracle] %s, %zu-token prompt: top-5 logits within %.1e after the prompt, %.1e over its steps\n", c.name.c_str(),
                    want_prompt.size(), t.first_step, t.run_worst);
        test::check_greedy(*model, run, kernels::Flavor::Avx2, kLogitTol, c.name, "ik_llama.cpp", t);
    }
    std::printf(
        "[ ik oracle] %s: greedy %d/%d tokens match, worst top-5 logit difference %.1e (probability %.1e) over %d steps "
        "(tolerance %.0e)\n",
        c.name.c_str(), t.greedy_match, t.greedy_total, t.worst_logit, t.worst_prob, t.steps, kLogitTol);
}

// Experts streamed from disk into a cache of a fifth of their bytes give the in-RAM greedy tokens: the expert byte
// ranges of ik's types (row scales in front of each row, interleaved row groups) are read whole.
TEST(IkOracleModel, StreamedExpertsGiveTheSameGreedyTokens) {
    REQUIRE_ORACLE();
    for (const char* name : {"shared-ik-mix", "shared-ik-IQ4_KS_R4", "shared-ik-IQ1_S_R4", "shared-ik-IQ2_KT", "shared-ik-IQ6_K"}) {
        GgufModel file = open_gguf_model(test::oracle_dir() + "/models/" + name + ".gguf");
        auto in_ram = load_model(file);
        auto streamed = test::load_streamed(file, *in_ram);
        const std::vector<int32_t> prompt = {464, 329, 286, 262, 995, 318, 257, 129, 13};  // ids of the 1024-token vocabulary
        EXPECT_EQ(test::greedy_tokens(*streamed, prompt, 24, kernels::Flavor::Avx2), test::greedy_tokens(*in_ram, prompt, 24, kernels::Flavor::Avx2))
            << name;
        EXPECT_GT(streamed->experts->stats().misses, 0u) << name;
    }
}

void PrintTo(const IkCase& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(OracleIk, IkOracleModel, ::testing::ValuesIn(kIkCases), [](const auto& info) { return test::test_name(info.param.name); });

}  // namespace
}  // namespace moe

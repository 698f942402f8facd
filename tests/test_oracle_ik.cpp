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
    {"shared-ik-IQ2_K"},  {"shared-ik-IQ3_K"},   {"shared-ik-IQ4_K"},  {"shared-ik-IQ5_K"},  {"shared-ik-IQ6_K"},  {"shared-ik-IQ2_KS"},
    {"shared-ik-IQ3_KS"}, {"shared-ik-IQ4_KS"},  {"shared-ik-IQ5_KS"}, {"shared-ik-IQ4_KSS"}, {"shared-ik-IQ2_KL"}, {"shared-ik-Q6_0"},
    {"shared-ik-IQ1_KT"}, {"shared-ik-IQ2_KT"},  {"shared-ik-IQ3_KT"}, {"shared-ik-IQ4_KT"},  {"shared-ik-mix"},
    {"shared-ik-IQ1_S_R4"}, {"shared-ik-IQ4_KS_R4"},
};

class IkOracleModel : public ::testing::TestWithParam<IkCase> {};

TEST_P(IkOracleModel, MatchesIkLlamaCpp) {
    REQUIRE_ORACLE();
    const IkCase c = GetParam();
    const nlohmann::json expected = nlohmann::json::parse(std::ifstream(test::oracle_dir() + "/expected/" + c.name + ".json"));
    GgufModel file = open_gguf_model(test::oracle_dir() + "/models/" + c.name + ".gguf");
    auto model = load_model(file);
    auto tok = Tokenizer::from_gguf(file.meta());
    const uint32_t n_vocab = model->hp.n_vocab;
    double worst_prob = 0, worst_logit = 0;
    int steps = 0, greedy_match = 0, greedy_total = 0;
    for (const auto& run : expected["runs"]) {
        const auto want_prompt = run["prompt_tokens"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok->encode(run["prompt"].get<std::string>(), true, true), want_prompt) << run["prompt"];

        Runner tf(*model, {.n_ctx = 1024, .n_threads = 2, .flavor = kernels::Flavor::Avx2});
        tf.eval(want_prompt);
        double run_worst = 0, first_step = 0;
        for (size_t i = 0; i < run["steps"].size(); ++i) {
            const auto& step = run["steps"][i];
            std::span<const float> logits(tf.logits(), n_vocab);
            const auto top = top_probs(logits, 5);
            // Probabilities over the whole vocabulary, in double, as the oracle's generator computes them.
            double mx = logits[0], z = 0;
            for (float v : logits) mx = std::max(mx, static_cast<double>(v));
            for (float v : logits) z += std::exp(static_cast<double>(v) - mx);
            for (size_t k = 0; k < 5; ++k) {
                const auto& want = step["top"][k];
                const int32_t id = want["id"].get<int32_t>();
                const double p = std::exp(static_cast<double>(logits[id]) - mx) / z;
                const double dp = std::fabs(p - want["prob"].get<double>());
                worst_prob = std::max(worst_prob, dp);
                const double dl = std::fabs(static_cast<double>(logits[id]) - want["logit"].get<double>());
                worst_logit = std::max(worst_logit, dl);
                run_worst = std::max(run_worst, dl);
                if (i == 0) first_step = std::max(first_step, dl);
                EXPECT_LE(dl, kLogitTol) << c.name << " prompt " << run["prompt"] << " step " << i << " rank " << k;
                const bool tie_above = k > 0 && step["top"][k - 1]["logit"].get<double>() - want["logit"].get<double>() <= kLogitTol;
                const bool tie_below = k + 1 < 5 && want["logit"].get<double>() - step["top"][k + 1]["logit"].get<double>() <= kLogitTol;
                if (!tie_above && !tie_below) {
                    EXPECT_EQ(top[k].first, id) << c.name << " step " << i << " rank " << k;
                }
            }
            ++steps;
            const int32_t next = step["id"].get<int32_t>();
            tf.eval(std::span<const int32_t>(&next, 1));
        }
        std::printf("[ ik oracle] %s, %zu-token prompt: top-5 logits within %.1e after the prompt, %.1e over its steps\n",
                    c.name.c_str(), want_prompt.size(), first_step, run_worst);

        Runner gen(*model, {.n_ctx = 1024, .n_threads = 2, .flavor = kernels::Flavor::Avx2});
        gen.eval(want_prompt);
        const auto want_gen = run["generated_tokens"].get<std::vector<int32_t>>();
        for (size_t i = 0; i < want_gen.size(); ++i) {
            const int32_t next = argmax({gen.logits(), n_vocab});
            if (next != want_gen[i]) {
                const auto& top = run["steps"][i]["top"];
                const double margin = top[0]["logit"].get<double>() - top[1]["logit"].get<double>();
                EXPECT_LE(margin, kLogitTol) << c.name << " prompt " << run["prompt"] << ": greedy token " << i << " is " << next
                                            << ", ik_llama.cpp's " << want_gen[i] << " (margin " << margin << ")";
                break;
            }
            ++greedy_match;
            gen.eval(std::span<const int32_t>(&next, 1));
        }
        greedy_total += static_cast<int>(want_gen.size());
    }
    std::printf("[ ik oracle] %s: greedy %d/%d tokens match, worst top-5 logit difference %.1e (probability %.1e) over %d steps "
                "(tolerance %.0e)\n",
                c.name.c_str(), greedy_match, greedy_total, worst_logit, worst_prob, steps, kLogitTol);
}

// Experts streamed from disk into a cache of a fifth of their bytes give the in-RAM greedy tokens: the expert byte
// ranges of ik's types (row scales in front of each row, interleaved row groups) are read whole.
TEST(IkOracleModel, StreamedExpertsGiveTheSameGreedyTokens) {
    REQUIRE_ORACLE();
    for (const char* name : {"shared-ik-mix", "shared-ik-IQ4_KS_R4", "shared-ik-IQ1_S_R4", "shared-ik-IQ2_KT", "shared-ik-IQ6_K"}) {
        GgufModel file = open_gguf_model(test::oracle_dir() + "/models/" + name + ".gguf");
        auto in_ram = load_model(file);
        std::vector<ExpertLayer> layers;
        for (const Layer& L : in_ram->layers)
            layers.push_back(L.moe ? ExpertLayer{&L.experts.gate, &L.experts.up, &L.experts.down} : ExpertLayer{});
        StreamingOptions so;
        so.cache_bytes = std::max<uint64_t>(model_facts(file).expert_bytes / 5,
                                            2 * StreamingExpertSource::slot_bytes_for(layers) * in_ram->hp.moe.n_expert_used);
        so.read_size = 64 << 10;
        auto streamed = load_model(file, {.experts = cli::streaming_experts(so)});
        const std::vector<int32_t> prompt = {464, 329, 286, 262, 995, 318, 257, 129, 13};  // ids of the 1024-token vocabulary
        std::vector<int32_t> got[2];
        int k = 0;
        for (const Model* m : {streamed.get(), in_ram.get()}) {
            Runner r(*m, {.n_ctx = 256, .n_threads = 2});
            r.eval(prompt);
            for (int i = 0; i < 24; ++i) {
                const int32_t next = argmax({r.logits(), m->hp.n_vocab});
                got[k].push_back(next);
                r.eval(std::span<const int32_t>(&next, 1));
            }
            ++k;
        }
        EXPECT_EQ(got[0], got[1]) << name;
        EXPECT_GT(streamed->experts->stats().misses, 0u) << name;
    }
}

void PrintTo(const IkCase& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(OracleIk, IkOracleModel, ::testing::ValuesIn(kIkCases), [](const auto& info) {
    std::string n = info.param.name;
    for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
});

}  // namespace
}  // namespace moe

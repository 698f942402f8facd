// The checks the oracle tests share (llama.cpp's records and ik_llama.cpp's, ../shared/oracle/README*.md), one
// recorded run at a time: teacher-forced top-5 logits, free greedy decoding, and streamed experts against RAM.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/engine_setup.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "engine/sampler/sampler.h"

namespace moe::test {

// The recorded runs (one per prompt) a test checks: all of them, or the first N where MOESTREAM_ORACLE_PROMPTS=N
// says so (tests/cpu_models/run.sh: under CPU emulation one prompt of a reference costs up to a minute).
inline std::vector<nlohmann::json> oracle_runs(const nlohmann::json& expected) {
    std::vector<nlohmann::json> runs(expected["runs"].begin(), expected["runs"].end());
    if (const char* n = std::getenv("MOESTREAM_ORACLE_PROMPTS"); n && std::atoi(n) > 0 && runs.size() > static_cast<size_t>(std::atoi(n)))
        runs.resize(static_cast<size_t>(std::atoi(n)));
    return runs;
}

struct OracleTally {
    int steps = 0, greedy_match = 0, greedy_total = 0;
    double worst_logit = 0, worst_prob = 0;
    double run_worst = 0, first_step = 0;  // the last run's worst logit difference, and its first step's
};

// Teacher forcing exactly as the peer produced the steps: the prompt as one batch, then the record's tokens one
// at a time (summation orders depend on the batch, see kernels::matmul_dots). Each recorded top-5 logit within
// `tol`; ranks compared where the recorded logits are further apart than `tol`; probabilities over the whole
// vocabulary in double, as the oracle's generator computes them.
inline void check_teacher_forced(const Model& model, const nlohmann::json& run, kernels::Flavor flavor, double tol, const std::string& label,
                                 OracleTally& t, kernels::KvCacheTypes kv = {}, int n_threads = 2) {
    const uint32_t n_vocab = model.hp.n_vocab;
    Runner tf(model, {.n_ctx = 1024, .n_threads = n_threads, .flavor = flavor, .cache_type_k = kv.k, .cache_type_v = kv.v});
    tf.eval(run["prompt_tokens"].get<std::vector<int32_t>>());
    t.run_worst = t.first_step = 0;
    for (size_t i = 0; i < run["steps"].size(); ++i) {
        const auto& step = run["steps"][i];
        std::span<const float> logits(tf.logits(), n_vocab);
        const auto top = top_probs(logits, 5);
        double mx = logits[0], z = 0;
        for (float v : logits) mx = std::max(mx, static_cast<double>(v));
        for (float v : logits) z += std::exp(static_cast<double>(v) - mx);
        for (size_t k = 0; k < 5; ++k) {
            const auto& want = step["top"][k];
            const int32_t id = want["id"].get<int32_t>();
            if (want.contains("prob"))
                t.worst_prob = std::max(t.worst_prob, std::fabs(std::exp(static_cast<double>(logits[id]) - mx) / z - want["prob"].get<double>()));
            const double dl = std::fabs(static_cast<double>(logits[id]) - want["logit"].get<double>());
            t.worst_logit = std::max(t.worst_logit, dl);
            t.run_worst = std::max(t.run_worst, dl);
            if (i == 0) t.first_step = std::max(t.first_step, dl);
            EXPECT_LE(dl, tol) << label << " prompt " << run["prompt"] << " step " << i << " rank " << k;
            const bool tie_above = k > 0 && step["top"][k - 1]["logit"].get<double>() - want["logit"].get<double>() <= tol;
            const bool tie_below = k + 1 < 5 && want["logit"].get<double>() - step["top"][k + 1]["logit"].get<double>() <= tol;
            if (!tie_above && !tie_below) { EXPECT_EQ(top[k].first, id) << label << " step " << i << " rank " << k; }
        }
        ++t.steps;
        const int32_t next = step["id"].get<int32_t>();
        tf.eval(std::span<const int32_t>(&next, 1));
    }
}

// Free greedy decoding, token by token as a user's run does it. A divergence is accepted only at a step whose
// recorded top-2 margin is within `tol` (there the peer's own builds may disagree).
inline void check_greedy(const Model& model, const nlohmann::json& run, kernels::Flavor flavor, double tol, const std::string& label,
                         const std::string& peer, OracleTally& t, kernels::KvCacheTypes kv = {}, int n_threads = 2) {
    Runner gen(model, {.n_ctx = 1024, .n_threads = n_threads, .flavor = flavor, .cache_type_k = kv.k, .cache_type_v = kv.v});
    gen.eval(run["prompt_tokens"].get<std::vector<int32_t>>());
    const auto want_gen = run["generated_tokens"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < want_gen.size(); ++i) {
        const int32_t next = argmax({gen.logits(), model.hp.n_vocab});
        if (next != want_gen[i]) {
            const auto& top = run["steps"][i]["top"];
            const double margin = top[0]["logit"].get<double>() - top[1]["logit"].get<double>();
            EXPECT_LE(margin, tol) << label << " prompt " << run["prompt"] << ": greedy token " << i << " is " << next << ", " << peer << "'s "
                                   << want_gen[i] << " (margin " << margin << ")";
            break;
        }
        ++t.greedy_match;
        gen.eval(std::span<const int32_t>(&next, 1));
    }
    t.greedy_total += static_cast<int>(want_gen.size());
}

// The model again with its experts streamed from disk into a cache of a fifth of their bytes (but room for twice
// one token's experts: tiny experts waste most of their 4 KiB-aligned O_DIRECT windows).
inline std::unique_ptr<Model> load_streamed(GgufModel& file, const Model& in_ram) {
    std::vector<ExpertLayer> layers;
    for (const Layer& L : in_ram.layers) layers.push_back(L.moe ? ExpertLayer{&L.experts.gate, &L.experts.up, &L.experts.down} : ExpertLayer{});
    StreamingOptions so;
    so.cache_bytes = std::max<uint64_t>(model_facts(file).expert_bytes / 5,
                                        2 * StreamingExpertSource::slot_bytes_for(layers) * in_ram.hp.moe.n_expert_used);
    so.read_size = 64 << 10;
    return load_model(file, {.experts = cli::streaming_experts(so)});
}

inline std::vector<int32_t> greedy_tokens(const Model& m, const std::vector<int32_t>& prompt, int n, kernels::Flavor flavor) {
    Runner r(m, {.n_ctx = 1024, .n_threads = 2, .flavor = flavor});
    r.eval(prompt);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        const int32_t next = argmax({r.logits(), m.hp.n_vocab});
        out.push_back(next);
        r.eval(std::span<const int32_t>(&next, 1));
    }
    return out;
}

}  // namespace moe::test

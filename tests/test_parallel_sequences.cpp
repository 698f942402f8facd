// Several sequences in one runner (server slots): a decode step for all of them at once gives each the logits
// it gets decoding alone (the batch changes matmul summation orders, so within float tolerance and the same
// greedy tokens), and each routed expert chosen by several sequences is fetched once per step.
#include <algorithm>
#include <cmath>

#include "cli/commands.h"
#include "engine/forward/runner.h"
#include "engine/kernels/kv_cache_types.h"
#include "engine/model/loader.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::string make(const test::TempDir& dir, const std::string& arch) {
    const std::string out = dir / (arch + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--arch",     arch, "--layers",        "3",      "--embd",    "128",   "--heads",
                                     "4",       "--kv-heads", "2",  "--head-dim",      "32",     "--experts", "16",    "--experts-used",
                                     "4",       "--ffn",      "96", "--vocab-builtin", "--seed", "5",         "--out", out};
    // DSA: a shared indexer layer between full ones, and fewer keys than the positions, so each sequence's
    // selection matters and must stay its own from the full layer to the shared one.
    if (arch == "glm-dsa") args.insert(args.end(), {"--indexer-top-k", "4", "--indexer-types", "101"});
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

int32_t argmax_of(const float* l, int n) { return static_cast<int32_t>(std::max_element(l, l + n) - l); }

class ParallelSequences : public ::testing::TestWithParam<std::string> {};

// "arch" or "arch:cache type" (K and V both; kernels/kv_cache_types.h).
TEST_P(ParallelSequences, BatchedDecodeMatchesEachSequenceAlone) {
    test::TempDir dir;
    const std::string param = GetParam(), arch = param.substr(0, param.find(':'));
    const GgmlType ct = param.find(':') == std::string::npos ? GgmlType::F16 : *kernels::parse_kv_cache_type(param.substr(param.find(':') + 1));
    const GgufModel file = open_gguf_model(make(dir, arch));
    auto model = load_model(file);
    const int V = static_cast<int>(model->hp.n_vocab), steps = 6;
    const std::vector<std::vector<int32_t>> prompts = {{5, 77, 200, 31}, {9, 120, 64, 3, 250, 17, 99}, {42}};

    // Alone: each sequence in its own runner, one token at a time.
    std::vector<std::vector<std::vector<float>>> alone(prompts.size());
    uint64_t loads_alone = 0;
    for (size_t s = 0; s < prompts.size(); ++s) {
        Runner r(*model, {.n_ctx = 64, .n_threads = 2, .cache_type_k = ct, .cache_type_v = ct});
        r.eval(prompts[s]);
        const uint64_t before = r.stats().expert_loads;
        for (int i = 0; i < steps; ++i) {
            alone[s].emplace_back(r.logits(), r.logits() + V);
            const int32_t next = argmax_of(r.logits(), V);
            r.eval(std::span<const int32_t>(&next, 1));
        }
        loads_alone += r.stats().expert_loads - before;
    }

    // Together: prompts one sequence at a time, then one decode step for all three.
    Runner r(*model, {.n_ctx = 64, .n_threads = 2, .n_seq = 3, .cache_type_k = ct, .cache_type_v = ct});
    std::vector<std::vector<float>> last(prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
        r.select_sequence(static_cast<int>(s));
        r.eval(prompts[s]);
        last[s].assign(r.logits(), r.logits() + V);
        EXPECT_EQ(r.n_past(), static_cast<int>(prompts[s].size()));
    }
    const uint64_t before = r.stats().expert_loads;
    const std::vector<int> seqs = {2, 0, 1};  // any order of rows
    for (int i = 0; i < steps; ++i) {
        std::vector<int32_t> next;
        for (int s : seqs) {
            const auto& want = alone[static_cast<size_t>(s)][static_cast<size_t>(i)];
            const auto& got = last[static_cast<size_t>(s)];
            float scale = 0, diff = 0;
            for (int v = 0; v < V; ++v) {
                scale = std::max(scale, std::fabs(want[static_cast<size_t>(v)]));
                diff = std::max(diff, std::fabs(want[static_cast<size_t>(v)] - got[static_cast<size_t>(v)]));
            }
            const float tol = 1e-3f * scale + 1e-5f;
            EXPECT_LE(diff, tol) << "sequence " << s << " step " << i;
            // The same greedy token unless the top two are closer than the tolerance allows telling apart.
            std::vector<float> sorted(want);
            std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
            if (sorted[0] - sorted[1] > 2 * tol) {
                EXPECT_EQ(argmax_of(got.data(), V), argmax_of(want.data(), V)) << "sequence " << s << " step " << i;
            }
            next.push_back(argmax_of(want.data(), V));  // the token the lone run took, so histories stay the same
        }
        r.eval_batch(seqs, next);
        for (size_t k = 0; k < seqs.size(); ++k)
            last[static_cast<size_t>(seqs[k])].assign(r.logits(static_cast<int>(k)), r.logits(static_cast<int>(k)) + V);
    }
    for (size_t s = 0; s < prompts.size(); ++s) EXPECT_EQ(r.n_past_of(static_cast<int>(s)), static_cast<int>(prompts[s].size()) + steps);
    // Experts two sequences both chose in a step are fetched once.
    EXPECT_LT(r.stats().expert_loads - before, loads_alone);
    // Misuse is refused, not computed: a sequence's tokens apart (together they are its next positions, as a
    // verification batch sends them), a sequence that does not exist.
    EXPECT_THROW(r.eval_batch(std::vector<int>{0, 1, 0}, std::vector<int32_t>{1, 2, 3}), std::invalid_argument);
    EXPECT_THROW(r.eval_batch(std::vector<int>{0, 9}, std::vector<int32_t>{1, 2}), std::invalid_argument);
    EXPECT_THROW(r.select_sequence(3), std::out_of_range);
}

INSTANTIATE_TEST_SUITE_P(Archs, ParallelSequences,
                         ::testing::Values("qwen3moe", "deepseek2", "glm-dsa", "qwen35moe", "kimi-k3", "deepseek4", "minimax-m3", "gpt-oss",
                                           "qwen3moe:q8_0", "deepseek2:bf16", "qwen35moe:iq4_nl"),
                         [](const auto& info) { return test::test_name(info.param); });

}  // namespace
}  // namespace moe

// Speculative decoding: greedy output with drafts is token for token (and logit for logit) what decoding
// without them gives, on every shared reference model the engine loads, whether the drafts are all right, all
// wrong or mixed; the sampled acceptance rule keeps the sampler's distribution; prompt lookup finds the right
// span; the planner drafts only where its measured costs pay.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "engine/forward/speculative.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "tests/greedy_decode.h"
#include "tests/test_support.h"

namespace moe {
namespace {

using test::decode_drafted;
using test::decode_plain;
using test::Decoded;
using test::expect_same;

TEST(LookupDraft, CopiesWhatFollowedTheLatestLongestMatch) {
    //                          0  1  2  3  4  5  6  7  8  9 10 11 12
    const std::vector<int32_t> c = {1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 6, 2, 3};
    // The last two tokens (2 3) occur at 1 and 6: the latest (6) wins; what followed it is 4 5 6 ...
    EXPECT_EQ(lookup_draft(c, 3), (std::vector<int32_t>{4, 5, 6}));
    // Past the context's end the repetition goes on with its period (here 2 3 4 5 6).
    EXPECT_EQ(lookup_draft(c, 7), (std::vector<int32_t>{4, 5, 6, 2, 3, 4, 5}));
    // A loop of one token drafts more of it, however close the match is to the end.
    EXPECT_EQ(lookup_draft(std::vector<int32_t>{5, 7, 7, 7}, 4), (std::vector<int32_t>{7, 7, 7, 7}));
    // A longer match outranks a later shorter one: (7 1 2 3) occurs at 0, followed by 8; (1 2 3) also at 5.
    const std::vector<int32_t> d = {7, 1, 2, 3, 8, 1, 2, 3, 9, 7, 1, 2, 3};
    EXPECT_EQ(lookup_draft(d, 2), (std::vector<int32_t>{8, 1}));
    EXPECT_TRUE(lookup_draft(std::vector<int32_t>{1, 2, 3, 4}, 4).empty());
    EXPECT_TRUE(lookup_draft(c, 0).empty());
    EXPECT_TRUE(lookup_draft(std::vector<int32_t>{}, 4).empty());
}

TEST(DraftMode, ParsesTheFourNamesAndRefusesOthers) {
    EXPECT_EQ(parse_draft_mode("auto"), DraftMode::Auto);
    EXPECT_EQ(parse_draft_mode("off"), DraftMode::Off);
    EXPECT_EQ(parse_draft_mode("lookup"), DraftMode::Lookup);
    EXPECT_EQ(parse_draft_mode("mtp"), DraftMode::Mtp);
    EXPECT_THROW(parse_draft_mode("ngram"), std::invalid_argument);
}

// Over many draws, the token a verification yields (the draft when kept, else its replacement) has the
// sampler's own distribution, for a likely draft, an unlikely one and one the filters cut away.
TEST(SpeculativeSampling, VerifiedTokensKeepTheSamplersDistribution) {
    const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
    for (const SamplerParams p : {SamplerParams{.temperature = 0.8f, .top_k = 0, .top_p = 1.f, .min_p = 0.f, .seed = 1},
                                  SamplerParams{.temperature = 1.2f, .top_k = 4, .top_p = 1.f, .min_p = 0.f, .seed = 2}}) {
        Sampler probe(p);
        std::map<int32_t, double> want;
        for (const auto& [id, prob] : probe.distribution(logits, {})) want[id] = prob;
        for (int32_t draft : {0, 3, 5}) {
            Sampler s(p);
            constexpr int kDraws = 200000;
            std::map<int32_t, int> got;
            int kept = 0;
            for (int i = 0; i < kDraws; ++i) {
                const Sampler::Verdict v = s.verify(logits, {}, draft);
                got[v.token]++;
                kept += v.accepted;
                if (v.accepted) { EXPECT_EQ(v.token, draft); }
            }
            // Kept as often as the sampler gives the draft (0 where top-k cuts it).
            EXPECT_NEAR(static_cast<double>(kept) / kDraws, want.count(draft) ? want[draft] : 0.0, 0.005) << "draft " << draft;
            for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
                const double expect = want.count(id) ? want[id] : 0.0, seen = static_cast<double>(got[id]) / kDraws;
                EXPECT_NEAR(seen, expect, 0.005) << "token " << id << " with draft " << draft << " at temperature " << p.temperature;
            }
        }
    }
}

TEST(SpeculativeSampling, GreedyKeepsOnlyTheArgmax) {
    const std::vector<float> logits = {0.5f, 3.0f, 3.0f, 1.0f};
    Sampler s({.temperature = 0.f});
    EXPECT_TRUE(s.verify(logits, {}, 1).accepted);
    const Sampler::Verdict v = s.verify(logits, {}, 2);  // tied, but greedy takes the lowest id
    EXPECT_FALSE(v.accepted);
    EXPECT_EQ(v.token, 1);
}

TEST(DraftPlanner, DraftsWhereExtraRowsAreCheapAndNotWhereTheyCostAStep) {
    // 64 experts, 6 per token: 3 tokens need about 2.73 tokens' worth of distinct experts.
    const StepCost moe{.expert_share = 0.5, .n_expert = 64, .n_used = 6};
    EXPECT_DOUBLE_EQ(moe.expert_sets(1), 1.0);
    EXPECT_NEAR(moe.expert_sets(3), 64 * (1 - std::pow(58.0 / 64, 3)) / 6, 1e-12);
    DraftPlanner cheap(8, moe);
    EXPECT_EQ(cheap.depth(8), 0);  // nothing measured: a plain step first
    cheap.observe_step(1, 0.100);
    cheap.observe_step(3, 0.100 + 0.100 * 0.2 * (moe.expert_sets(3) - 1));  // the experts are a fifth of a step
    for (int i = 0; i < 10; ++i) cheap.observe_drafts(4, 4);                // drafts nearly always kept
    EXPECT_GT(cheap.acceptance(), 0.8);
    EXPECT_NEAR(cheap.expert_share(), 0.2, 1e-9);
    EXPECT_NEAR(cheap.step_seconds(9), 0.100 * (0.8 + 0.2 * moe.expert_sets(9)), 1e-12);
    EXPECT_GE(cheap.depth(8), 4);
    EXPECT_LE(cheap.depth(2), 2);

    // I/O bound on a model whose every row is new work (a dense count): an extra row costs a step; even
    // always-kept drafts cannot pay.
    DraftPlanner costly(8, {.expert_share = 1.0});
    costly.observe_step(1, 0.100);
    for (int i = 0; i < 3; ++i) costly.observe_step(2, 0.200);
    for (int i = 0; i < 10; ++i) costly.observe_drafts(4, 4);
    EXPECT_NEAR(costly.expert_share(), 1.0, 1e-9);
    for (int i = 0; i < 200; ++i) EXPECT_EQ(costly.depth(8), 0);

    // Unmeasured, with a prior that says no: one draft now and then, to measure.
    DraftPlanner probing(8, {.expert_share = 1.0});
    probing.observe_step(1, 0.100);
    int probes = 0;
    for (int i = 0; i < 640; ++i) probes += probing.depth(8) > 0;
    EXPECT_EQ(probes, 10);
    // Rarely-kept drafts are not worth verifying even when rows are cheap.
    DraftPlanner rejected(8, {.expert_share = 0.05});
    rejected.observe_step(1, 0.100);
    for (int i = 0; i < 50; ++i) rejected.observe_drafts(3, 0);
    EXPECT_LT(rejected.acceptance(), 0.05);
    EXPECT_EQ(rejected.depth(8), 0);
}

// auto learns how often drafts would be kept from the ones it passes up: the tokens that follow judge them.
TEST(Drafter, AutoJudgesTheDraftsItPassesUpAgainstWhatFollows) {
    Drafter d(DraftMode::Auto, 8, {.expert_share = 1.0});  // extra rows assumed as costly as a step: nothing gets verified
    std::vector<int32_t> history = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
    const double before = d.planner().acceptance();
    for (int i = 0; i < 40; ++i) {
        EXPECT_TRUE(d.propose(history, 8).empty());
        d.observe(1, 0.01, 0, 0);
        history.push_back(history[history.size() - 4]);  // the loop goes on: every passed-up draft was right
    }
    EXPECT_GT(d.planner().acceptance(), 0.9);
    EXPECT_GT(d.planner().acceptance(), before);
    Drafter wrong(DraftMode::Auto, 8, {.expert_share = 1.0});
    std::vector<int32_t> h2 = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
    uint32_t x = 12345;
    for (int i = 0; i < 200; ++i) {
        wrong.propose(h2, 8);
        wrong.observe(1, 0.01, 0, 0);
        x = x * 1664525u + 1013904223u;
        h2.push_back(1 + static_cast<int32_t>((x >> 16) % 4));  // random over the same four tokens: drafts right 1 in 4
    }
    EXPECT_LT(wrong.planner().acceptance(), 0.45);
}

// Every shared reference model the engine loads (attention, MLA, DSA, DeltaNet; every weight type; ik's files
// on ik's numerics), with drafts that are the model's own continuation (all kept), wrong (all rejected) and
// right but broken every third token (kept, then rejected mid-batch): the same tokens and logits as without.
TEST(SpeculativeGreedy, DraftsNeverChangeTheTokensOnAnySharedModel) {
    REQUIRE_ORACLE();
    std::vector<std::string> paths, refused;
    for (const auto& e : std::filesystem::directory_iterator(test::oracle_dir() + "/models"))
        if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
    std::sort(paths.begin(), paths.end());
    int checked = 0;
    for (const std::string& path : paths) {
        GgufModel file = open_gguf_model(path);
        std::unique_ptr<Model> m;
        try {
            m = load_model(file);
        } catch (const std::exception& e) {
            refused.push_back(std::filesystem::path(path).filename().string() + " (" + e.what() + ")");
            continue;
        }
        const std::string name = std::filesystem::path(path).filename().string();
        const int V = static_cast<int>(m->hp.n_vocab);
        const std::vector<int32_t> prompt = {1 % V, 17 % V, 42 % V, 9 % V, 250 % V, 17 % V, 42 % V};
        const int n = 14;
        // Both llama.cpp builds' numerics: the AVX2 build's batches take other kernels (repacked GEMMs) than its
        // one-token steps, more often than the AVX-512 build's.
        std::vector<RunnerOptions> options = {{.n_ctx = 64, .n_threads = 2, .flavor = kernels::Flavor::Avx512},
                                              {.n_ctx = 64, .n_threads = 2, .flavor = kernels::Flavor::Avx2}};
        if (name.find("qwen-s64") != std::string::npos || name.find("deepseek2-gpt2") != std::string::npos ||
            name.find("deepseek4-gpt2-1k-s64-Q8_0") != std::string::npos)
            options.push_back({.n_ctx = 64, .n_threads = 2, .cache_type_k = GgmlType::Q8_0, .cache_type_v = GgmlType::Q8_0});
        for (const RunnerOptions& ro : options) {
            const Decoded plain = decode_plain(*m, ro, prompt, n);
            const std::string what = name + (ro.cache_type_k == GgmlType::F16 ? "" : " (q8_0 cache)") +
                                     (ro.flavor == kernels::Flavor::Avx2 ? " (AVX2 build's numerics)" : "");
            // The continuation the model will produce from here: its own greedy tokens.
            auto own = [&](const std::vector<int32_t>& h) {
                const size_t done = h.size() - prompt.size();
                return std::vector<int32_t>(plain.tokens.begin() + static_cast<long>(done), plain.tokens.end());
            };
            int kept = 0;
            expect_same(plain, decode_drafted(*m, ro, prompt, n, own, &kept), what + ", right drafts");
            EXPECT_EQ(kept, n - 2) << what << ": every right draft is kept (one step verifies them all)";
            kept = 0;
            auto wrong = [&](const std::vector<int32_t>& h) {
                std::vector<int32_t> d = own(h);
                for (int32_t& t : d) t = (t + 1) % V;
                return std::vector<int32_t>(d.begin(), d.begin() + std::min<long>(3, static_cast<long>(d.size())));
            };
            expect_same(plain, decode_drafted(*m, ro, prompt, n, wrong, &kept), what + ", wrong drafts");
            EXPECT_EQ(kept, 0) << what;
            kept = 0;
            auto broken = [&](const std::vector<int32_t>& h) {
                std::vector<int32_t> d = own(h);
                if (d.size() > 2) d[2] = (d[2] + 1) % V;
                return std::vector<int32_t>(d.begin(), d.begin() + std::min<long>(5, static_cast<long>(d.size())));
            };
            expect_same(plain, decode_drafted(*m, ro, prompt, n, broken, &kept), what + ", drafts wrong at the third");
            EXPECT_GT(kept, 0) << what;
        }
        ++checked;
    }
    std::string list;
    for (const std::string& r : refused) list += "\n  " + r;
    std::printf("[ speculative ] %d shared models checked; not loadable by this engine (%zu):%s\n", checked, refused.size(), list.c_str());
    EXPECT_GE(checked, 40);
}

// The server's verification batch: several sequences, each with several consecutive tokens, in one
// eval_batch; every row's logits are those of evaluating that sequence's tokens one at a time.
TEST(SpeculativeBatch, SequencesWithSeveralTokensEachMatchDecodingAlone) {
    test::TempDir dir;
    for (const std::string arch : {"qwen3moe", "deepseek2", "qwen35moe"}) {
        const std::string path = dir / (arch + ".gguf");
        ASSERT_EQ(cli::dispatch({"mkmodel", "--arch",     arch,  "--layers",        "2",      "--embd",    "128",    "--heads",
                                 "2",       "--kv-heads", "1",   "--head-dim",      "32",     "--experts", "16",     "--experts-used",
                                 "2",       "--ffn",      "128", "--vocab-builtin", "--type", "q8_0",      "--seed", "3",
                                 "--out",   path}),
                  0);
        GgufModel file = open_gguf_model(path);
        auto m = load_model(file);
        const RunnerOptions ro{.n_ctx = 64, .n_threads = 2, .n_seq = 2};
        const std::vector<std::vector<int32_t>> prompts = {{5, 9, 33, 71}, {120, 4, 18}};
        const std::vector<std::vector<int32_t>> next = {{7, 99, 12}, {250, 3}};
        // Alone: each sequence's tokens one by one.
        std::vector<std::vector<std::vector<float>>> want(2);
        for (int q = 0; q < 2; ++q) {
            Runner r(*m, ro);
            r.select_sequence(q);
            r.eval(prompts[q]);
            for (int32_t t : next[q]) {
                r.eval(std::span<const int32_t>(&t, 1));
                want[q].emplace_back(r.logits(), r.logits() + r.n_vocab());
            }
        }
        Runner r(*m, ro);
        for (int q = 0; q < 2; ++q) {
            r.select_sequence(q);
            r.eval(prompts[q]);
        }
        const std::vector<int> seqs = {0, 0, 0, 1, 1};
        const std::vector<int32_t> batch = {7, 99, 12, 250, 3};
        r.eval_batch(seqs, batch, Runner::Rows::OneByOne);
        EXPECT_EQ(r.n_past_of(0), 4 + 3);
        EXPECT_EQ(r.n_past_of(1), 3 + 2);
        for (size_t i = 0; i < batch.size(); ++i) {
            const auto& w = want[static_cast<size_t>(seqs[i])][i < 3 ? i : i - 3];
            EXPECT_EQ(0, std::memcmp(w.data(), r.logits(static_cast<int>(i)), w.size() * sizeof(float))) << arch << " row " << i;
        }
        // A sequence's tokens must come together.
        EXPECT_THROW(r.eval_batch(std::vector<int>{0, 1, 0}, std::vector<int32_t>{1, 2, 3}), std::invalid_argument);
    }
}

}  // namespace
}  // namespace moe

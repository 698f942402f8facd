// Sampler: greedy is argmax (lowest id on ties), seeded sampling is repeatable, and each filter narrows
// the candidates as documented.
#include <map>

#include "engine/sampler/sampler.h"
#include "tests/test_support.h"

namespace moe {
namespace {

TEST(Sampler, GreedyTakesTheLowestIdAmongTies) {
    std::vector<float> l = {0.f, 3.f, 1.f, 3.f};
    Sampler s({.temperature = 0.f});
    EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, RepetitionPenaltyMovesGreedyAway) {
    std::vector<float> l = {2.0f, 1.9f, 0.f};
    Sampler s({.temperature = 0.f, .repeat_penalty = 1.5f});
    std::vector<int32_t> hist = {0};
    EXPECT_EQ(s.sample(l, hist), 1);
}

TEST(Sampler, SeededSamplingRepeatsAndTopKLimits) {
    std::vector<float> l(100);
    for (int i = 0; i < 100; ++i) l[i] = static_cast<float>(i % 10) * 0.3f;
    SamplerParams p{.temperature = 1.0f, .top_k = 3, .top_p = 1.f, .min_p = 0.f, .seed = 42};
    Sampler a(p), b(p);
    std::map<int32_t, int> seen;
    for (int i = 0; i < 300; ++i) {
        int32_t x = a.sample(l, {});
        EXPECT_EQ(x, b.sample(l, {}));
        seen[x]++;
    }
    // Top-3 logits are 2.7 at ids 9, 19, 29.
    for (auto [id, n] : seen) EXPECT_TRUE(id == 9 || id == 19 || id == 29) << id;
    EXPECT_EQ(seen.size(), 3u);
}

TEST(Sampler, MinPAndTopPCut) {
    std::vector<float> l = {5.f, 4.9f, 0.f, -1.f};
    Sampler mp({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .min_p = 0.5f, .seed = 1});
    Sampler tp({.temperature = 1.f, .top_k = 0, .top_p = 0.5f, .min_p = 0.f, .seed = 1});
    for (int i = 0; i < 200; ++i) {
        EXPECT_LE(mp.sample(l, {}), 1);
        EXPECT_EQ(tp.sample(l, {}), 0);
    }
}

TEST(Sampler, TopProbsSumsOverTheWholeVocabulary) {
    std::vector<float> l = {0.f, 0.f, 0.f, 0.f};
    auto t = top_probs(l, 2);
    ASSERT_EQ(t.size(), 2u);
    EXPECT_DOUBLE_EQ(t[0].second, 0.25);
    EXPECT_EQ(t[0].first, 0);
}

}  // namespace
}  // namespace moe

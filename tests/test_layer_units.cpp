// Layer kinds as units (layer_unit.h): every attention and feed-forward kind is registered with its scratch
// count, fast step and reference step, and what a runner allocates (the units' scratch, the caches, the runner's own rows) stays
// within what Runner::working_bytes and the caches count, which is what --ram-budget relies on.
#include <malloc.h>

#include "cli/commands.h"
#include "engine/forward/layer_unit.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "tests/test_support.h"

namespace moe {
namespace {

TEST(LayerUnits, EveryKindIsRegisteredOnce) {
    for (size_t k = 0; k < kAttentionKindCount; ++k) {
        const AttentionKind kind = static_cast<AttentionKind>(k);
        const AttentionKindInfo& info = attention_kind_info(kind);
        EXPECT_EQ(info.kind, kind);
        EXPECT_NE(std::string(info.name), "");
        EXPECT_NE(info.scratch_bytes, nullptr);
        EXPECT_NE(info.make, nullptr);
        EXPECT_NE(info.reference, nullptr);
        for (size_t j = 0; j < k; ++j) EXPECT_STRNE(attention_kind_info(static_cast<AttentionKind>(j)).name, info.name);
    }
    EXPECT_THROW(attention_kind_info(static_cast<AttentionKind>(kAttentionKindCount)), std::logic_error);
    for (size_t k = 0; k < kFeedForwardKindCount; ++k) {
        const FeedForwardKind kind = static_cast<FeedForwardKind>(k);
        const FeedForwardKindInfo& info = feed_forward_kind_info(kind);
        EXPECT_EQ(info.kind, kind);
        EXPECT_NE(info.scratch_bytes, nullptr);
        EXPECT_NE(info.make, nullptr);
        EXPECT_NE(info.reference, nullptr);
        for (size_t j = 0; j < k; ++j) EXPECT_STRNE(feed_forward_kind_info(static_cast<FeedForwardKind>(j)).name, info.name);
    }
    EXPECT_THROW(feed_forward_kind_info(static_cast<FeedForwardKind>(kFeedForwardKindCount)), std::logic_error);
}

uint64_t heap_in_use() {
    const struct mallinfo2 mi = mallinfo2();  // every arena, and the blocks malloc mapped on their own
    return mi.uordblks + mi.hblkhd;
}

// (cache: the KV cache's type for K and V; an f32 one adds the f16 copy its attention reads.) Returns the heap the
// runner holds beyond its caches and checkpoints, and what Runner::working_bytes counts for it.
std::pair<uint64_t, uint64_t> check_runner_memory(const std::string& arch, GgmlType cache) {
    test::TempDir dir;
    const std::string path = dir / (arch + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--arch",     arch, "--layers",        "4",      "--embd",    "128",   "--heads",
                                     "4",       "--kv-heads", "2",  "--head-dim",      "32",     "--experts", "8",     "--experts-used",
                                     "2",       "--ffn",      "96", "--vocab-builtin", "--seed", "3",         "--out", path};
    if (arch == "glm-dsa") args.insert(args.end(), {"--indexer-top-k", "4", "--indexer-types", "1010"});
    EXPECT_EQ(cli::dispatch(args), 0);
    const GgufModel file = open_gguf_model(path);
    auto model = load_model(file);
    const RunnerOptions opt{.n_ctx = 2048, .n_threads = 2, .n_batch = 64, .n_seq = 2, .cache_type_k = cache, .cache_type_v = cache};
    malloc_trim(0);

    // Each kind's unit allocates what its registration counts (no vector left out of its list; the feed-forward
    // kinds' counts also bound what they grow on first use).
    uint64_t units = 0;
    auto check_unit = [&](const auto& info, double least) {
        const uint64_t counted = info.scratch_bytes(*model, opt), before = heap_in_use();
        const auto unit = info.make(*model, opt);
        const uint64_t allocated = heap_in_use() - before;
        EXPECT_LE(allocated, counted + 4096) << info.name;
        EXPECT_GE(allocated, static_cast<uint64_t>(static_cast<double>(counted) * least)) << info.name;
        units += counted;
    };
    for (AttentionKind kind : attention_kinds_of(*model)) check_unit(attention_kind_info(kind), 0.5);
    for (FeedForwardKind kind : feed_forward_kinds_of(*model)) check_unit(feed_forward_kind_info(kind), 0.2);
    EXPECT_GT(units, 0u);

    // The whole runner, after prompts, checkpoints and a decode batch: nothing beyond what it counts (small
    // objects aside: the thread pool, the vectors' own headers).
    const uint64_t before = heap_in_use();
    Runner r(*model, opt);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 1500; ++i) prompt.push_back((i * 37 + 5) % 200);
    uint64_t caches = 0;
    for (int s = 0; s < 2; ++s) {
        r.select_sequence(s);
        r.eval(prompt);
        caches += r.sequence_cache().bytes();
        r.checkpoint();
    }
    r.eval_batch(std::vector<int>{0, 1}, std::vector<int32_t>{7, 9});
    const uint64_t used = heap_in_use() - before;
    const uint64_t counted = Runner::working_bytes(*model, opt) + caches + 2 * r.checkpoint_bytes();
    EXPECT_LE(used, counted + counted / 50 + (64u << 10)) << "counted " << counted << " bytes, of which the layer units' " << units;
    return {used - caches - 2 * r.checkpoint_bytes(), Runner::working_bytes(*model, opt)};
}

class RunnerMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(RunnerMemory, AllocatesNoMoreThanItCounts) { (void)check_runner_memory(GetParam(), GgmlType::F16); }

class RunnerMemoryF32Cache : public ::testing::TestWithParam<std::string> {};

// What an f32 cache adds beyond its own bytes (the f16 copy its attention reads) is counted too: the runner's heap
// grows by no more than its count grows.
TEST_P(RunnerMemoryF32Cache, AllocatesNoMoreThanItCounts) {
    const auto [held16, counted16] = check_runner_memory(GetParam(), GgmlType::F16);
    const auto [held32, counted32] = check_runner_memory(GetParam(), GgmlType::F32);
    EXPECT_GT(held32, held16 + (64u << 10)) << "the f16 copy of an f32 layer's 1,500 positions";
    EXPECT_LE(held32 - held16, counted32 - counted16 + (64u << 10)) << "held " << held32 << " against " << held16 << " with f16 caches";
}

INSTANTIATE_TEST_SUITE_P(Archs, RunnerMemoryF32Cache, ::testing::Values("qwen3moe", "glm-dsa", "gpt-oss"),
                         [](const auto& info) { return test::test_name(info.param); });

INSTANTIATE_TEST_SUITE_P(Archs, RunnerMemory, ::testing::Values("qwen3moe", "glm-dsa", "qwen35moe", "kimi-k3", "deepseek4", "minimax-m3", "gpt-oss"),
                         [](const auto& info) { return test::test_name(info.param); });

}  // namespace
}  // namespace moe

// A disk error under batched decode: when one slot's next token needs an expert whose bytes cannot be read, that
// request fails with the read error and the slot beside it keeps generating the tokens it generates alone (on
// a recurrent model too, whose state the failed step had already moved).
#include <algorithm>
#include <atomic>
#include <cerrno>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "engine/server/generation.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/expert_faults.h"
#include "tests/test_support.h"

namespace moe {
namespace {

class GenerationFaults : public ::testing::TestWithParam<std::string> {};

// qwen35moe, kimi-k3: the failed step had advanced B's recurrent state; it is rebuilt from B's newest snapshot.
TEST_P(GenerationFaults, AnUnreadableExpertFailsOnlyTheRequestThatNeedsIt) {
    test::TempDir dir;
    const std::string path = dir / "m.gguf";
    ASSERT_EQ(cli::dispatch({"mkmodel", "--arch",     GetParam(), "--layers",        "2",      "--embd",    "128",    "--heads",
                             "2",       "--kv-heads", "1",        "--head-dim",      "32",     "--experts", "32",     "--experts-used",
                             "2",       "--ffn",      "128",      "--vocab-builtin", "--type", "q8_0",      "--seed", "4",
                             "--out",   path}),
              0);
    GgufModel file = open_gguf_model(path);
    auto ram = load_model(file);
    const uint32_t E = ram->hp.moe.n_expert;
    const std::vector<int32_t> prompt_a = {11, 57, 203, 98}, prompt_b = {200, 7, 150, 42, 9};
    const int steps_a = 6, steps_b = 10;
    const test::Alone a = test::run_alone(*ram, prompt_a, steps_a), b = test::run_alone(*ram, prompt_b, steps_b);
    // Every read touching the inside of an expert A needs only while decoding (and B never) fails, as a bad
    // sector would.
    const auto fault = test::fault_only_a_needs(file, a, b, E);
    ASSERT_TRUE(fault) << "no expert separates the two requests: change the prompts";
    const uint64_t lo = fault->lo, hi = fault->hi;
    StreamingOptions so;
    so.cache_bytes = model_facts(file).expert_bytes / 2;
    so.read_size = 64 << 10;
    so.io.queue_depth = 8;
    so.io.fault = [lo, hi](uint64_t off, uint32_t len) { return off < hi && off + len > lo ? -EIO : 0; };
    auto streamed = load_model(file, {.experts = cli::streaming_experts(so)});

    Generator g(*streamed, Tokenizer::from_gguf(file.meta()), {.n_ctx = 128, .n_threads = 1, .n_seq = 3}, 4);
    // A first request keeps the worker busy for its prompt, so that A and B are admitted together and decode
    // in one batch from their first token.
    GenerationRequest first;
    for (int i = 0; i < 120; ++i) first.prompt.push_back(static_cast<int32_t>((i * 37 + 5) % 250));
    first.max_tokens = 1;
    auto f0 = g.submit(std::move(first));
    GenerationRequest ra, rb;
    ra.prompt = prompt_a;
    ra.max_tokens = steps_a;
    ra.ignore_eos = true;
    rb.prompt = prompt_b;
    rb.max_tokens = steps_b;
    rb.ignore_eos = true;
    auto fa = g.submit(std::move(ra));
    auto fb = g.submit(std::move(rb));
    ASSERT_TRUE(fa && fb);
    const GenerationResult got_a = fa->get(), got_b = fb->get();
    (void)f0->get();  // its prompt may touch the bad expert too: only its own result would say so
    EXPECT_EQ(got_a.finish_reason, FinishReason::Error);
    EXPECT_NE(got_a.error.find("Input/output error"), std::string::npos) << got_a.error;
    EXPECT_EQ(got_b.finish_reason, FinishReason::Length) << got_b.error;
    EXPECT_EQ(got_b.tokens, b.tokens);
    // The engine goes on: the same request again, the fault gone from B's path, answers as before.
    GenerationRequest again;
    again.prompt = prompt_b;
    again.max_tokens = steps_b;
    again.ignore_eos = true;
    EXPECT_EQ(g.submit(std::move(again))->get().tokens, b.tokens);
}

INSTANTIATE_TEST_SUITE_P(Archs, GenerationFaults, ::testing::Values("qwen3moe", "qwen35moe", "kimi-k3"), [](const auto& info) {
    std::string n = info.param;
    std::replace(n.begin(), n.end(), '-', '_');
    return n;
});

}  // namespace
}  // namespace moe

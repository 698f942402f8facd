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
#include "tests/test_support.h"

namespace moe {
namespace {

int32_t argmax_of(const float* l, int n) { return static_cast<int32_t>(std::max_element(l, l + n) - l); }

struct Alone {
    std::vector<uint64_t> prompt_selections, decode_selections;  // [layer * n_expert + expert]
    std::vector<int32_t> tokens;                                  // greedy, as Generator draws them
};

// Prompt, then `steps` greedy tokens evaluated one by one (Generator evaluates each drawn token but the last).
Alone run_alone(const Model& m, const std::vector<int32_t>& prompt, int steps) {
    Runner r(m, {.n_ctx = 128, .n_threads = 1});
    Alone a;
    r.eval(prompt);
    a.prompt_selections = r.expert_selections();
    for (int i = 0; i < steps; ++i) {
        const int32_t next = argmax_of(r.logits(), r.n_vocab());
        a.tokens.push_back(next);
        if (i + 1 < steps) r.eval(std::span<const int32_t>(&next, 1));
    }
    a.decode_selections = r.expert_selections();
    for (size_t i = 0; i < a.decode_selections.size(); ++i) a.decode_selections[i] -= a.prompt_selections[i];
    return a;
}

class GenerationFaults : public ::testing::TestWithParam<std::string> {};

// qwen35moe: the failed step had advanced B's recurrent state; it is rebuilt from B's newest snapshot.
TEST_P(GenerationFaults, AnUnreadableExpertFailsOnlyTheRequestThatNeedsIt) {
    test::TempDir dir;
    const std::string path = dir / "m.gguf";
    ASSERT_EQ(cli::dispatch({"mkmodel", "--arch", GetParam(), "--layers", "2", "--embd", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--experts", "32",
                             "--experts-used", "2", "--ffn", "128", "--vocab-builtin", "--type", "q8_0", "--seed", "4", "--out", path}),
              0);
    GgufModel file = open_gguf_model(path);
    auto ram = load_model(file);
    const uint32_t E = ram->hp.moe.n_expert;
    const std::vector<int32_t> prompt_a = {11, 57, 203, 98}, prompt_b = {200, 7, 150, 42, 9};
    const int steps_a = 6, steps_b = 10;
    const Alone a = run_alone(*ram, prompt_a, steps_a), b = run_alone(*ram, prompt_b, steps_b);
    // An expert A needs only while decoding, and B never.
    int bad = -1;
    for (size_t i = 0; i < a.decode_selections.size() && bad < 0; ++i)
        if (a.decode_selections[i] && !a.prompt_selections[i] && !b.prompt_selections[i] && !b.decode_selections[i]) bad = static_cast<int>(i);
    ASSERT_GE(bad, 0) << "no expert separates the two requests: change the prompts";
    const uint32_t layer = static_cast<uint32_t>(bad) / E, expert = static_cast<uint32_t>(bad) % E;
    // Every read touching the inside of that expert's gate matrix fails, as a bad sector would; the 4 KiB
    // blocks it shares with its neighbours (aligned direct reads of theirs touch them) stay readable.
    const auto* gate = file.find_tensor("blk." + std::to_string(layer) + ".ffn_gate_exps.weight");
    ASSERT_NE(gate, nullptr);
    const uint64_t slice = gate->nbytes / E, start = gate->file_offset + expert * slice;
    const uint64_t lo = (start + 4095) / 4096 * 4096, hi = (start + slice) / 4096 * 4096;
    ASSERT_LT(lo, hi) << "the expert's slice holds no whole block";
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
    EXPECT_EQ(got_a.finish_reason, "error");
    EXPECT_NE(got_a.error.find("Input/output error"), std::string::npos) << got_a.error;
    EXPECT_EQ(got_b.finish_reason, "length") << got_b.error;
    EXPECT_EQ(got_b.tokens, b.tokens);
    // The engine goes on: the same request again, the fault gone from B's path, answers as before.
    GenerationRequest again;
    again.prompt = prompt_b;
    again.max_tokens = steps_b;
    again.ignore_eos = true;
    EXPECT_EQ(g.submit(std::move(again))->get().tokens, b.tokens);
}

INSTANTIATE_TEST_SUITE_P(Archs, GenerationFaults, ::testing::Values("qwen3moe", "qwen35moe"));

}  // namespace
}  // namespace moe

// Greedy decoding one token per step, and comparing two decodings bit for bit: what the speculative tests
// (lookup drafts, NextN drafts) hold their drafted decodings to.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "engine/forward/runner.h"
#include "engine/forward/speculative.h"
#include "engine/sampler/sampler.h"

namespace moe::test {

struct Decoded {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;  // the row each token was chosen from
};

// Greedy decoding without drafts, one token per step.
inline Decoded decode_plain(const Model& m, const RunnerOptions& ro, const std::vector<int32_t>& prompt, int n) {
    Runner r(m, ro);
    r.eval(prompt);
    Decoded d;
    for (int i = 0; i < n; ++i) {
        const std::span<const float> row(r.logits(), static_cast<size_t>(r.n_vocab()));
        d.tokens.push_back(argmax(row));
        d.logits.emplace_back(row.begin(), row.end());
        if (i + 1 < n) r.eval(std::span<const int32_t>(&d.tokens.back(), 1));
    }
    return d;
}

inline void expect_same(const Decoded& want, const Decoded& got, const std::string& what) {
    ASSERT_EQ(want.tokens, got.tokens) << what;
    for (size_t i = 0; i < want.logits.size(); ++i)
        ASSERT_EQ(0, std::memcmp(want.logits[i].data(), got.logits[i].data(), want.logits[i].size() * sizeof(float)))
            << what << ": logits of token " << i << " differ from decoding without drafts";
}

// Greedy decoding on `r` after `prompt` (evaluated here), n tokens, each step taken by
// step(sampler, history, room, emit) -> StepOutcome (room: drafts that still fit in n).
template <class Step>
Decoded decode_steps(Runner& r, const std::vector<int32_t>& prompt, int n, Step step) {
    Sampler s({.temperature = 0.f});
    r.eval(prompt);
    Decoded d;
    std::vector<int32_t> history = prompt;
    const EmitToken emit = [&](int32_t t, std::span<const float> row) {
        d.tokens.push_back(t);
        d.logits.emplace_back(row.begin(), row.end());
        return static_cast<int>(d.tokens.size()) < n;
    };
    history.push_back(s.sample({r.logits(), static_cast<size_t>(r.n_vocab())}, history));
    bool more = emit(history.back(), {r.logits(), static_cast<size_t>(r.n_vocab())});
    while (more) more = !step(s, history, n - static_cast<int>(d.tokens.size()) - 1, emit).stopped;
    return d;
}

// Greedy decoding with drafts from `draft_for(history)` verified each step.
template <class DraftFn>
Decoded decode_drafted(const Model& m, const RunnerOptions& ro, const std::vector<int32_t>& prompt, int n, DraftFn draft_for, int* kept) {
    Runner r(m, ro);
    return decode_steps(r, prompt, n, [&](Sampler& s, std::vector<int32_t>& history, int room, const EmitToken& emit) {
        std::vector<int32_t> drafts = draft_for(history);
        drafts.resize(std::min<size_t>(drafts.size(), static_cast<size_t>(room)));
        const StepOutcome o = speculative_step(r, s, history, drafts, emit);
        *kept += o.accepted;
        return o;
    });
}

}  // namespace moe::test

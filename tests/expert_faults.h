// For disk-fault tests that must hit exactly one request: what a prompt routes to when decoded alone, and the
// file bytes of an expert that one request needs while decoding and another never does.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/forward/runner.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/sampler/sampler.h"

namespace moe::test {

struct Alone {
    std::vector<uint64_t> prompt_selections, decode_selections;  // [layer * n_expert + expert]
    std::vector<int32_t> tokens;                                 // greedy, as Generator draws them
};

// Prompt, then `steps` greedy tokens evaluated one by one (Generator evaluates each drawn token but the last).
inline Alone run_alone(const Model& m, const std::vector<int32_t>& prompt, int steps) {
    Runner r(m, {.n_ctx = 128, .n_threads = 1});
    Alone a;
    r.eval(prompt);
    a.prompt_selections = r.expert_selections();
    for (int i = 0; i < steps; ++i) {
        const int32_t next = argmax({r.logits(), static_cast<size_t>(r.n_vocab())});
        a.tokens.push_back(next);
        if (i + 1 < steps) r.eval(std::span<const int32_t>(&next, 1));
    }
    a.decode_selections = r.expert_selections();
    for (size_t i = 0; i < a.decode_selections.size(); ++i) a.decode_selections[i] -= a.prompt_selections[i];
    return a;
}

// An expert `a` chooses only while decoding and `b` never, and the bytes inside its gate matrix in the file:
// whole 4 KiB blocks, so aligned direct reads of its neighbours (which share the boundary blocks) stay readable.
struct ExpertFault {
    uint32_t layer = 0, expert = 0;
    uint64_t lo = 0, hi = 0;  // [lo, hi) in the GGUF
};
inline std::optional<ExpertFault> fault_only_a_needs(const GgufModel& file, const Alone& a, const Alone& b, uint32_t n_expert) {
    for (size_t i = 0; i < a.decode_selections.size(); ++i) {
        if (!a.decode_selections[i] || a.prompt_selections[i] || b.prompt_selections[i] || b.decode_selections[i]) continue;
        ExpertFault f{static_cast<uint32_t>(i / n_expert), static_cast<uint32_t>(i % n_expert)};
        const auto* gate = file.find_tensor("blk." + std::to_string(f.layer) + ".ffn_gate_exps.weight");
        if (!gate) return std::nullopt;
        const uint64_t slice = gate->nbytes / n_expert, start = gate->file_offset + f.expert * slice;
        f.lo = (start + 4095) / 4096 * 4096;
        f.hi = (start + slice) / 4096 * 4096;
        if (f.lo < f.hi) return f;
    }
    return std::nullopt;
}

}  // namespace moe::test

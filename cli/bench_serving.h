// The serving part of `moestream bench`: decode steps batched over parallel slots (generated tok/s summed over
// slots and expert bytes read per generated token, each against one slot), and the cost of constrained
// decoding's vocabulary mask per token against the time of a decode step.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/engine_setup.h"

namespace moe::cli {

// For each slot count: a fresh runner with that many sequences, a prompt per sequence, then n_gen batched
// decode steps (greedy). The engine's expert cache is shared across the counts (run the smallest first).
nlohmann::json bench_parallel_slots(const LoadedEngine& le, int threads, uint32_t n_ctx, int n_prompt, int n_gen, const std::vector<int>& slots);

// Full vocabulary masks (a trie walk per step) at the states of a JSON-schema output, in ms per mask, and as a
// share of `decode_ms_per_token`. The model's own vocabulary: its size is in the result.
nlohmann::json bench_grammar_mask(const GgufFile& vocab_source, double decode_ms_per_token);

}  // namespace moe::cli

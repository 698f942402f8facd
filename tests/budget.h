// --ram-budget for tests that want a given expert cache: the budget is the whole process, so the engine's own
// working memory (cli::engine_working_bytes) is added to what the test means to leave for weights, KV and cache.
#pragma once
#include <cstdint>
#include <string>

#include "cli/engine_setup.h"

namespace moe::test {

inline std::string budget_plus_working(const std::string& model, uint64_t bytes, uint32_t n_ctx, int n_seq = 1) {
    return std::to_string(bytes + cli::engine_working_bytes(open_gguf_model(model), n_ctx, n_seq));
}

}  // namespace moe::test

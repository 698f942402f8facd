// --ram-budget for tests that want a given expert cache: the budget is the whole process, so the engine's own
// working memory (cli::engine_working_bytes) is added to what the test means to leave for weights, KV and cache.
#pragma once
#include <cstdint>
#include <string>

#include "cli/engine_setup.h"

namespace moe::test {

// The threads the tested command runs (test::Server: kServeThreads; run and bench: their default 2).
inline std::string budget_plus_working(const std::string& model, uint64_t bytes, uint32_t n_ctx, int n_seq = 1, int n_threads = 2) {
    return std::to_string(bytes + cli::engine_working_bytes(open_gguf_model(model), n_ctx, n_seq, n_threads));
}

// test::Server's --threads.
constexpr int kServeThreads = 1;

}  // namespace moe::test

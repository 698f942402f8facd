// libFuzzer target for routing traces (files a user passes to cache-sim and profile, and that a crash or a full
// disk can leave cut): any bytes must be refused with RoutingTraceError or parse into a trace that the
// simulator, the optimal bound and the workload measures then replay without crashing or reading outside it.
// ROUTING_TRACE_FUZZ_WRITE_SEED=DIR writes the seed corpus's valid trace and exits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <span>
#include <unistd.h>

#include "engine/runtime/cache_sim.h"
#include "engine/runtime/routing_trace.h"

namespace {

void write_seed(const std::string& dir) {
    moe::RoutingTraceHeader h;
    h.arch = "qwen3moe";
    h.n_layer = 3;
    h.n_expert = 8;
    h.n_expert_used = 2;
    h.model_hash = 42;
    h.slot_bytes = 4096;
    h.cache_bytes = 4 * 4096;
    h.policy = "lru-freq";
    h.prefetch_layers = 1;
    h.prefetch_cap = 65536;
    h.load_bytes.assign(24, 4096);
    for (int e = 0; e < 8; ++e) h.load_bytes[e] = 0;
    const std::string path = dir + "/valid";
    ::unlink(path.c_str());
    moe::RoutingTraceWriter w(path, h);
    for (int step = 0; step < 4; ++step) {
        w.begin_step(step == 0 ? 2 : 1);
        for (uint32_t l = 1; l < 3; ++l) {
            const int ex[4] = {step % 8, (step + static_cast<int>(l)) % 8, (step + 3) % 8, (step + 5) % 8};
            const float wt[4] = {0.6f, 0.4f, 0.7f, 0.3f};
            w.route(l, step == 0 ? 2 : 1, 2, ex, wt);
            const uint32_t set[2] = {static_cast<uint32_t>(std::min(ex[0], ex[1])), static_cast<uint32_t>(std::max(ex[0], ex[1]))};
            const uint8_t hit[2] = {static_cast<uint8_t>(step > 1), 3};
            w.demand(l, std::span<const uint32_t>(set, set[0] == set[1] ? 1 : 2), std::span<const uint8_t>(hit, set[0] == set[1] ? 1 : 2));
            if (l == 1) {
                const uint32_t predicted[2] = {1, 6};
                const uint8_t issued[2] = {1, 0};
                w.prefetch(2, predicted, issued);
            }
            w.release(l, set[1]);
            w.release(l, set[0]);
        }
        w.end_step(100000, 20000);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bool seeded = [] {
        if (const char* dir = std::getenv("ROUTING_TRACE_FUZZ_WRITE_SEED")) {
            write_seed(dir);
            std::exit(0);
        }
        return true;
    }();
    (void)seeded;
    moe::RoutingTrace t;
    try {
        t = moe::parse_routing_trace(std::span<const uint8_t>(data, size), "fuzz");
    } catch (const moe::RoutingTraceError&) { return 0; }
    // Budgets of a few slots (never sized from the header alone: slot_bytes may be 1).
    for (uint64_t slots : {1, 3, 9}) {
        const uint64_t budget = t.header.slot_bytes * slots;
        moe::simulate_engine_cache(t, moe::EvictionPolicy::Lru, budget);
        moe::simulate_engine_cache(t, moe::EvictionPolicy::LruFrequency, budget, false);
        moe::simulate_engine_cache(t, moe::EvictionPolicy::LruFrequencyGuard, budget);
        moe::simulate_belady(t, budget);
    }
    moe::recorded_cache(t);
    moe::measure_workload(t);
    return 0;
}

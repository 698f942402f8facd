// Replays routing traces (routing_trace.h) against the expert cache at any budget: the engine's own eviction
// policies with its admission and prefetch rules (cache_policy.h: the eviction rule StreamingExpertSource runs), and
// Belady's MIN (evict the expert used farthest in the future, no prefetch) as the bound no policy can beat.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/cache_policy.h"
#include "engine/runtime/routing_trace.h"

namespace moe {

struct CacheSimResult {
    std::string policy;  // "lru", "lru+frequency", "belady"
    uint64_t budget_bytes = 0, slots = 0;
    uint64_t tokens = 0, lookups = 0, hits = 0;
    uint64_t bytes_read = 0;  // demand misses and prefetches
    uint64_t prefetch_issued = 0, prefetch_used = 0, prefetch_unused_bytes = 0;
    // The same over single-token (decode) steps only: what generation speed depends on.
    uint64_t decode_tokens = 0, decode_lookups = 0, decode_hits = 0, decode_bytes = 0;
    // bytes_read per layer (simulate_engine_cache only): which layers the cache fails.
    std::vector<uint64_t> layer_bytes_read;

    double hit_rate() const { return lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0; }
    // Hits on experts kept from an earlier use, not brought in by a prefetch: what an eviction policy earns,
    // and what Belady's MIN (which does not prefetch) bounds.
    uint64_t retained_hits() const { return hits - prefetch_used; }
    double bytes_per_token() const { return tokens ? static_cast<double>(bytes_read) / static_cast<double>(tokens) : 0; }
    double decode_bytes_per_token() const { return decode_tokens ? static_cast<double>(decode_bytes) / static_cast<double>(decode_tokens) : 0; }
};

// The engine's cache at `budget_bytes` (slots of the trace's slot size). prefetch: issue the trace's
// predictions under the engine's rules (false: demand reads only).
CacheSimResult simulate_engine_cache(const RoutingTrace& trace, EvictionPolicy policy, uint64_t budget_bytes, bool prefetch = true);
// The trace with the given layers' records removed (drop[layer]): the cache as it would run were those layers'
// experts held elsewhere (a GPU).
RoutingTrace without_layers(const RoutingTrace& trace, const std::vector<bool>& drop);

// Belady's MIN over the demand lookups at the same slot count: the most hits any policy can get. Steps before
// `count_from` run (they fill the cache) but are not counted.
CacheSimResult simulate_belady(const RoutingTrace& trace, uint64_t budget_bytes, size_t count_from = 0);

// What the engine itself saw while recording (the 'D' records' hit flags, the header's load sizes), from step
// `count_from` on.
CacheSimResult recorded_cache(const RoutingTrace& trace, size_t count_from = 0);

// A recording's recent steps replayed while it goes on (the server's engine view): the engine's recorded hits
// beside MIN's at the recording's own budget, over the later half of the steps (the earlier half warms MIN's
// cache, as the engine's was warm). Empty (steps 0) below kMinSteps.
struct LiveCacheBound {
    static constexpr size_t kMinSteps = 16;
    uint64_t steps = 0, tokens = 0;  // counted
    CacheSimResult engine, belady;
};
LiveCacheBound live_cache_bound(const RoutingTrace& recent);

struct RoutingWorkload {
    uint64_t steps = 0, tokens = 0, decode_steps = 0;
    double hot10_share = 0;          // share of routings that go to each layer's hottest 10% of experts
    double consecutive_overlap = 0;  // share of a token's experts its predecessor also chose (same layer)
    double distant_overlap = 0;      // ... that the token kDistantTokens before it chose: what is left of locality
    static constexpr size_t kDistantTokens = 16;
    double compute_ns_per_token = 0;  // decode steps' wall time minus time blocked on reads, per token
    uint64_t total_expert_bytes = 0;  // every routed expert once (what "100%" of a budget means)
};
RoutingWorkload measure_workload(const RoutingTrace& trace);

}  // namespace moe

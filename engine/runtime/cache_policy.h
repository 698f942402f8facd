// The expert cache's eviction rule, shared by the engine (expert_cache.cpp) and the simulator (cache_sim.cpp)
// so that a replayed trace is judged by the rule the engine runs, not by a copy of it.
#pragma once
#include <cstdint>

namespace moe {

enum class EvictionPolicy { Lru, LruFrequency };
inline const char* policy_name(EvictionPolicy p) { return p == EvictionPolicy::Lru ? "lru" : "lru+frequency"; }

constexpr uint64_t kFrequencyDecayEvery = 4096;  // layer requests between halvings of the use counts
constexpr int kFrequencyWindow = 8;              // LRU-tail candidates the frequency policy chooses among

// The slot to evict, walking the LRU list from its tail (prev(s) goes towards the head): among the first
// `window` evictable slots (1 for LRU, kFrequencyWindow for LRU+frequency) the least used, the oldest on ties.
// -1 when no slot can go.
template <class Prev, class Evictable, class Uses>
int pick_victim(EvictionPolicy policy, int tail, Prev prev, Evictable evictable, Uses uses) {
    const int window = policy == EvictionPolicy::Lru ? 1 : kFrequencyWindow;
    int best = -1, seen = 0;
    for (int s = tail; s >= 0 && seen < window; s = prev(s)) {
        if (!evictable(s)) continue;
        ++seen;
        if (best < 0 || uses(s) < uses(best)) best = s;
    }
    return best;
}

}  // namespace moe

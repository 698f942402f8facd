// The expert cache's eviction rule, shared by the engine (expert_cache.cpp) and the simulator (cache_sim.cpp)
// so that a replayed trace is judged by the rule the engine runs, not by a copy of it.
#pragma once
#include <cstdint>
#include <string_view>

namespace moe {

// LruFrequencyGuard: LruFrequency with the insertion rule below.
enum class EvictionPolicy { Lru, LruFrequency, LruFrequencyGuard };
constexpr EvictionPolicy kDefaultEvictionPolicy = EvictionPolicy::LruFrequencyGuard;
inline const char* policy_name(EvictionPolicy p) {
    switch (p) {
        case EvictionPolicy::Lru: return "lru";
        case EvictionPolicy::LruFrequency: return "lru+frequency";
        case EvictionPolicy::LruFrequencyGuard: return "lru+freq+guard";
    }
    return "?";
}
// The option's spelling (--policy, the routing trace's header).
inline const char* policy_flag(EvictionPolicy p) {
    switch (p) {
        case EvictionPolicy::Lru: return "lru";
        case EvictionPolicy::LruFrequency: return "lru-freq";
        case EvictionPolicy::LruFrequencyGuard: return "lru-freq-guard";
    }
    return "?";
}
inline bool parse_policy_flag(std::string_view flag, EvictionPolicy& out) {
    for (EvictionPolicy p : {EvictionPolicy::Lru, EvictionPolicy::LruFrequency, EvictionPolicy::LruFrequencyGuard})
        if (flag == policy_flag(p)) return out = p, true;
    return false;
}

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

// Whether a prefetch may take the place of `victim_uses`' expert (when no slot is free). LRU admits every
// prediction; LRU+frequency only one the router has chosen more often than the expert it would evict, so a
// guess does not push out an expert that is used more (cache-sim: 25-60% fewer bytes read per token at the
// same budgets on skewed and unskewed traces; 1.3-1.7x tok/s I/O-bound, docs/streaming.md).
inline bool prefetch_admits(EvictionPolicy policy, uint32_t candidate_uses, uint32_t victim_uses) {
    return policy == EvictionPolicy::Lru || candidate_uses > victim_uses;
}

// Where an expert loaded on a miss goes in the LRU list once computed. A decode step (one forward pass through
// the MoE layers) that asks for more experts than the cache has slots makes LRU evict each expert shortly before
// its next use: decode steps route alike, so the lookups go round a loop longer than the cache and almost none
// hit (cache-sim on a greedy 12-layer trace at 10% of the experts: 0-5% hits where Belady's MIN gets 75%).
// Under LruFrequencyGuard a miss then goes in at the LRU end instead (LRU insertion, Qureshi et al., "Adaptive
// Insertion Policies for High Performance Caching", ISCA 2007): it is the next to go unless the router asks for
// it again first, so the experts already held stay and serve hits; one miss in kBimodalEvery still goes to the
// front so the kept set follows the routing as it drifts. The rule acts when the last two steps were decode
// steps (at most kDecodeTokens tokens: slots, drafts) that both overflowed; a prompt chunk asks for many experts
// once, and the decode steps after a prompt must not keep the prompt's set. Steps that fit keep plain LRU
// insertion. The engine and the simulator feed it the same calls in the same order.
class InsertionRule {
public:
    static constexpr uint64_t kBimodalEvery = 32;
    static constexpr uint32_t kDecodeTokens = 64;

    // Each forward step as it starts, with its token count (the routing trace's steps).
    void begin_step(uint32_t n_tokens) {
        last_[1] = last_[0];
        last_[0] = current_;
        current_ = {n_tokens, 0};
    }
    // Each layer request with its number of experts (pinned ones left out).
    void on_request(size_t experts) { current_.lookups += experts; }
    // For each miss as its slot is claimed: whether the slot goes to the LRU end when released.
    bool miss_to_tail(EvictionPolicy policy, size_t usable_slots) {
        if (policy != EvictionPolicy::LruFrequencyGuard) return false;
        for (const Step& s : last_)
            if (s.tokens == 0 || s.tokens > kDecodeTokens || s.lookups <= usable_slots) return false;
        return ++misses_ % kBimodalEvery != 0;
    }

private:
    struct Step {
        uint32_t tokens = 0;
        uint64_t lookups = 0;
    };
    Step current_, last_[2];
    uint64_t misses_ = 0;
};

}  // namespace moe

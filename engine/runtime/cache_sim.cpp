#include "engine/runtime/cache_sim.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <set>
#include <unordered_map>

namespace moe {
namespace {

// The experts a layer asked the cache for in one step: the 'D' record when the engine streamed, else the union
// of the 'R' record's choices (the same set: request() is given each chosen expert once, ascending).
std::vector<uint32_t> demand_set(const TraceLayerEvent& ev, uint32_t n_expert) {
    std::vector<uint32_t> out;
    if (ev.kind == 'D') {
        out.assign(ev.experts.begin(), ev.experts.end());
        return out;
    }
    std::vector<char> seen(n_expert, 0);
    for (uint16_t e : ev.experts) seen[e] = 1;
    for (uint32_t e = 0; e < n_expert; ++e)
        if (seen[e]) out.push_back(e);
    return out;
}

// Whether a step has 'D' records (then its 'R' records are not lookups of their own).
bool has_demand(const TraceStep& s) {
    return std::any_of(s.events.begin(), s.events.end(), [](const TraceLayerEvent& e) { return e.kind == 'D'; });
}

// The engine's cache (expert_cache.cpp) reduced to its decisions: slots, the LRU list, use counts, pins,
// protected prefetches. Loads complete at once (the engine's are in flight while their layer computes; what
// is decided meanwhile is the same).
class EngineCacheModel {
public:
    EngineCacheModel(const RoutingTraceHeader& h, EvictionPolicy policy, uint64_t budget)
        : h_(h), policy_(policy), slots_(h.slot_bytes ? budget / h.slot_bytes : 0), freq_(static_cast<size_t>(h.n_layer) * h.n_expert, 0) {
        for (size_t i = slots_.size(); i-- > 0;) free_.push_back(static_cast<int>(i));
    }
    size_t slot_count() const { return slots_.size(); }
    void begin_step(uint32_t n_tokens) { insertion_.begin_step(n_tokens); }

    // request(): hits, misses; every chosen expert pinned until release_layer().
    void request(uint32_t layer, const std::vector<uint32_t>& experts, bool decode, CacheSimResult& r) {
        for (auto& s : slots_)
            if (s.protect && s.layer == layer && std::find(experts.begin(), experts.end(), s.expert) == experts.end()) s.protect = false;
        if (++requests_ % kFrequencyDecayEvery == 0)
            for (auto& f : freq_) f >>= 1;
        insertion_.on_request(experts.size());
        loading_ = 0;
        for (uint32_t e : experts) {
            const int64_t key = key_of(layer, e);
            freq_[static_cast<size_t>(key)]++;
            r.lookups++;
            if (decode) r.decode_lookups++;
            auto it = map_.find(key);
            if (it != map_.end()) {
                Slot& s = slots_[it->second];
                if (s.prefetched) r.prefetch_used++;
                s.prefetched = s.protect = s.to_tail = false;
                s.pins++;
                lru_remove(it->second);
                r.hits++;
                if (decode) r.decode_hits++;
                continue;
            }
            const uint64_t bytes = h_.load(layer, e);
            r.bytes_read += bytes;
            r.layer_bytes_read[layer] += bytes;
            if (decode) r.decode_bytes += bytes;
            loading_ += bytes;
            const int si = allocate();
            if (si < 0) deferred_.push_back(key);  // loaded when a slot frees (release_layer)
            else claim(si, layer, e, true);
        }
    }

    // prefetch(): the engine's admission: stop when the loads in flight reach the cap or no slot can go.
    void prefetch(uint32_t layer, const std::vector<uint16_t>& predicted, bool decode, CacheSimResult& r) {
        for (uint16_t e : predicted) {
            if (loading_ >= h_.prefetch_cap) break;
            if (map_.count(key_of(layer, e))) continue;
            if (free_.empty()) {
                const int v = victim();
                if (v < 0) break;
                if (!prefetch_admits(policy_, freq_[static_cast<size_t>(key_of(layer, e))], freq_[static_cast<size_t>(slots_[v].key)])) continue;
            }
            const int si = allocate();
            if (si < 0) break;
            claim(si, layer, e, false);
            const uint64_t bytes = h_.load(layer, e);
            loading_ += bytes;
            r.bytes_read += bytes;
            r.layer_bytes_read[layer] += bytes;
            if (decode) r.decode_bytes += bytes;
            r.prefetch_issued++;
        }
    }

    // The layer's experts computed, in this order: each unpinned to the front of the LRU list, and deferred
    // loads started in the slots that frees. An expert still deferred when its turn comes means the engine
    // found only protected prefetches in the way and gave them up (next_ready).
    void release_layer(uint32_t layer, const std::vector<uint32_t>& order) {
        for (uint32_t e : order) {
            const int64_t key = key_of(layer, e);
            if (std::find(deferred_.begin(), deferred_.end(), key) != deferred_.end()) {
                for (auto& s : slots_) s.protect = false;
                start_deferred();
            }
            auto it = map_.find(key);
            if (it == map_.end()) continue;
            Slot& s = slots_[it->second];
            if (s.pins > 0 && --s.pins == 0) {
                if (s.to_tail) lru_push_back(it->second);
                else lru_push_front(it->second);
            }
            start_deferred();
        }
        deferred_.clear();  // none left in practice; a trace cut mid-layer must not carry them on
    }

    // Prefetched experts never asked for: evicted so, or still so at the end (their bytes were read for nothing).
    uint64_t unused_prefetch_bytes() const {
        uint64_t b = unused_evicted_;
        for (const auto& s : slots_)
            if (s.key >= 0 && s.prefetched) b += h_.load(s.layer, s.expert);
        return b;
    }

private:
    struct Slot {
        int64_t key = -1;
        uint32_t layer = 0, expert = 0;
        int pins = 0;
        bool prefetched = false, protect = false, in_list = false;
        bool to_tail = false;  // a miss the insertion rule puts at the LRU end on release
        int prev = -1, next = -1;
    };
    int64_t key_of(uint32_t l, uint32_t e) const { return static_cast<int64_t>(l) * h_.n_expert + e; }
    void lru_remove(int s) {
        Slot& x = slots_[s];
        if (!x.in_list) return;
        if (x.prev >= 0) slots_[x.prev].next = x.next;
        else head_ = x.next;
        if (x.next >= 0) slots_[x.next].prev = x.prev;
        else tail_ = x.prev;
        x.prev = x.next = -1;
        x.in_list = false;
    }
    void lru_push_front(int s) {
        lru_remove(s);
        Slot& x = slots_[s];
        x.next = head_;
        if (head_ >= 0) slots_[head_].prev = s;
        head_ = s;
        if (tail_ < 0) tail_ = s;
        x.in_list = true;
    }
    void lru_push_back(int s) {
        lru_remove(s);
        Slot& x = slots_[s];
        x.prev = tail_;
        if (tail_ >= 0) slots_[tail_].next = s;
        tail_ = s;
        if (head_ < 0) head_ = s;
        x.in_list = true;
    }
    int victim() const {
        return pick_victim(
            policy_, tail_, [&](int s) { return slots_[s].prev; }, [&](int s) { return slots_[s].pins == 0 && !slots_[s].protect; },
            [&](int s) { return freq_[static_cast<size_t>(slots_[s].key)]; });
    }
    int allocate() {
        if (!free_.empty()) {
            const int s = free_.back();
            free_.pop_back();
            return s;
        }
        const int best = victim();
        if (best < 0) return -1;
        lru_remove(best);
        map_.erase(slots_[best].key);
        if (slots_[best].prefetched) unused_evicted_ += h_.load(slots_[best].layer, slots_[best].expert);
        slots_[best].key = -1;
        return best;
    }
    void start_deferred() {
        while (!deferred_.empty()) {
            const int si = allocate();
            if (si < 0) return;
            const int64_t key = deferred_.front();
            deferred_.erase(deferred_.begin());
            claim(si, static_cast<uint32_t>(key / h_.n_expert), static_cast<uint32_t>(key % h_.n_expert), true);
        }
    }
    void claim(int si, uint32_t layer, uint32_t e, bool demand) {
        Slot& s = slots_[si];
        s.key = key_of(layer, e);
        s.layer = layer;
        s.expert = e;
        s.pins = demand ? 1 : 0;
        s.prefetched = s.protect = !demand;
        s.to_tail = demand && insertion_.miss_to_tail(policy_, slots_.size());
        map_[s.key] = si;
        if (!demand) lru_push_front(si);  // in the list once loaded; protected until its layer runs
    }

    const RoutingTraceHeader& h_;
    EvictionPolicy policy_;
    std::vector<Slot> slots_;
    std::vector<int> free_;
    std::vector<int64_t> deferred_;  // demanded, waiting for a slot
    std::unordered_map<int64_t, int> map_;
    std::vector<uint32_t> freq_;
    uint64_t requests_ = 0, loading_ = 0;
    int head_ = -1, tail_ = -1;
    InsertionRule insertion_;
    uint64_t unused_evicted_ = 0;  // prefetched bytes evicted before any request
};

}  // namespace

CacheSimResult simulate_engine_cache(const RoutingTrace& trace, EvictionPolicy policy, uint64_t budget_bytes, bool prefetch) {
    const RoutingTraceHeader& h = trace.header;
    CacheSimResult r;
    r.policy = policy_name(policy);
    r.budget_bytes = budget_bytes;
    EngineCacheModel cache(h, policy, budget_bytes);
    r.slots = cache.slot_count();
    r.layer_bytes_read.assign(h.n_layer, 0);
    for (const TraceStep& step : trace.steps) {
        const bool decode = step.n_tokens == 1, demanded = has_demand(step);
        r.tokens += step.n_tokens;
        if (decode) r.decode_tokens++;
        cache.begin_step(step.n_tokens);
        // A layer's request, then the predictions made right after it, then its releases in the order the
        // engine computed the experts ('X'; request order when the trace has none): the order the runner calls
        // the cache in.
        int open_layer = -1;
        std::vector<uint32_t> open_set;
        for (const TraceLayerEvent& ev : step.events) {
            if (ev.kind == 'D' || (ev.kind == 'R' && !demanded)) {
                if (open_layer >= 0) cache.release_layer(static_cast<uint32_t>(open_layer), open_set);
                open_set = demand_set(ev, h.n_expert);
                open_layer = static_cast<int>(ev.layer);
                cache.request(ev.layer, open_set, decode, r);
            } else if (ev.kind == 'P' && prefetch) {
                cache.prefetch(ev.layer, ev.experts, decode, r);
            } else if (ev.kind == 'X' && static_cast<int>(ev.layer) == open_layer) {
                std::vector<uint32_t> order(ev.experts.begin(), ev.experts.end());
                for (uint32_t e : open_set)  // any the engine did not release (an error mid-layer) go last
                    if (std::find(order.begin(), order.end(), e) == order.end()) order.push_back(e);
                cache.release_layer(ev.layer, order);
                open_layer = -1;
            }
        }
        if (open_layer >= 0) cache.release_layer(static_cast<uint32_t>(open_layer), open_set);
    }
    r.prefetch_unused_bytes = cache.unused_prefetch_bytes();
    return r;
}

RoutingTrace without_layers(const RoutingTrace& trace, const std::vector<bool>& drop) {
    RoutingTrace out;
    out.header = trace.header;
    out.steps.reserve(trace.steps.size());
    for (const TraceStep& step : trace.steps) {
        TraceStep s;
        s.n_tokens = step.n_tokens;
        s.wall_ns = step.wall_ns;
        s.io_wait_ns = step.io_wait_ns;
        for (const TraceLayerEvent& ev : step.events)
            if (ev.layer >= drop.size() || !drop[ev.layer]) s.events.push_back(ev);
        out.steps.push_back(std::move(s));
    }
    return out;
}

CacheSimResult simulate_belady(const RoutingTrace& trace, uint64_t budget_bytes, size_t count_from) {
    const RoutingTraceHeader& h = trace.header;
    CacheSimResult r;
    r.policy = "belady";
    r.budget_bytes = budget_bytes;
    r.slots = h.slot_bytes ? budget_bytes / h.slot_bytes : 0;
    // The lookups in order, grouped by request (a group's experts are pinned together).
    struct Access {
        int64_t key;
        uint32_t group;
        bool decode, counted;
    };
    std::vector<Access> seq;
    uint32_t group = 0;
    for (size_t si = 0; si < trace.steps.size(); ++si) {
        const TraceStep& step = trace.steps[si];
        const bool decode = step.n_tokens == 1, demanded = has_demand(step), counted = si >= count_from;
        if (counted) r.tokens += step.n_tokens;
        if (counted && decode) r.decode_tokens++;
        for (const TraceLayerEvent& ev : step.events) {
            if (!(ev.kind == 'D' || (ev.kind == 'R' && !demanded))) continue;
            for (uint32_t e : demand_set(ev, h.n_expert)) seq.push_back({static_cast<int64_t>(ev.layer) * h.n_expert + e, group, decode, counted});
            ++group;
        }
    }
    constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
    std::vector<uint64_t> next_use(seq.size(), kNever);
    std::unordered_map<int64_t, uint64_t> last;
    for (size_t i = seq.size(); i-- > 0;) {
        auto it = last.find(seq[i].key);
        if (it != last.end()) next_use[i] = it->second;
        last[seq[i].key] = i;
    }
    // Resident keys ordered by next use (ties broken by key so "never again" entries stay distinct).
    std::set<std::pair<uint64_t, int64_t>> by_next;
    std::unordered_map<int64_t, std::pair<uint64_t, uint32_t>> resident;  // key -> (next use, last group)
    for (size_t i = 0; i < seq.size(); ++i) {
        const Access& a = seq[i];
        // Uncounted accesses only move the cache.
        const bool count = a.counted, count_decode = a.counted && a.decode;
        r.lookups += count;
        r.decode_lookups += count_decode;
        auto it = resident.find(a.key);
        if (it != resident.end()) {
            r.hits += count;
            r.decode_hits += count_decode;
            by_next.erase({it->second.first, a.key});
            it->second = {next_use[i], a.group};
            by_next.insert({next_use[i], a.key});
            continue;
        }
        const uint64_t bytes = h.load(static_cast<uint32_t>(a.key / h.n_expert), static_cast<uint32_t>(a.key % h.n_expert));
        if (count) r.bytes_read += bytes;
        if (count_decode) r.decode_bytes += bytes;
        if (r.slots == 0) continue;
        if (resident.size() >= r.slots) {
            // Farthest next use among experts not pinned by the current request.
            auto victim = by_next.end();
            for (auto v = by_next.rbegin(); v != by_next.rend(); ++v)
                if (resident[v->second].second != a.group) {
                    victim = std::prev(v.base());
                    break;
                }
            if (victim == by_next.end()) continue;  // all pinned: read without keeping it
            // Not worth keeping when it is needed later than everything resident (MIN bypasses it).
            if (next_use[i] > victim->first) continue;
            resident.erase(victim->second);
            by_next.erase(victim);
        }
        resident[a.key] = {next_use[i], a.group};
        by_next.insert({next_use[i], a.key});
    }
    return r;
}

CacheSimResult recorded_cache(const RoutingTrace& trace, size_t count_from) {
    const RoutingTraceHeader& h = trace.header;
    CacheSimResult r;
    r.policy = h.policy.empty() ? "in RAM" : h.policy;
    r.budget_bytes = h.cache_bytes;
    r.slots = h.slot_bytes ? h.cache_bytes / h.slot_bytes : 0;
    for (size_t si = count_from; si < trace.steps.size(); ++si) {
        const TraceStep& step = trace.steps[si];
        const bool decode = step.n_tokens == 1;
        r.tokens += step.n_tokens;
        if (decode) r.decode_tokens++;
        for (const TraceLayerEvent& ev : step.events) {
            if (ev.kind != 'D' && ev.kind != 'P') continue;
            for (size_t i = 0; i < ev.experts.size(); ++i) {
                const uint64_t bytes = h.load(ev.layer, ev.experts[i]);
                if (ev.kind == 'P') {
                    if (!ev.flags[i]) continue;
                    r.prefetch_issued++;
                    r.bytes_read += bytes;
                    if (decode) r.decode_bytes += bytes;
                    continue;
                }
                r.lookups++;
                if (decode) r.decode_lookups++;
                if (ev.flags[i]) {
                    r.hits++;
                    if (ev.flags[i] & 2) r.prefetch_used++;
                    if (decode) r.decode_hits++;
                } else {
                    r.bytes_read += bytes;
                    if (decode) r.decode_bytes += bytes;
                }
            }
        }
    }
    return r;
}

LiveCacheBound live_cache_bound(const RoutingTrace& recent) {
    LiveCacheBound b;
    const size_t n = recent.steps.size();
    if (n < LiveCacheBound::kMinSteps || recent.header.cache_bytes == 0) return b;
    const size_t warm = n / 2;
    b.engine = recorded_cache(recent, warm);
    b.belady = simulate_belady(recent, recent.header.cache_bytes, warm);
    b.steps = n - warm;
    b.tokens = b.engine.tokens;
    return b;
}

RoutingWorkload measure_workload(const RoutingTrace& trace) {
    const RoutingTraceHeader& h = trace.header;
    RoutingWorkload w;
    std::vector<uint64_t> counts(static_cast<size_t>(h.n_layer) * h.n_expert, 0);
    constexpr size_t D = RoutingWorkload::kDistantTokens;
    // Each layer's last D tokens' experts, newest last. (A trace of parallel slots interleaves its sequences'
    // rows, so there "consecutive" compares neighbouring slots.)
    std::vector<std::deque<std::vector<uint16_t>>> previous(h.n_layer);
    uint64_t shared = 0, compared = 0, far_shared = 0, far_compared = 0, decode_ns = 0, decode_tokens = 0, all_ns = 0;
    auto overlap = [](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
        uint64_t n = 0;
        for (uint16_t e : a) n += std::count(b.begin(), b.end(), e) ? 1 : 0;
        return n;
    };
    for (const TraceStep& step : trace.steps) {
        w.steps++;
        w.tokens += step.n_tokens;
        const uint64_t compute = step.wall_ns > step.io_wait_ns ? step.wall_ns - step.io_wait_ns : 0;
        all_ns += compute;
        if (step.n_tokens == 1) {
            w.decode_steps++;
            decode_ns += compute;
            decode_tokens++;
        }
        for (const TraceLayerEvent& ev : step.events) {
            if (ev.kind != 'R') continue;
            const size_t n = ev.experts.size() / ev.k;
            for (size_t t = 0; t < n; ++t) {
                std::vector<uint16_t> cur(ev.experts.begin() + static_cast<std::ptrdiff_t>(t * ev.k),
                                          ev.experts.begin() + static_cast<std::ptrdiff_t>((t + 1) * ev.k));
                for (uint16_t e : cur) counts[static_cast<size_t>(ev.layer) * h.n_expert + e]++;
                auto& prev = previous[ev.layer];
                if (!prev.empty()) {
                    shared += overlap(cur, prev.back());
                    compared += cur.size();
                }
                if (prev.size() >= D) {
                    far_shared += overlap(cur, prev[prev.size() - D]);
                    far_compared += cur.size();
                }
                prev.push_back(std::move(cur));
                if (prev.size() > D) prev.pop_front();
            }
        }
    }
    const uint32_t hot = std::max<uint32_t>(1, (h.n_expert + 9) / 10);
    uint64_t hot_sum = 0, total = 0;
    for (uint32_t l = 0; l < h.n_layer; ++l) {
        std::vector<uint64_t> c(counts.begin() + static_cast<std::ptrdiff_t>(l) * h.n_expert,
                                counts.begin() + static_cast<std::ptrdiff_t>(l + 1) * h.n_expert);
        std::sort(c.rbegin(), c.rend());
        for (uint32_t i = 0; i < h.n_expert; ++i) {
            total += c[i];
            if (i < hot) hot_sum += c[i];
        }
        for (uint32_t e = 0; e < h.n_expert; ++e) w.total_expert_bytes += h.load(l, e);
    }
    w.hot10_share = total ? static_cast<double>(hot_sum) / static_cast<double>(total) : 0;
    w.consecutive_overlap = compared ? static_cast<double>(shared) / static_cast<double>(compared) : 0;
    w.distant_overlap = far_compared ? static_cast<double>(far_shared) / static_cast<double>(far_compared) : 0;
    w.compute_ns_per_token = decode_tokens ? static_cast<double>(decode_ns) / static_cast<double>(decode_tokens)
                             : w.tokens    ? static_cast<double>(all_ns) / static_cast<double>(w.tokens)
                                           : 0;
    return w;
}

}  // namespace moe

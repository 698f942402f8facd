// Routing traces and the cache simulator: the file round-trips, appends across runs, refuses another model's
// trace, trims a cut tail, stays within its bound; the parser names the offset and field of bad bytes;
// Belady's MIN is optimal (brute force on small traces) and never below a policy's retained hits; the
// workload measures are exact on hand-made routing; and over a real streamed run the simulator reproduces
// the engine's hit rate and bytes read per token within 1%.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <yaml-cpp/yaml.h>

#include "engine/runtime/cache_sim.h"
#include "engine/runtime/routing_trace.h"
#include "engine/runtime/routing_window.h"
#include "tests/test_support.h"

namespace moe {
namespace {

RoutingTraceHeader header(uint32_t layers = 3, uint32_t experts = 8, uint32_t used = 2) {
    RoutingTraceHeader h;
    h.arch = "qwen3moe";
    h.n_layer = layers;
    h.n_expert = experts;
    h.n_expert_used = used;
    h.model_hash = 0x1234abcd;
    h.slot_bytes = 8192;
    h.cache_bytes = 4 * 8192;
    h.policy = "lru";
    h.prefetch_layers = 1;
    h.prefetch_cap = 1 << 20;
    h.load_bytes.assign(static_cast<size_t>(layers) * experts, 8192);
    for (uint32_t e = 0; e < experts; ++e) h.load_bytes[e] = 0;  // layer 0 is dense
    return h;
}

// One decode step routing token 0 of each MoE layer to `experts`, the cache's outcome recorded as given.
void write_step(RoutingTraceWriter& w, const std::vector<std::vector<int>>& per_layer) {
    w.begin_step(1);
    for (uint32_t l = 1; l <= per_layer.size(); ++l) {
        const auto& ex = per_layer[l - 1];
        std::vector<float> wt(ex.size(), 0.5f);
        w.route(l, 1, static_cast<int>(ex.size()), ex.data(), wt.data());
        std::vector<uint32_t> set(ex.begin(), ex.end());
        std::sort(set.begin(), set.end());
        std::vector<uint8_t> hit(set.size(), 0);
        w.demand(l, set, hit);
        for (uint32_t e : set) w.release(l, e);
    }
    w.end_step(1000, 250);
}

TEST(RoutingTrace, RoundTripAppendAndRefuseAnotherModel) {
    test::TempDir dir;
    const std::string path = dir / "t.trace";
    {
        RoutingTraceWriter w(path, header());
        write_step(w, {{1, 5}, {7, 2}});
        const std::vector<uint32_t> predicted = {3, 4};
        const std::vector<uint8_t> issued = {1, 0};
        w.begin_step(2);
        const int ex[4] = {1, 2, 3, 4};
        const float wt[4] = {0.25f, 0.75f, 0.5f, 0.5f};
        w.route(1, 2, 2, ex, wt);
        w.prefetch(2, predicted, issued);
        w.end_step(5000, 0);
    }
    RoutingTrace t = read_routing_trace(path);
    ASSERT_EQ(t.steps.size(), 2u);
    EXPECT_TRUE(t.header.same_model(header()));
    EXPECT_EQ(t.header.load(2, 3), 8192u);
    EXPECT_EQ(t.steps[0].wall_ns, 1000u);
    EXPECT_EQ(t.steps[0].io_wait_ns, 250u);
    ASSERT_EQ(t.steps[0].events.size(), 6u);  // R, D, X per layer
    EXPECT_EQ(t.steps[0].events[0].kind, 'R');
    EXPECT_EQ(t.steps[0].events[0].experts, (std::vector<uint16_t>{1, 5}));
    EXPECT_EQ(t.steps[0].events[1].kind, 'D');
    EXPECT_EQ(t.steps[0].events[2].kind, 'X');
    EXPECT_EQ(t.steps[0].events[5].experts, (std::vector<uint16_t>{2, 7}));
    EXPECT_EQ(t.steps[1].n_tokens, 2u);
    EXPECT_EQ(t.steps[1].events[0].weights, (std::vector<float>{0.25f, 0.75f, 0.5f, 0.5f}));
    EXPECT_EQ(t.steps[1].events[1].flags, (std::vector<uint8_t>{1, 0}));

    // Another run of the same model continues the file, with its own recording settings.
    {
        RoutingTraceHeader h = header();
        h.cache_bytes = 6 * 8192;
        RoutingTraceWriter w(path, h);
        write_step(w, {{0, 6}, {4, 3}});
    }
    t = read_routing_trace(path);
    EXPECT_EQ(t.steps.size(), 3u);
    EXPECT_EQ(t.header.cache_bytes, 6u * 8192);

    // Another model's trace is refused, the file untouched.
    const auto size = std::filesystem::file_size(path);
    RoutingTraceHeader other = header();
    other.model_hash = 99;
    try {
        RoutingTraceWriter w(path, other);
        FAIL() << "opened another model's trace";
    } catch (const RoutingTraceError& e) { EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what(); }
    EXPECT_EQ(std::filesystem::file_size(path), size);

    // A second writer on the same file (two servers) is refused while the first holds it.
    RoutingTraceWriter first(path, header());
    EXPECT_THROW(RoutingTraceWriter(path, header()), RoutingTraceError);
}

TEST(RoutingTrace, CutTailIsTrimmedAndBoundDropsOldestSteps) {
    test::TempDir dir;
    const std::string path = dir / "t.trace";
    {
        RoutingTraceWriter w(path, header());
        write_step(w, {{1, 2}, {3, 4}});
        write_step(w, {{1, 2}, {3, 4}});
    }
    const auto whole = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, whole - 5);  // a crash inside the last step
    EXPECT_EQ(read_routing_trace(path).steps.size(), 1u);
    {
        RoutingTraceWriter w(path, header());
        write_step(w, {{5, 6}, {7, 0}});
    }
    RoutingTrace t = read_routing_trace(path);
    ASSERT_EQ(t.steps.size(), 2u);
    EXPECT_EQ(t.steps[1].events[0].experts, (std::vector<uint16_t>{5, 6}));

    // Bounded: the file never passes its bound; the oldest steps go and are counted.
    const std::string small = dir / "small.trace";
    const uint64_t bound = 70 * 1024;
    {
        RoutingTraceWriter w(small, header(), bound);
        for (int i = 0; i < 2000; ++i) {
            write_step(w, {{i % 8, (i + 1) % 8}, {(i + 3) % 8, (i + 5) % 8}});
            ASSERT_LE(w.file_bytes(), bound);
        }
        EXPECT_GT(w.steps_dropped(), 0u);
    }
    t = read_routing_trace(small);
    EXPECT_GT(t.header.steps_dropped, 0u);
    EXPECT_EQ(t.header.steps_dropped + t.steps.size(), 2000u);
    EXPECT_EQ(t.steps.back().events[0].experts, (std::vector<uint16_t>{1999 % 8, 2000 % 8}));  // the newest kept
}

TEST(RoutingTrace, BadBytesNameOffsetAndField) {
    test::TempDir dir;
    const std::string path = dir / "t.trace";
    {
        RoutingTraceWriter w(path, header());
        write_step(w, {{1, 2}, {3, 4}});
    }
    std::ifstream f(path, std::ios::binary);
    std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), {}};
    auto error_of = [&](std::vector<uint8_t> b, bool strict = false) -> std::string {
        try {
            parse_routing_trace(b, "t.trace", strict);
        } catch (const RoutingTraceError& e) { return e.what(); }
        return "";
    };
    auto bad = bytes;
    bad[0] = 'X';
    EXPECT_NE(error_of(bad).find("magic"), std::string::npos);
    EXPECT_NE(error_of({bytes.begin(), bytes.begin() + 30}).find("cut short"), std::string::npos);
    const RoutingTrace ok = parse_routing_trace(bytes, "t");
    // The route record of layer 1, by its head: kind 'R', k 2, layer 1 (u16); its first expert id follows.
    size_t at = 0;
    for (size_t i = 0; i + 8 < bytes.size() && !at; ++i)
        if (bytes[i] == 'R' && bytes[i + 1] == 2 && bytes[i + 2] == 1 && bytes[i + 3] == 0) at = i;
    ASSERT_GT(at, 0u);
    bad = bytes;
    bad[at + 8] = 200;  // expert 200 of 8
    const std::string e1 = error_of(bad);
    EXPECT_NE(e1.find("names expert 200"), std::string::npos) << e1;
    EXPECT_NE(e1.find("at byte " + std::to_string(at)), std::string::npos) << e1;
    bad = bytes;
    bad[at + 2] = 9;  // layer 9 of 3
    EXPECT_NE(error_of(bad).find("layer 9 of 3"), std::string::npos);
    bad = bytes;
    bad.resize(bytes.size() - 3);
    EXPECT_EQ(error_of(bad), "");                                         // a cut tail is dropped...
    EXPECT_NE(error_of(bad, true).find("cut short"), std::string::npos);  // ...unless asked to be strict
    EXPECT_EQ(ok.steps.size(), 1u);
}

// A trace of single-expert lookups, one per step (each its own request group), on one layer.
RoutingTrace lookups(const std::vector<int>& keys, uint32_t n_expert) {
    RoutingTrace t;
    t.header = header(2, n_expert, 1);
    for (int k : keys) {
        TraceStep s;
        s.n_tokens = 1;
        TraceLayerEvent d;
        d.kind = 'D';
        d.layer = 1;
        d.experts = {static_cast<uint16_t>(k)};
        d.flags = {0};
        s.events.push_back(d);
        t.steps.push_back(s);
    }
    return t;
}

// A cache-sim --json budget row's figures for the engine's default policy.
nlohmann::json default_policy(const nlohmann::json& budget_row) {
    for (const auto& p : budget_row["policies"])
        if (p["policy"] == policy_name(kDefaultEvictionPolicy)) return p;
    ADD_FAILURE() << "no " << policy_name(kDefaultEvictionPolicy) << " in " << budget_row;
    return nlohmann::json::object({{"hit_rate", -1.0}});
}

// The most hits any replacement can get (with bypass), by exhaustive search: the definition of optimal.
uint64_t brute_force_best(const std::vector<int>& keys, size_t capacity) {
    std::function<uint64_t(size_t, std::set<int>)> go = [&](size_t i, std::set<int> cache) -> uint64_t {
        if (i == keys.size()) return 0;
        if (cache.count(keys[i])) return 1 + go(i + 1, cache);
        uint64_t best = go(i + 1, cache);  // bypass
        if (cache.size() < capacity) {
            auto c = cache;
            c.insert(keys[i]);
            return std::max(best, go(i + 1, c));
        }
        for (int victim : cache) {
            auto c = cache;
            c.erase(victim);
            c.insert(keys[i]);
            best = std::max(best, go(i + 1, c));
        }
        return best;
    };
    return go(0, {});
}

TEST(CacheSim, BeladyIsOptimalAndBoundsEveryPolicy) {
    std::mt19937 rng(7);
    for (int round = 0; round < 40; ++round) {
        const int n_keys = 3 + round % 4;
        std::vector<int> keys(12);
        for (auto& k : keys) k = static_cast<int>(rng() % static_cast<unsigned>(n_keys));
        const size_t capacity = 1 + round % 3;
        const RoutingTrace t = lookups(keys, 8);
        const CacheSimResult min = simulate_belady(t, capacity * t.header.slot_bytes);
        EXPECT_EQ(min.hits, brute_force_best(keys, capacity)) << "round " << round;
        for (EvictionPolicy p : {EvictionPolicy::Lru, EvictionPolicy::LruFrequency, EvictionPolicy::LruFrequencyGuard}) {
            const CacheSimResult r = simulate_engine_cache(t, p, capacity * t.header.slot_bytes);
            EXPECT_LE(r.retained_hits(), min.hits) << policy_name(p) << " round " << round;
            EXPECT_EQ(r.lookups, keys.size());
        }
    }
    // LRU by hand: capacity 2, A B A C B A -> hits on the second A only (C evicts B, B evicts A).
    const RoutingTrace t = lookups({0, 1, 0, 2, 1, 0}, 8);
    const CacheSimResult lru = simulate_engine_cache(t, EvictionPolicy::Lru, 2 * t.header.slot_bytes);
    EXPECT_EQ(lru.hits, 1u);
    EXPECT_EQ(lru.bytes_read, 5u * 8192);
    EXPECT_EQ(simulate_belady(t, 2 * t.header.slot_bytes).hits, 3u);  // keep A throughout: A, B(via bypass C), A
}

// Decode steps that route every token of a layer alike and ask for more experts than the cache holds: LRU evicts
// each expert just before its next use and never hits; the guard's LRU-end insertion keeps most of the set (as
// Belady's MIN does), and where the step fits it decides exactly as lru+frequency.
TEST(CacheSim, GuardKeepsItsSetWhenAStepOverflowsTheCache) {
    const uint32_t layers = 6, experts = 16, used = 4;
    RoutingTrace t;
    t.header = header(layers, experts, used);
    std::mt19937 rng(11);
    for (int step = 0; step < 200; ++step) {
        TraceStep s;
        s.n_tokens = 1;
        for (uint32_t l = 1; l < layers; ++l) {
            TraceLayerEvent d;
            d.kind = 'D';
            d.layer = l;
            // Experts 0..3 of each layer, one of them swapped for a random other in one step of four.
            for (uint16_t e = 0; e < used; ++e) d.experts.push_back(e);
            if (step % 4 == 3) d.experts[rng() % used] = static_cast<uint16_t>(used + rng() % (experts - used));
            std::sort(d.experts.begin(), d.experts.end());
            d.flags.assign(d.experts.size(), 0);
            s.events.push_back(d);
        }
        t.steps.push_back(s);
    }
    const uint64_t step_demand = (layers - 1) * used;  // 20 lookups per step
    for (uint64_t slots : {step_demand - 6, step_demand - 1}) {
        const uint64_t budget = slots * t.header.slot_bytes;
        const CacheSimResult lru = simulate_engine_cache(t, EvictionPolicy::Lru, budget);
        const CacheSimResult freq = simulate_engine_cache(t, EvictionPolicy::LruFrequency, budget);
        const CacheSimResult guard = simulate_engine_cache(t, EvictionPolicy::LruFrequencyGuard, budget);
        const CacheSimResult min = simulate_belady(t, budget);
        std::cerr << "[  NOTE    ] " << slots << " slots for " << step_demand << " lookups per step: hits lru " << lru.hits << ", lru+frequency "
                  << freq.hits << ", guard " << guard.hits << ", MIN " << min.hits << " of " << min.lookups << "\n";
        EXPECT_LT(lru.hit_rate(), 0.1) << slots;
        EXPECT_GT(guard.hits, freq.hits + min.hits / 10) << slots;
        EXPECT_GT(guard.retained_hits(), 0.7 * static_cast<double>(min.hits)) << slots << " slots: " << guard.hits << " of MIN's " << min.hits;
        EXPECT_LE(guard.retained_hits(), min.hits);
    }
    // Prompt-sized steps (more than kDecodeTokens tokens) never engage it, overflowing or not: a prompt's experts
    // are not the set decode goes on to reuse.
    RoutingTrace prompts = t;
    for (auto& st : prompts.steps) st.n_tokens = InsertionRule::kDecodeTokens + 1;
    const uint64_t small = (step_demand - 6) * t.header.slot_bytes;
    EXPECT_EQ(simulate_engine_cache(prompts, EvictionPolicy::LruFrequencyGuard, small).hits,
              simulate_engine_cache(prompts, EvictionPolicy::LruFrequency, small).hits);
    for (uint64_t slots : {step_demand, step_demand + 8}) {
        const uint64_t budget = slots * t.header.slot_bytes;
        const CacheSimResult freq = simulate_engine_cache(t, EvictionPolicy::LruFrequency, budget);
        const CacheSimResult guard = simulate_engine_cache(t, EvictionPolicy::LruFrequencyGuard, budget);
        EXPECT_EQ(guard.hits, freq.hits) << slots;
        EXPECT_EQ(guard.bytes_read, freq.bytes_read) << slots;
    }
}

// The server's window of recent steps: the last N of them, in the file's encoding (a trace file of the same
// run holds the same steps), every step forwarded to the file as well.
TEST(RoutingWindow, KeepsTheLastStepsAndForwardsEveryOne) {
    test::TempDir dir;
    const std::string path = dir / "w.trace";
    RoutingTraceWriter file(path, header());
    RoutingWindow window(header(), 4, &file);
    EXPECT_EQ(window.recent().trace.steps.size(), 0u);
    for (int i = 0; i < 10; ++i) {
        window.begin_step(1);
        const std::vector<int> ex = {i % 8, (i + 3) % 8};
        const std::vector<float> wt = {0.25f, 0.75f};
        window.route(1, 1, 2, ex.data(), wt.data());
        std::vector<uint32_t> set = {static_cast<uint32_t>(std::min(ex[0], ex[1])), static_cast<uint32_t>(std::max(ex[0], ex[1]))};
        const std::vector<uint8_t> hit = {static_cast<uint8_t>(i % 2), 0};
        window.demand(1, set, hit);
        window.release(1, set[1]);
        window.release(1, set[0]);
        window.end_step(1000 + static_cast<uint64_t>(i), 10);
    }
    EXPECT_EQ(window.steps_seen(), 10u);
    const RoutingWindow::Recent recent = window.recent();
    ASSERT_EQ(recent.trace.steps.size(), 4u);
    EXPECT_EQ(recent.first_step, 6u);
    const RoutingTrace all = read_routing_trace(path);
    ASSERT_EQ(all.steps.size(), 10u);
    for (size_t i = 0; i < 4; ++i) {
        const TraceStep &a = recent.trace.steps[i], &b = all.steps[6 + i];
        EXPECT_EQ(a.wall_ns, b.wall_ns);
        ASSERT_EQ(a.events.size(), b.events.size());
        for (size_t e = 0; e < a.events.size(); ++e) {
            EXPECT_EQ(a.events[e].kind, b.events[e].kind);
            EXPECT_EQ(a.events[e].experts, b.events[e].experts);
            EXPECT_EQ(a.events[e].flags, b.events[e].flags);
            EXPECT_EQ(a.events[e].weights, b.events[e].weights);
        }
    }
    EXPECT_EQ(recent.trace.steps[3].wall_ns, 1009u);
}

// Bounded in bytes as well as steps: steps of random sizes (a prompt chunk is many tokens) go round a small
// ring; what it keeps is always the latest steps without a gap, byte for byte those the file holds, and within
// one step's worth of the ring's size. A step larger than the ring empties the window.
TEST(RoutingWindow, ARingOfBytesKeepsTheLatestWholeSteps) {
    test::TempDir dir;
    const std::string path = dir / "w.trace";
    RoutingTraceWriter file(path, header());
    constexpr size_t kRing = 2000, kSteps = 40;
    RoutingWindow window(header(), kSteps, &file, kRing);
    EXPECT_EQ(window.capacity_bytes(), kRing);
    std::mt19937 rng(11);
    std::vector<size_t> step_bytes;  // each appended step's encoded size, as the file grew by it
    size_t largest = 0;              // of the steps that fit the ring
    for (int i = 0; i < 3000; ++i) {
        const int n = i == 1500 ? 200 : 1 + static_cast<int>(rng() % 12u);  // step 1500 alone is past the ring
        const uint64_t before = file.file_bytes();
        window.begin_step(static_cast<uint32_t>(n));
        std::vector<int> ex(static_cast<size_t>(n) * 2);
        std::vector<float> wt(ex.size(), 0.5f);
        for (auto& e : ex) e = static_cast<int>(rng() % 8u);
        window.route(1, n, 2, ex.data(), wt.data());
        window.end_step(static_cast<uint64_t>(i), 0);
        step_bytes.push_back(file.file_bytes() - before);
        if (i != 1500) largest = std::max(largest, step_bytes.back());
        if (i % 9 != 0 && i != 1500 && i != 1501) continue;
        const RoutingWindow::Recent recent = window.recent();
        const size_t kept = recent.trace.steps.size();
        ASSERT_EQ(recent.first_step + kept, static_cast<uint64_t>(i) + 1) << "step " << i;
        if (i == 1500) {
            EXPECT_EQ(kept, 0u);
            continue;
        }
        ASSERT_GE(kept, 1u);
        ASSERT_LE(kept, kSteps);
        for (size_t s = 0; s < kept; ++s) EXPECT_EQ(recent.trace.steps[s].wall_ns, recent.first_step + s);
        size_t kept_bytes = 0;
        for (size_t s = recent.first_step; s <= static_cast<size_t>(i); ++s) kept_bytes += step_bytes[s];
        EXPECT_LE(kept_bytes, kRing);
        if (kept < kSteps && recent.first_step > 1501) {
            // The step before them was dropped for room: with it the ring was full, less at most one step's
            // worth left unused where a step wrapped to the start.
            EXPECT_GT(kept_bytes + step_bytes[recent.first_step - 1] + largest, kRing) << "step " << i;
        }
    }
    const RoutingTrace all = read_routing_trace(path);
    const RoutingWindow::Recent recent = window.recent();
    ASSERT_EQ(all.steps.size(), 3000u);
    for (size_t s = 0; s < recent.trace.steps.size(); ++s) {
        EXPECT_EQ(recent.trace.steps[s].events[0].experts, all.steps[recent.first_step + s].events[0].experts);
        EXPECT_EQ(recent.trace.steps[s].events[0].weights, all.steps[recent.first_step + s].events[0].weights);
    }
}

// Counting from a step: the steps before it move the cache but are not counted; the live bound is the
// recording against MIN over the later half, nothing below kMinSteps.
TEST(CacheSim, LiveBoundCountsTheLaterHalf) {
    std::mt19937 rng(3);
    std::vector<int> keys(60);
    for (auto& k : keys) k = static_cast<int>(rng() % 6u);
    RoutingTrace t = lookups(keys, 8);
    for (size_t i = 0; i < t.steps.size(); ++i) t.steps[i].events[0].flags[0] = i % 3 == 0;  // what "the engine" saw
    t.header.cache_bytes = 2 * t.header.slot_bytes;
    const CacheSimResult full = simulate_belady(t, t.header.cache_bytes);
    for (size_t from : {size_t{0}, size_t{17}, size_t{30}}) {
        const CacheSimResult part = simulate_belady(t, t.header.cache_bytes, from);
        EXPECT_EQ(part.lookups, keys.size() - from);
        EXPECT_EQ(part.tokens, keys.size() - from);
        EXPECT_LE(part.hits, full.hits);
        if (from == 0) { EXPECT_EQ(part.hits, full.hits); }
        RoutingTrace tail = t;
        tail.steps.erase(tail.steps.begin(), tail.steps.begin() + static_cast<std::ptrdiff_t>(from));
        EXPECT_EQ(recorded_cache(t, from).hits, recorded_cache(tail).hits);
        EXPECT_EQ(recorded_cache(t, from).lookups, keys.size() - from);
    }
    const LiveCacheBound b = live_cache_bound(t);
    EXPECT_EQ(b.steps, 30u);
    EXPECT_EQ(b.engine.hits, recorded_cache(t, 30).hits);
    EXPECT_EQ(b.belady.hits, simulate_belady(t, t.header.cache_bytes, 30).hits);
    t.steps.resize(LiveCacheBound::kMinSteps - 1);
    EXPECT_EQ(live_cache_bound(t).steps, 0u);
}

TEST(CacheSim, WorkloadMeasuresAreExact) {
    // One MoE layer of 10 experts, 2 used: tokens route {0,1}, {0,2}, {0,1}, {3,4}.
    RoutingTrace t;
    t.header = header(2, 10, 2);
    const std::vector<std::vector<uint16_t>> tokens = {{0, 1}, {0, 2}, {0, 1}, {3, 4}};
    for (const auto& tok : tokens) {
        TraceStep s;
        s.n_tokens = 1;
        s.wall_ns = 3000;
        s.io_wait_ns = 1000;
        TraceLayerEvent r;
        r.kind = 'R';
        r.layer = 1;
        r.k = 2;
        r.experts = tok;
        r.weights = {0.5f, 0.5f};
        s.events.push_back(r);
        t.steps.push_back(s);
    }
    const RoutingWorkload w = measure_workload(t);
    EXPECT_DOUBLE_EQ(w.hot10_share, 3.0 / 8);          // the hottest 10% (1 expert: 0) takes 3 of 8 routings
    EXPECT_DOUBLE_EQ(w.consecutive_overlap, 2.0 / 6);  // {0} of {0,2}, {0} of {0,1}, none of {3,4}
    EXPECT_DOUBLE_EQ(w.distant_overlap, 0);            // no token has one 16 before it
    EXPECT_DOUBLE_EQ(w.compute_ns_per_token, 2000);
    EXPECT_EQ(w.total_expert_bytes, 10u * 8192);
    // Without 'D' records the lookups come from the routes: 8 routings, 6 distinct per-step sets of 2.
    const CacheSimResult r = simulate_engine_cache(t, EvictionPolicy::Lru, 4 * 8192);
    EXPECT_EQ(r.lookups, 8u);
    EXPECT_EQ(r.hits, 3u);  // 0 at tokens 2 and 3, 1 at token 3
    // One prompt step of 20 tokens: token i routes {i % 5, 5 + i % 3}. Neither 1 nor 16 is a multiple of 5 or 3,
    // so neither neighbours nor tokens 16 apart share an expert; with every second expert made 5, each pair
    // shares one of two.
    TraceStep prompt;
    prompt.n_tokens = 20;
    TraceLayerEvent r20;
    r20.kind = 'R';
    r20.layer = 1;
    r20.k = 2;
    for (uint16_t i = 0; i < 20; ++i) {
        r20.experts.insert(r20.experts.end(), {static_cast<uint16_t>(i % 5), static_cast<uint16_t>(5 + i % 3)});
        r20.weights.insert(r20.weights.end(), {0.5f, 0.5f});
    }
    prompt.events.push_back(r20);
    RoutingTrace p;
    p.header = t.header;
    p.steps = {prompt};
    EXPECT_DOUBLE_EQ(measure_workload(p).distant_overlap, 0);
    EXPECT_DOUBLE_EQ(measure_workload(p).consecutive_overlap, 0);
    for (auto& e : p.steps[0].events[0].experts)
        if (e >= 5) e = 5;  // now every token shares its second expert with every other
    EXPECT_DOUBLE_EQ(measure_workload(p).distant_overlap, 0.5);
    EXPECT_DOUBLE_EQ(measure_workload(p).consecutive_overlap, 0.5);
}

// profile --trace counts the traces' routings: the profile a server's own traffic gives.
TEST(RoutingTrace, ProfileCountsTheTracesRoutings) {
    test::TempDir dir;
    const std::string path = dir / "t.trace";
    {
        RoutingTraceWriter w(path, header());
        write_step(w, {{1, 5}, {7, 2}});
        write_step(w, {{1, 6}, {7, 3}});
    }
    auto [rc, out] = test::run_moestream("profile --trace " + path + " --out " + dir / "p.yaml", true);
    ASSERT_EQ(rc, 0) << out;
    std::ifstream f(dir / "p.yaml");
    const std::string yaml{std::istreambuf_iterator<char>(f), {}};
    EXPECT_NE(yaml.find("tokens: 2"), std::string::npos) << yaml;
    EXPECT_NE(yaml.find("- [0, 2, 0, 0, 0, 1, 1, 0]"), std::string::npos) << yaml;  // layer 1: expert 1 twice, 5 and 6 once
    EXPECT_NE(yaml.find("hottest:\n  - {layer: 1, expert: 1, count: 2}"), std::string::npos) << yaml;
    auto [bad, bad_out] = test::run_moestream("profile --trace " + path + " --prompts x --out " + dir / "q.yaml", true);
    EXPECT_EQ(bad, 2) << bad_out;
}

// The command on the checked-in seed trace: a row per budget and policy plus the bound, the recorded budget
// added, the plot's curves, and one-line errors for bad budgets and for another model's file.
TEST(CacheSim, CommandReportsPlotsAndRefuses) {
    test::TempDir dir;
    const std::string trace = std::string(MOESTREAM_SOURCE_DIR) + "/tests/fuzz/seed_routing_trace/valid";
    auto [rc, out] = test::run_moestream("cache-sim --trace " + trace + " --budgets 50%,100% --disk-gbps 2 --json --plot " + dir / "p.svg", false);
    ASSERT_EQ(rc, 0) << out;
    const auto j = nlohmann::json::parse(out);
    ASSERT_EQ(j["budgets"].size(), 3u);  // 16 KiB recorded, 32 KiB, 64 KiB
    EXPECT_EQ(j["budgets"][0]["budget_bytes"], 16384);
    EXPECT_EQ(j["total_expert_bytes"], 2 * 8 * 4096);
    for (const auto& b : j["budgets"]) {
        ASSERT_EQ(b["policies"].size(), 3u);
        for (const auto& p : b["policies"]) {
            EXPECT_LE(p["hits"].get<uint64_t>() - p["prefetch_used"].get<uint64_t>(), b["belady"]["hits"].get<uint64_t>());
            EXPECT_GT(p["predicted_tokens_per_s"].get<double>(), 0);
        }
    }
    // Every expert fits at 100%: the bound misses each distinct expert once.
    std::set<std::pair<uint32_t, uint16_t>> distinct;
    for (const auto& step : read_routing_trace(trace).steps)
        for (const auto& ev : step.events)
            if (ev.kind == 'D')
                for (uint16_t e : ev.experts) distinct.insert({ev.layer, e});
    EXPECT_EQ(j["budgets"][2]["belady"]["hits"], j["budgets"][2]["belady"]["lookups"].get<uint64_t>() - distinct.size());
    std::ifstream svg(dir / "p.svg");
    const std::string plot{std::istreambuf_iterator<char>(svg), {}};
    size_t curves = 0;
    for (size_t at = plot.find("class=\"curve\""); at != std::string::npos; at = plot.find("class=\"curve\"", at + 1)) ++curves;
    EXPECT_EQ(curves, 4u) << plot;  // three policies and the bound
    auto [bad, bad_out] = test::run_moestream("cache-sim --trace " + trace + " --budgets 0%", true);
    EXPECT_EQ(bad, 2);
    EXPECT_NE(bad_out.find("--budgets: 0%"), std::string::npos) << bad_out;
    const std::string model = dir / "m.gguf";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 2 --embd 64 --heads 2 --experts 4 --experts-used 2 --ffn 64 --vocab-builtin --out " + model, true)
                  .first,
              0);
    auto [other, other_out] = test::run_moestream("cache-sim --trace " + trace + " --model " + model, true);
    EXPECT_EQ(other, 2);
    EXPECT_NE(other_out.find("not the model the routing trace was recorded on"), std::string::npos) << other_out;
}

// plan --trace: the planned cache's hit rate comes from replaying the user's trace (the same figure cache-sim
// gives at that budget), plan.yaml says so and keeps the trace for regen; another model's trace is refused.
TEST(CacheSim, PlanJudgesItsCacheOnTheTrace) {
    test::TempDir dir;
    const std::string model = dir / "m.gguf", trace = dir / "t.trace";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 4 --embd 128 --heads 4 --kv-heads 2 --experts 32 --experts-used 4 --ffn 64 "
                                  "--vocab-builtin --seed 9 --router-skew 1 --out " +
                                      model,
                                  true)
                  .first,
              0);
    auto [rc, out] = test::run_moestream("run --model " + model + " -p 'plan from traffic' -n 40 --ram-budget 47M --routing-trace " + trace, true);
    ASSERT_EQ(rc, 0) << out;
    const std::string facts = dir / "host.json";
    ASSERT_EQ(test::run_moestream_cmd(std::string(MOESTREAM_BINARY) + " probe --root " + MOESTREAM_SOURCE_DIR +
                                      "/tests/fixtures/hosts/laptop-1node-smt --json > " + facts)
                  .first,
              0);
    auto [prc, pout] = test::run_moestream(
        "plan --model " + model + " --host " + facts + " --ram-budget 47M --trace " + trace + " --out " + dir / "p", true);
    ASSERT_EQ(prc, 0) << pout;
    const YAML::Node plan = YAML::LoadFile(dir / "p/plan.yaml");
    const uint64_t cache = plan["decisions"]["expert_cache_bytes"].as<uint64_t>();
    const double planned_hit = std::stod(plan["reasons"]["expert_cache_hit_rate"]["value"].as<std::string>());
    EXPECT_NE(plan["reasons"]["expert_cache_hit_rate"]["reason"].as<std::string>().find("simulated on " + trace), std::string::npos);
    EXPECT_EQ(plan["asked"]["routing_trace"].as<std::string>(), trace);
    const auto j = nlohmann::json::parse(
        test::run_moestream("cache-sim --trace " + trace + " --json --budgets " + std::to_string(cache), false).second);
    bool found = false;
    for (const auto& b : j["budgets"])
        if (b["budget_bytes"] == cache) {
            EXPECT_NEAR(default_policy(b)["hit_rate"].get<double>(), planned_hit, 1e-4);
            found = true;
        }
    EXPECT_TRUE(found);
    auto [same, same_out] = test::run_moestream("regen --plan " + dir / "p/plan.yaml --host " + facts, true);
    EXPECT_EQ(same, 0) << same_out;
    const std::string other = dir / "o.gguf";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 4 --embd 128 --heads 4 --kv-heads 2 --experts 32 --experts-used 4 --ffn 64 "
                                  "--vocab-builtin --seed 10 --out " +
                                      other,
                                  true)
                  .first,
              0);
    auto [bad, bad_out] = test::run_moestream(
        "plan --model " + other + " --host " + facts + " --ram-budget 47M --trace " + trace + " --out " + dir / "q", true);
    EXPECT_EQ(bad, 2) << bad_out;
    EXPECT_NE(bad_out.find("another model"), std::string::npos) << bad_out;

    // check --trace: the cache the budget leaves, replayed; the same figures cache-sim gives at that size.
    for (const char* budget : {"47M", "42M"}) {
        // (this host's own rows may FAIL: only the trace's row is read)
        const std::string cout =
            test::run_moestream("check --model " + model + " --ram-budget " + budget + " --trace " + trace + " --no-storage --json", false).second;
        const nlohmann::json report = nlohmann::json::parse(cout);
        nlohmann::json row;
        for (const auto& r : report["rows"])
            if (r["id"] == "routing_trace") row = r;
        ASSERT_FALSE(row.is_null()) << cout;
        const std::string measured = row["measured"];
        const uint64_t at = std::stoull(measured.substr(measured.rfind('(') + 1));
        const double hit = std::stod(measured.substr(measured.find("hit rate ") + 9)) / 100;
        const auto sim = nlohmann::json::parse(
            test::run_moestream("cache-sim --trace " + trace + " --json --budgets " + std::to_string(at), false).second);
        EXPECT_NEAR(default_policy(sim["budgets"][0])["hit_rate"].get<double>(), hit, 0.0005) << measured;
        EXPECT_NE(measured.find("Belady's eviction without prefetch"), std::string::npos);
        if (row["status"] == "WARN") { EXPECT_EQ(row["fix"].get<std::string>().rfind("--ram-budget ", 0), 0u) << row; }
    }
    auto [cbad, cbad_out] = test::run_moestream("check --model " + other + " --ram-budget 47M --trace " + trace + " --no-storage", true);
    EXPECT_EQ(cbad, 2) << cbad_out;
    EXPECT_NE(cbad_out.find("another model"), std::string::npos) << cbad_out;
}

// Over a recorded run on a streamed model, the simulator at the recorded budget and policy gives the engine's
// own hit rate and bytes read per token (within 1%), with and without the expert store's layout.
TEST(CacheSim, ReproducesTheEnginesRecordedRun) {
    test::TempDir dir;
    const std::string model = dir / "m.gguf";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 5 --embd 128 --heads 4 --kv-heads 2 --experts 32 --experts-used 4 --ffn 128 "
                                  "--vocab-builtin --seed 5 --out " +
                                      model,
                                  true)
                  .first,
              0);
    // 44M: 17 slots for 20 lookups per decode step, where the guard's insertion rule acts.
    const std::vector<std::pair<std::string, std::string>> runs = {{"47M", "lru"},      {"47M", "lru-freq"},      {"47M", "lru-freq-guard"},
                                                                   {"53M", "lru"},      {"53M", "lru-freq"},      {"53M", "lru-freq-guard"},
                                                                   {"44M", "lru-freq"}, {"44M", "lru-freq-guard"}};
    for (const auto& [budget, policy] : runs) {
        const std::string trace = dir / ("t-" + budget + policy + ".trace");
        auto [rc, out] = test::run_moestream("run --model " + model +
                                                 " -p 'the routing trace and the cache simulator agree' -n 80 "
                                                 "--ram-budget " +
                                                 budget + " --policy " + policy + " --routing-trace " + trace,
                                             true);
        ASSERT_EQ(rc, 0) << out;
        auto [sim_rc, sim] = test::run_moestream("cache-sim --trace " + trace + " --json --budgets 50%", false);
        ASSERT_EQ(sim_rc, 0) << sim;
        const auto j = nlohmann::json::parse(sim);
        ASSERT_TRUE(j.contains("simulated_at_recorded")) << sim;
        const auto& rec = j["recorded"];
        const auto& got = j["simulated_at_recorded"];
        const double rec_hit = rec["hit_rate"], got_hit = got["hit_rate"];
        const double rec_bytes = rec["bytes_per_token"], got_bytes = got["bytes_per_token"];
        EXPECT_GT(rec["lookups"].get<uint64_t>(), 500u);
        EXPECT_GT(rec_bytes, 0);
        EXPECT_NEAR(got_hit, rec_hit, 0.01 * rec_hit) << budget << " " << policy;
        EXPECT_NEAR(got_bytes, rec_bytes, 0.01 * rec_bytes) << budget << " " << policy;
        std::cerr << "[  NOTE    ] " << budget << " " << policy << ": engine hit " << rec_hit << ", " << rec_bytes << " B/token; simulated "
                  << got_hit << ", " << got_bytes << " B/token\n";
    }
}

}  // namespace
}  // namespace moe

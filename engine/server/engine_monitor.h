// The engine seen live: once a second a sample of generation and prompt tok/s, expert read GB/s, cache hit
// rate, prefetch accuracy, the share of the second spent blocked on I/O and computing, RSS and slots, kept for
// the last five minutes; plus the expert heat map and the configuration (and the plan's decisions, when serve
// was given its plan). /v1/engine/stats, its server-sent-event stream and the web page read it; /metrics
// keeps the Prometheus view of the same counters. When experts stream, each sample also carries the cache's
// recent hit rate beside Belady's MIN at the same budget over the same steps (RoutingWindow, live_cache_bound),
// recomputed every few seconds.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/runtime/routing_window.h"
#include "engine/server/generation.h"

namespace moe {

class EngineMonitor {
public:
    // `config`: static facts shown beside the samples (threads, budget split, plan decisions...). `heat_dims`:
    // (layers, experts) of the heat map; `pinned`: (layer, expert) pairs a routing profile keeps resident;
    // `routing`: the streaming engine's recent steps (null in RAM).
    EngineMonitor(Generator* gen, nlohmann::json config, std::pair<uint32_t, uint32_t> heat_dims, std::vector<std::pair<uint32_t, uint32_t>> pinned,
                  const RoutingWindow* routing = nullptr, double period_s = 1.0, size_t keep = 300);
    ~EngineMonitor();

    // {"config", "samples": [...], "heat": {"layers", "experts", "counts", "pinned"}}.
    nlohmann::json snapshot() const;
    // The first sample newer than `seq` (which it advances), waiting up to `timeout`; null on timeout or stop.
    nlohmann::json next_sample(uint64_t& seq, std::chrono::milliseconds timeout) const;
    void stop();
    bool stopped() const {
        std::lock_guard<std::mutex> lk(mu_);
        return stop_;
    }

private:
    void run();
    nlohmann::json take_sample();
    // The latest cache_bound object, recomputed when new steps came and kBoundEvery has passed.
    const nlohmann::json& cache_bound(std::chrono::steady_clock::time_point now);
    static constexpr std::chrono::seconds kBoundEvery{5};

    Generator* gen_;
    nlohmann::json config_;
    std::pair<uint32_t, uint32_t> dims_;
    std::vector<std::pair<uint32_t, uint32_t>> pinned_;
    double period_s_;
    size_t keep_;
    mutable std::mutex mu_;
    mutable std::condition_variable cv_;
    std::deque<nlohmann::json> samples_;
    uint64_t seq_ = 0;  // samples taken so far
    bool stop_ = false;
    // The previous reading, for rates.
    std::chrono::steady_clock::time_point last_t_;
    uint64_t last_tokens_ = 0, last_prompt_ = 0, last_busy_ = 0;
    ExpertSourceStats last_x_;
    const RoutingWindow* routing_;
    nlohmann::json bound_;  // null until enough steps
    uint64_t bound_steps_seen_ = 0;
    std::chrono::steady_clock::time_point bound_t_{};
    std::thread thread_;
};

// Resident set size of this process, from /proc/self/status (0 when unreadable).
uint64_t process_rss_bytes();

}  // namespace moe

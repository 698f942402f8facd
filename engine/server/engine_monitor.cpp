#include "engine/server/engine_monitor.h"

#include "engine/runtime/cache_sim.h"
#include "engine/server/prompt_cache.h"

#include <malloc.h>

#include <fstream>

namespace moe {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

uint64_t process_rss_bytes() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    return 0;
}

EngineMonitor::EngineMonitor(Generator* gen, json config, std::pair<uint32_t, uint32_t> heat_dims, std::vector<std::pair<uint32_t, uint32_t>> pinned,
                             const RoutingWindow* routing, double period_s, size_t keep)
    : gen_(gen), config_(std::move(config)), dims_(heat_dims), pinned_(std::move(pinned)), period_s_(period_s), keep_(keep), routing_(routing) {
    last_t_ = Clock::now();
    last_x_ = gen_->expert_stats();
    thread_ = std::thread([this] { run(); });
}

EngineMonitor::~EngineMonitor() { stop(); }

void EngineMonitor::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return;
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

json EngineMonitor::take_sample() {
    const auto now = Clock::now();
    const double dt = std::max(1e-3, std::chrono::duration<double>(now - last_t_).count());
    GenerationStats& s = gen_->stats();
    const uint64_t tokens = s.tokens_decoded.load(), prompt = s.prompt_evaluated.load(), busy = s.busy_ns.load();
    const ExpertSourceStats x = gen_->expert_stats();
    const uint64_t lookups = (x.hits - last_x_.hits) + (x.misses - last_x_.misses);
    const uint64_t issued = x.prefetch_issued - last_x_.prefetch_issued;
    const double wait_s = static_cast<double>(x.wait_ns - last_x_.wait_ns) / 1e9;
    const double busy_s = static_cast<double>(busy - last_busy_) / 1e9;
    json sample = {{"t", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
                   {"gen_tokens_per_s", static_cast<double>(tokens - last_tokens_) / dt},
                   {"prompt_tokens_per_s", static_cast<double>(prompt - last_prompt_) / dt},
                   {"read_bytes_per_s", static_cast<double>(x.bytes_read - last_x_.bytes_read) / dt},
                   {"cache_hit_rate", lookups ? json(static_cast<double>(x.hits - last_x_.hits) / static_cast<double>(lookups)) : json(nullptr)},
                   {"prefetch_accuracy",
                    issued ? json(static_cast<double>(x.prefetch_used - last_x_.prefetch_used) / static_cast<double>(issued)) : json(nullptr)},
                   {"io_blocked_share", std::min(1.0, wait_s / dt)},
                   {"compute_share", std::clamp((busy_s - wait_s) / dt, 0.0, 1.0)},
                   {"rss_bytes", process_rss_bytes()},
                   {"slots_busy", gen_->slots_busy()},
                   {"queued", gen_->queued()}};
    if (const PromptCache* pc = gen_->prompt_cache()) sample["prompt_cache"] = prompt_cache_json(*pc, gen_->prompt_seconds_per_token());
    if (routing_) sample["cache_bound"] = cache_bound(now);
    if (gen_->draft_mode() != DraftMode::Off)
        sample["drafts"] = {{"steps", s.draft_steps.load()}, {"drafted", s.draft_tokens.load()}, {"accepted", s.draft_accepted.load()}};
    last_t_ = now;
    last_tokens_ = tokens;
    last_prompt_ = prompt;
    last_busy_ = busy;
    last_x_ = x;
    return sample;
}

const json& EngineMonitor::cache_bound(Clock::time_point now) {
    const uint64_t seen = routing_->steps_seen();
    if (seen == bound_steps_seen_ || now - bound_t_ < kBoundEvery) return bound_;
    LiveCacheBound b;
    uint64_t window_first = 0, kept = 0, budget = 0;
    {
        const RoutingWindow::Recent recent = routing_->recent();
        b = live_cache_bound(recent.trace);
        window_first = recent.first_step;
        kept = recent.trace.steps.size();
        budget = recent.trace.header.cache_bytes;
    }
    // The replay's parsed steps (on a 75-layer model, hundreds of thousands of small vectors) were freed into
    // this thread's malloc arena, where they would stay as resident memory a long-running server never uses
    // again: hand them back, so its RSS is its caches, not the last replay.
    malloc_trim(0);
    bound_steps_seen_ = seen;
    bound_t_ = now;
    if (b.steps == 0) return bound_;
    const auto rate = [](uint64_t part, uint64_t of) { return of ? json(static_cast<double>(part) / static_cast<double>(of)) : json(nullptr); };
    // The steps replayed and those counted, as indices since the server started (a trace file of the same run
    // holds them).
    const uint64_t first = window_first + (kept - b.steps);
    bound_ = {{"window_first_step", window_first},
              {"first_step", first},
              {"steps", b.steps},
              {"tokens", b.tokens},
              {"budget_bytes", budget},
              {"hit_rate", rate(b.engine.hits, b.engine.lookups)},
              {"belady_hit_rate", rate(b.belady.hits, b.belady.lookups)},
              // What eviction earned (hits not brought in by a prefetch) as a share of MIN's, which never prefetches.
              {"retained_of_belady", rate(b.engine.retained_hits(), b.belady.hits)},
              {"bytes_per_token", b.engine.bytes_per_token()},
              {"belady_bytes_per_token", b.belady.bytes_per_token()}};
    return bound_;
}

void EngineMonitor::run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
        cv_.wait_for(lk, std::chrono::duration<double>(period_s_), [&] { return stop_; });
        if (stop_) break;
        lk.unlock();
        json sample = take_sample();
        lk.lock();
        samples_.push_back(std::move(sample));
        if (samples_.size() > keep_) samples_.pop_front();
        ++seq_;
        cv_.notify_all();
    }
}

json EngineMonitor::snapshot() const {
    std::vector<uint64_t> counts = gen_->expert_heat();
    if (counts.empty()) counts.assign(size_t{dims_.first} * dims_.second, 0);  // nothing routed yet
    json heat = {{"layers", dims_.first}, {"experts", dims_.second}, {"counts", counts}, {"pinned", json::array()}};
    for (const auto& [l, e] : pinned_) heat["pinned"].push_back({l, e});
    std::lock_guard<std::mutex> lk(mu_);
    return {{"config", config_}, {"samples", json(std::vector<json>(samples_.begin(), samples_.end()))}, {"heat", heat}};
}

json EngineMonitor::next_sample(uint64_t& seq, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return stop_ || seq_ > seq; }) || stop_ || samples_.empty()) return nullptr;
    seq = seq_;
    return samples_.back();
}

}  // namespace moe

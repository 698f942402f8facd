#include "cli/plan_trace.h"

#include <cstdio>

#include "cli/commands.h"
#include "engine/gguf/gguf.h"
#include "engine/runtime/cache_sim.h"
#include "tune/check.h"
#include "tune/perf_model.h"

namespace moe::cli {

void apply_routing_trace(Plan& p, const ModelFacts& m, double mem_bytes_per_s) {
    if (p.routing_trace_path.empty()) return;
    if (p.target != "engine") throw CliError("--trace: only the engine target streams experts through a cache to simulate");
    RoutingTrace t;
    try {
        t = read_routing_trace(p.routing_trace_path);
    } catch (const RoutingTraceError& e) { throw CliError(e.what()); }
    if (routing_model_hash(open_gguf_model(p.model_path)) != t.header.model_hash)
        throw CliError(p.routing_trace_path + ": a routing trace of another model than " + p.model_path + " (" + t.header.arch + ")");
    if (t.steps.empty()) throw CliError(p.routing_trace_path + ": the routing trace has no steps");

    auto per_token = [](const CacheSimResult& r) { return r.decode_tokens ? r.decode_bytes_per_token() : r.bytes_per_token(); };
    const CacheSimResult planned = simulate_engine_cache(t, EvictionPolicy::LruFrequency, p.expert_cache_bytes);
    const double bytes = per_token(planned);
    const double expert_bytes = static_cast<double>(m.expert_bytes_per_token());
    const double uniform = m.expert_bytes ? std::min(1.0, static_cast<double>(p.expert_cache_bytes) / static_cast<double>(m.expert_bytes)) : 1.0;
    // The estimate's hit rate in bytes: what the trace says is read per token, prefetches included.
    const double h = expert_bytes > 0 ? std::clamp(1.0 - bytes / expert_bytes, 0.0, 1.0) : 1.0;
    const DecodeEstimate e = estimate_decode_with_hit_rate(m, h, p.disk_bytes_per_s, mem_bytes_per_s);
    p.predicted_tok_s = e.tokens_per_s;
    p.prediction_formula = e.formula() + " (h: bytes read per token simulated on the routing trace)";
    char reason[512];
    std::snprintf(reason, sizeof reason,
                  "simulated on %s (%llu tokens) at the planned cache of %s with lru+frequency: hit rate %.1f%%, %.2f MiB read per token "
                  "(uniform routing would assume a hit rate of %.1f%%)",
                  p.routing_trace_path.c_str(), static_cast<unsigned long long>(planned.tokens),
                  human_bytes(static_cast<double>(p.expert_cache_bytes)).c_str(), 100 * planned.hit_rate(), bytes / 1048576.0, 100 * uniform);
    char value[32];
    std::snprintf(value, sizeof value, "%.4f", planned.hit_rate());
    p.reasons.push_back({"expert_cache_hit_rate", {value, reason}});
    // The curve below the plan: the smallest share of the cache that reads within 5% as much.
    for (double f : {0.25, 0.5, 0.75}) {
        const uint64_t smaller = static_cast<uint64_t>(static_cast<double>(p.expert_cache_bytes) * f);
        if (smaller < t.header.slot_bytes * t.header.n_expert_used) continue;
        const CacheSimResult r = simulate_engine_cache(t, EvictionPolicy::LruFrequency, smaller);
        if (per_token(r) <= bytes * 1.05 + 1) {
            p.notes.push_back("routing trace: a cache of " + human_bytes(static_cast<double>(smaller)) + " reads within 5% of the planned " +
                              human_bytes(static_cast<double>(p.expert_cache_bytes)) + "'s bytes per token on this traffic; the other " +
                              human_bytes(static_cast<double>(p.expert_cache_bytes - smaller)) +
                              " could hold KV cache for a longer --ctx or more --parallel slots");
            break;
        }
    }
}

CheckRow routing_trace_row(const std::string& trace_path, const std::string& model_path, uint64_t ram_budget, uint64_t cache_bytes) {
    RoutingTrace t;
    try {
        t = read_routing_trace(trace_path);
    } catch (const RoutingTraceError& e) { throw CliError(e.what()); }
    if (routing_model_hash(open_gguf_model(model_path)) != t.header.model_hash)
        throw CliError(trace_path + ": a routing trace of another model than " + model_path + " (" + t.header.arch + ")");
    if (t.steps.empty()) throw CliError(trace_path + ": the routing trace has no steps");
    auto per_token = [](const CacheSimResult& r) { return r.decode_tokens ? r.decode_bytes_per_token() : r.bytes_per_token(); };
    const CacheSimResult engine = simulate_engine_cache(t, EvictionPolicy::LruFrequency, cache_bytes);
    const CacheSimResult bound = simulate_belady(t, cache_bytes);
    char measured[512];
    std::snprintf(measured, sizeof measured,
                  "hit rate %.1f%% with lru+frequency and prefetch (Belady's eviction without prefetch: %.1f%%, ratio %.2f), %.2f MiB read per "
                  "token, over %llu tokens at the "
                  "cache the budget leaves, %s (%llu bytes)",
                  100 * engine.hit_rate(), 100 * bound.hit_rate(), bound.hit_rate() > 0 ? engine.hit_rate() / bound.hit_rate() : 1.0,
                  per_token(engine) / 1048576.0, static_cast<unsigned long long>(engine.tokens),
                  human_bytes(static_cast<double>(cache_bytes)).c_str(), static_cast<unsigned long long>(cache_bytes));
    CheckRow r{"routing_trace",
               "the expert cache on your own traffic (--trace " + trace_path + ")",
               CheckStatus::Pass,
               measured,
               "a budget past the steep part of the traffic's curve",
               ""};
    const CacheSimResult twice = simulate_engine_cache(t, EvictionPolicy::LruFrequency, cache_bytes * 2);
    if (per_token(engine) > 0 && per_token(twice) <= 0.75 * per_token(engine)) {
        char fix[256];
        std::snprintf(fix, sizeof fix,
                      "--ram-budget %llu, if RAM allows: a cache twice as large reads %.2f MiB per token (hit rate %.1f%%) on this traffic",
                      static_cast<unsigned long long>(ram_budget + cache_bytes), per_token(twice) / 1048576.0, 100 * twice.hit_rate());
        r.status = CheckStatus::Warn;
        r.fix = fix;
    }
    return r;
}

}  // namespace moe::cli

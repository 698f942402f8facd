#include "cli/plan_trace.h"

#include <cstdio>

#include "cli/commands.h"
#include "engine/gguf/gguf.h"
#include "engine/runtime/cache_sim.h"
#include "tune/check.h"
#include "tune/perf_model.h"

namespace moe::cli {
namespace {

// The trace, refused (CliError) when unreadable, of another model or empty.
RoutingTrace read_trace_of(const std::string& trace_path, const std::string& model_path) {
    RoutingTrace t;
    try {
        t = read_routing_trace(trace_path);
    } catch (const RoutingTraceError& e) { throw CliError(e.what()); }
    if (routing_model_hash(open_gguf_model(model_path)) != t.header.model_hash)
        throw CliError(trace_path + ": a routing trace of another model than " + model_path + " (" + t.header.arch + ")");
    if (t.steps.empty()) throw CliError(trace_path + ": the routing trace has no steps");
    return t;
}

// Bytes read per generated token (per token of any step when the trace has no decode steps).
double per_token(const CacheSimResult& r) { return r.decode_tokens ? r.decode_bytes_per_token() : r.bytes_per_token(); }

std::string mib_text(double bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f MiB", bytes / 1048576.0);
    return b;
}

}  // namespace

void apply_routing_trace(Plan& p, const ModelFacts& m, double mem_bytes_per_s) {
    if (p.routing_trace_path.empty()) return;
    if (p.target != "engine") throw CliError("--trace: only the engine target streams experts through a cache to simulate");
    const RoutingTrace t = read_trace_of(p.routing_trace_path, p.model_path);
    const CacheSimResult planned = simulate_engine_cache(t, kDefaultEvictionPolicy, p.expert_cache_bytes);
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
        const CacheSimResult r = simulate_engine_cache(t, kDefaultEvictionPolicy, smaller);
        if (per_token(r) <= bytes * 1.05 + 1) {
            p.notes.push_back("routing trace: a cache of " + human_bytes(static_cast<double>(smaller)) + " reads within 5% of the planned " +
                              human_bytes(static_cast<double>(p.expert_cache_bytes)) + "'s bytes per token on this traffic; the other " +
                              human_bytes(static_cast<double>(p.expert_cache_bytes - smaller)) +
                              " could hold KV cache for a longer --ctx or more --parallel slots");
            break;
        }
    }
}

void place_experts_by_trace(Plan& p, const ModelFacts& m, const PlanOptions& o, const std::function<Plan(const PlanOptions&)>& replan) {
    if (p.routing_trace_path.empty()) return;
    const RoutingTrace t = read_trace_of(p.routing_trace_path, p.model_path);
    const std::string trace_path = p.routing_trace_path;
    const uint64_t room = p.ram_budget_bytes > m.token_embd_bytes ? p.ram_budget_bytes - m.token_embd_bytes : 0;
    // Page-cache reads per token with a plan's layers on its GPUs.
    auto reads = [&](const Plan& q) {
        std::vector<bool> on_gpu(t.header.n_layer, false);
        for (const auto& g : q.gpus)
            for (uint32_t l : g.layers)
                if (l < on_gpu.size()) on_gpu[l] = true;
        return per_token(simulate_engine_cache(without_layers(t, on_gpu), EvictionPolicy::Lru, room, false));
    };
    const std::string at = " (LRU without prefetch, the page cache's nearest policy, over " + std::to_string(t.steps.size()) + " steps of " +
                           trace_path + ", in the " + human_bytes(static_cast<double>(room)) + " the RAM budget leaves beside the token embeddings)";
    const double planned = reads(p);
    if (!o.gpu_layers.empty() || planned == 0) {
        p.reasons.push_back({"page_cache_reads",
                             {mib_text(planned), "expert bytes llama.cpp would read from disk per token with this placement" + at +
                                                     (planned == 0 ? ": every routed expert the trace uses and no GPU holds fits in RAM, so the "
                                                                     "trace prefers no layer"
                                                                   : "")}});
        return;
    }
    // Every MoE layer on the CPU: the bytes the page cache fails each one for are its claim on a GPU.
    const CacheSimResult all = simulate_engine_cache(without_layers(t, {}), EvictionPolicy::Lru, room, false);
    PlanOptions by_trace = o;
    by_trace.layer_heat.clear();
    for (uint32_t l = 0; l < all.layer_bytes_read.size(); ++l)
        if (all.layer_bytes_read[l]) by_trace.layer_heat.emplace_back(l, all.layer_bytes_read[l]);
    by_trace.layer_heat_reason = "the layers whose experts the page cache would miss most on the routing trace " + trace_path +
                                 " first: llama.cpp maps the file, so the experts no GPU holds are read through it";
    Plan q = replan(by_trace);
    q.routing_trace_path = trace_path;
    const double traced = reads(q);
    const std::string other = o.layer_heat.empty() ? "the head- and tail-biased layout" : "the profile's layout";
    if (traced < planned) {
        p = std::move(q);
        p.reasons.push_back({"page_cache_reads",
                             {mib_text(traced), "expert bytes llama.cpp would read from disk per token with this placement" + at + "; " + other +
                                                    " would read " + mib_text(planned)}});
    } else {
        p.reasons.push_back({"page_cache_reads",
                             {mib_text(planned), "expert bytes llama.cpp would read from disk per token with this placement" + at +
                                                     "; putting the layers the page cache misses most on the GPUs "
                                                     "would read " +
                                                     mib_text(traced) + ", so " + other + " stays"}});
    }
}

CheckRow routing_trace_row(const std::string& trace_path, const std::string& model_path, uint64_t ram_budget, uint64_t cache_bytes) {
    const RoutingTrace t = read_trace_of(trace_path, model_path);
    const CacheSimResult engine = simulate_engine_cache(t, kDefaultEvictionPolicy, cache_bytes);
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
    const CacheSimResult twice = simulate_engine_cache(t, kDefaultEvictionPolicy, cache_bytes * 2);
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

// `plan --trace FILE`: the expert cache the plan sizes is judged on the user's own routing (a trace that run,
// serve or bench recorded on this model) instead of the uniform-routing assumption.
#pragma once
#include <functional>
#include <string>

#include "engine/model/model_facts.h"
#include "tune/check.h"
#include "tune/plan.h"
#include "tune/planner.h"

namespace moe::cli {

// Replays p.routing_trace_path (when set) at the planned cache budget with the engine's default policy: the
// prediction uses its bytes read per token, plan.yaml says why, and a note names a smaller cache that reads
// within 5% as much (what could go to KV instead). CliError for another model's trace or a non-engine target.
void apply_routing_trace(Plan& p, const ModelFacts& m, double mem_bytes_per_s);

// The same for --target llama-server / ik-llama-server: llama.cpp maps the file, so the routed experts no GPU
// holds are read through the page cache, which keeps what the RAM budget leaves beside the token embeddings.
// Replayed on the trace (LRU, no prefetch: the page cache's nearest policy), the layers it would miss most go
// to the GPUs first (-ot) when that reads less per token than the layout planned without the trace;
// plan.yaml's page_cache_reads gives the figure (and the other layout's). A pinned --gpu-layers is kept and
// only measured. `replan` plans again with other options.
void place_experts_by_trace(Plan& p, const ModelFacts& m, const PlanOptions& o, const std::function<Plan(const PlanOptions&)>& replan);

// `check --model M --ram-budget B --trace FILE`: the expert cache the budget leaves, replayed on the trace with
// the engine's default policy beside Belady's bound. WARN when a cache twice as large would read at most 3/4
// of the bytes per token (the budget sits on the steep part of this traffic's curve), naming that budget.
// CliError for an unreadable trace or one of another model.
CheckRow routing_trace_row(const std::string& trace_path, const std::string& model_path, uint64_t ram_budget, uint64_t cache_bytes);

}  // namespace moe::cli

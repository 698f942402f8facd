// `plan --trace FILE`: the expert cache the plan sizes is judged on the user's own routing (a trace that run,
// serve or bench recorded on this model) instead of the uniform-routing assumption.
#pragma once
#include <string>

#include "engine/model/model_facts.h"
#include "tune/check.h"
#include "tune/plan.h"

namespace moe::cli {

// Replays p.routing_trace_path (when set) at the planned cache budget with the engine's default policy: the
// prediction uses its bytes read per token, plan.yaml says why, and a note names a smaller cache that reads
// within 5% as much (what could go to KV instead). CliError for another model's trace or a non-engine target.
void apply_routing_trace(Plan& p, const ModelFacts& m, double mem_bytes_per_s);

// `check --model M --ram-budget B --trace FILE`: the expert cache the budget leaves, replayed on the trace with
// the engine's default policy beside Belady's bound. WARN when a cache twice as large would read at most 3/4
// of the bytes per token (the budget sits on the steep part of this traffic's curve), naming that budget.
// CliError for an unreadable trace or one of another model.
CheckRow routing_trace_row(const std::string& trace_path, const std::string& model_path, uint64_t ram_budget, uint64_t cache_bytes);

}  // namespace moe::cli

// `plan --trace FILE`: the expert cache the plan sizes is judged on the user's own routing (a trace that run,
// serve or bench recorded on this model) instead of the uniform-routing assumption.
#pragma once
#include <string>

#include "engine/model/model_facts.h"
#include "tune/plan.h"

namespace moe::cli {

// Replays p.routing_trace_path (when set) at the planned cache budget with the engine's default policy: the
// prediction uses its bytes read per token, plan.yaml says why, and a note names a smaller cache that reads
// within 5% as much (what could go to KV instead). CliError for another model's trace or a non-engine target.
void apply_routing_trace(Plan& p, const ModelFacts& m, double mem_bytes_per_s);

}  // namespace moe::cli

// Renders moestream.service for a plan: Type=notify with watchdog, the plan's limits, CPU and NUMA
// binding, scheduling, and as much sandboxing as the engine allows. Every directive has its reason.
#pragma once
#include <string>

#include "tune/plan.h"

namespace moe {

std::string render_unit(const Plan& p);

}  // namespace moe

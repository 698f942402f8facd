// Renders moestream.service for a plan: Type=notify with watchdog, the plan's limits, CPU and NUMA
// binding, scheduling, and as much sandboxing as the engine allows. Every directive has its reason.
#pragma once
#include <string>

#include "tune/plan.h"

namespace moe {

std::string render_unit(const Plan& p);
// The [Service] sandbox lines every generated unit shares (engine, llama-server, rpc-server).
std::string sandbox_section(const std::string& read_only_path, bool uses_io_uring);

}  // namespace moe

// plan.yaml: written with yaml-cpp, read back strictly (every field checked; a newer schema is refused).
#pragma once
#include <string>

#include "tune/plan.h"

namespace moe {

std::string plan_to_yaml(const Plan& p);
// Throws PlanError naming the file and the field for a corrupt, incomplete or newer plan.
Plan load_plan(const std::string& path);

}  // namespace moe

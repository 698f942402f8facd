// The command a plan runs, as argv (for `moestream launch`, which execs it) and as launch.sh (for the
// systemd unit and for shells): both come from launch_argv, so they start identically.
#pragma once
#include <string>
#include <vector>

#include "tune/plan.h"

namespace moe {

std::vector<std::string> launch_argv(const Plan& p);
std::string render_launch_sh(const Plan& p);
std::string shell_quote(const std::string& s);

}  // namespace moe

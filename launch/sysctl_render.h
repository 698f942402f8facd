// Renders the kernel-facing files of a plan: /etc/sysctl.d/60-moestream.conf and
// /etc/security/limits.d/99-moestream.conf, every line with its reason.
#pragma once
#include <string>

#include "tune/plan.h"

namespace moe {

std::string render_sysctl_conf(const Plan& p);
std::string render_limits_conf(const Plan& p);

}  // namespace moe

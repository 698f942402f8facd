#include "launch/sysctl_render.h"

namespace moe {

std::string render_sysctl_conf(const Plan& p) {
    std::string s = "# /etc/sysctl.d/60-moestream.conf: written by `moestream apply` from " + p.out_dir +
                    "/plan.yaml\n"
                    "# Only what this engine needs on this host; each value with its reason. A file that sorts later\n"
                    "# (e.g. 99-sysctl.conf) can override these: `moestream check` reports it.\n";
    for (const auto& st : p.sysctl) s += "\n# " + st.reason + "\n" + st.key + " = " + st.value + "\n";
    for (const auto& n : p.notes) s += "\n# " + n + "\n";
    return s;
}

std::string render_limits_conf(const Plan& p) {
    // limits.d counts memlock in KiB.
    const uint64_t mib = std::stoull(p.memlock_limit);
    const std::string kib = std::to_string(mib * 1024);
    // A dynamic service user has no name to list: the unit's LimitMEMLOCK covers it, and this line serves a
    // `moestream launch` run by root.
    const std::string user = p.service_user == "dynamic" ? "root" : p.service_user;
    return "# /etc/security/limits.d/99-moestream.conf: written by `moestream apply` from " + p.out_dir +
           "/plan.yaml\n"
           "# memlock: the resident weights and KV cache (" +
           std::to_string(p.mlock_bytes) +
           " bytes) plus 64 MiB, so mlock can\n"
           "# pin them; applies to login sessions (the systemd unit sets LimitMEMLOCK itself).\n" +
           user + " soft memlock " + kib + "\n" + user + " hard memlock " + kib + "\n";
}

}  // namespace moe

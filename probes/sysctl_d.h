// How systemd-sysctl resolves sysctl.d: files from /etc, /run, /usr/local/lib, /usr/lib and /lib sysctl.d
// (a name in /etc hides the same name in the others), applied in file-name order, then /etc/sysctl.conf;
// the last assignment of a key wins. Used to find what silently overrides our 60-moestream.conf.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "probes/fs_root.h"

namespace moe {

struct SysctlAssignment {
    std::string key;
    std::string value;
    std::string file;  // host path of the file that sets it
};

// Every assignment in application order (later wins).
std::vector<SysctlAssignment> sysctl_d_assignments(const FsRoot& fs);
// The assignment that wins for each key.
std::map<std::string, SysctlAssignment> sysctl_d_effective(const FsRoot& fs);
// Assignments of `key` in files applied after `our_file` (a basename such as 60-moestream.conf) whose
// value differs from `our_value`.
std::vector<SysctlAssignment> sysctl_overrides(const FsRoot& fs, const std::string& our_file, const std::string& key, const std::string& our_value);

}  // namespace moe

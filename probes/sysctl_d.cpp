#include "probes/sysctl_d.h"

#include <algorithm>
#include <sstream>

namespace moe {
namespace {

const char* kDirs[] = {"/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d"};

std::string trim(std::string s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

void parse_file(const FsRoot& fs, const std::string& path, std::vector<SysctlAssignment>& out) {
    auto text = fs.read(path);
    if (!text) return;
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
        line = trim(line);
        if (line.empty() || line[0] == '#' || line[0] == ';') continue;
        if (line[0] == '-') line.erase(0, 1);  // "-key = value": ignore errors, still an assignment
        auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        std::string key = trim(line.substr(0, eq));
        for (char& c : key)
            if (c == '/') c = '.';
        out.push_back({key, trim(line.substr(eq + 1)), path});
    }
}

}  // namespace

std::vector<SysctlAssignment> sysctl_d_assignments(const FsRoot& fs) {
    std::map<std::string, std::string> by_name;  // basename -> path of the directory that wins it
    for (const char* dir : kDirs)
        for (const auto& name : fs.list(dir))
            if (name.size() > 5 && name.substr(name.size() - 5) == ".conf" && !by_name.count(name)) by_name[name] = std::string(dir) + "/" + name;
    std::vector<SysctlAssignment> out;
    for (const auto& [name, path] : by_name) parse_file(fs, path, out);  // std::map iterates in name order
    parse_file(fs, "/etc/sysctl.conf", out);
    return out;
}

std::map<std::string, SysctlAssignment> sysctl_d_effective(const FsRoot& fs) {
    std::map<std::string, SysctlAssignment> eff;
    for (auto& a : sysctl_d_assignments(fs)) eff[a.key] = a;
    return eff;
}

std::vector<SysctlAssignment> sysctl_overrides(const FsRoot& fs, const std::string& our_file, const std::string& key, const std::string& our_value) {
    std::vector<SysctlAssignment> out;
    for (const auto& a : sysctl_d_assignments(fs)) {
        std::string base = a.file.substr(a.file.rfind('/') + 1);
        bool later = a.file == "/etc/sysctl.conf" || base > our_file;
        if (later && a.key == key && a.value != our_value) out.push_back(a);
    }
    return out;
}

}  // namespace moe

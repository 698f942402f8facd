// Reads /proc and /sys through a root prefix so tests can point the probes at fixture trees.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace moe {

class FsRoot {
public:
    explicit FsRoot(std::string root = "/");
    const std::string& root() const { return root_; }
    // Full path of an absolute host path under the root.
    std::string path(const std::string& abs) const;
    // File contents with trailing whitespace trimmed; nullopt if missing or unreadable.
    std::optional<std::string> read(const std::string& abs) const;
    std::optional<int64_t> read_int(const std::string& abs) const;
    std::vector<std::string> list(const std::string& abs_dir) const;
    bool exists(const std::string& abs) const;
    // Resolves a symlink under the root to a host-absolute path (the root prefix removed).
    std::optional<std::string> resolve(const std::string& abs) const;

private:
    std::string root_;
};

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt on malformed input.
std::optional<std::vector<int>> parse_cpu_list(const std::string& s);
std::string format_cpu_list(const std::vector<int>& cpus);

}  // namespace moe

// `moestream check`: one row per requirement with PASS/WARN/FAIL/UNKNOWN, the measured and required values,
// and the exact fix. Exit code as monitoring plugins do: 0 all pass, 1 warnings, 2 a failure, 3 unknown.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/model_facts.h"
#include "probes/fs_root.h"
#include "probes/host_facts.h"

namespace moe {

enum class CheckStatus { Pass, Warn, Fail, Unknown };
const char* status_name(CheckStatus s);

struct CheckRow {
    std::string id;    // stable key for machines: "memlock", "swappiness", ...
    std::string what;  // for people
    CheckStatus status = CheckStatus::Pass;
    std::string measured;
    std::string required;
    std::string fix;  // the sysctl line, limits.d line, systemd directive or numactl flag; empty on PASS
};

struct CheckInput {
    HostFacts host;  // storage filled when bandwidth was measured
    std::optional<ModelFacts> model;
    std::optional<uint64_t> ram_budget;  // the engine's whole RAM: resident + KV cache + working memory + expert cache
    uint64_t working_bytes = 0;          // the engine's activations, scratch, logits and process (engine_working_bytes)
    double mem_bytes_per_s = 0;          // measured RAM read bandwidth (0: not measured)
    bool tuned_running = false;
    std::string tuned_profile;
    uint32_t n_ctx = 4096;
    GgmlType cache_type_k = GgmlType::F16, cache_type_v = GgmlType::F16;  // --cache-type-k/-v: the KV rows' types
};

std::vector<CheckRow> run_checks(const CheckInput& in, const FsRoot& fs);
// Whether `path` (the program of `role`, "rpc-server" or "llama-server", that a plan starts on `host`) exists
// and runs there, by that host's probed facts; the fix names what the probe found instead.
CheckRow llama_binary_row(const std::string& host, const HostFacts& facts, const std::string& role, const std::string& path);
// The llama.cpp builds of the programs the rows above checked: RPC needs the same protocol on both sides (an
// rpc-server refuses a head of another version), so different builds are a WARN.
CheckRow llama_builds_row(const std::vector<std::pair<std::string, std::string>>& host_builds);
// serve --prompt-cache DIR: a directory (or one systemd makes under /var/cache), writable, with room on its
// filesystem for --prompt-cache-size beside the records already there.
CheckRow prompt_cache_row(const std::string& dir, uint64_t limit_bytes);
int check_exit_code(const std::vector<CheckRow>& rows);
nlohmann::json rows_to_json(const std::vector<CheckRow>& rows);
std::string rows_to_table(const std::vector<CheckRow>& rows);

// Whether tuned is running under this root (pid file, or a process named tuned).
bool tuned_running(const FsRoot& fs, std::string& profile);

std::string human_bytes(double bytes);

}  // namespace moe

// What `plan`, `install` and `regen` share with the cluster commands: reading and writing plan files, the
// host facts (from a file or probed), and systemd's exposure score of a unit.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "probes/host_facts.h"

namespace moe::cli {

std::string read_text(const std::string& path);
void write_text(const std::string& path, const std::string& text, unsigned mode);
// From a facts file (probe --json / --yaml), else probed now under `root` (storage measured unless told not).
HostFacts gather_host(const std::string& facts_file, const std::string& root, const std::string& model, double seconds, bool no_storage);
// This process's PATH as absolute directories, in order (where the planning host's programs are looked for).
std::vector<std::string> path_directories();
// systemd-analyze's overall exposure of a unit file ("1.9"), or nothing where the tool is missing or fails.
std::optional<std::string> unit_exposure(const std::string& unit);

}  // namespace moe::cli

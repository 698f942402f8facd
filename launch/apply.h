// Puts a plan's files in place under a root directory: shows a unified diff first, backs up what it
// replaces (restorable with rollback), writes atomically, and changes nothing on a second run.
#pragma once
#include <string>
#include <vector>

#include "tune/plan.h"

namespace moe {

struct GeneratedFile {
    std::string install_path;  // absolute host path ("/etc/sysctl.d/60-moestream.conf")
    std::string content;
    unsigned mode = 0644;
};

// sysctl.d and limits.d files (what `apply` writes).
std::vector<GeneratedFile> apply_files(const Plan& p);
// The systemd unit (what `install` writes).
GeneratedFile unit_file(const Plan& p);

struct ApplyResult {
    std::vector<std::string> changed;  // install paths written (or that would be, with dry_run)
    std::vector<std::string> unchanged;
    std::string diff;                         // unified diffs of every changed file
    std::string backup_dir;                   // where the replaced files went (empty when nothing changed)
    std::vector<std::string> applied_sysctl;  // keys written to /proc/sys (root "/" only)
};

// Writes `files` under `root` (dry_run: only computes the diff). Throws std::runtime_error on I/O errors,
// naming the path; a failed write leaves the old file in place.
ApplyResult apply_files_under(const std::vector<GeneratedFile>& files, const std::string& root, bool dry_run, const std::string& tag);
// Restores the most recent backup under `root`; returns the paths restored (or removed, when the file did
// not exist before). Throws when there is no backup.
std::vector<std::string> rollback_latest(const std::string& root);

// With root "/": writes the plan's sysctl keys to /proc/sys (the `sysctl --system` step for our keys only).
std::vector<std::string> apply_sysctl_now(const Plan& p);

}  // namespace moe

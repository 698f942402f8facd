// Random-read bandwidth of the filesystem under a path: fio (driven and its JSON parsed) over a sweep of
// block sizes, and a built-in io_uring O_DIRECT probe for hosts without fio. Reads the model's own file
// read-only when one is given; otherwise a scratch file written in full first (never fallocate-only,
// whose unwritten extents read back as zeros without touching the disk) and removed afterwards.
#pragma once
#include "engine/runtime/block_reader.h"
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "probes/host_facts.h"

namespace moe {

struct StorageProbeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct StorageProbeOptions {
    std::string dir;                      // filesystem to measure (scratch file goes here)
    std::string model_file;               // measure this file read-only instead of a scratch file
    double seconds = 5;                   // per measurement
    uint64_t scratch_bytes = 1ull << 30;  // scratch file size (capped by free space)
    bool use_fio = true;
    std::vector<uint64_t> block_sizes = {128 << 10, 512 << 10, 1 << 20};
    int queue_depth = 32;
    std::string fio_binary = "fio";
    std::function<void(const std::string&)> progress;  // what is being measured now (may be empty)
};

// Throws StorageProbeError for a path on tmpfs/ramfs (no O_DIRECT) or one that cannot be measured at all.
StorageFacts probe_storage(const StorageProbeOptions& opt);

// One fio random-read run on `file` (read-only when asked); nullopt with `why` set when fio is missing.
std::optional<BandwidthResult> run_fio(const std::string& fio, const std::string& file, uint64_t size, bool readonly, uint64_t block, int qd,
                                       double seconds, std::string& why);
// fio replaying a recorded read sequence (its iolog v2 format) at depth qd, O_DIRECT through io_uring, with no
// think time: the same work the engine did, at the device's pace. nullopt with `why` when fio is missing.
std::optional<BandwidthResult> run_fio_replay(const std::string& fio, const std::vector<std::string>& files, const std::vector<ReadRecord>& reads,
                                              int qd, std::string& why);
void write_fio_iolog(const std::string& path, const std::vector<std::string>& files, const std::vector<ReadRecord>& reads);
// Parses `fio --output-format=json` output; throws StorageProbeError naming what is missing.
BandwidthResult parse_fio_json(const std::string& text);
// Runs the built-in probe: random `block` reads at depth `qd` with O_DIRECT through io_uring.
BandwidthResult uring_random_read(const std::string& file, uint64_t file_bytes, uint64_t block, int qd, double seconds);

}  // namespace moe

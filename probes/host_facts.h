// Host facts, each with where it came from. Plain data: filled by the probes, read by the planner and
// `check`, written as JSON or YAML. A value that could not be read is absent (never guessed) and its
// `source` says why.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moe {

template <typename T>
struct Sourced {
    std::optional<T> value;
    std::string source;  // file, syscall or tool it came from; or why it is unknown
};

struct CpuFacts {
    Sourced<std::string> model;
    Sourced<int> logical_cpus;
    Sourced<int> physical_cores;
    Sourced<int> sockets;
    std::vector<int> smt_siblings_of_cpu0;   // logical CPUs sharing a core with cpu0
    std::vector<int> first_thread_per_core;  // one logical CPU per physical core (for pinning)
    std::map<std::string, bool> simd;        // avx2, fma, avx512f, avx512bw, avx512_vnni, avx512_bf16, avx512vbmi, neon, dotprod
    std::string simd_source;
};

struct NumaNode {
    int id = 0;
    std::vector<int> cpus;
    std::optional<uint64_t> mem_total_bytes;
};

struct NumaFacts {
    std::vector<NumaNode> nodes;
    std::string source;  // "hwloc" or "sysfs"
};

struct MemoryFacts {
    Sourced<uint64_t> total_bytes, available_bytes, swap_total_bytes, swap_free_bytes;
    Sourced<std::string> thp_enabled;  // always | madvise | never
    Sourced<uint64_t> hugepages_total, hugepage_size_bytes;
    // RAM read bandwidth measured by `probe` on the live host (absent for fixture trees and older files): what
    // the cluster planner divides each host's weight bytes by.
    Sourced<double> read_bytes_per_s;
};

struct LimitFacts {
    Sourced<uint64_t> memlock_soft, memlock_hard;  // bytes; absent value + source "unlimited" never: UINT64_MAX = unlimited
    Sourced<uint64_t> nofile_soft, nofile_hard;
    bool memlock_hard_raisable = false;  // would setrlimit above the hard limit work (CAP_SYS_RESOURCE)
};

struct KernelFacts {
    std::map<std::string, Sourced<int64_t>> sysctl;  // "vm.swappiness" -> value
    Sourced<bool> io_uring_works;                    // a real ring was created
    Sourced<int64_t> io_uring_disabled;              // kernel.io_uring_disabled (0 allowed, 1 restricted, 2 off)
};

struct BlockDeviceFacts {
    std::string name;       // nvme0n1, sda, vda (the whole disk, not the partition)
    std::string partition;  // nvme0n1p2 when the path lives on a partition
    Sourced<std::string> model;
    Sourced<uint64_t> size_bytes;
    Sourced<std::string> scheduler;
    Sourced<int64_t> nr_requests, read_ahead_kb, logical_block_size;
    Sourced<bool> rotational;
    Sourced<int> numa_node;  // absent when unknown (never guessed as 0)
};

struct BandwidthResult {
    std::string tool;  // "fio" or "io_uring-probe"
    uint64_t block_size = 0;
    int queue_depth = 0;
    double bytes_per_s = 0;
    double iops = 0;
    double clat_p50_us = 0, clat_p99_us = 0;
    double seconds = 0;
};

struct StorageFacts {
    std::string path;  // what was measured
    std::string file;  // the file read (model or scratch)
    Sourced<std::string> filesystem;
    Sourced<uint64_t> free_bytes;
    std::optional<BlockDeviceFacts> device;
    std::vector<BandwidthResult> results;  // fio sweep and the built-in probe
    std::vector<std::string> notes;        // disagreements, fallbacks, refusals
};

// llama.cpp's programs found on this host (for the llama-server and llama-rpc plans): where, whether they run,
// and the build they report.
struct LlamaCppBinary {
    std::string role;          // "rpc-server" or "llama-server"
    std::string path;          // absolute
    std::string found_by;      // "PATH" or "install location"
    bool runs = false;         // started, answered --version (or usage) and exited
    std::string build;         // "6123 (1a2b3c4)" as llama.cpp prints its build; empty when not reported
    std::string build_source;  // "--version", or "llama-server beside it" (rpc-server reports none)
    std::string detail;        // what it printed first, or why it did not run
};

struct LlamaCppFacts {
    bool probed = false;  // false in facts written before this probe existed, and under --root
    std::string source;
    std::vector<LlamaCppBinary> binaries;
};

struct HostFacts {
    int schema = 1;
    std::string root = "/";
    CpuFacts cpu;
    NumaFacts numa;
    MemoryFacts memory;
    LimitFacts limits;
    KernelFacts kernel;
    std::optional<StorageFacts> storage;
    LlamaCppFacts llama_cpp;
};

nlohmann::json to_json(const HostFacts& f);
// The same tree as YAML (block style).
std::string to_yaml(const HostFacts& f);
// Reads what to_json/to_yaml wrote (either format); throws std::runtime_error naming the file and field.
HostFacts host_facts_from_text(const std::string& text, const std::string& label);

}  // namespace moe

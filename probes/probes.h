// The host probes. Each reads through an FsRoot (fixture trees in tests) and reports what it could not read
// in the fact's `source` instead of failing; nothing here throws for a missing or unreadable file.
#pragma once
#include <string>
#include <vector>

#include "probes/fs_root.h"
#include "probes/host_facts.h"

namespace moe {

CpuFacts probe_cpu(const FsRoot& fs);
// hwloc for the real root (NUMA nodes and their memory), sysfs otherwise or when hwloc fails.
NumaFacts probe_numa(const FsRoot& fs);
MemoryFacts probe_memory(const FsRoot& fs);
// This process's limits (not root-prefixed: they are a property of the process, not of a file).
LimitFacts probe_limits();
// vm.* / kernel.* settings; `try_ring` creates a real io_uring (only meaningful for the real root).
KernelFacts probe_kernel(const FsRoot& fs, bool try_ring);
// A whole block device by name (vda, nvme0n1, sda) under /sys/block.
BlockDeviceFacts probe_block_device(const FsRoot& fs, const std::string& disk);
// The disk holding `path` ("MAJ:MIN" of its filesystem through /sys/dev/block); nullopt when unknown.
std::optional<BlockDeviceFacts> probe_block_device_for_path(const FsRoot& fs, const std::string& path);

// llama.cpp's rpc-server (ggml-rpc-server, or rpc-server before its rename) and llama-server on `path_env`
// (a PATH value) and in the install locations (/usr/local/bin, /usr/bin), each run once with --version.
LlamaCppFacts probe_llama_cpp(const std::string& path_env);
// The names each role's program has had, newest first.
const std::vector<std::string>& llama_cpp_names(const std::string& role);

struct HostProbeOptions {
    std::string root = "/";
    bool try_ring = true;
};
// Everything but storage bandwidth.
HostFacts probe_host(const HostProbeOptions& opt);

}  // namespace moe

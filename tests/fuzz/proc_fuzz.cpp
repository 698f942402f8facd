// libFuzzer target for the /proc and /sys parsers behind `probe` and `check` (which also read fixture trees
// and other hosts' copies under --root): any file contents must give facts or a `source` saying what could not
// be read, never a crash. Input: parts separated by "\n@@\n" become, in order, /proc/cpuinfo,
// /proc/meminfo, /sys/devices/system/cpu/online, cpu0's topology core_id, node0's cpulist and meminfo, then
// the block device nvme0n1's size, queue settings, model and numa_node, and the numa_node of the controller
// behind its multipath path nvme0c1n1 (the head's node is looked up there when its own is absent or -1).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "probes/probes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string root = "/tmp/moestream-proc-fuzz-" + std::to_string(::getpid());
    static const char* const files[] = {"/proc/cpuinfo",
                                        "/proc/meminfo",
                                        "/sys/devices/system/cpu/online",
                                        "/sys/devices/system/cpu/cpu0/topology/core_id",
                                        "/sys/devices/system/node/node0/cpulist",
                                        "/sys/devices/system/node/node0/meminfo",
                                        "/sys/block/nvme0n1/size",
                                        "/sys/block/nvme0n1/queue/scheduler",
                                        "/sys/block/nvme0n1/queue/nr_requests",
                                        "/sys/block/nvme0n1/queue/read_ahead_kb",
                                        "/sys/block/nvme0n1/queue/logical_block_size",
                                        "/sys/block/nvme0n1/queue/rotational",
                                        "/sys/block/nvme0n1/device/model",
                                        "/sys/block/nvme0n1/device/numa_node",
                                        "/sys/class/nvme/nvme1/device/numa_node"};
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root + "/sys/block/nvme0c1n1");  // the multipath path beside its head
    size_t start = 0;
    for (const char* f : files) {
        const size_t sep = text.find("\n@@\n", start);
        const std::string part = text.substr(start, sep == std::string::npos ? std::string::npos : sep - start);
        std::filesystem::create_directories(std::filesystem::path(root + f).parent_path());
        std::ofstream(root + f, std::ios::binary) << part;
        if (sep == std::string::npos) break;
        start = sep + 4;
    }
    const moe::FsRoot fs(root);
    (void)moe::probe_cpu(fs);
    (void)moe::probe_memory(fs);
    (void)moe::probe_numa(fs);
    (void)moe::probe_block_device(fs, "nvme0n1");
    return 0;
}

// libFuzzer target for the /proc and /sys parsers behind `probe` and `check` (which also read fixture trees
// and other hosts' copies under --root): any file contents must give facts or a `source` saying what could not
// be read, never a crash. Input: parts separated by "\n@@\n" become, in order, /proc/cpuinfo,
// /proc/meminfo, /sys/devices/system/cpu/online, cpu0's topology core_id, node0's cpulist and meminfo.
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
                                        "/sys/devices/system/node/node0/meminfo"};
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::filesystem::remove_all(root);
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
    return 0;
}

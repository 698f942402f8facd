// CPU model, logical CPUs vs physical cores (SMT siblings), sockets and the SIMD flags the kernels use.
#include <set>
#include <sstream>

#include "probes/probes.h"

namespace moe {

CpuFacts probe_cpu(const FsRoot& fs) {
    CpuFacts c;
    auto cpuinfo = fs.read("/proc/cpuinfo");
    std::set<std::string> flags;
    if (cpuinfo) {
        std::istringstream in(*cpuinfo);
        std::string line;
        while (std::getline(in, line)) {
            auto colon = line.find(':');
            if (colon == std::string::npos) continue;
            std::string key = line.substr(0, colon), val = line.substr(colon + 1);
            while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
            if (!val.empty() && val[0] == ' ') val.erase(0, 1);
            if (!c.model.value && (key == "model name" || key == "Hardware" || key == "cpu model")) c.model = {val, "/proc/cpuinfo"};
            if (flags.empty() && (key == "flags" || key == "Features")) {
                std::istringstream fl(val);
                for (std::string f; fl >> f;) flags.insert(f);
            }
        }
        c.simd_source = "/proc/cpuinfo";
    } else {
        c.simd_source = "unknown: /proc/cpuinfo unreadable";
    }
    if (!c.model.value) c.model.source = cpuinfo ? "/proc/cpuinfo has no model name" : "unknown: /proc/cpuinfo unreadable";
    for (auto [name, flag] : {std::pair{"avx2", "avx2"},
                              {"fma", "fma"},
                              {"f16c", "f16c"},
                              {"bmi2", "bmi2"},
                              {"avx512f", "avx512f"},
                              {"avx512dq", "avx512dq"},
                              {"avx512bw", "avx512bw"},
                              {"avx512vl", "avx512vl"},
                              {"avx512_vnni", "avx512_vnni"},
                              {"avx512_bf16", "avx512_bf16"},
                              {"avx512vbmi", "avx512vbmi"},
                              {"neon", "asimd"},
                              {"dotprod", "asimddp"}})
        c.simd[name] = flags.count(flag) > 0;

    // Topology from sysfs: one physical core per (package, core_id).
    auto online = fs.read("/sys/devices/system/cpu/online");
    std::vector<int> cpus;
    if (online) {
        if (auto l = parse_cpu_list(*online)) cpus = *l;
    }
    if (cpus.empty()) {
        for (const auto& e : fs.list("/sys/devices/system/cpu"))
            if (e.size() > 3 && e.rfind("cpu", 0) == 0 && std::isdigit(static_cast<unsigned char>(e[3]))) cpus.push_back(std::stoi(e.substr(3)));
        std::sort(cpus.begin(), cpus.end());
    }
    if (cpus.empty()) {
        c.logical_cpus.source = c.physical_cores.source = "unknown: /sys/devices/system/cpu unreadable";
        return c;
    }
    c.logical_cpus = {static_cast<int>(cpus.size()), "/sys/devices/system/cpu/online"};
    std::set<std::pair<int64_t, int64_t>> cores;
    std::set<int64_t> packages;
    bool topo_ok = true;
    for (int cpu : cpus) {
        std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        auto core = fs.read_int(base + "core_id");
        auto pkg = fs.read_int(base + "physical_package_id");
        if (!core || !pkg) {
            topo_ok = false;
            break;
        }
        if (cores.insert({*pkg, *core}).second) c.first_thread_per_core.push_back(cpu);
        packages.insert(*pkg);
    }
    if (topo_ok) {
        c.physical_cores = {static_cast<int>(cores.size()), "/sys/devices/system/cpu/cpu*/topology/{core_id,physical_package_id}"};
        c.sockets = {static_cast<int>(packages.size()), "/sys/devices/system/cpu/cpu*/topology/physical_package_id"};
        if (auto sib = fs.read("/sys/devices/system/cpu/cpu" + std::to_string(cpus[0]) + "/topology/thread_siblings_list"))
            if (auto l = parse_cpu_list(*sib)) c.smt_siblings_of_cpu0 = *l;
    } else {
        c.physical_cores.source = "unknown: topology files missing under /sys/devices/system/cpu/cpu*/topology";
        c.first_thread_per_core.clear();
    }
    return c;
}

}  // namespace moe

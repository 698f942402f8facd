// NUMA nodes with their CPUs and memory: hwloc on the real host, /sys/devices/system/node otherwise.
#include <hwloc.h>

#include <sstream>

#include "probes/probes.h"

namespace moe {
namespace {

std::optional<NumaFacts> numa_from_hwloc() {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return std::nullopt;
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return std::nullopt;
    }
    NumaFacts f;
    f.source = "hwloc";
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; ++i) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
        NumaNode node;
        node.id = static_cast<int>(o->os_index);
        unsigned cpu;
        hwloc_bitmap_foreach_begin(cpu, o->cpuset) { node.cpus.push_back(static_cast<int>(cpu)); }
        hwloc_bitmap_foreach_end();
        if (o->attr) node.mem_total_bytes = o->attr->numanode.local_memory;
        f.nodes.push_back(node);
    }
    hwloc_topology_destroy(topo);
    if (f.nodes.empty()) return std::nullopt;
    return f;
}

}  // namespace

NumaFacts probe_numa(const FsRoot& fs) {
    if (fs.root() == "/")
        if (auto h = numa_from_hwloc()) return *h;
    NumaFacts f;
    f.source = "sysfs /sys/devices/system/node";
    for (const auto& e : fs.list("/sys/devices/system/node")) {
        if (e.rfind("node", 0) != 0 || e.size() < 5 || !std::isdigit(static_cast<unsigned char>(e[4]))) continue;
        NumaNode node;
        node.id = std::stoi(e.substr(4));
        const std::string base = "/sys/devices/system/node/" + e;
        if (auto l = fs.read(base + "/cpulist"))
            if (auto cpus = parse_cpu_list(*l)) node.cpus = *cpus;
        if (auto mi = fs.read(base + "/meminfo")) {
            std::istringstream in(*mi);
            std::string line;
            while (std::getline(in, line)) {
                auto pos = line.find("MemTotal:");
                if (pos == std::string::npos) continue;
                std::istringstream ls(line.substr(pos + 9));
                uint64_t kb;
                if (ls >> kb) node.mem_total_bytes = kb * 1024;
            }
        }
        f.nodes.push_back(node);
    }
    std::sort(f.nodes.begin(), f.nodes.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    if (f.nodes.empty()) {
        // No node directory: a kernel without NUMA support is one node holding every CPU and all memory.
        NumaNode node;
        if (auto online = fs.read("/sys/devices/system/cpu/online"))
            if (auto l = parse_cpu_list(*online)) node.cpus = *l;
        f.nodes.push_back(node);
        f.source = "one node assumed: /sys/devices/system/node absent";
    }
    return f;
}

}  // namespace moe

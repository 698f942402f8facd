// The block device under a path: queue settings, size, model, rotational, and the NUMA node it hangs off
// (NVMe multipath heads resolved through their controllers; unknown stays unknown).
#include <hwloc.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <regex>
#include <set>

#include "probes/probes.h"

namespace moe {
namespace {

std::optional<int> node_of(const FsRoot& fs, const std::string& numa_file) {
    auto v = fs.read_int(numa_file);
    if (!v || *v < 0) return std::nullopt;  // -1: the platform does not say
    return static_cast<int>(*v);
}

// hwloc's view: the block OS device's first non-I/O ancestor and its NUMA nodeset (I/O objects kept).
std::optional<int> node_from_hwloc(const std::string& disk, std::string& why) {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return std::nullopt;
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    std::optional<int> node;
    if (hwloc_topology_load(topo) == 0) {
        for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
            if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_BLOCK || !o->name || disk != o->name) continue;
            hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
            if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1) {
                node = hwloc_bitmap_first(anc->nodeset);
                why = std::string("hwloc: block device ") + o->name + " under " + hwloc_obj_type_string(anc->type);
            } else {
                why = std::string("hwloc: block device ") + o->name + " is not local to a single NUMA node";
            }
            break;
        }
    }
    hwloc_topology_destroy(topo);
    return node;
}

}  // namespace

BlockDeviceFacts probe_block_device(const FsRoot& fs, const std::string& disk) {
    BlockDeviceFacts d;
    d.name = disk;
    const std::string base = "/sys/block/" + disk;
    auto str = [&](Sourced<std::string>& out, const std::string& rel) {
        if (auto v = fs.read(base + rel)) out = {*v, base + rel};
        else out.source = "unreadable: " + base + rel;
    };
    auto num = [&](Sourced<int64_t>& out, const std::string& rel) {
        if (auto v = fs.read_int(base + rel)) out = {*v, base + rel};
        else out.source = "unreadable: " + base + rel;
    };
    str(d.model, "/device/model");
    if (auto sectors = fs.read_int(base + "/size")) d.size_bytes = {static_cast<uint64_t>(*sectors) * 512, base + "/size"};
    else d.size_bytes.source = "unreadable: " + base + "/size";
    if (auto s = fs.read(base + "/queue/scheduler")) {
        auto a = s->find('['), b = s->find(']');
        d.scheduler = {a != std::string::npos && b > a ? s->substr(a + 1, b - a - 1) : *s, base + "/queue/scheduler"};
    } else {
        d.scheduler.source = "unreadable: " + base + "/queue/scheduler";
    }
    num(d.nr_requests, "/queue/nr_requests");
    num(d.read_ahead_kb, "/queue/read_ahead_kb");
    num(d.logical_block_size, "/queue/logical_block_size");
    if (auto r = fs.read_int(base + "/queue/rotational")) d.rotational = {*r != 0, base + "/queue/rotational"};
    else d.rotational.source = "unreadable: " + base + "/queue/rotational";

    if (fs.root() == "/") {
        std::string why;
        if (auto n = node_from_hwloc(disk, why)) {
            d.numa_node = {*n, why};
            return d;
        }
    }
    if (auto n = node_of(fs, base + "/device/numa_node")) {
        d.numa_node = {*n, base + "/device/numa_node"};
        return d;
    }
    // NVMe multipath head nvme<S>n<N>: its paths nvme<S>c<C>n<N> name the controllers, whose PCI device
    // has the node. All paths must agree, or the node is reported unknown.
    static const std::regex head(R"(nvme(\d+)n(\d+))");
    std::smatch m;
    if (std::regex_match(disk, m, head)) {
        std::set<int> nodes;
        std::string via;
        const std::regex path_re("nvme" + m[1].str() + R"(c(\d+)n)" + m[2].str());
        for (const auto& e : fs.list("/sys/block")) {
            std::smatch pm;
            if (!std::regex_match(e, pm, path_re)) continue;
            std::string ctrl_file = "/sys/class/nvme/nvme" + pm[1].str() + "/device/numa_node";
            if (auto n = node_of(fs, ctrl_file)) {
                nodes.insert(*n);
                via = ctrl_file;
            }
        }
        if (nodes.size() == 1) {
            d.numa_node = {*nodes.begin(), "multipath head via " + via};
            return d;
        }
        if (nodes.size() > 1) {
            d.numa_node.source = "unknown: multipath controllers on different nodes";
            return d;
        }
    }
    d.numa_node.source = "unknown: " + base + "/device/numa_node absent or -1";
    return d;
}

std::optional<BlockDeviceFacts> probe_block_device_for_path(const FsRoot& fs, const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    const std::string devlink = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
    auto real = fs.resolve(devlink);
    if (!real) return std::nullopt;  // overlay/tmpfs/network filesystems have no block device
    std::string name = real->substr(real->rfind('/') + 1), partition;
    if (fs.exists(*real + "/partition")) {
        partition = name;
        std::string parent = real->substr(0, real->rfind('/'));
        name = parent.substr(parent.rfind('/') + 1);
    }
    // Device-mapper / md: report the first underlying disk.
    if (auto slaves = fs.list("/sys/block/" + name + "/slaves"); !slaves.empty()) {
        std::string s = slaves.front();
        if (auto r = fs.resolve("/sys/class/block/" + s); r && fs.exists(*r + "/partition")) {
            std::string parent = r->substr(0, r->rfind('/'));
            s = parent.substr(parent.rfind('/') + 1);
        }
        name = s;
    }
    BlockDeviceFacts d = probe_block_device(fs, name);
    d.partition = partition;
    return d;
}

}  // namespace moe

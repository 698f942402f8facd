// The kernel settings that matter for streaming experts, and whether io_uring really works here.
#include <liburing.h>

#include <cstring>

#include "probes/probes.h"

namespace moe {

namespace {
const char* kSysctls[] = {"vm.swappiness",    "vm.overcommit_memory", "vm.min_free_kbytes",    "vm.vfs_cache_pressure",
                          "vm.max_map_count", "vm.dirty_ratio",       "kernel.numa_balancing", "kernel.io_uring_disabled"};
}

KernelFacts probe_kernel(const FsRoot& fs, bool try_ring) {
    KernelFacts k;
    for (const char* key : kSysctls) {
        std::string rel = key;
        for (char& c : rel)
            if (c == '.') c = '/';
        const std::string path = "/proc/sys/" + rel;
        if (auto v = fs.read_int(path)) k.sysctl[key] = {*v, path};
        else k.sysctl[key] = {std::nullopt, fs.exists(path) ? "unreadable: " + path : "absent: " + path};
    }
    k.io_uring_disabled = k.sysctl["kernel.io_uring_disabled"];
    if (!try_ring) {
        k.io_uring_works.source = "not tried (fixture root)";
        return k;
    }
    struct io_uring ring;
    int rc = io_uring_queue_init(8, &ring, 0);
    if (rc == 0) {
        io_uring_queue_exit(&ring);
        k.io_uring_works = {true, "io_uring_queue_init(8)"};
    } else {
        k.io_uring_works = {false, std::string("io_uring_queue_init(8) failed: ") + std::strerror(-rc) +
                                       (rc == -EPERM ? " (kernel.io_uring_disabled or a seccomp filter)" : "")};
    }
    return k;
}

}  // namespace moe

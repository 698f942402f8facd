#include "probes/probes.h"

namespace moe {

HostFacts probe_host(const HostProbeOptions& opt) {
    FsRoot fs(opt.root);
    HostFacts h;
    h.root = fs.root();
    h.cpu = probe_cpu(fs);
    h.numa = probe_numa(fs);
    h.memory = probe_memory(fs);
    h.limits = probe_limits();
    h.kernel = probe_kernel(fs, opt.try_ring && fs.root() == "/");
    return h;
}

}  // namespace moe

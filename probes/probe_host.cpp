#include "probes/probes.h"

#include <cstdlib>

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
    if (fs.root() == "/") {
        const char* path = std::getenv("PATH");
        h.llama_cpp = probe_llama_cpp(path ? path : "");
    } else {
        h.llama_cpp.source = "not probed: programs are looked for on the live host only, not under --root";
    }
    return h;
}

}  // namespace moe

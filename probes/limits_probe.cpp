// RLIMIT_MEMLOCK and RLIMIT_NOFILE of this process, and whether the memlock hard limit can be raised.
#include <sys/resource.h>
#include <unistd.h>

#include "probes/probes.h"

namespace moe {

LimitFacts probe_limits() {
    LimitFacts l;
    auto conv = [](rlim_t v) { return v == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(v); };
    struct rlimit rl {};
    if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        l.memlock_soft = {conv(rl.rlim_cur), "getrlimit(RLIMIT_MEMLOCK)"};
        l.memlock_hard = {conv(rl.rlim_max), "getrlimit(RLIMIT_MEMLOCK)"};
        if (rl.rlim_max == RLIM_INFINITY) {
            l.memlock_hard_raisable = true;
        } else {
            // Raising the hard limit needs CAP_SYS_RESOURCE; try one page more and put it back.
            struct rlimit up = rl;
            up.rlim_max = rl.rlim_max + static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
            if (::setrlimit(RLIMIT_MEMLOCK, &up) == 0) {
                l.memlock_hard_raisable = true;
                ::setrlimit(RLIMIT_MEMLOCK, &rl);
            }
        }
    } else {
        l.memlock_soft.source = l.memlock_hard.source = "unknown: getrlimit(RLIMIT_MEMLOCK) failed";
    }
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        l.nofile_soft = {conv(rl.rlim_cur), "getrlimit(RLIMIT_NOFILE)"};
        l.nofile_hard = {conv(rl.rlim_max), "getrlimit(RLIMIT_NOFILE)"};
    }
    return l;
}

}  // namespace moe

#include "tune/perf_model.h"

#include <algorithm>
#include <cstdio>

namespace moe {

DecodeEstimate estimate_decode(const ModelFacts& m, uint64_t cache_bytes, double ssd, double mem) {
    return estimate_decode_with_hit_rate(
        m, m.expert_bytes ? std::min(1.0, static_cast<double>(cache_bytes) / static_cast<double>(m.expert_bytes)) : 1.0, ssd, mem);
}

DecodeEstimate estimate_decode_with_hit_rate(const ModelFacts& m, double hit_rate, double ssd, double mem) {
    DecodeEstimate e;
    e.expert_bytes_per_token = m.expert_bytes_per_token();
    e.hit_rate = std::clamp(hit_rate, 0.0, 1.0);
    e.io_bytes_per_token = static_cast<double>(e.expert_bytes_per_token) * (1.0 - e.hit_rate);
    e.ssd_bytes_per_s = ssd;
    e.t_io = ssd > 0 ? e.io_bytes_per_token / ssd : (e.io_bytes_per_token > 0 ? 1e30 : 0);
    e.active_bytes_per_token = m.active_bytes_per_token();
    e.mem_bytes_per_s = mem;
    e.t_compute = mem > 0 ? static_cast<double>(e.active_bytes_per_token) / mem : 0;
    const double t = std::max(e.t_io, e.t_compute);
    // Without a RAM bandwidth the compute side is unknown, and so is the speed (0), unless the disk bounds it.
    e.tokens_per_s = t > 0 && (mem > 0 || e.t_io > 0) ? 1.0 / t : 0;
    e.bound = e.t_io >= e.t_compute ? "disk" : "memory";
    return e;
}

std::string DecodeEstimate::formula() const {
    char buf[512];
    if (ssd_bytes_per_s <= 0 && io_bytes_per_token > 0) {  // nothing to divide by: say so instead of an infinite time
        std::snprintf(buf, sizeof buf, "unknown: t_io=%.1f MiB x (1-h), h=%.2f, over a disk bandwidth not measured (probe the storage)",
                      expert_bytes_per_token / 1048576.0, hit_rate);
        return buf;
    }
    if (mem_bytes_per_s <= 0 && io_bytes_per_token <= 0) {
        std::snprintf(buf, sizeof buf,
                      "unknown: t_compute=%.1f MiB per token over a RAM bandwidth not measured (run probe on the host, or plan there)",
                      active_bytes_per_token / 1048576.0);
        return buf;
    }
    std::snprintf(buf, sizeof buf, "1/max(t_io=%.1f MiB x (1-h), h=%.2f, / %.2f GB/s = %.2f ms; t_compute=%.1f MiB / %.1f GB/s = %.2f ms)",
                  expert_bytes_per_token / 1048576.0, hit_rate, ssd_bytes_per_s / 1e9, t_io * 1e3, active_bytes_per_token / 1048576.0,
                  mem_bytes_per_s / 1e9, t_compute * 1e3);
    return buf;
}

}  // namespace moe

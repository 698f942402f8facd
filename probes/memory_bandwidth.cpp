#include "probes/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace moe {

double measure_memory_read_bandwidth(int threads, size_t bytes) {
    threads = std::max(1, threads);
    std::vector<uint64_t> buf(bytes / 8);
    for (size_t i = 0; i < buf.size(); i += 512) buf[i] = i;  // fault every page in before timing
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                size_t per = buf.size() / threads, b = per * t, e = b + per;
                uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (size_t i = b; i + 4 <= e; i += 4) {
                    s0 += buf[i];
                    s1 += buf[i + 1];
                    s2 += buf[i + 2];
                    s3 += buf[i + 3];
                }
                sums[t] = s0 + s1 + s2 + s3;
            });
        for (auto& t : ts) t.join();
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(bytes) / dt);
    }
    volatile uint64_t sink = sums[0];
    (void)sink;
    return best;
}

}  // namespace moe

// RAM read bandwidth, measured: the compute side of the performance model (design section 4).
#pragma once
#include <cstddef>

namespace moe {

// Best of three passes of `threads` threads summing a `bytes` buffer (far larger than the caches).
double measure_memory_read_bandwidth(int threads, size_t bytes);

}  // namespace moe

// The per-weight-type part of `moestream bench`: how fast each kernel of this host consumes weight bytes.
#pragma once
#include <nlohmann/json.hpp>

#include "engine/gguf/gguf.h"
#include "engine/kernels/flavor.h"

namespace moe::cli {

// For each weight type among the model's matmul tensors (largest byte share first): single-thread weight
// bytes/s of the dot-product kernel of every ISA this CPU has, the scalar reference included as the baseline,
// on random rows of the model's row length that stay in cache, so the figure is the kernel's, not RAM's.
nlohmann::json bench_weight_kernels(const GgufModel& model, kernels::Flavor flavor, double seconds_per_kernel = 0.05);

// The table above as text lines for the human report.
void print_weight_kernels(const nlohmann::json& rows);

}  // namespace moe::cli

// GPU placement for a llama-server plan: what each device holds once the written command runs, and which
// layers' routed experts go where so that no device exceeds its --gpu-mem. The command offloads every layer
// (-ngl 999) split over the GPUs in proportion to --tensor-split (llama.cpp's layer split: layer il of
// block_count + 1 slots goes to the first device whose cumulative share exceeds il / (block_count + 1), the
// output to the slot after the last layer), keeps routed experts on the CPU (--cpu-moe) except the layers
// given to a GPU with -ot. So a device holds: its layers' non-expert weights, the output when it is last, its
// layers' KV cache, llama.cpp's compute buffer, a runtime reserve, and the routed experts placed on it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/model/model_facts.h"
#include "tune/plan.h"

namespace moe {

// "3-17:0,74-77:1": layers 3..17's experts on GPU 0, 74..77's on GPU 1.
struct GpuPin {
    uint32_t first = 0, last = 0;
    int gpu = 0;
};
// PlanError naming the bad part.
std::vector<GpuPin> parse_gpu_layers(const std::string& text);

struct GpuPlanOptions {
    std::map<int, uint64_t> gpu_mem;                                      // GPU index -> bytes the plan may use there
    uint32_t n_ctx = 4096;                                                // llama-server --ctx-size (all slots together)
    int n_batch = 2048, n_ubatch = 512;                                   // -b / -ub
    uint64_t reserve_bytes = 768ull << 20;                                // per GPU: CUDA context (~300-500 MiB), cuBLAS workspace
    std::vector<GpuPin> pinned;                                           // a layout the user fixed
    std::vector<std::pair<uint32_t, uint64_t>> layer_heat;                // routing profile: (layer, count)
    GgmlType cache_type_k = GgmlType::F16, cache_type_v = GgmlType::F16;  // -ctk / -ctv
};

// llama.cpp's KV cache types (-ctk / -ctv): f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, and for
// ik_llama.cpp also q6_0. PlanError naming the flag, the value and the choices.
GgmlType parse_cache_type(const std::string& flag, const std::string& name, const std::string& target);
// One token's cache on all layers in those types (the model's K and V element counts; MLA has no V cache).
uint64_t cache_bytes_per_token(const ModelFacts& m, GgmlType k, GgmlType v);

// Compute buffer of one device at -ub n_ubatch (an estimate from the graph's largest tensors, see gpu_plan.cpp).
uint64_t compute_buffer_bytes(const ModelFacts& m, int n_ubatch, bool has_output, bool has_experts);
// Every device's figures and its experts; PlanError when a device cannot hold its share of the layers (naming
// the flag and both values), or a pinned layout overlaps, names a dense layer, or exceeds a device.
std::vector<GpuAssignment> plan_gpus(const ModelFacts& m, const GpuPlanOptions& o);
// Per GPU, one line: each figure and the margin left.
std::string describe_gpu(const GpuAssignment& g);

}  // namespace moe

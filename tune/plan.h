// A plan: every decision the planner made for one model on one host, each with its reason, plus the
// hardware fingerprint `regen` compares. Plain data; written to and read from plan.yaml (plan_io.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moe {

constexpr int kPlanSchema = 1;

struct PlanValue {
    std::string value;   // as written to the files ("4-7", "unlimited", "1048576")
    std::string reason;  // one line: why, with the measured fact behind it
};

struct SysctlSetting {
    std::string key, value, reason;
};

// One GPU of a llama-server plan: what the written command puts there (tune/gpu_plan.h models it).
struct GpuAssignment {
    int gpu = 0;
    uint64_t budget_bytes = 0;               // --gpu-mem
    std::vector<uint32_t> layers;            // MoE layers whose routed experts go to this GPU (-ot ...=CUDAn)
    uint64_t used_bytes = 0;                 // the sum of the parts below
    uint64_t expert_bytes = 0;               // those layers' routed experts
    uint64_t layer_bytes = 0;                // the non-expert weights of the layers llama.cpp's layer split puts here
    uint64_t output_bytes = 0;               // output.weight and its norm, on the device after the last layer
    uint64_t kv_bytes = 0;                   // the KV cache of those layers at the plan's context
    uint64_t compute_bytes = 0;              // llama.cpp's compute buffer at -ub (an estimate)
    uint64_t reserve_bytes = 0;              // CUDA context, cuBLAS workspace, fragmentation
    uint32_t first_layer = 0, n_layers = 0;  // the layer split's range (--tensor-split)
    double split = 0;                        // this GPU's --tensor-split share
};

// llama.cpp's llama-server and ik_llama.cpp's: the same GPU placement and files, their own options.
inline bool is_llama_target(const std::string& target) { return target == "llama-server" || target == "ik-llama-server"; }

struct Fingerprint {
    std::string cpu_model;
    int physical_cores = 0;
    int logical_cpus = 0;
    std::string numa_layout;  // "0:0-3/256G;1:4-7/256G"
    uint64_t ram_bytes = 0;
    std::string block_device;  // "nvme0n1 SAMSUNG MZQL27T6HBLA 7.0 TiB"
    std::string model_file;    // "path size mtime"
};

struct Plan {
    int schema = kPlanSchema;
    std::string created_by;
    std::string target = "engine";  // engine | llama-server | ik-llama-server
    std::string model_path;
    std::string model_arch;
    uint64_t resident_bytes = 0, expert_bytes = 0;
    Fingerprint fingerprint;

    // Decisions
    int threads = 1;
    std::string cpus;                 // physcpubind / CPUAffinity list
    std::optional<int> membind_node;  // numactl --membind / NUMAMask
    uint64_t ram_budget_bytes = 0;    // the engine's whole footprint
    uint64_t kv_bytes = 0;
    uint32_t n_ctx = 4096;
    int parallel = 1;  // serve --parallel: slots, each with a KV cache of n_ctx
    uint64_t expert_cache_bytes = 0;
    int io_queue_depth = 32;
    uint64_t read_size = 1 << 20;
    uint64_t mlock_bytes = 0;   // resident bytes to lock
    std::string memlock_limit;  // limits.d / LimitMEMLOCK value
    double predicted_tok_s = 0;
    double disk_bytes_per_s = 0;  // the probe's fio bandwidth the plan used (0: none measured)
    std::string prediction_formula;
    std::vector<std::pair<std::string, PlanValue>> reasons;  // decision name -> value + reason, in order
    std::vector<SysctlSetting> sysctl;
    std::vector<std::string> notes;  // what was deliberately not set, and why

    // Serving
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string alias;
    std::string moestream_binary;  // absolute path used by launch.sh
    // The service's account: "dynamic" (DynamicUser=yes: a transient unprivileged user) or a user name.
    std::string service_user = "dynamic";
    // serve --prompt-cache: the directory prompt prefixes are saved to ("" off) and its size bound.
    std::string prompt_cache_dir;
    uint64_t prompt_cache_bytes = 8ull << 30;

    // llama-server target
    std::string llama_server_binary = "llama-server";
    std::vector<GpuAssignment> gpus;
    int n_batch = 2048, n_ubatch = 512;                      // llama-server -b / -ub (its defaults)
    uint64_t host_model_bytes = 0;                           // llama-server: model bytes left in RAM (token embeddings, experts not on a GPU)
    std::vector<std::string> server_args;                    // the target's own options (ik-llama-server: -fa, -mla, -amb, -tb), each with a reason
    std::string asked_gpu_layers;                            // --gpu-layers as given (a pinned layout)
    std::string cache_type_k = "f16", cache_type_v = "f16";  // llama-server -ctk / -ctv

    // What the user asked for, so `regen` re-plans with the same request.
    std::optional<uint64_t> asked_ram_budget;
    std::optional<int> asked_threads;
    std::string asked_gpu_mem;
    std::string draft = "off";       // engine: serve --draft (auto | lookup | mtp | off)
    std::string profile_path;        // routing profile: the engine keeps its hottest experts resident
    std::string routing_trace_path;  // routing trace (--trace): the cache's hit rate simulated on it, not assumed

    // Where the generated files were written (plan.yaml's directory).
    std::string out_dir;
};

}  // namespace moe

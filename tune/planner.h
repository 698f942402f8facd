// plan(HostFacts, ModelFacts, user limits) -> Plan. Pure: reads nothing from the host itself.
#pragma once
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/model/model_facts.h"
#include "probes/host_facts.h"
#include "tune/plan.h"

namespace moe {

// Bad user input or an infeasible plan; what() names the value.
struct PlanError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct PlanOptions {
    std::string model_path;
    std::string target = "engine";       // engine | llama-server
    std::optional<uint64_t> ram_budget;  // whole engine footprint (resident + KV + expert cache)
    std::optional<int> threads;
    uint32_t n_ctx = 4096;
    int parallel = 1;                                        // server slots, each with its own KV cache of n_ctx
    uint64_t engine_working_bytes = 0;                       // engine target: its activations, scratch, logits and process base
    std::map<int, uint64_t> gpu_mem;                         // llama-server: GPU index -> bytes the plan may use on it (all of it)
    std::string gpu_layers;                                  // llama-server: a pinned layout, "3-17:0,74-77:1" (tune/gpu_plan.h)
    int n_batch = 2048, n_ubatch = 512;                      // llama-server -b / -ub: the compute buffer follows -ub
    std::string cache_type_k = "f16", cache_type_v = "f16";  // llama-server -ctk / -ctv: the KV cache's types
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string alias;
    std::string moestream_binary = "/usr/local/bin/moestream";
    std::string llama_server_binary = "llama-server";
    std::string created_by;
    double mem_bytes_per_s = 0;                             // measured RAM bandwidth for the prediction (0: not shown)
    std::string draft = "off";                              // engine: serve --draft (mtp keeps the NextN block in RAM)
    uint64_t draft_block_bytes = 0;                         // engine, --draft mtp: that block's bytes (draft_block_bytes)
    std::string profile_path;                               // routing profile (moestream profile)
    std::vector<std::pair<uint32_t, uint64_t>> layer_heat;  // from the profile: (layer, routed count), or a trace's
    std::string layer_heat_reason;                          // where layer_heat came from, when not the profile
};

Plan make_plan(const HostFacts& host, const ModelFacts& model, const PlanOptions& opt);
// The host's share of the sysctl decisions (swap, reclaim reserve, NUMA balancing, overcommit) into p.sysctl
// and p.notes; the cluster planner uses it for every host.
void host_sysctl(const HostFacts& h, size_t numa_nodes, Plan& p);
Fingerprint fingerprint_of(const HostFacts& host, const std::string& model_path);
// "0=96G,1=96G" -> {0: 96 GiB, 1: 96 GiB}; PlanError naming the bad part.
std::map<int, uint64_t> parse_gpu_mem(const std::string& text);

}  // namespace moe

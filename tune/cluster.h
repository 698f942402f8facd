// Planning a llama.cpp RPC cluster from several hosts' probes: `rpc-server` on each worker, `llama-server
// --rpc` on the head. Layers go to hosts in contiguous ranges in proportion to each host's memory budget
// (the head also keeps the embeddings and output), every host is checked against its budget, and a decode
// speed is predicted: a token passes the hosts one after another, each reading its layers' active weights
// at its memory bandwidth, with one activation transfer per hop over the link.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/model/model_facts.h"
#include "probes/host_facts.h"
#include "tune/plan.h"

namespace moe {

struct ClusterHost {
    std::string name;     // head, worker1, ...
    std::string address;  // what rpc-server binds / the head connects to (head: where llama-server listens)
    HostFacts facts;
    double mem_bytes_per_s = 0;  // weight read bandwidth used for the prediction
};

struct ClusterOptions {
    std::string model_path;
    ClusterHost head;
    std::vector<ClusterHost> workers;
    int rpc_port = 50052;
    double link_bytes_per_s = 10e9 / 8;  // 10 Gbit/s
    double link_latency_s = 100e-6;      // per hop, each way
    uint32_t n_ctx = 4096;
    int port = 8000;  // llama-server's API port on the head
    // Empty: found (choose_llama_binary); else the path given, and why it was (regen passes the recorded reason).
    std::string llama_server_binary, rpc_server_binary;
    std::string llama_server_binary_reason, rpc_server_binary_reason;
    std::vector<std::string> planning_path;  // the planning host's PATH directories, searched after the hosts' probes
};

struct BinaryChoice {
    std::string path, reason;
    std::string warning;  // the hosts' probes disagree, or none found the program: check --cluster will say more
};
// The program of `role` ("rpc-server" on the workers, "llama-server" on the head): `given` when not empty;
// else the path the probes of `hosts` found it running at (the one most of them report); else the first
// directory of `planning_path` holding it under either name (ggml-rpc-server, or rpc-server before the
// rename); else llama.cpp's install location, /usr/local/bin, under its current name.
BinaryChoice choose_llama_binary(const std::string& role, const std::string& given, const std::vector<const ClusterHost*>& hosts,
                                 const std::vector<std::string>& planning_path);

struct HostShare {
    std::string name, address;
    uint64_t budget_bytes = 0, weight_bytes = 0;
    uint32_t first_layer = 0, n_layers = 0;  // a contiguous range
    double stage_s = 0;                      // per token: active bytes / bandwidth
    int threads = 1;
    std::string cpus;
    std::optional<int> numa_node;
    Plan host_plan;  // its sysctl and limits decisions (rendered like a single host's)
};

struct ClusterPlan {
    std::vector<HostShare> hosts;  // head first
    int rpc_port = 50052;
    double link_bytes_per_s = 0, hop_s = 0, predicted_tok_s = 0;
    std::string slowest, formula;
    std::vector<std::pair<std::string, std::string>> reasons;  // decision -> why
    std::vector<std::string> warnings;                         // e.g. a worker bound to a public address
    std::string model_path;
    uint32_t n_ctx = 4096;
    int port = 8000;
    std::string llama_server_binary, rpc_server_binary;
    std::string llama_server_binary_reason, rpc_server_binary_reason;
};

// Throws PlanError naming what does not fit (the model beyond all budgets, a worker without an address).
ClusterPlan make_cluster_plan(const ModelFacts& model, const ClusterOptions& opt);
// Loopback, private (10/8, 172.16/12, 192.168/16, fd00::/8), link-local: not reachable from the internet.
bool is_private_address(const std::string& address);

}  // namespace moe

// `plan --target llama-rpc`, `install --host-dir` and `regen --cluster`: the CLI side of a llama.cpp RPC
// cluster plan (tune/cluster.h decides, launch/cluster_files.h renders).
#pragma once
#include <string>
#include <vector>

#include "launch/apply.h"

namespace moe::cli {

struct ClusterRequest {
    std::string model, head;
    std::vector<std::string> workers;
    std::string out;
    int rpc_port = 50052;
    double link_gbps = 10, mem_gbps = 20;
    uint32_t n_ctx = 4096;
    int port = 8000;
    std::string rpc_binary, llama_binary;                // empty: found (tune/cluster.h choose_llama_binary)
    std::string rpc_binary_reason, llama_binary_reason;  // regen: why cluster.yaml has them
};

// Plans and writes DIR (printing each changed file's diff against what was there); returns the exit code.
int plan_cluster(const ClusterRequest& r);
// One host's directory of a cluster plan: its files at their places on that host.
std::vector<GeneratedFile> host_dir_files(const std::string& dir);
// The request cluster.yaml recorded, planned again from the facts files it names.
int regen_cluster(const std::string& path);

}  // namespace moe::cli

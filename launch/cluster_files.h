// The files of a cluster plan, per host directory: the head's launch.sh (llama-server --rpc with the layer
// ranges placed by -ot) and its unit; each worker's rpc-server unit (bound to the address the user named,
// systemd's own IP allow-list admitting only the head) and nftables rules that admit only the head; every
// host's sysctl and limits files; and cluster.yaml with every decision and its reason.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tune/cluster.h"

namespace moe {

// (path relative to the plan directory, content, mode), in a stable order.
struct ClusterFile {
    std::string path, content;
    unsigned mode = 0644;
};
std::vector<ClusterFile> render_cluster_files(const ClusterPlan& cp, const std::string& out_dir);

// The head's llama-server command.
std::vector<std::string> head_argv(const ClusterPlan& cp);

}  // namespace moe

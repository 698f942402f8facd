#include "launch/cluster_files.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "launch/launch_script.h"
#include "launch/sysctl_render.h"
#include "systemd/unit.h"

namespace moe {

namespace {

std::string endpoint(const HostShare& s, int port) {
    return (s.address.find(':') != std::string::npos ? "[" + s.address + "]" : s.address) + ":" + std::to_string(port);
}

// "blk\.(3|4|5)\." for layers 3..5.
std::string layer_pattern(const HostShare& s) {
    std::string alt;
    for (uint32_t l = s.first_layer; l < s.first_layer + s.n_layers; ++l) alt += (alt.empty() ? "" : "|") + std::to_string(l);
    return "blk\\.(" + alt + ")\\.";
}

std::string unit_head(const std::string& description, const std::string& why_after) {
    return "# written by `moestream plan --target llama-rpc`\n\n[Unit]\n# what runs\nDescription=" + description + "\n# " + why_after +
           "\nAfter=network-online.target local-fs.target\nWants=network-online.target\n\n[Service]\n";
}

std::string worker_unit(const ClusterPlan& cp, const HostShare& w, const HostShare& head) {
    std::string s = unit_head("llama.cpp rpc-server: layers " + std::to_string(w.first_layer) + ".." +
                                  std::to_string(w.first_layer + w.n_layers - 1) + " for " + head.name + " (" + head.address + ")",
                              "listen once the network is up");
    auto line = [&](const std::string& why, const std::string& directive) { s += "# " + why + "\n" + directive + "\n"; };
    line("rpc-server does not speak sd_notify", "Type=exec");
    line(
        "bound to the address the plan names, never every interface: rpc-server has no authentication; -c caches tensors the head sends, "
        "so a restart does not resend them",
        "ExecStart=" + cp.rpc_server_binary + " -H " + w.address + " -p " + std::to_string(cp.rpc_port) + " -t " + std::to_string(w.threads) + " -c");
    line("where -c keeps its cache (a directory the dynamic user owns)", "CacheDirectory=llama-rpc\nEnvironment=LLAMA_CACHE=/var/cache/llama-rpc");
    line("come back after a crash, not after a clean stop", "Restart=on-failure\nRestartSec=5");
    line("an unprivileged user made for the service's lifetime", "DynamicUser=yes");
    line("its layers (" + std::to_string(w.weight_bytes) + " bytes) stay in RAM", "LimitMEMLOCK=" + w.host_plan.memlock_limit);
    line("the host's budget for its share (RAM minus the OS reserve): beyond it, the OOM killer picks this service, not the host",
         "MemoryMax=" + std::to_string(w.budget_bytes + (1ull << 30)));
    line("one CPU per physical core", "CPUAffinity=" + w.cpus);
    line("only the head may connect, whatever the firewall says (systemd's per-service IP filter)",
         "IPAddressAllow=" + head.address + " localhost\nIPAddressDeny=any");
    line("the kernel should pick other victims first: losing the layers means the head resends them", "OOMScoreAdjust=-500");
    s += sandbox_section("/var/cache/llama-rpc", false);
    s += "\n[Install]\nWantedBy=multi-user.target\n";
    return s;
}

std::string head_unit(const ClusterPlan& cp, const HostShare& head, const std::string& launch_path) {
    std::string s = unit_head("llama-server over " + std::to_string(cp.hosts.size() - 1) + " rpc-server workers", "the workers must be reachable");
    auto line = [&](const std::string& why, const std::string& directive) { s += "# " + why + "\n" + directive + "\n"; };
    line("llama-server does not speak sd_notify", "Type=exec");
    line("loading sends every worker its layers over the network: it takes a while", "TimeoutStartSec=3600");
    line("the command in launch.sh (also runnable by hand)", "ExecStart=" + launch_path);
    line("come back after a crash, not after a clean stop", "Restart=on-failure\nRestartSec=10");
    line("an unprivileged user made for the service's lifetime", "DynamicUser=yes");
    line("its layers, embeddings, output and KV cache stay in RAM", "LimitMEMLOCK=" + head.host_plan.memlock_limit);
    line("split models and sockets", "LimitNOFILE=65536");
    line("one CPU per physical core", "CPUAffinity=" + head.cpus);
    s += sandbox_section(std::filesystem::path(cp.model_path).parent_path().string(), false);
    s += "\n[Install]\nWantedBy=multi-user.target\n";
    return s;
}

std::string nft_rules(const ClusterPlan& cp, const HostShare& w, const HostShare& head) {
    const bool v6 = head.address.find(':') != std::string::npos;
    return "#!/usr/sbin/nft -f\n"
           "# " +
           w.name + ": rpc-server (port " + std::to_string(cp.rpc_port) + ") admits only the head, " + head.address +
           ". Load with `nft -f nftables.conf`\n# (or include it from /etc/nftables.conf). Its own table: other rules are left alone.\n"
           "table inet moestream_rpc\ndelete table inet moestream_rpc\n"
           "table inet moestream_rpc {\n"
           "\tchain input {\n"
           "\t\ttype filter hook input priority filter; policy accept;\n"
           "\t\ttcp dport " +
           std::to_string(cp.rpc_port) + " " + (v6 ? "ip6" : "ip") + " saddr " + head.address +
           " accept\n"
           "\t\ttcp dport " +
           std::to_string(cp.rpc_port) +
           " iifname \"lo\" accept\n"
           "\t\ttcp dport " +
           std::to_string(cp.rpc_port) +
           " counter drop\n"
           "\t}\n}\n";
}

std::string cluster_yaml(const ClusterPlan& cp) {
    YAML::Emitter y;
    y << YAML::BeginMap << YAML::Key << "moestream_cluster" << YAML::Value << 1 << YAML::Key << "model" << YAML::Value << cp.model_path;
    y << YAML::Key << "rpc_port" << YAML::Value << cp.rpc_port << YAML::Key << "predicted_tok_s" << YAML::Value << cp.predicted_tok_s;
    y << YAML::Key << "slowest_stage" << YAML::Value << cp.slowest << YAML::Key << "hosts" << YAML::Value << YAML::BeginSeq;
    for (const auto& s : cp.hosts)
        y << YAML::BeginMap << YAML::Key << "name" << YAML::Value << s.name << YAML::Key << "address" << YAML::Value << s.address << YAML::Key
          << "first_layer" << YAML::Value << s.first_layer << YAML::Key << "layers" << YAML::Value << s.n_layers << YAML::Key << "weight_bytes"
          << YAML::Value << s.weight_bytes << YAML::Key << "budget_bytes" << YAML::Value << s.budget_bytes << YAML::Key << "stage_ms" << YAML::Value
          << s.stage_s * 1e3 << YAML::Key << "threads" << YAML::Value << s.threads << YAML::EndMap;
    y << YAML::EndSeq << YAML::Key << "reasons" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : cp.reasons) y << YAML::Key << k << YAML::Value << v;
    y << YAML::EndMap << YAML::Key << "warnings" << YAML::Value << YAML::BeginSeq;
    for (const auto& w : cp.warnings) y << w;
    y << YAML::EndSeq << YAML::EndMap;
    return std::string(y.c_str()) + "\n";
}

}  // namespace

std::vector<std::string> head_argv(const ClusterPlan& cp) {
    const HostShare& head = cp.hosts.front();
    std::string rpc;
    for (size_t i = 1; i < cp.hosts.size(); ++i) rpc += (rpc.empty() ? "" : ",") + endpoint(cp.hosts[i], cp.rpc_port);
    std::vector<std::string> a = {
        cp.llama_server_binary,   "--model",        cp.model_path, "--rpc",  rpc,         "--threads", std::to_string(head.threads), "--ctx-size",
        std::to_string(cp.n_ctx), "--n-gpu-layers", "999",         "--host", "127.0.0.1", "--port",    std::to_string(cp.port)};
    // Each worker's layer range on its device (RPCn[host:port], n the device index on that server: 0, its CPU),
    // as one -ot with comma-separated rules: current llama.cpp deprecates repeated -ot ("only last value will be used").
    std::string rules;
    for (size_t i = 1; i < cp.hosts.size(); ++i)
        if (cp.hosts[i].n_layers)
            rules += (rules.empty() ? "" : ",") + layer_pattern(cp.hosts[i]) + "=RPC0[" + endpoint(cp.hosts[i], cp.rpc_port) + "]";
    if (head.n_layers) rules += (rules.empty() ? "" : ",") + layer_pattern(head) + "=CPU";
    if (!rules.empty()) a.insert(a.end(), {"-ot", rules});
    return a;
}

std::vector<ClusterFile> render_cluster_files(const ClusterPlan& cp, const std::string& out_dir) {
    std::vector<ClusterFile> files;
    const HostShare& head = cp.hosts.front();
    files.push_back({"cluster.yaml", cluster_yaml(cp), 0644});
    std::string cmd;  // one option (and its value) per line
    for (const auto& s : head_argv(cp)) cmd += (cmd.empty() ? "" : s[0] == '-' ? " \\\n    " : " ") + shell_quote(s);
    files.push_back({head.name + "/launch.sh",
                     "#!/bin/sh\n# launch.sh: llama-server on the head with the workers' layers placed by -ot (cluster.yaml says why).\nset -eu\n"
                     "export OMP_NUM_THREADS=" +
                         std::to_string(head.threads) + "\nexec " + cmd + "\n",
                     0755});
    files.push_back({head.name + "/llama-server.service", head_unit(cp, head, out_dir + "/" + head.name + "/launch.sh"), 0644});
    for (const auto& s : cp.hosts) {
        Plan hp = s.host_plan;
        hp.out_dir = out_dir + "/" + s.name;
        files.push_back({s.name + "/60-moestream.conf", render_sysctl_conf(hp), 0644});
        files.push_back({s.name + "/99-moestream.conf", render_limits_conf(hp), 0644});
        if (&s == &head) continue;
        files.push_back({s.name + "/rpc-server.service", worker_unit(cp, s, head), 0644});
        files.push_back({s.name + "/nftables.conf", nft_rules(cp, s, head), 0644});
    }
    return files;
}

}  // namespace moe

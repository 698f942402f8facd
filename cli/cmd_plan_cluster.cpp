// `plan --target llama-rpc`, `install --host-dir`, `regen --cluster`: the cluster plan from the command line.
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/plan_cluster.h"
#include "cli/plan_files.h"
#include "engine/model/model_facts.h"
#include "launch/cluster_files.h"
#include "launch/diff.h"
#include "tune/check.h"
#include "tune/cluster.h"
#include "tune/planner.h"

namespace moe::cli {

namespace fs = std::filesystem;

int plan_cluster(const ClusterRequest& r) {
    if (r.head.empty() || r.workers.empty()) throw CliError("--target llama-rpc needs --head FACTS@ADDRESS and at least one --worker FACTS@ADDRESS");
    if (r.rpc_port < 1 || r.rpc_port > 65535) throw CliError("--rpc-port " + std::to_string(r.rpc_port) + " is not a port");
    if (!(r.link_gbps > 0) || !(r.mem_gbps > 0)) throw CliError("--link-gbps and --mem-gbps must be positive");
    auto host_of = [&](const std::string& spec, const std::string& name) {
        const size_t at = spec.rfind('@');
        if (at == std::string::npos || at + 1 == spec.size())
            throw CliError(name + " '" + spec + "': give FACTS@ADDRESS (the address rpc-server binds; never 0.0.0.0 by default)");
        ClusterHost h;
        h.name = name;
        h.address = spec.substr(at + 1);
        h.facts = gather_host(spec.substr(0, at), "/", r.model, 0, true);
        // The host's own measured RAM bandwidth when its facts carry it (probe on the live host), else --mem-gbps.
        h.mem_bytes_per_s = h.facts.memory.read_bytes_per_s.value.value_or(r.mem_gbps * 1e9);
        return h;
    };
    ClusterOptions o;
    o.model_path = fs::absolute(r.model).string();
    o.head = host_of(r.head, "head");
    for (size_t i = 0; i < r.workers.size(); ++i) o.workers.push_back(host_of(r.workers[i], "worker" + std::to_string(i + 1)));
    o.rpc_port = r.rpc_port;
    o.link_bytes_per_s = r.link_gbps * 1e9 / 8;
    o.n_ctx = r.n_ctx;
    o.port = r.port;
    o.rpc_server_binary = r.rpc_binary;
    o.llama_server_binary = r.llama_binary;
    o.rpc_server_binary_reason = r.rpc_binary_reason;
    o.llama_server_binary_reason = r.llama_binary_reason;
    o.planning_path = path_directories();
    ClusterPlan cp;
    try {
        cp = make_cluster_plan(read_model_facts(r.model), o);
    } catch (const PlanError& e) { throw CliError(e.what()); }
    const std::string dir = fs::absolute(r.out).string();
    // What was asked, so `regen --cluster DIR/cluster.yaml` can plan again from the hosts' new facts.
    YAML::Emitter req;
    req << YAML::BeginMap << YAML::Key << "request" << YAML::Value << YAML::BeginMap << YAML::Key << "model" << YAML::Value << o.model_path;
    req << YAML::Key << "head" << YAML::Value << (fs::absolute(r.head.substr(0, r.head.rfind('@'))).string() + r.head.substr(r.head.rfind('@')));
    req << YAML::Key << "workers" << YAML::Value << YAML::BeginSeq;
    for (const auto& w : r.workers) req << (fs::absolute(w.substr(0, w.rfind('@'))).string() + w.substr(w.rfind('@')));
    req << YAML::EndSeq << YAML::Key << "rpc_port" << YAML::Value << r.rpc_port << YAML::Key << "link_gbps" << YAML::Value << r.link_gbps << YAML::Key
        << "mem_gbps" << YAML::Value << r.mem_gbps << YAML::Key << "n_ctx" << YAML::Value << r.n_ctx << YAML::Key << "port" << YAML::Value << r.port
        << YAML::Key << "rpc_server_binary" << YAML::Value << cp.rpc_server_binary << YAML::Key << "rpc_server_binary_reason" << YAML::Value
        << cp.rpc_server_binary_reason << YAML::Key << "llama_server_binary" << YAML::Value << cp.llama_server_binary << YAML::Key
        << "llama_server_binary_reason" << YAML::Value << cp.llama_server_binary_reason << YAML::EndMap << YAML::EndMap;
    // Each file against what the directory holds: a re-plan shows, per host, what changed.
    size_t changed = 0;
    for (auto f : render_cluster_files(cp, dir)) {
        if (f.path == "cluster.yaml") f.content += std::string(req.c_str()) + "\n";
        const std::string path = dir + "/" + f.path;
        const std::string old = fs::exists(path) ? read_text(path) : "";
        if (old == f.content) continue;
        ++changed;
        if (!old.empty()) std::cout << unified_diff(old, f.content, f.path + " (was)", f.path);
        fs::create_directories(fs::path(path).parent_path());
        write_text(path, f.content, f.mode);
    }
    std::cout << "cluster plan for " << o.model_path << "\n";
    for (const auto& s : cp.hosts)
        std::cout << "  " << s.name << " " << s.address << ": layers "
                  << (s.n_layers ? std::to_string(s.first_layer) + ".." + std::to_string(s.first_layer + s.n_layers - 1) : std::string("none"))
                  << ", " << human_bytes(static_cast<double>(s.weight_bytes)) << " of " << human_bytes(static_cast<double>(s.budget_bytes)) << ", "
                  << s.threads << " threads\n";
    for (const auto& [k, v] : cp.reasons)
        if (k == "prediction") std::cout << "predicted        " << v << "\n";
    for (const auto& w : cp.warnings) std::cerr << "moestream plan: WARNING: " << w << "\n";
    for (const auto& s : cp.hosts) {
        const std::string unit = dir + "/" + s.name + (&s == &cp.hosts.front() ? "/llama-server.service" : "/rpc-server.service");
        if (const auto exposure = unit_exposure(unit))
            std::cout << s.name << " unit exposure " << *exposure << " (systemd-analyze security --offline)\n";
    }
    if (changed)
        std::cout << "wrote " << changed << " files under " << dir
                  << ": cluster.yaml and a directory per host (units, nftables.conf, sysctl and limits files)\n";
    else std::cout << "nothing changed under " << dir << "\n";
    return 0;
}

std::vector<GeneratedFile> host_dir_files(const std::string& dir) {
    const std::pair<const char*, const char*> places[] = {{"60-moestream.conf", "/etc/sysctl.d/60-moestream.conf"},
                                                          {"99-moestream.conf", "/etc/security/limits.d/99-moestream.conf"},
                                                          {"rpc-server.service", "/etc/systemd/system/llama-rpc-server.service"},
                                                          {"llama-server.service", "/etc/systemd/system/llama-server-rpc.service"},
                                                          {"nftables.conf", "/etc/nftables.d/moestream-rpc.nft"}};
    std::vector<GeneratedFile> files;
    for (const auto& [name, target] : places)
        if (fs::exists(dir + "/" + name)) files.push_back({target, read_text(dir + "/" + name), 0644});
    if (files.empty()) throw CliError("--host-dir " + dir + ": none of a cluster host's files (60-moestream.conf, rpc-server.service, ...) is there");
    return files;
}

int regen_cluster(const std::string& path) {
    YAML::Node y;
    try {
        y = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) { throw CliError(path + ": not valid YAML (" + e.msg + ")"); }
    const YAML::Node q = y["request"];
    if (!q || !q.IsMap() || !q["model"] || !q["head"] || !q["workers"]) throw CliError(path + ": no request (write it with plan --target llama-rpc)");
    try {
        ClusterRequest r;
        r.model = q["model"].as<std::string>();
        r.head = q["head"].as<std::string>();
        for (const auto& w : q["workers"]) r.workers.push_back(w.as<std::string>());
        r.out = fs::path(path).parent_path().string();
        r.rpc_port = q["rpc_port"].as<int>(50052);
        r.link_gbps = q["link_gbps"].as<double>(10);
        r.mem_gbps = q["mem_gbps"].as<double>(20);
        r.n_ctx = q["n_ctx"].as<uint32_t>(4096);
        r.port = q["port"].as<int>(8000);
        // The paths the plan chose are kept, with their reasons; a request from before they were recorded finds them again.
        r.rpc_binary = q["rpc_server_binary"].as<std::string>("");
        r.llama_binary = q["llama_server_binary"].as<std::string>("");
        r.rpc_binary_reason = q["rpc_server_binary_reason"].as<std::string>("");
        r.llama_binary_reason = q["llama_server_binary_reason"].as<std::string>("");
        if (!r.rpc_binary.empty() && r.rpc_binary_reason.empty()) r.rpc_binary_reason = "kept from cluster.yaml";
        if (!r.llama_binary.empty() && r.llama_binary_reason.empty()) r.llama_binary_reason = "kept from cluster.yaml";
        return plan_cluster(r);
    } catch (const YAML::Exception& e) { throw CliError(path + ": request: " + e.msg); }
}

}  // namespace moe::cli

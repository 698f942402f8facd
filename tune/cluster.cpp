#include "tune/cluster.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "probes/fs_root.h"
#include "probes/probes.h"
#include "tune/check.h"
#include "tune/planner.h"

namespace moe {

namespace {
std::string fs_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }
}  // namespace

namespace {

std::string mib(uint64_t b) { return human_bytes(static_cast<double>(b)); }

std::string fixed(double v, int digits) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", digits, v);
    return b;
}

}  // namespace

bool is_private_address(const std::string& a) {
    in_addr v4{};
    if (::inet_pton(AF_INET, a.c_str(), &v4) == 1) {
        const uint32_t ip = ntohl(v4.s_addr);
        return (ip >> 24) == 10 || (ip >> 24) == 127 || (ip >> 20) == (172u << 4 | 1) || (ip >> 16) == (192u << 8 | 168) ||
               (ip >> 16) == (169u << 8 | 254);
    }
    in6_addr v6{};
    if (::inet_pton(AF_INET6, a.c_str(), &v6) == 1) {
        static const in6_addr loopback = IN6ADDR_LOOPBACK_INIT;
        return std::equal(std::begin(v6.s6_addr), std::end(v6.s6_addr), std::begin(loopback.s6_addr)) || (v6.s6_addr[0] & 0xfe) == 0xfc ||
               (v6.s6_addr[0] == 0xfe && (v6.s6_addr[1] & 0xc0) == 0x80);
    }
    return false;  // a name, or 0.0.0.0 / :: (every interface): treat as public
}

BinaryChoice choose_llama_binary(const std::string& role, const std::string& given, const std::vector<const ClusterHost*>& hosts,
                                 const std::vector<std::string>& planning_path) {
    if (!given.empty()) return {given, "given on the command line", ""};
    std::map<std::string, std::vector<std::string>> where;  // path -> hosts whose probe found it running
    std::vector<std::string> unprobed;
    for (const ClusterHost* h : hosts) {
        if (!h->facts.llama_cpp.probed) unprobed.push_back(h->name);
        for (const auto& n : llama_cpp_names(role)) {  // the newest name first, as llama.cpp installs it now
            const auto it = std::find_if(h->facts.llama_cpp.binaries.begin(), h->facts.llama_cpp.binaries.end(),
                                         [&](const LlamaCppBinary& b) { return b.role == role && b.runs && fs_name(b.path) == n; });
            if (it != h->facts.llama_cpp.binaries.end()) {
                where[it->path].push_back(h->name);
                break;
            }
        }
    }
    auto names = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
        return s;
    };
    if (!where.empty()) {
        auto best = std::max_element(where.begin(), where.end(), [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
        BinaryChoice c{best->first, "found running by the probe of " + names(best->second), ""};
        if (where.size() > 1 || best->second.size() < hosts.size())
            c.warning = role + " is " + best->first + " on " + names(best->second) +
                        " but not on every host that runs it: install it there, "
                        "or give --" +
                        role + "-binary (check --cluster names each host's)";
        return c;
    }
    for (const auto& n : llama_cpp_names(role))
        for (const auto& d : planning_path) {
            const std::string p = d + "/" + n;
            if (::access(p.c_str(), X_OK) == 0)
                return {p,
                        "not in the hosts' facts" +
                            (unprobed.empty() ? std::string() : " (" + names(unprobed) + ": probed before programs were looked for)") +
                            "; found on the planning host's PATH" + (n != llama_cpp_names(role).front() ? " under its older name " + n : ""),
                        ""};
        }
    const std::string p = "/usr/local/bin/" + llama_cpp_names(role).front();
    return {
        p,
        "found on no host's probe nor the planning host's PATH: llama.cpp's install location (cmake --install, prefix /usr/local) under its current name",
        "no host's probe found " + role + ": install llama.cpp there (with -DGGML_RPC=ON) or give --" + role + "-binary"};
}

ClusterPlan make_cluster_plan(const ModelFacts& m, const ClusterOptions& opt) {
    ClusterPlan cp;
    cp.rpc_port = opt.rpc_port;
    cp.link_bytes_per_s = opt.link_bytes_per_s;
    cp.model_path = opt.model_path;
    cp.n_ctx = opt.n_ctx;
    cp.port = opt.port;
    auto why = [&](const std::string& k, const std::string& r) { cp.reasons.emplace_back(k, r); };
    {
        std::vector<const ClusterHost*> workers;
        for (const auto& w : opt.workers) workers.push_back(&w);
        BinaryChoice rpc = choose_llama_binary("rpc-server", opt.rpc_server_binary, workers, opt.planning_path);
        BinaryChoice head = choose_llama_binary("llama-server", opt.llama_server_binary, {&opt.head}, opt.planning_path);
        if (!opt.rpc_server_binary_reason.empty()) rpc.reason = opt.rpc_server_binary_reason;
        if (!opt.llama_server_binary_reason.empty()) head.reason = opt.llama_server_binary_reason;
        cp.rpc_server_binary = rpc.path, cp.rpc_server_binary_reason = rpc.reason;
        cp.llama_server_binary = head.path, cp.llama_server_binary_reason = head.reason;
        why("rpc_server_binary", rpc.path + ": " + rpc.reason);
        why("llama_server_binary", head.path + ": " + head.reason);
        for (const auto* w : {&rpc.warning, &head.warning})
            if (!w->empty()) cp.warnings.push_back(*w);
    }
    if (opt.workers.empty()) throw PlanError("--target llama-rpc needs at least one --worker FACTS@ADDRESS");
    if (m.n_layer == 0) throw PlanError(opt.model_path + ": no layers");

    // What each layer holds, and what a token reads of it.
    const uint64_t globals = m.token_embd_bytes * (m.tied_output ? 1 : 2);  // embeddings, and the output matrix unless tied
    uint64_t expert_total = 0;
    for (uint64_t b : m.layer_expert_bytes) expert_total += b;
    const uint64_t dense_per_layer = (m.resident_bytes > globals ? m.resident_bytes - globals : 0) / m.n_layer;
    auto layer_bytes = [&](uint32_t l) { return dense_per_layer + (l < m.layer_expert_bytes.size() ? m.layer_expert_bytes[l] : 0); };
    auto layer_active = [&](uint32_t l) {
        const uint64_t e = l < m.layer_expert_bytes.size() ? m.layer_expert_bytes[l] : 0;
        return static_cast<double>(dense_per_layer) + (m.n_expert ? static_cast<double>(e) * m.n_expert_used / m.n_expert : static_cast<double>(e));
    };
    const uint64_t kv = m.kv_bytes(opt.n_ctx);

    std::vector<const ClusterHost*> hosts = {&opt.head};
    for (const auto& w : opt.workers) hosts.push_back(&w);
    uint64_t total_budget = 0;
    for (size_t i = 0; i < hosts.size(); ++i) {
        const ClusterHost& h = *hosts[i];
        if (h.address.empty()) throw PlanError(h.name + ": no address (give --worker FACTS@ADDRESS; rpc-server never binds 0.0.0.0 by default)");
        const uint64_t ram = h.facts.memory.total_bytes.value.value_or(0);
        if (ram == 0) throw PlanError(h.name + ": RAM size unknown in its facts");
        const uint64_t reserve = std::max<uint64_t>(1ull << 30, ram / 20);
        HostShare s;
        s.name = h.name;
        s.address = h.address;
        // The head also holds the embeddings, the output matrix and the KV cache.
        s.budget_bytes = ram > reserve + (i == 0 ? kv + globals : 0) ? ram - reserve - (i == 0 ? kv + globals : 0) : 0;
        s.threads = std::max(1, h.facts.cpu.physical_cores.value.value_or(1));
        s.cpus = format_cpu_list(h.facts.cpu.first_thread_per_core);
        if (h.facts.numa.nodes.size() == 1) s.numa_node = h.facts.numa.nodes[0].id;
        total_budget += s.budget_bytes;
        cp.hosts.push_back(std::move(s));
        if (i > 0 && !is_private_address(h.address))
            cp.warnings.push_back(h.name + " would listen on " + h.address +
                                  ", not a private address: rpc-server has no authentication, anyone who reaches it can run code in its memory");
    }
    uint64_t layers_total = 0;
    for (uint32_t l = 0; l < m.n_layer; ++l) layers_total += layer_bytes(l);
    if (layers_total > total_budget)
        throw PlanError("the layers need " + mib(layers_total) + " but the hosts' budgets add up to " + mib(total_budget) +
                        " (RAM minus a 5% / 1 GiB reserve each; the head also holds " + mib(globals + kv) + " of embeddings, output and KV cache)");

    // Contiguous layer ranges in proportion to the budgets: host i ends where the running total of layer bytes
    // passes its share of the running total of budgets.
    uint32_t l = 0;
    uint64_t budget_so_far = 0, bytes_so_far = 0;
    for (size_t i = 0; i < cp.hosts.size(); ++i) {
        HostShare& s = cp.hosts[i];
        budget_so_far += s.budget_bytes;
        const double target = static_cast<double>(layers_total) * static_cast<double>(budget_so_far) / static_cast<double>(total_budget);
        s.first_layer = l;
        while (l < m.n_layer && (i + 1 == cp.hosts.size() || static_cast<double>(bytes_so_far + layer_bytes(l)) <= target + 0.5 * layer_bytes(l)) &&
               s.weight_bytes + layer_bytes(l) <= s.budget_bytes) {
            s.weight_bytes += layer_bytes(l);
            bytes_so_far += layer_bytes(l);
            ++l;
        }
        s.n_layers = l - s.first_layer;
    }
    if (l < m.n_layer)
        throw PlanError("layers " + std::to_string(l) + ".." + std::to_string(m.n_layer - 1) +
                        " fit on no host: contiguous ranges leave too little room at the end (add memory or a worker)");

    // Prediction: hosts one after another per token, plus a hop per boundary and back to the head.
    const double hop_bytes = static_cast<double>(m.n_embd) * 4;
    cp.hop_s = hop_bytes / opt.link_bytes_per_s + opt.link_latency_s;
    double total = 0, slowest = -1;
    for (size_t i = 0; i < cp.hosts.size(); ++i) {
        HostShare& s = cp.hosts[i];
        double active = 0;
        for (uint32_t k = s.first_layer; k < s.first_layer + s.n_layers; ++k) active += layer_active(k);
        if (i == 0)
            active += static_cast<double>(m.token_embd_bytes) / std::max<uint32_t>(1, m.n_vocab_rows) + static_cast<double>(m.token_embd_bytes);
        const double bw = hosts[i]->mem_bytes_per_s > 0 ? hosts[i]->mem_bytes_per_s : 20e9;
        s.stage_s = active / bw;
        total += s.stage_s;
        if (s.stage_s > slowest) {
            slowest = s.stage_s;
            cp.slowest = s.name;
        }
        why(s.name + ".layers", s.n_layers ? std::to_string(s.first_layer) + ".." + std::to_string(s.first_layer + s.n_layers - 1) + " (" +
                                                 mib(s.weight_bytes) + " of a " + mib(s.budget_bytes) + " budget)"
                                           : "none (" + mib(s.budget_bytes) + " budget)");
        why(s.name + ".stage", fixed(s.stage_s * 1e3, 2) + " ms per token: " + mib(static_cast<uint64_t>(active)) + " active / " +
                                   fixed(bw / 1e9, 1) + " GB/s (" +
                                   (hosts[i]->facts.memory.read_bytes_per_s.value ? "measured by its probe" : "--mem-gbps") + ")");

        // Its own sysctl and limits, decided as for a single host.
        Plan& hp = s.host_plan;
        hp.out_dir = s.name;
        hp.service_user = "dynamic";
        host_sysctl(hosts[i]->facts, hosts[i]->facts.numa.nodes.size(), hp);
        hp.mlock_bytes = s.weight_bytes + (i == 0 ? kv + globals : 0);
        hp.memlock_limit = std::to_string((hp.mlock_bytes + (64ull << 20) + (1ull << 20) - 1) >> 20) + "M";
    }
    const size_t hops = cp.hosts.size();  // head -> w1 -> ... -> wN -> head
    total += static_cast<double>(hops) * cp.hop_s;
    cp.predicted_tok_s = total > 0 ? 1.0 / total : 0;
    cp.formula = "1 / (sum of stages " + fixed((total - hops * cp.hop_s) * 1e3, 2) + " ms + " + std::to_string(hops) + " hops x " +
                 fixed(cp.hop_s * 1e6, 1) + " us (" + fixed(hop_bytes, 0) + " B of activations at " + fixed(opt.link_bytes_per_s * 8 / 1e9, 1) +
                 " Gbit/s + latency))";
    why("layers", "in proportion to the hosts' budgets; the head keeps embeddings, output and the KV cache (" + mib(globals + kv) + ")");
    why("prediction", fixed(cp.predicted_tok_s, 2) + " tok/s = " + cp.formula + "; slowest stage: " + cp.slowest +
                          " (with several requests in flight the slowest stage bounds the total rate)");
    return cp;
}

}  // namespace moe

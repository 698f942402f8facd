// `moestream probe` and `moestream check`: host facts, and the readiness table built on them.
#include <algorithm>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <yaml-cpp/yaml.h>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "cli/plan_files.h"
#include "cli/plan_trace.h"
#include "engine/gguf/gguf.h"
#include "probes/memory_bandwidth.h"
#include "probes/probes.h"
#include "probes/storage_probe.h"
#include "tune/check.h"
#include "tune/cluster.h"
#include "tune/plan_io.h"

namespace po = boost::program_options;

namespace moe::cli {

uint64_t parse_bytes(const std::string& flag, const std::string& text) {
    size_t used = 0;
    double v;
    try {
        v = std::stod(text, &used);
    } catch (...) { throw CliError(flag + " '" + text + "' is not a size (examples: 8G, 512M, 1073741824)"); }
    std::string unit = text.substr(used);
    for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    double mult = 1;
    if (unit == "" || unit == "B") mult = 1;
    else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1024.0;
    else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1024.0 * 1024;
    else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
    else if (unit == "T" || unit == "TB" || unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
    else throw CliError(flag + " '" + text + "': unknown unit '" + unit + "' (use K, M, G or T)");
    const double bytes = v * mult;
    if (!(bytes >= 1) || bytes > 1.0 * (1ull << 50)) throw CliError(flag + " '" + text + "' is not a plausible size (1 byte .. 1 PiB)");
    return static_cast<uint64_t>(bytes);
}

namespace {

struct StorageFlags {
    std::string storage;
    double seconds = 5;
    bool no_fio = false;
    bool no_storage = false;
};

void add_storage_options(po::options_description& opts, StorageFlags& f, double default_seconds) {
    opts.add_options()("storage", po::value(&f.storage), "directory whose filesystem to measure (default: the model's, else .)")(
        "seconds", po::value(&f.seconds)->default_value(default_seconds), "seconds per bandwidth measurement")(
        "no-fio", po::bool_switch(&f.no_fio), "only the built-in io_uring probe")("no-storage", po::bool_switch(&f.no_storage),
                                                                                  "skip the bandwidth measurement");
}

std::optional<StorageFacts> measure(const StorageFlags& f, const std::string& model, bool quiet, bool sweep) {
    if (f.no_storage) return std::nullopt;
    if (f.seconds < 1 || f.seconds > 600) throw CliError("--seconds " + std::to_string(f.seconds) + " is out of range (1..600)");
    StorageProbeOptions o;
    std::string dir = f.storage;
    if (dir.empty()) dir = model.empty() ? "." : std::filesystem::absolute(model).parent_path().string();
    o.dir = dir;
    if (f.storage.empty()) o.model_file = model;  // read the model itself when it is on the measured filesystem
    o.seconds = f.seconds;
    o.use_fio = !f.no_fio;
    if (!sweep) o.block_sizes = {1 << 20};
    if (!quiet && ::isatty(2)) o.progress = [](const std::string& s) { std::cerr << "measuring: " << s << "\n"; };
    try {
        return probe_storage(o);
    } catch (const StorageProbeError& e) { throw CliError(e.what()); }
}

void print_human(const HostFacts& h) {
    auto opt = [](const auto& s) { return s.value ? std::to_string(*s.value) : "unknown (" + s.source + ")"; };
    std::cout << "cpu      " << h.cpu.model.value.value_or("unknown") << "\n"
              << "         " << opt(h.cpu.physical_cores) << " physical cores, " << opt(h.cpu.logical_cpus) << " logical CPUs, " << opt(h.cpu.sockets)
              << " socket(s)\n         simd:";
    for (const auto& [k, v] : h.cpu.simd)
        if (v) std::cout << " " << k;
    std::cout << "\nnuma     " << h.numa.nodes.size() << " node(s) [" << h.numa.source << "]\n";
    for (const auto& n : h.numa.nodes)
        std::cout << "         node " << n.id << ": cpus " << format_cpu_list(n.cpus) << ", "
                  << (n.mem_total_bytes ? human_bytes(static_cast<double>(*n.mem_total_bytes)) : "memory unknown") << "\n";
    auto bytes = [](const Sourced<uint64_t>& s) { return s.value ? human_bytes(static_cast<double>(*s.value)) : "unknown"; };
    std::cout << "memory   " << bytes(h.memory.total_bytes) << " total, " << bytes(h.memory.available_bytes) << " available, swap "
              << bytes(h.memory.swap_total_bytes) << ", THP " << h.memory.thp_enabled.value.value_or("unknown") << ", hugepages "
              << opt(h.memory.hugepages_total) << "\n";
    auto lim = [](const Sourced<uint64_t>& s) {
        return !s.value ? std::string("unknown") : *s.value == UINT64_MAX ? std::string("unlimited") : human_bytes(static_cast<double>(*s.value));
    };
    std::cout << "limits   memlock soft " << lim(h.limits.memlock_soft) << ", hard " << lim(h.limits.memlock_hard)
              << (h.limits.memlock_hard_raisable ? " (raisable)" : " (not raisable by this process)") << "; nofile " << opt(h.limits.nofile_soft)
              << "/" << opt(h.limits.nofile_hard) << "\nkernel  ";
    for (const auto& [k, v] : h.kernel.sysctl) std::cout << " " << k << "=" << (v.value ? std::to_string(*v.value) : "?");
    std::cout << "\n         io_uring: "
              << (h.kernel.io_uring_works.value ? (*h.kernel.io_uring_works.value ? "works" : h.kernel.io_uring_works.source)
                                                : h.kernel.io_uring_works.source)
              << "\n";
    std::cout << "llama.cpp";
    if (h.llama_cpp.binaries.empty()) std::cout << " none found (" << h.llama_cpp.source << ")\n";
    for (size_t i = 0; i < h.llama_cpp.binaries.size(); ++i) {
        const auto& b = h.llama_cpp.binaries[i];
        std::cout << (i ? "         " : "") << " " << b.role << " " << b.path << " (" << b.found_by
                  << "): " << (b.runs ? "runs" : "does not run: " + b.detail)
                  << (b.build.empty() ? "" : ", build " + b.build + (b.build_source == "--version" ? "" : " (" + b.build_source + ")")) << "\n";
    }
    if (h.storage) {
        const auto& s = *h.storage;
        std::cout << "storage  " << s.path << " (" << s.filesystem.value.value_or("?") << "), free " << bytes(s.free_bytes) << ", read from "
                  << s.file << "\n";
        if (s.device)
            std::cout << "         device " << s.device->name << " (" << s.device->model.value.value_or("model unknown") << "), scheduler "
                      << s.device->scheduler.value.value_or("?") << ", numa node "
                      << (s.device->numa_node.value ? std::to_string(*s.device->numa_node.value) : "unknown") << "\n";
        for (const auto& r : s.results) {
            char buf[200];
            std::snprintf(buf, sizeof buf, "         %-15s %5lluK QD%-3d %7.2f GB/s %9.0f IOPS  p50 %7.0f us  p99 %7.0f us\n", r.tool.c_str(),
                          static_cast<unsigned long long>(r.block_size >> 10), r.queue_depth, r.bytes_per_s / 1e9, r.iops, r.clat_p50_us,
                          r.clat_p99_us);
            std::cout << buf;
        }
        for (const auto& n : s.notes) std::cout << "         note: " << n << "\n";
    }
}

}  // namespace

int cmd_probe(const std::vector<std::string>& args) {
    bool as_json = false, as_yaml = false;
    std::string root = "/", model;
    StorageFlags sf;
    po::options_description opts("moestream probe options");
    opts.add_options()("help,h", "show this help")("json", po::bool_switch(&as_json), "JSON output")("yaml", po::bool_switch(&as_yaml),
                                                                                                     "YAML output")(
        "root", po::value(&root)->default_value("/"),
        "read /proc and /sys under this directory (fixture trees); storage is not measured unless --storage is given")(
        "model", po::value(&model), "measure by reading this model file (read-only)");
    add_storage_options(opts, sf, 5);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (as_json && as_yaml) throw CliError("give at most one of --json and --yaml");
    if (!std::filesystem::is_directory(root)) throw CliError("--root " + root + " is not a directory");
    if (root != "/" && sf.storage.empty()) sf.no_storage = true;
    HostFacts h = probe_host({.root = root, .try_ring = true});
    h.storage = measure(sf, model, as_json || as_yaml, true);
    if (root == "/")  // RAM read bandwidth, for plans made elsewhere (the cluster planner)
        h.memory.read_bytes_per_s = {measure_memory_read_bandwidth(std::max(1, h.cpu.physical_cores.value.value_or(1)), 256u << 20),
                                     "measured: read of 256 MiB with every physical core"};
    if (as_json) std::cout << to_json(h).dump(2) << "\n";
    else if (as_yaml) std::cout << to_yaml(h);
    else print_human(h);
    return 0;
}

// A cluster plan's rows: each worker's rpc-server, which has no authentication, must listen on a private
// address (a public one fails loudly, with the fix).
std::vector<CheckRow> check_cluster(const std::string& yaml_path) {
    const std::string& path = yaml_path;
    YAML::Node y;
    try {
        y = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) { throw CliError(path + ": not valid YAML (" + e.msg + ")"); }
    if (!y["hosts"] || !y["hosts"].IsSequence()) throw CliError(path + ": no hosts (write it with plan --target llama-rpc)");
    std::vector<CheckRow> rows;
    for (const auto& h : y["hosts"]) {
        const std::string name = h["name"].as<std::string>(""), address = h["address"].as<std::string>("");
        if (name == "head") continue;
        CheckRow r;
        r.id = "rpc_listen_" + name;
        r.what = name + ": rpc-server listen address (it has no authentication)";
        r.measured = address;
        r.required = "a private address (10/8, 172.16/12, 192.168/16, fc00::/7, loopback)";
        if (is_private_address(address)) {
            r.status = CheckStatus::Pass;
        } else {
            r.status = CheckStatus::Fail;
            r.what = name + ": rpc-server on a PUBLIC address, no authentication";
            r.fix =
                "anyone who reaches " + address +
                " can make it run code in its memory: plan again with --worker FACTS@<the worker's private interface address>, and load its nftables.conf";
        }
        rows.push_back(r);
    }
    // The programs the plan starts, on each host by its facts file (the ones the request names), and their builds.
    const YAML::Node q = y["request"];
    if (q && q.IsMap() && q["head"] && q["workers"]) {
        std::vector<std::pair<std::string, std::string>> specs = {{"head", q["head"].as<std::string>()}};
        int i = 0;
        for (const auto& w : q["workers"]) specs.push_back({"worker" + std::to_string(++i), w.as<std::string>()});
        std::vector<std::pair<std::string, std::string>> builds;
        for (const auto& [name, spec] : specs) {
            const std::string role = name == "head" ? "llama-server" : "rpc-server";
            const std::string path = q[role == "llama-server" ? "llama_server_binary" : "rpc_server_binary"].as<std::string>("");
            const std::string facts_file = spec.substr(0, spec.rfind('@'));
            HostFacts facts;
            try {
                facts = host_facts_from_text(read_text(facts_file), facts_file);
            } catch (const std::exception& e) {
                rows.push_back({"binary_" + role + "_" + name, name + ": " + role + " the plan starts", CheckStatus::Unknown,
                                std::string("facts not readable: ") + e.what(), path + " exists and runs",
                                "probe " + name + " again: moestream probe --json > " + facts_file});
                continue;
            }
            if (path.empty()) {
                rows.push_back({"binary_" + role + "_" + name, name + ": " + role + " the plan starts", CheckStatus::Warn,
                                "cluster.yaml names no " + role + " (planned before the paths were recorded)", "a path",
                                "moestream regen --cluster " + yaml_path});
                continue;
            }
            CheckRow r = llama_binary_row(name, facts, role, path);
            std::string build;
            for (const auto& b : facts.llama_cpp.binaries)
                if (b.path == path && b.runs) build = b.build;
            if (r.status == CheckStatus::Pass) builds.push_back({name, build});
            rows.push_back(r);
        }
        if (builds.size() > 1) rows.push_back(llama_builds_row(builds));
    }
    return rows;
}

int cmd_check(const std::vector<std::string>& args) {
    bool as_json = false;
    std::string root = "/", model, budget, cluster, plan_path, cache_type_k = "f16", cache_type_v = "f16", prompt_cache, prompt_cache_size = "8G",
                trace;
    uint32_t n_ctx = 4096;
    StorageFlags sf;
    po::options_description opts("moestream check options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model), "GGUF model (first split file for split models)")(
        "ram-budget", po::value(&budget), "RAM for the whole engine: resident + KV + expert cache (bytes, or 64G / 512M)")(
        "ctx", po::value(&n_ctx)->default_value(4096), "context length the KV cache is sized for")(
        "cache-type-k", po::value(&cache_type_k)->default_value("f16"), "-ctk: the K cache's type the engine will run with")(
        "cache-type-v", po::value(&cache_type_v)->default_value("f16"), "-ctv: the V cache's type")("json", po::bool_switch(&as_json),
                                                                                                    "rows as JSON")(
        "trace", po::value(&trace), "routing trace of this model (run/serve/bench --routing-trace): the cache --ram-budget leaves, replayed on it")(
        "prompt-cache", po::value(&prompt_cache), "serve --prompt-cache DIR: the directory exists, is writable and has room")(
        "prompt-cache-size", po::value(&prompt_cache_size)->default_value("8G"), "serve --prompt-cache-size")(
        "plan", po::value(&plan_path),
        "also check what a plan starts: a llama-server plan's llama-server exists and runs here, an engine plan's prompt cache")(
        "cluster", po::value(&cluster),
        "instead: check a cluster plan's cluster.yaml (where each rpc-server listens; the programs it starts, on each host by its facts file, and their llama.cpp builds)")(
        "root", po::value(&root)->default_value("/"), "read /proc, /sys and /etc under this directory");
    add_storage_options(opts, sf, 3);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (!cluster.empty()) {
        const auto rows = check_cluster(cluster);
        std::cout << (as_json ? rows_to_json(rows).dump(2) + "\n" : rows_to_table(rows));
        return check_exit_code(rows);
    }
    if (!std::filesystem::is_directory(root)) throw CliError("--root " + root + " is not a directory");
    CheckInput in;
    in.n_ctx = n_ctx;
    const kernels::KvCacheTypes kv_types = parse_kv_cache_types(cache_type_k, cache_type_v);
    in.cache_type_k = kv_types.k;
    in.cache_type_v = kv_types.v;
    if (n_ctx < 1 || n_ctx > (1u << 24)) throw CliError("--ctx " + std::to_string(n_ctx) + " is out of range");
    if (!budget.empty()) in.ram_budget = parse_bytes("--ram-budget", budget);
    if (!model.empty()) in.model = read_model_facts(model);  // header only; GgufError -> one line, exit 2
    if (root != "/" && sf.storage.empty()) sf.no_storage = true;
    FsRoot fs(root);
    in.host = probe_host({.root = root, .try_ring = true});
    // As plan counts it: a thread per physical core.
    if (in.model && in.model->supported)
        in.working_bytes = engine_working_bytes_or_base(model, n_ctx, 1, std::max(1, in.host.cpu.physical_cores.value.value_or(2)));
    in.host.storage = measure(sf, model, as_json, false);
    in.mem_bytes_per_s = measure_memory_read_bandwidth(std::max(1, in.host.cpu.physical_cores.value.value_or(1)), 256u << 20);
    in.tuned_running = tuned_running(fs, in.tuned_profile);
    auto rows = run_checks(in, fs);
    if (!plan_path.empty()) {  // a llama-server plan: the program its launch.sh starts exists and runs here
        Plan p;
        try {
            p = load_plan(plan_path);
        } catch (const std::exception& e) { throw CliError(e.what()); }
        if (is_llama_target(p.target)) rows.push_back(llama_binary_row("this host", in.host, "llama-server", p.llama_server_binary));
        if (!p.prompt_cache_dir.empty() && prompt_cache.empty()) rows.push_back(prompt_cache_row(p.prompt_cache_dir, p.prompt_cache_bytes));
    }
    if (!trace.empty()) {
        if (!in.model || !in.ram_budget) throw CliError("--trace needs --model and --ram-budget (the cache to replay it on)");
        const uint64_t fixed = in.model->resident_bytes + in.model->kv_bytes(n_ctx, kv_types) + in.working_bytes;
        const uint64_t cache = std::min(*in.ram_budget > fixed ? *in.ram_budget - fixed : 0, in.model->expert_bytes);
        rows.push_back(routing_trace_row(trace, model, *in.ram_budget, cache));
    }
    if (!prompt_cache.empty()) rows.push_back(prompt_cache_row(prompt_cache, parse_bytes("--prompt-cache-size", prompt_cache_size)));
    if (as_json) {
        auto out = rows_to_json(rows);
        if (in.model) {
            const ModelFacts& m = *in.model;
            out["model"] = {{"arch", m.arch},
                            {"name", m.name},
                            {"layers", m.n_layer},
                            {"nextn_layers", m.n_layer_nextn},
                            {"experts", m.n_expert},
                            {"experts_used", m.n_expert_used},
                            {"resident_bytes", m.resident_bytes},
                            {"expert_bytes", m.expert_bytes},
                            {"shared_expert_bytes", m.shared_expert_bytes},
                            {"nextn_bytes", m.nextn_bytes},
                            {"nextn_file", m.nextn_file},
                            {"nextn_file_bytes", m.nextn_file_bytes},
                            {"expert_bytes_per_token", m.expert_bytes_per_token()},
                            {"active_bytes_per_token", m.active_bytes_per_token()},
                            {"cache_bytes_per_token", m.cache_bytes_per_token},
                            {"state_bytes_per_sequence", m.state_bytes},
                            {"recurrent_layers", m.recurrent_layers},
                            {"cache_layout", m.cache_layout},
                            {"supported", m.supported}};
            if (!m.supported) out["model"]["unsupported_reason"] = m.unsupported_reason;
        }
        std::cout << out.dump(2) << "\n";
    } else std::cout << rows_to_table(rows);
    return check_exit_code(rows);
}

}  // namespace moe::cli

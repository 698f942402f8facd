// `moestream plan`, `apply`, `install`, `launch`, `regen`: from facts and a model to files on the host.
#include <algorithm>
#include <sys/resource.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <optional>
#include <boost/program_options.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/plan_trace.h"
#include "cli/engine_setup.h"
#include "cli/plan_cluster.h"
#include "cli/plan_files.h"
#include "launch/apply.h"
#include "launch/diff.h"
#include "launch/launch_script.h"
#include "probes/memory_bandwidth.h"
#include "probes/probes.h"
#include "probes/storage_probe.h"
#include "systemd/unit.h"
#include "tune/check.h"
#include "tune/plan_io.h"
#include "tune/cluster.h"
#include "tune/planner.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace moe::cli {
namespace {

std::string self_path() {
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("moestream") : p.string();
}

}  // namespace

std::string read_text(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw CliError(path + ": cannot read");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void write_text(const std::string& path, const std::string& text, unsigned mode) {
    std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::trunc);
        if (!(f << text)) throw CliError(path + ": cannot write");
    }
    fs::permissions(tmp, static_cast<fs::perms>(mode));
    fs::rename(tmp, path);
}

std::vector<std::string> path_directories() {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("PATH")) {
        std::stringstream ss(env);
        for (std::string d; std::getline(ss, d, ':');)
            if (!d.empty() && d[0] == '/') dirs.push_back(d);
    }
    return dirs;
}

HostFacts gather_host(const std::string& facts_file, const std::string& root, const std::string& model, double seconds, bool no_storage) {
    if (!facts_file.empty()) {
        try {
            return host_facts_from_text(read_text(facts_file), facts_file);
        } catch (const std::runtime_error& e) { throw CliError(e.what()); }
    }
    HostFacts h = probe_host({.root = root, .try_ring = true});
    if (!no_storage && root == "/") {
        StorageProbeOptions o;
        o.dir = fs::absolute(model).parent_path().string();
        o.model_file = model;
        o.seconds = seconds;
        if (::isatty(2)) o.progress = [](const std::string& s) { std::cerr << "measuring: " << s << "\n"; };
        try {
            h.storage = probe_storage(o);
        } catch (const StorageProbeError& e) { std::cerr << "moestream: storage not measured: " << e.what() << "\n"; }
    }
    return h;
}

namespace {

// Writes plan.yaml and launch.sh into the plan's directory; returns the diff of what changed there.
std::string write_plan_dir(Plan& p, const std::string& dir) {
    fs::create_directories(dir);
    p.out_dir = fs::absolute(dir).string();
    std::string diff;
    const std::pair<std::string, std::string> files[] = {{"plan.yaml", plan_to_yaml(p)}, {"launch.sh", render_launch_sh(p)}};
    for (const auto& [name, text] : files) {
        const std::string path = p.out_dir + "/" + name;
        std::string old;
        if (fs::exists(path)) old = read_text(path);
        diff += unified_diff(old, text, fs::exists(path) ? path : "/dev/null", path);
        write_text(path, text, name == "launch.sh" ? 0755 : 0644);
    }
    // The unit and the sysctl/limits files are previewed here; apply/install put them in place.
    const std::pair<std::string, std::string> previews[] = {
        {"60-moestream.conf", apply_files(p)[0].content}, {"99-moestream.conf", apply_files(p)[1].content}, {"moestream.service", render_unit(p)}};
    for (const auto& [name, text] : previews) {
        const std::string path = p.out_dir + "/" + name;
        std::string old;
        if (fs::exists(path)) old = read_text(path);
        diff += unified_diff(old, text, fs::exists(path) ? path : "/dev/null", path);
        write_text(path, text, 0644);
    }
    return diff;
}

void print_plan(const Plan& p) {
    std::cout << "plan for " << p.model_path << " (" << p.target << ")\n";
    for (const auto& [k, v] : p.reasons) std::cout << "  " << k << " = " << v.value << "\n      " << v.reason << "\n";
    for (const auto& s : p.sysctl) std::cout << "  sysctl " << s.key << " = " << s.value << "   # " << s.reason << "\n";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f tok/s", p.predicted_tok_s);
    std::cout << "  predicted decode: " << (p.predicted_tok_s > 0 ? buf : "unknown") << " = " << p.prediction_formula << "\n";
}

// Routed counts per layer from a profile's `hottest` list.
std::vector<std::pair<uint32_t, uint64_t>> profile_layer_heat(const std::string& path) {
    std::map<uint32_t, uint64_t> heat;
    try {
        YAML::Node y = YAML::LoadFile(path);
        if (!y["hottest"] || !y["hottest"].IsSequence()) throw CliError(path + ": not a routing profile (no 'hottest' list)");
        for (const auto& e : y["hottest"]) heat[e["layer"].as<uint32_t>()] += e["count"].as<uint64_t>();
    } catch (const YAML::Exception& e) { throw CliError(path + ": not a valid routing profile (" + e.msg + ")"); }
    return {heat.begin(), heat.end()};
}

PlanOptions options_from(const Plan& p) {
    PlanOptions o;
    o.model_path = p.model_path;
    o.target = p.target;
    o.ram_budget = p.asked_ram_budget;
    o.threads = p.asked_threads;
    o.n_ctx = p.n_ctx;
    o.parallel = p.parallel;
    if (!p.asked_gpu_mem.empty()) o.gpu_mem = parse_gpu_mem(p.asked_gpu_mem);
    o.gpu_layers = p.asked_gpu_layers;
    o.n_batch = p.n_batch;
    o.n_ubatch = p.n_ubatch;
    o.cache_type_k = p.cache_type_k;
    o.cache_type_v = p.cache_type_v;
    o.draft = p.draft;
    o.host = p.host;
    o.port = p.port;
    o.alias = p.alias;
    o.moestream_binary = p.moestream_binary;
    o.llama_server_binary = p.llama_server_binary;
    o.created_by = "moestream 0.1.0";
    if (!p.profile_path.empty()) {
        o.profile_path = p.profile_path;
        o.layer_heat = profile_layer_heat(p.profile_path);
    }
    return o;
}

Plan plan_or_cli_error(const HostFacts& h, const ModelFacts& m, const PlanOptions& given) {
    PlanOptions o = given;
    const auto types = kernels::KvCacheTypes{kernels::parse_kv_cache_type(o.cache_type_k).value_or(GgmlType::F16),
                                             kernels::parse_kv_cache_type(o.cache_type_v).value_or(GgmlType::F16)};
    // What the engine will keep out of the budget for itself (load_engine), from the file's layout.
    // Counted for every physical core (the planner gives the engine at most that many threads), or --threads.
    if (o.target == "engine") {
        int threads = std::max(1, h.cpu.physical_cores.value.value_or(static_cast<int>(h.cpu.first_thread_per_core.size())));
        if (o.threads) threads = std::clamp(*o.threads, 1, threads);
        o.engine_working_bytes = engine_working_bytes_or_base(o.model_path, o.n_ctx, o.parallel, threads, types);
    }
    if (o.draft == "mtp") {
        try {
            const GgufModel file = open_gguf_model(o.model_path);
            o.draft_block_bytes = draft_block_bytes(file, m, o.n_ctx, o.parallel, types);
        } catch (const std::exception&) { o.draft_block_bytes = 0; }  // make_plan says why it cannot draft
    }
    try {
        return make_plan(h, m, o);
    } catch (const PlanError& e) { throw CliError(e.what()); }
}

// --trace: the engine's cache, or a llama target's placement of experts on its GPUs, judged on the user's routing.
void judge_on_trace(Plan& p, const HostFacts& h, const ModelFacts& m, const PlanOptions& o) {
    if (p.routing_trace_path.empty()) return;
    if (!is_llama_target(p.target)) return apply_routing_trace(p, m, o.mem_bytes_per_s);
    place_experts_by_trace(p, m, o, [&](const PlanOptions& other) { return plan_or_cli_error(h, m, other); });
}

Plan load_or_cli_error(const std::string& path) {
    try {
        return load_plan(path);
    } catch (const PlanError& e) { throw CliError(e.what()); }
}

}  // namespace

// systemd-analyze's overall exposure of a unit file ("1.9"), or nothing where the tool is missing or fails.
std::optional<std::string> unit_exposure(const std::string& unit) {
    FILE* f = ::popen(("systemd-analyze security --offline=true '" + unit + "' 2>/dev/null").c_str(), "r");
    if (!f) return std::nullopt;
    std::string out;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    ::pclose(f);
    const size_t at = out.find("Overall exposure level for");
    if (at == std::string::npos) return std::nullopt;
    const size_t colon = out.find(':', at);
    if (colon == std::string::npos) return std::nullopt;
    const size_t a = out.find_first_not_of(' ', colon + 1), b = out.find_first_of(" \n", a);
    return out.substr(a, b - a);
}

int cmd_plan(const std::vector<std::string>& args) {
    std::string model, facts, budget, target, gpu_mem, gpu_layers, out, root = "/", listen, alias, profile, cache_type_k, cache_type_v, trace;
    int n_batch = 2048, n_ubatch = 512;
    int threads = 0, port = 8000;
    uint32_t n_ctx = 4096;
    int parallel = 1, rpc_port = 50052;
    double seconds = 3, link_gbps = 10, mem_gbps = 20;
    bool no_storage = false;
    std::string head, rpc_binary, llama_binary, prompt_cache, prompt_cache_size = "8G", draft = "off";
    std::vector<std::string> workers;
    po::options_description opts("moestream plan options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model)->required(), "GGUF model (first split)")(
        "host", po::value(&facts), "host facts from `moestream probe --yaml` (default: probe this host now)")(
        "ram-budget", po::value(&budget), "RAM for the whole engine: resident weights + KV cache + expert cache")(
        "threads", po::value(&threads), "at most this many threads (default: every physical core of the node)")(
        "target", po::value(&target)->default_value("engine"),
        "engine | llama-server | ik-llama-server (ik_llama.cpp's server) | llama-rpc (a cluster: --head and --worker)")(
        "head", po::value(&head), "llama-rpc: the head's facts (probe --json or --yaml) @ the address workers see it at, as head.json@10.0.0.1")(
        "worker", po::value(&workers)->composing(), "llama-rpc: a worker's facts @ the address its rpc-server binds, as w1.json@10.0.0.2 (repeat)")(
        "rpc-port", po::value(&rpc_port)->default_value(50052), "llama-rpc: the workers' rpc-server port")(
        "link-gbps", po::value(&link_gbps)->default_value(10), "llama-rpc: network speed between the hosts, Gbit/s")(
        "rpc-server-binary", po::value(&rpc_binary),
        "llama-rpc: rpc-server on the workers (default: where their probes found "
        "ggml-rpc-server or rpc-server, else this host's PATH, else /usr/local/bin/ggml-rpc-server)")(
        "llama-server-binary", po::value(&llama_binary),
        "llama-server / llama-rpc: llama-server (on the head; default: where its probe found it, "
        "else this host's PATH, else /usr/local/bin/llama-server)")("mem-gbps", po::value(&mem_gbps)->default_value(20),
                                                                    "llama-rpc: each host's RAM read bandwidth for the prediction, GB/s")(
        "gpu-mem", po::value(&gpu_mem),
        "llama-server: GPU memory the plan may use, per GPU, as 0=96G,1=96G (every layer's share, KV, compute and experts fit in it)")(
        "gpu-layers", po::value(&gpu_layers), "llama-server: pin which layers' experts go to which GPU, as 3-17:0,74-77:1")(
        "batch-size,b", po::value(&n_batch)->default_value(2048), "llama-server: -b")("ubatch-size", po::value(&n_ubatch)->default_value(512),
                                                                                      "llama-server: -ub (the compute buffer grows with it)")(
        "cache-type-k", po::value(&cache_type_k)->default_value("f16"), "-ctk: the K cache's type, for the engine or llama-server (q8_0 halves it)")(
        "cache-type-v", po::value(&cache_type_v)->default_value("f16"),
        "-ctv: the V cache's type (MLA models: the engine needs it equal to K; llama-server has none)")(
        "ctx", po::value(&n_ctx)->default_value(4096), "context length")("parallel", po::value(&parallel)->default_value(1),
                                                                         "server slots (serve --parallel); each holds a KV cache of --ctx")(
        "listen", po::value(&listen)->default_value("127.0.0.1"), "address the server binds")(
        "port", po::value(&port)->default_value(8000), "port the server listens on")("alias", po::value(&alias), "model name the API reports")(
        "profile", po::value(&profile), "routing profile (moestream profile): hottest experts resident; llama-server: hottest layers on GPUs")(
        "prompt-cache", po::value(&prompt_cache),
        "engine: serve --prompt-cache DIR, prompt prefixes kept across restarts (under /var/cache the unit has systemd make it)")(
        "prompt-cache-size", po::value(&prompt_cache_size)->default_value("8G"), "engine: bytes the prompt cache may take on disk")(
        "draft", po::value(&draft)->default_value("off"),
        "engine: serve --draft auto | lookup | mtp (the NextN block, kept in RAM: counted in the budget) | off")(
        "trace", po::value(&trace), "routing trace of this model (run/serve/bench --routing-trace): the cache's hit rate simulated on it")(
        "root", po::value(&root)->default_value("/"), "probe /proc and /sys under this directory")("seconds", po::value(&seconds)->default_value(3),
                                                                                                   "seconds per storage measurement")(
        "no-storage", po::bool_switch(&no_storage), "do not measure the disk")("out", po::value(&out)->required(),
                                                                               "directory for plan.yaml and the generated files");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (target == "llama-rpc")
        return plan_cluster({.model = model,
                             .head = head,
                             .workers = workers,
                             .out = out,
                             .rpc_port = rpc_port,
                             .link_gbps = link_gbps,
                             .mem_gbps = mem_gbps,
                             .n_ctx = n_ctx,
                             .port = port,
                             .rpc_binary = rpc_binary,
                             .llama_binary = llama_binary,
                             .rpc_binary_reason = "",
                             .llama_binary_reason = ""});
    if (is_llama_target(target) && gpu_mem.empty()) throw CliError("--target " + target + " needs --gpu-mem, as 0=96G,1=96G");
    if (port < 1 || port > 65535) throw CliError("--port " + std::to_string(port) + " is not a port");
    ModelFacts m = read_model_facts(model);
    PlanOptions o;
    o.model_path = fs::absolute(model).string();
    o.target = target;
    if (!budget.empty()) o.ram_budget = parse_bytes("--ram-budget", budget);
    if (vm.count("threads")) o.threads = threads;
    o.n_ctx = n_ctx;
    o.parallel = parallel;
    try {
        if (!gpu_mem.empty()) o.gpu_mem = parse_gpu_mem(gpu_mem);
    } catch (const PlanError& e) { throw CliError(e.what()); }
    o.gpu_layers = gpu_layers;
    o.n_batch = n_batch;
    o.n_ubatch = n_ubatch;
    o.cache_type_k = cache_type_k;
    o.cache_type_v = cache_type_v;
    if (draft != "off" && draft != "auto" && draft != "lookup" && draft != "mtp")
        throw CliError("--draft " + draft + ": expected auto, off, lookup or mtp");
    o.draft = draft;
    o.host = listen;
    o.port = port;
    o.alias = alias;
    o.moestream_binary = self_path();
    o.created_by = "moestream 0.1.0";
    if (!profile.empty()) {
        o.profile_path = fs::absolute(profile).string();
        o.layer_heat = profile_layer_heat(o.profile_path);
    }
    HostFacts h = gather_host(facts, root, model, seconds, no_storage);
    // A host file carries the RAM bandwidth its probe measured (older files and fixture trees do not).
    o.mem_bytes_per_s = facts.empty() ? measure_memory_read_bandwidth(std::max(1, h.cpu.physical_cores.value.value_or(1)), 256u << 20)
                                      : h.memory.read_bytes_per_s.value.value_or(0);
    BinaryChoice server;
    if (is_llama_target(target)) {
        ClusterHost self{"this host", "", h, 0};
        server = choose_llama_binary("llama-server", llama_binary, {&self}, path_directories());
        o.llama_server_binary = server.path;
    }
    Plan p = plan_or_cli_error(h, m, o);
    if (!trace.empty()) {
        p.routing_trace_path = fs::absolute(trace).string();
        judge_on_trace(p, h, m, o);
    }
    if (is_llama_target(target)) {
        p.reasons.push_back({"llama_server_binary", {server.path, server.reason}});
        if (!server.warning.empty()) p.notes.push_back(server.warning);
    }
    p.asked_ram_budget = o.ram_budget;
    if (vm.count("threads")) p.asked_threads = threads;
    p.asked_gpu_mem = gpu_mem;
    if (!prompt_cache.empty()) {
        if (target != "engine")
            throw CliError("--prompt-cache is the engine's (serve --prompt-cache); --target " + target + " keeps no prompt cache across restarts");
        p.prompt_cache_dir = fs::absolute(prompt_cache).lexically_normal().string();
        p.prompt_cache_bytes = parse_bytes("--prompt-cache-size", prompt_cache_size);
    }
    write_plan_dir(p, out);
    print_plan(p);
    if (const auto exposure = unit_exposure(p.out_dir + "/moestream.service"))
        std::cout << "service exposure " << *exposure << " (systemd-analyze security --offline; lower is safer, 10 is unsandboxed root)\n";
    std::cout << "wrote " << p.out_dir << "/{plan.yaml,launch.sh} and previews of 60-moestream.conf, 99-moestream.conf, "
              << "moestream.service\nnext: moestream apply --plan " << p.out_dir << "/plan.yaml --dry-run\n";
    return 0;
}

int cmd_apply(const std::vector<std::string>& args) {
    std::string plan_path, root = "/";
    bool dry_run = false, rollback = false;
    po::options_description opts("moestream apply options");
    opts.add_options()("help,h", "show this help")("plan", po::value(&plan_path), "plan.yaml")("root", po::value(&root)->default_value("/"),
                                                                                               "install under this directory instead of /")(
        "dry-run", po::bool_switch(&dry_run), "show the diff, write nothing; exit 2 when changes are pending, 0 when none")(
        "rollback", po::bool_switch(&rollback), "restore the files the last apply/install replaced");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (!fs::is_directory(root)) throw CliError("--root " + root + " is not a directory");
    if (rollback) {
        if (dry_run) throw CliError("--rollback and --dry-run together: nothing to show");
        try {
            for (const auto& p : rollback_latest(root)) std::cout << "restored " << p << "\n";
        } catch (const std::runtime_error& e) { throw CliError(e.what()); }
        return 0;
    }
    if (plan_path.empty()) throw CliError("--plan is required");
    Plan p = load_or_cli_error(plan_path);
    ApplyResult r;
    try {
        r = apply_files_under(apply_files(p), root, dry_run, "apply");
    } catch (const std::runtime_error& e) { throw CliError(e.what(), 1); }
    std::cout << r.diff;
    if (r.changed.empty()) {
        std::cout << "nothing to change: " << r.unchanged.size() << " files already as planned\n";
        return 0;
    }
    if (dry_run) {
        std::cout << r.changed.size() << " file(s) would change (dry run: nothing written)\n";
        return 2;
    }
    for (const auto& c : r.changed) std::cout << "wrote " << (root == "/" ? "" : root) << c << "\n";
    std::cout << "backup: " << r.backup_dir << " (undo: moestream apply --rollback" << (root == "/" ? "" : " --root " + root) << ")\n";
    if (root == "/") {
        try {
            for (const auto& s : apply_sysctl_now(p)) std::cout << "sysctl " << s << "\n";
        } catch (const std::runtime_error& e) { std::cerr << "moestream apply: " << e.what() << "; the file applies at next boot\n"; }
    } else {
        std::cout << "running kernel untouched: --root is not /\n";
    }
    return 0;
}

int cmd_install(const std::vector<std::string>& args) {
    std::string plan_path, root = "/", host_dir;
    bool dry_run = false;
    po::options_description opts("moestream install options");
    opts.add_options()("help,h", "show this help")("plan", po::value(&plan_path), "plan.yaml")(
        "host-dir", po::value(&host_dir), "instead of --plan: one host's directory of a cluster plan (plan --target llama-rpc)")(
        "dry-run", po::bool_switch(&dry_run), "show what would change, change nothing")("root", po::value(&root)->default_value("/"),
                                                                                        "install under this directory instead of /");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (!fs::is_directory(root)) throw CliError("--root " + root + " is not a directory");
    if (plan_path.empty() == host_dir.empty()) throw CliError("give --plan plan.yaml or --host-dir DIR/HOST");
    if (!host_dir.empty()) {
        // Idempotent, with backups and a diff, like apply; sysctl and nftables take effect at the next boot or
        // `sysctl --system` / `nft -f`, said below rather than done behind the user's back.
        ApplyResult r = apply_files_under(host_dir_files(host_dir), root, dry_run, "install");
        std::cout << r.diff;
        for (const auto& c : r.changed) std::cout << (dry_run ? "would install " : "installed ") << (root == "/" ? "" : root) << c << "\n";
        for (const auto& u : r.unchanged) std::cout << "unchanged: " << (root == "/" ? "" : root) << u << "\n";
        if (!r.backup_dir.empty()) std::cout << "replaced files backed up in " << r.backup_dir << "\n";
        std::cout << "then, on that host: sysctl --system; nft -f /etc/nftables.d/moestream-rpc.nft (workers); systemctl daemon-reload; "
                     "systemctl enable --now llama-rpc-server (workers) or llama-server-rpc (head)\n";
        return dry_run && !r.changed.empty() ? 2 : 0;
    }
    Plan p = load_or_cli_error(plan_path);
    ApplyResult r = apply_files_under({unit_file(p)}, root, false, "install");
    std::cout << r.diff;
    std::cout << (r.changed.empty() ? "unit unchanged: " : "installed ") << (root == "/" ? "" : root) << unit_file(p).install_path << "\n";
    const bool systemd_running = root == "/" && fs::is_directory("/run/systemd/system");
    if (!systemd_running) {
        std::string pid1 = "?";
        std::ifstream("/proc/1/comm") >> pid1;
        std::cout << "systemd is not running here (" << (root == "/" ? "PID 1 is " + pid1 : "--root is not /")
                  << "): not enabled. On the target host: systemctl daemon-reload && systemctl enable --now moestream\n";
        return 0;
    }
    for (const char* cmd : {"systemctl daemon-reload", "systemctl enable moestream.service"}) {
        std::cout << "$ " << cmd << "\n";
        if (std::system(cmd) != 0) throw CliError(std::string(cmd) + " failed", 1);
    }
    std::cout << "enabled; start with: systemctl start moestream\n";
    return 0;
}

int cmd_launch(const std::vector<std::string>& args) {
    std::string plan_path;
    bool print_only = false;
    po::options_description opts("moestream launch options");
    opts.add_options()("help,h", "show this help")("plan", po::value(&plan_path)->required(), "plan.yaml")("print", po::bool_switch(&print_only),
                                                                                                           "print the command instead of running it");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    Plan p = load_or_cli_error(plan_path);
    std::vector<std::string> argv = launch_argv(p);
    std::string line;
    for (const auto& a : argv) line += (line.empty() ? "" : " ") + shell_quote(a);
    if (print_only) {
        std::cout << line << "\n";
        return 0;
    }
    // As launch.sh's `ulimit -l`: raise memlock for the resident weights where the hard limit allows.
    struct rlimit rl {};
    const rlim_t want = static_cast<rlim_t>(std::stoull(p.memlock_limit)) << 20;
    if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur < want) {
        struct rlimit up {
            want, std::max(want, rl.rlim_max)
        };
        if (::setrlimit(RLIMIT_MEMLOCK, &up) != 0 && rl.rlim_max > rl.rlim_cur) {
            up = {rl.rlim_max, rl.rlim_max};
            ::setrlimit(RLIMIT_MEMLOCK, &up);
        }
    }
    std::cerr << "launch: " << line << "\n";
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execvp(cargv[0], cargv.data());
    throw CliError(
        std::string("cannot exec ") + argv[0] + ": " + std::strerror(errno) + (argv[0] == std::string("numactl") ? " (apt-get install numactl)" : ""),
        1);
}

int cmd_regen(const std::vector<std::string>& args) {
    std::string plan_path, facts, root = "/", cluster;
    double seconds = 3;
    bool no_storage = false;
    po::options_description opts("moestream regen options");
    opts.add_options()("help,h", "show this help")("plan", po::value(&plan_path), "plan.yaml")(
        "cluster", po::value(&cluster),
        "instead of --plan: a cluster.yaml from plan --target llama-rpc; plans again from the hosts' facts files and shows each host's diffs")(
        "host", po::value(&facts), "host facts file instead of probing")("root", po::value(&root)->default_value("/"),
                                                                         "probe /proc and /sys under this directory")(
        "seconds", po::value(&seconds)->default_value(3), "seconds per storage measurement")("no-storage", po::bool_switch(&no_storage),
                                                                                             "do not measure the disk");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (!cluster.empty()) return regen_cluster(cluster);
    if (plan_path.empty()) throw CliError("give --plan plan.yaml or --cluster cluster.yaml");
    Plan old = load_or_cli_error(plan_path);
    HostFacts h = gather_host(facts, root, old.model_path, seconds, no_storage);
    Fingerprint now = fingerprint_of(h, old.model_path);
    const Fingerprint& was = old.fingerprint;
    std::vector<std::string> changes;
    auto cmp = [&](const char* what, const std::string& a, const std::string& b) {
        if (a != b) changes.push_back(std::string(what) + ": " + a + " -> " + b);
    };
    cmp("cpu", was.cpu_model, now.cpu_model);
    cmp("physical cores", std::to_string(was.physical_cores), std::to_string(now.physical_cores));
    cmp("logical cpus", std::to_string(was.logical_cpus), std::to_string(now.logical_cpus));
    cmp("numa", was.numa_layout, now.numa_layout);
    cmp("ram", human_bytes(static_cast<double>(was.ram_bytes)), human_bytes(static_cast<double>(now.ram_bytes)));
    if (h.storage) cmp("disk", was.block_device, now.block_device);
    cmp("model file", was.model_file, now.model_file);
    if (changes.empty()) {
        std::cout << "nothing changed since the plan was made: " << plan_path << " stands\n";
        return 0;
    }
    for (const auto& c : changes) std::cout << "changed: " << c << "\n";
    ModelFacts m = read_model_facts(old.model_path);
    PlanOptions o = options_from(old);
    Plan p = plan_or_cli_error(h, m, o);
    p.routing_trace_path = old.routing_trace_path;
    judge_on_trace(p, h, m, o);
    p.asked_ram_budget = old.asked_ram_budget;
    p.asked_threads = old.asked_threads;
    p.asked_gpu_mem = old.asked_gpu_mem;
    p.service_user = old.service_user;
    p.prompt_cache_dir = old.prompt_cache_dir;  // saved prefixes stay where they are
    p.prompt_cache_bytes = old.prompt_cache_bytes;
    std::cout << write_plan_dir(p, fs::absolute(plan_path).parent_path().string());
    std::cout << "rewrote the plan; apply and install put the new files in place\n";
    return 0;
}

}  // namespace moe::cli

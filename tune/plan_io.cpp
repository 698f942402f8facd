#include <algorithm>
#include "tune/plan_io.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "probes/fs_root.h"
#include "tune/planner.h"

namespace moe {

std::string plan_to_yaml(const Plan& p) {
    YAML::Emitter o;
    o << YAML::BeginMap;
    o << YAML::Key << "moestream_plan" << YAML::Value << p.schema;
    o << YAML::Key << "created_by" << YAML::Value << p.created_by;
    o << YAML::Key << "target" << YAML::Value << p.target;
    o << YAML::Key << "model" << YAML::Value << YAML::BeginMap << YAML::Key << "path" << YAML::Value << p.model_path << YAML::Key << "arch"
      << YAML::Value << p.model_arch << YAML::Key << "resident_bytes" << YAML::Value << p.resident_bytes << YAML::Key << "expert_bytes" << YAML::Value
      << p.expert_bytes << YAML::EndMap;
    const Fingerprint& f = p.fingerprint;
    o << YAML::Key << "fingerprint" << YAML::Value << YAML::BeginMap << YAML::Key << "cpu_model" << YAML::Value << f.cpu_model << YAML::Key
      << "physical_cores" << YAML::Value << f.physical_cores << YAML::Key << "logical_cpus" << YAML::Value << f.logical_cpus << YAML::Key
      << "numa_layout" << YAML::Value << f.numa_layout << YAML::Key << "ram_bytes" << YAML::Value << f.ram_bytes << YAML::Key << "block_device"
      << YAML::Value << f.block_device << YAML::Key << "model_file" << YAML::Value << f.model_file << YAML::EndMap;
    o << YAML::Key << "decisions" << YAML::Value << YAML::BeginMap;
    o << YAML::Key << "threads" << YAML::Value << p.threads << YAML::Key << "cpus" << YAML::Value << p.cpus;
    o << YAML::Key << "membind_node" << YAML::Value;
    if (p.membind_node) o << *p.membind_node;
    else o << YAML::Null;
    o << YAML::Key << "ram_budget_bytes" << YAML::Value << p.ram_budget_bytes << YAML::Key << "n_ctx" << YAML::Value << p.n_ctx << YAML::Key
      << "parallel" << YAML::Value << p.parallel << YAML::Key << "kv_bytes" << YAML::Value << p.kv_bytes << YAML::Key << "expert_cache_bytes"
      << YAML::Value << p.expert_cache_bytes << YAML::Key << "io_queue_depth" << YAML::Value << p.io_queue_depth << YAML::Key << "read_size"
      << YAML::Value << p.read_size << YAML::Key << "mlock_bytes" << YAML::Value << p.mlock_bytes << YAML::Key << "memlock_limit" << YAML::Value
      << p.memlock_limit << YAML::Key << "predicted_tok_s" << YAML::Value << p.predicted_tok_s << YAML::Key << "disk_bytes_per_s" << YAML::Value
      << p.disk_bytes_per_s << YAML::Key << "prediction" << YAML::Value << p.prediction_formula;
    o << YAML::EndMap;
    o << YAML::Key << "reasons" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : p.reasons)
        o << YAML::Key << k << YAML::Value << YAML::BeginMap << YAML::Key << "value" << YAML::Value << v.value << YAML::Key << "reason" << YAML::Value
          << v.reason << YAML::EndMap;
    o << YAML::EndMap;
    o << YAML::Key << "sysctl" << YAML::Value << YAML::BeginSeq;
    for (const auto& s : p.sysctl)
        o << YAML::BeginMap << YAML::Key << "key" << YAML::Value << s.key << YAML::Key << "value" << YAML::Value << s.value << YAML::Key << "reason"
          << YAML::Value << s.reason << YAML::EndMap;
    o << YAML::EndSeq;
    o << YAML::Key << "notes" << YAML::Value << YAML::BeginSeq;
    for (const auto& n : p.notes) o << n;
    o << YAML::EndSeq;
    o << YAML::Key << "asked" << YAML::Value << YAML::BeginMap << YAML::Key << "ram_budget" << YAML::Value;
    if (p.asked_ram_budget) o << *p.asked_ram_budget;
    else o << YAML::Null;
    o << YAML::Key << "threads" << YAML::Value;
    if (p.asked_threads) o << *p.asked_threads;
    else o << YAML::Null;
    o << YAML::Key << "gpu_mem" << YAML::Value << p.asked_gpu_mem << YAML::Key << "profile" << YAML::Value << p.profile_path << YAML::Key
      << "routing_trace" << YAML::Value << p.routing_trace_path << YAML::Key << "cache_type_k" << YAML::Value << p.cache_type_k << YAML::Key
      << "cache_type_v" << YAML::Value << p.cache_type_v << YAML::Key << "draft" << YAML::Value << p.draft << YAML::EndMap;
    o << YAML::Key << "serve" << YAML::Value << YAML::BeginMap << YAML::Key << "host" << YAML::Value << p.host << YAML::Key << "port" << YAML::Value
      << p.port << YAML::Key << "alias" << YAML::Value << p.alias << YAML::Key << "moestream_binary" << YAML::Value << p.moestream_binary << YAML::Key
      << "user" << YAML::Value << p.service_user << YAML::Key << "prompt_cache" << YAML::Value << p.prompt_cache_dir << YAML::Key
      << "prompt_cache_size" << YAML::Value << p.prompt_cache_bytes << YAML::EndMap;
    if (is_llama_target(p.target)) {
        o << YAML::Key << "llama_server" << YAML::Value << YAML::BeginMap << YAML::Key << "binary" << YAML::Value << p.llama_server_binary
          << YAML::Key << "gpus" << YAML::Value << YAML::BeginSeq;
        for (const auto& g : p.gpus) {
            o << YAML::BeginMap << YAML::Key << "gpu" << YAML::Value << g.gpu << YAML::Key << "budget_bytes" << YAML::Value << g.budget_bytes
              << YAML::Key << "used_bytes" << YAML::Value << g.used_bytes << YAML::Key << "margin_bytes" << YAML::Value
              << (g.budget_bytes - std::min(g.used_bytes, g.budget_bytes)) << YAML::Key << "expert_bytes" << YAML::Value << g.expert_bytes
              << YAML::Key << "layer_bytes" << YAML::Value << g.layer_bytes << YAML::Key << "output_bytes" << YAML::Value << g.output_bytes
              << YAML::Key << "kv_bytes" << YAML::Value << g.kv_bytes << YAML::Key << "compute_bytes" << YAML::Value << g.compute_bytes << YAML::Key
              << "reserve_bytes" << YAML::Value << g.reserve_bytes << YAML::Key << "first_layer" << YAML::Value << g.first_layer << YAML::Key
              << "n_layers" << YAML::Value << g.n_layers << YAML::Key << "split" << YAML::Value << g.split << YAML::Key << "layers" << YAML::Value
              << YAML::Flow << g.layers << YAML::EndMap;
        }
        o << YAML::EndSeq << YAML::Key << "batch" << YAML::Value << p.n_batch << YAML::Key << "ubatch" << YAML::Value << p.n_ubatch << YAML::Key
          << "gpu_layers" << YAML::Value << p.asked_gpu_layers << YAML::Key << "cache_type_k" << YAML::Value << p.cache_type_k << YAML::Key
          << "cache_type_v" << YAML::Value << p.cache_type_v << YAML::Key << "server_args" << YAML::Value << YAML::Flow << p.server_args
          << YAML::EndMap;
    }
    o << YAML::EndMap;
    return std::string(o.c_str()) + "\n";
}

namespace {

template <typename T>
T field(const YAML::Node& n, const std::string& path, const std::string& file) {
    YAML::Node cur = YAML::Clone(n);
    std::stringstream ss(path);
    std::string part;
    while (std::getline(ss, part, '.')) {
        if (!cur.IsMap() || !cur[part]) throw PlanError(file + ": field '" + path + "' is missing");
        cur = cur[part];
    }
    try {
        return cur.as<T>();
    } catch (const YAML::Exception&) {
        throw PlanError(file + ": field '" + path + "' has a value of the wrong type (line " + std::to_string(cur.Mark().line + 1) + ")");
    }
}

}  // namespace

namespace {
Plan load_plan_fields(const std::string& path);
}  // namespace

// A field of the wrong YAML kind (a map where a number belongs, found by fuzzing) is a PlanError too.
Plan load_plan(const std::string& path) {
    try {
        return load_plan_fields(path);
    } catch (const YAML::Exception& e) {
        throw PlanError(path + ": a field has the wrong type (line " + std::to_string(e.mark.line + 1) + ": " + e.msg + ")");
    }
}

namespace {
Plan load_plan_fields(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw PlanError(path + ": cannot open the plan");
    YAML::Node y;
    try {
        y = YAML::Load(in);
    } catch (const YAML::Exception& e) { throw PlanError(path + ": not valid YAML (line " + std::to_string(e.mark.line + 1) + ": " + e.msg + ")"); }
    if (!y.IsMap()) throw PlanError(path + ": not a moestream plan (top level is not a map)");
    const int schema = field<int>(y, "moestream_plan", path);
    if (schema > kPlanSchema)
        throw PlanError(path + ": plan schema " + std::to_string(schema) + " is newer than this moestream understands (" +
                        std::to_string(kPlanSchema) + "): upgrade moestream or re-run `moestream plan`");
    if (schema < 1) throw PlanError(path + ": moestream_plan " + std::to_string(schema) + " is not a schema version");
    Plan p;
    p.schema = schema;
    p.created_by = field<std::string>(y, "created_by", path);
    p.target = field<std::string>(y, "target", path);
    if (p.target != "engine" && !is_llama_target(p.target))
        throw PlanError(path + ": target '" + p.target + "' is not engine, llama-server or ik-llama-server");
    p.model_path = field<std::string>(y, "model.path", path);
    p.model_arch = field<std::string>(y, "model.arch", path);
    p.resident_bytes = field<uint64_t>(y, "model.resident_bytes", path);
    p.expert_bytes = field<uint64_t>(y, "model.expert_bytes", path);
    Fingerprint& f = p.fingerprint;
    f.cpu_model = field<std::string>(y, "fingerprint.cpu_model", path);
    f.physical_cores = field<int>(y, "fingerprint.physical_cores", path);
    f.logical_cpus = field<int>(y, "fingerprint.logical_cpus", path);
    f.numa_layout = field<std::string>(y, "fingerprint.numa_layout", path);
    f.ram_bytes = field<uint64_t>(y, "fingerprint.ram_bytes", path);
    f.block_device = field<std::string>(y, "fingerprint.block_device", path);
    f.model_file = field<std::string>(y, "fingerprint.model_file", path);
    p.threads = field<int>(y, "decisions.threads", path);
    if (p.threads < 1 || p.threads > 4096) throw PlanError(path + ": decisions.threads " + std::to_string(p.threads) + " is out of range");
    p.cpus = field<std::string>(y, "decisions.cpus", path);
    if (!parse_cpu_list(p.cpus)) throw PlanError(path + ": decisions.cpus '" + p.cpus + "' is not a CPU list");
    if (y["decisions"]["membind_node"] && !y["decisions"]["membind_node"].IsNull()) p.membind_node = field<int>(y, "decisions.membind_node", path);
    p.ram_budget_bytes = field<uint64_t>(y, "decisions.ram_budget_bytes", path);
    p.n_ctx = field<uint32_t>(y, "decisions.n_ctx", path);
    if (y["decisions"]["parallel"]) p.parallel = field<int>(y, "decisions.parallel", path);  // absent in plans before it existed: 1
    if (p.parallel < 1 || p.parallel > 256)
        throw PlanError(path + ": decisions.parallel " + std::to_string(p.parallel) + " is out of range (1..256)");
    p.kv_bytes = field<uint64_t>(y, "decisions.kv_bytes", path);
    p.expert_cache_bytes = field<uint64_t>(y, "decisions.expert_cache_bytes", path);
    p.io_queue_depth = field<int>(y, "decisions.io_queue_depth", path);
    p.read_size = field<uint64_t>(y, "decisions.read_size", path);
    p.mlock_bytes = field<uint64_t>(y, "decisions.mlock_bytes", path);
    p.memlock_limit = field<std::string>(y, "decisions.memlock_limit", path);
    p.predicted_tok_s = field<double>(y, "decisions.predicted_tok_s", path);
    if (y["decisions"]["disk_bytes_per_s"]) p.disk_bytes_per_s = field<double>(y, "decisions.disk_bytes_per_s", path);
    p.prediction_formula = field<std::string>(y, "decisions.prediction", path);
    if (y["reasons"] && y["reasons"].IsMap())
        for (const auto& kv : y["reasons"])
            p.reasons.push_back({kv.first.as<std::string>(), {kv.second["value"].as<std::string>(""), kv.second["reason"].as<std::string>("")}});
    if (y["sysctl"] && y["sysctl"].IsSequence())
        for (const auto& s : y["sysctl"]) {
            SysctlSetting st{s["key"].as<std::string>(""), s["value"].as<std::string>(""), s["reason"].as<std::string>("")};
            if (st.key.empty() || st.value.empty() || st.key.find_first_of(" =\n") != std::string::npos || st.value.find('\n') != std::string::npos)
                throw PlanError(path + ": a sysctl entry has a bad key or value ('" + st.key + "')");
            p.sysctl.push_back(st);
        }
    if (y["notes"] && y["notes"].IsSequence())
        for (const auto& n : y["notes"]) p.notes.push_back(n.as<std::string>(""));
    if (y["asked"] && y["asked"].IsMap()) {
        if (y["asked"]["ram_budget"] && !y["asked"]["ram_budget"].IsNull()) p.asked_ram_budget = field<uint64_t>(y, "asked.ram_budget", path);
        if (y["asked"]["threads"] && !y["asked"]["threads"].IsNull()) p.asked_threads = field<int>(y, "asked.threads", path);
        if (y["asked"]["gpu_mem"]) p.asked_gpu_mem = field<std::string>(y, "asked.gpu_mem", path);
        if (y["asked"]["profile"]) p.profile_path = field<std::string>(y, "asked.profile", path);
        if (y["asked"]["routing_trace"]) p.routing_trace_path = field<std::string>(y, "asked.routing_trace", path);
        if (y["asked"]["cache_type_k"]) p.cache_type_k = field<std::string>(y, "asked.cache_type_k", path);
        if (y["asked"]["cache_type_v"]) p.cache_type_v = field<std::string>(y, "asked.cache_type_v", path);
        if (y["asked"]["draft"]) p.draft = field<std::string>(y, "asked.draft", path);
        if (p.draft != "off" && p.draft != "auto" && p.draft != "lookup" && p.draft != "mtp")
            throw PlanError(path + ": asked.draft " + p.draft + " is not auto, lookup, mtp or off");
    }
    p.host = field<std::string>(y, "serve.host", path);
    p.port = field<int>(y, "serve.port", path);
    if (y["serve"]["prompt_cache"]) p.prompt_cache_dir = field<std::string>(y, "serve.prompt_cache", path);
    if (y["serve"]["prompt_cache_size"]) p.prompt_cache_bytes = field<uint64_t>(y, "serve.prompt_cache_size", path);
    if (!p.prompt_cache_dir.empty() && p.prompt_cache_dir[0] != '/')
        throw PlanError(path + ": serve.prompt_cache " + p.prompt_cache_dir + " is not an absolute path");
    if (p.port < 1 || p.port > 65535) throw PlanError(path + ": serve.port " + std::to_string(p.port) + " is not a port");
    p.alias = field<std::string>(y, "serve.alias", path);
    p.moestream_binary = field<std::string>(y, "serve.moestream_binary", path);
    p.service_user = field<std::string>(y, "serve.user", path);
    if (is_llama_target(p.target)) {
        p.llama_server_binary = field<std::string>(y, "llama_server.binary", path);
        for (const auto& g : y["llama_server"]["gpus"]) {
            GpuAssignment a;
            a.gpu = g["gpu"].as<int>();
            a.budget_bytes = g["budget_bytes"].as<uint64_t>();
            a.used_bytes = g["used_bytes"].as<uint64_t>();
            a.layers = g["layers"].as<std::vector<uint32_t>>();
            auto u64 = [&](const char* k) { return g[k] ? g[k].as<uint64_t>() : 0; };
            a.expert_bytes = u64("expert_bytes"), a.layer_bytes = u64("layer_bytes"), a.output_bytes = u64("output_bytes");
            a.kv_bytes = u64("kv_bytes"), a.compute_bytes = u64("compute_bytes"), a.reserve_bytes = u64("reserve_bytes");
            a.first_layer = static_cast<uint32_t>(u64("first_layer")), a.n_layers = static_cast<uint32_t>(u64("n_layers"));
            a.split = g["split"] ? g["split"].as<double>() : 0;
            p.gpus.push_back(a);
        }
        const YAML::Node ls = y["llama_server"];
        if (ls["batch"]) p.n_batch = ls["batch"].as<int>();
        if (ls["ubatch"]) p.n_ubatch = ls["ubatch"].as<int>();
        if (ls["gpu_layers"]) p.asked_gpu_layers = ls["gpu_layers"].as<std::string>();
        if (ls["cache_type_k"]) p.cache_type_k = ls["cache_type_k"].as<std::string>();
        if (ls["cache_type_v"]) p.cache_type_v = ls["cache_type_v"].as<std::string>();
        if (ls["server_args"]) p.server_args = ls["server_args"].as<std::vector<std::string>>();
    }
    p.out_dir = std::filesystem::absolute(path).parent_path().string();
    return p;
}
}  // namespace

}  // namespace moe

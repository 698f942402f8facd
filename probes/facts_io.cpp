// HostFacts as JSON (nlohmann) and YAML (yaml-cpp, emitted from the same tree so the two never disagree).
#include <yaml-cpp/yaml.h>

#include "probes/host_facts.h"

namespace moe {
namespace {

using json = nlohmann::json;

template <typename T>
json src(const Sourced<T>& s) {
    json j = {{"source", s.source}};
    j["value"] = s.value ? json(*s.value) : json(nullptr);
    return j;
}

json bandwidth(const BandwidthResult& r) {
    return {{"tool", r.tool}, {"block_size", r.block_size},   {"queue_depth", r.queue_depth}, {"bytes_per_s", r.bytes_per_s},
            {"iops", r.iops}, {"clat_p50_us", r.clat_p50_us}, {"clat_p99_us", r.clat_p99_us}, {"seconds", r.seconds}};
}

json device(const BlockDeviceFacts& d) {
    return {{"name", d.name},
            {"partition", d.partition},
            {"model", src(d.model)},
            {"size_bytes", src(d.size_bytes)},
            {"scheduler", src(d.scheduler)},
            {"nr_requests", src(d.nr_requests)},
            {"read_ahead_kb", src(d.read_ahead_kb)},
            {"logical_block_size", src(d.logical_block_size)},
            {"rotational", src(d.rotational)},
            {"numa_node", src(d.numa_node)}};
}

void emit(YAML::Emitter& out, const json& j) {
    if (j.is_object()) {
        out << YAML::BeginMap;
        for (auto it = j.begin(); it != j.end(); ++it) {
            out << YAML::Key << it.key() << YAML::Value;
            emit(out, it.value());
        }
        out << YAML::EndMap;
    } else if (j.is_array()) {
        out << YAML::BeginSeq;
        for (const auto& e : j) emit(out, e);
        out << YAML::EndSeq;
    } else if (j.is_null()) {
        out << YAML::Null;
    } else if (j.is_string()) {
        out << j.get<std::string>();
    } else if (j.is_boolean()) {
        out << j.get<bool>();
    } else if (j.is_number_unsigned()) {
        out << j.get<uint64_t>();
    } else if (j.is_number_integer()) {
        out << j.get<int64_t>();
    } else {
        out << j.get<double>();
    }
}

}  // namespace

json to_json(const HostFacts& f) {
    json cpu = {{"model", src(f.cpu.model)},
                {"logical_cpus", src(f.cpu.logical_cpus)},
                {"physical_cores", src(f.cpu.physical_cores)},
                {"sockets", src(f.cpu.sockets)},
                {"smt_siblings_of_cpu0", f.cpu.smt_siblings_of_cpu0},
                {"first_thread_per_core", f.cpu.first_thread_per_core},
                {"simd", f.cpu.simd},
                {"simd_source", f.cpu.simd_source}};
    json nodes = json::array();
    for (const auto& n : f.numa.nodes)
        nodes.push_back({{"id", n.id}, {"cpus", n.cpus}, {"mem_total_bytes", n.mem_total_bytes ? json(*n.mem_total_bytes) : json(nullptr)}});
    json mem = {{"total_bytes", src(f.memory.total_bytes)},
                {"available_bytes", src(f.memory.available_bytes)},
                {"swap_total_bytes", src(f.memory.swap_total_bytes)},
                {"swap_free_bytes", src(f.memory.swap_free_bytes)},
                {"thp_enabled", src(f.memory.thp_enabled)},
                {"hugepages_total", src(f.memory.hugepages_total)},
                {"hugepage_size_bytes", src(f.memory.hugepage_size_bytes)},
                {"read_bytes_per_s", src(f.memory.read_bytes_per_s)}};
    json limits = {{"memlock_soft", src(f.limits.memlock_soft)},
                   {"memlock_hard", src(f.limits.memlock_hard)},
                   {"memlock_hard_raisable", f.limits.memlock_hard_raisable},
                   {"nofile_soft", src(f.limits.nofile_soft)},
                   {"nofile_hard", src(f.limits.nofile_hard)},
                   {"unlimited_is", UINT64_MAX}};
    json sysctl = json::object();
    for (const auto& [k, v] : f.kernel.sysctl) sysctl[k] = src(v);
    json kernel = {{"sysctl", sysctl}, {"io_uring_works", src(f.kernel.io_uring_works)}};
    json out = {{"schema", f.schema}, {"root", f.root},   {"cpu", cpu},      {"numa", {{"source", f.numa.source}, {"nodes", nodes}}},
                {"memory", mem},      {"limits", limits}, {"kernel", kernel}};
    json bins = json::array();
    for (const auto& b : f.llama_cpp.binaries)
        bins.push_back({{"role", b.role},
                        {"path", b.path},
                        {"found_by", b.found_by},
                        {"runs", b.runs},
                        {"build", b.build},
                        {"build_source", b.build_source},
                        {"detail", b.detail}});
    out["llama_cpp"] = {{"probed", f.llama_cpp.probed}, {"source", f.llama_cpp.source}, {"binaries", bins}};
    if (f.storage) {
        json res = json::array();
        for (const auto& r : f.storage->results) res.push_back(bandwidth(r));
        out["storage"] = {{"path", f.storage->path},
                          {"file", f.storage->file},
                          {"filesystem", src(f.storage->filesystem)},
                          {"free_bytes", src(f.storage->free_bytes)},
                          {"device", f.storage->device ? device(*f.storage->device) : json(nullptr)},
                          {"results", res},
                          {"notes", f.storage->notes}};
    }
    return out;
}

std::string to_yaml(const HostFacts& f) {
    YAML::Emitter out;
    emit(out, to_json(f));
    return std::string(out.c_str()) + "\n";
}

}  // namespace moe

namespace moe {
namespace {

using json = nlohmann::json;

template <typename T>
Sourced<T> get_src(const json& j, const char* key) {
    Sourced<T> s;
    if (!j.is_object() || !j.contains(key) || !j[key].is_object()) {
        s.source = std::string("missing from the facts file: ") + key;
        return s;
    }
    const json& o = j[key];
    s.source = o.value("source", "");
    if (o.contains("value") && !o["value"].is_null()) {
        if constexpr (std::is_same_v<T, std::string>) {
            // A string that looks like a number comes back from YAML as one.
            s.value = o["value"].is_string() ? o["value"].get<std::string>() : o["value"].dump();
        } else {
            s.value = o["value"].get<T>();
        }
    }
    return s;
}

json yaml_to_json(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Map: {
            json j = json::object();
            for (const auto& kv : n) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
            return j;
        }
        case YAML::NodeType::Sequence: {
            json j = json::array();
            for (const auto& e : n) j.push_back(yaml_to_json(e));
            return j;
        }
        case YAML::NodeType::Scalar: {
            const std::string s = n.Scalar();
            if (n.Tag() == "!") return s;  // quoted
            if (s == "true") return true;
            if (s == "false") return false;
            try {
                size_t used = 0;
                if (s.find_first_of(".eE") == std::string::npos) {
                    if (!s.empty() && s[0] != '-') {
                        unsigned long long v = std::stoull(s, &used);
                        if (used == s.size()) return v;
                    } else {
                        long long v = std::stoll(s, &used);
                        if (used == s.size()) return v;
                    }
                } else {
                    double d = std::stod(s, &used);
                    if (used == s.size()) return d;
                }
            } catch (...) {}
            return s;
        }
        default: return nullptr;
    }
}

}  // namespace

HostFacts host_facts_from_text(const std::string& text, const std::string& label) {
    json j;
    try {
        j = yaml_to_json(YAML::Load(text));  // YAML is a superset of JSON: one parser for both
    } catch (const YAML::Exception& e) {
        throw std::runtime_error(label + ": not valid YAML/JSON (line " + std::to_string(e.mark.line + 1) + ": " + e.msg + ")");
    }
    if (!j.is_object() || !j.contains("schema")) throw std::runtime_error(label + ": not a `moestream probe` facts file (no schema)");
    if (!j["schema"].is_number_integer()) throw std::runtime_error(label + ": schema is not a number");
    if (j["schema"].get<int64_t>() > 1)
        throw std::runtime_error(label + ": facts schema " + std::to_string(j["schema"].get<int64_t>()) + " is newer than this moestream");
    try {
        (void)j.dump();  // every string must be UTF-8, or writing the facts back (JSON, YAML, plan files) fails later (found by fuzzing)
    } catch (const nlohmann::json::type_error&) { throw std::runtime_error(label + ": not UTF-8 text"); }
    try {
        HostFacts h;
        h.root = j.value("root", "/");
        const json& c = j["cpu"];
        h.cpu.model = get_src<std::string>(c, "model");
        h.cpu.logical_cpus = get_src<int>(c, "logical_cpus");
        h.cpu.physical_cores = get_src<int>(c, "physical_cores");
        h.cpu.sockets = get_src<int>(c, "sockets");
        h.cpu.smt_siblings_of_cpu0 = c.value("smt_siblings_of_cpu0", std::vector<int>{});
        h.cpu.first_thread_per_core = c.value("first_thread_per_core", std::vector<int>{});
        h.cpu.simd = c.value("simd", std::map<std::string, bool>{});
        h.cpu.simd_source = c.value("simd_source", "");
        h.numa.source = j["numa"].value("source", "");
        for (const auto& n : j["numa"]["nodes"]) {
            NumaNode node;
            node.id = n.value("id", 0);
            node.cpus = n.value("cpus", std::vector<int>{});
            if (n.contains("mem_total_bytes") && !n["mem_total_bytes"].is_null()) node.mem_total_bytes = n["mem_total_bytes"].get<uint64_t>();
            h.numa.nodes.push_back(node);
        }
        const json& m = j["memory"];
        h.memory.total_bytes = get_src<uint64_t>(m, "total_bytes");
        h.memory.available_bytes = get_src<uint64_t>(m, "available_bytes");
        h.memory.swap_total_bytes = get_src<uint64_t>(m, "swap_total_bytes");
        h.memory.swap_free_bytes = get_src<uint64_t>(m, "swap_free_bytes");
        h.memory.thp_enabled = get_src<std::string>(m, "thp_enabled");
        h.memory.hugepages_total = get_src<uint64_t>(m, "hugepages_total");
        h.memory.hugepage_size_bytes = get_src<uint64_t>(m, "hugepage_size_bytes");
        if (m.contains("read_bytes_per_s")) h.memory.read_bytes_per_s = get_src<double>(m, "read_bytes_per_s");
        const json& l = j["limits"];
        h.limits.memlock_soft = get_src<uint64_t>(l, "memlock_soft");
        h.limits.memlock_hard = get_src<uint64_t>(l, "memlock_hard");
        h.limits.memlock_hard_raisable = l.value("memlock_hard_raisable", false);
        h.limits.nofile_soft = get_src<uint64_t>(l, "nofile_soft");
        h.limits.nofile_hard = get_src<uint64_t>(l, "nofile_hard");
        for (const auto& [k, v] : j["kernel"]["sysctl"].items()) {
            Sourced<int64_t> s;
            s.source = v.value("source", "");
            if (v.contains("value") && !v["value"].is_null()) s.value = v["value"].get<int64_t>();
            h.kernel.sysctl[k] = s;
        }
        h.kernel.io_uring_works = get_src<bool>(j["kernel"], "io_uring_works");
        if (h.kernel.sysctl.count("kernel.io_uring_disabled")) h.kernel.io_uring_disabled = h.kernel.sysctl["kernel.io_uring_disabled"];
        if (j.contains("llama_cpp") && j["llama_cpp"].is_object()) {
            const json& lc = j["llama_cpp"];
            h.llama_cpp.probed = lc.value("probed", false);
            h.llama_cpp.source = lc.value("source", "");
            for (const auto& b : lc.value("binaries", json::array()))
                h.llama_cpp.binaries.push_back({b.value("role", ""), b.value("path", ""), b.value("found_by", ""), b.value("runs", false),
                                                b.value("build", ""), b.value("build_source", ""), b.value("detail", "")});
        } else {
            h.llama_cpp.source = "missing from the facts file (probed before llama.cpp's programs were looked for)";
        }
        if (j.contains("storage") && j["storage"].is_object()) {
            const json& s = j["storage"];
            StorageFacts st;
            st.path = s.value("path", "");
            st.file = s.value("file", "");
            st.filesystem = get_src<std::string>(s, "filesystem");
            st.free_bytes = get_src<uint64_t>(s, "free_bytes");
            if (s.contains("device") && s["device"].is_object()) {
                const json& d = s["device"];
                BlockDeviceFacts dev;
                dev.name = d.value("name", "");
                dev.partition = d.value("partition", "");
                dev.model = get_src<std::string>(d, "model");
                dev.size_bytes = get_src<uint64_t>(d, "size_bytes");
                dev.scheduler = get_src<std::string>(d, "scheduler");
                dev.nr_requests = get_src<int64_t>(d, "nr_requests");
                dev.read_ahead_kb = get_src<int64_t>(d, "read_ahead_kb");
                dev.logical_block_size = get_src<int64_t>(d, "logical_block_size");
                dev.rotational = get_src<bool>(d, "rotational");
                dev.numa_node = get_src<int>(d, "numa_node");
                st.device = dev;
            }
            for (const auto& r : s.value("results", json::array())) {
                BandwidthResult b;
                b.tool = r.value("tool", "");
                b.block_size = r.value("block_size", uint64_t{0});
                b.queue_depth = r.value("queue_depth", 0);
                b.bytes_per_s = r.value("bytes_per_s", 0.0);
                b.iops = r.value("iops", 0.0);
                b.clat_p50_us = r.value("clat_p50_us", 0.0);
                b.clat_p99_us = r.value("clat_p99_us", 0.0);
                b.seconds = r.value("seconds", 0.0);
                st.results.push_back(b);
            }
            st.notes = s.value("notes", std::vector<std::string>{});
            h.storage = st;
        }
        return h;
    } catch (const nlohmann::json::exception& e) { throw std::runtime_error(label + ": a field has the wrong type (" + std::string(e.what()) + ")"); }
}

}  // namespace moe

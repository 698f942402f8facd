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
    return {{"tool", r.tool}, {"block_size", r.block_size}, {"queue_depth", r.queue_depth},
            {"bytes_per_s", r.bytes_per_s}, {"iops", r.iops}, {"clat_p50_us", r.clat_p50_us},
            {"clat_p99_us", r.clat_p99_us}, {"seconds", r.seconds}};
}

json device(const BlockDeviceFacts& d) {
    return {{"name", d.name}, {"partition", d.partition}, {"model", src(d.model)}, {"size_bytes", src(d.size_bytes)},
            {"scheduler", src(d.scheduler)}, {"nr_requests", src(d.nr_requests)}, {"read_ahead_kb", src(d.read_ahead_kb)},
            {"logical_block_size", src(d.logical_block_size)}, {"rotational", src(d.rotational)},
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
    json cpu = {{"model", src(f.cpu.model)}, {"logical_cpus", src(f.cpu.logical_cpus)},
                {"physical_cores", src(f.cpu.physical_cores)}, {"sockets", src(f.cpu.sockets)},
                {"smt_siblings_of_cpu0", f.cpu.smt_siblings_of_cpu0}, {"first_thread_per_core", f.cpu.first_thread_per_core},
                {"simd", f.cpu.simd}, {"simd_source", f.cpu.simd_source}};
    json nodes = json::array();
    for (const auto& n : f.numa.nodes)
        nodes.push_back({{"id", n.id}, {"cpus", n.cpus}, {"mem_total_bytes", n.mem_total_bytes ? json(*n.mem_total_bytes) : json(nullptr)}});
    json mem = {{"total_bytes", src(f.memory.total_bytes)}, {"available_bytes", src(f.memory.available_bytes)},
                {"swap_total_bytes", src(f.memory.swap_total_bytes)}, {"swap_free_bytes", src(f.memory.swap_free_bytes)},
                {"thp_enabled", src(f.memory.thp_enabled)}, {"hugepages_total", src(f.memory.hugepages_total)},
                {"hugepage_size_bytes", src(f.memory.hugepage_size_bytes)}};
    json limits = {{"memlock_soft", src(f.limits.memlock_soft)}, {"memlock_hard", src(f.limits.memlock_hard)},
                   {"memlock_hard_raisable", f.limits.memlock_hard_raisable}, {"nofile_soft", src(f.limits.nofile_soft)},
                   {"nofile_hard", src(f.limits.nofile_hard)}, {"unlimited_is", UINT64_MAX}};
    json sysctl = json::object();
    for (const auto& [k, v] : f.kernel.sysctl) sysctl[k] = src(v);
    json kernel = {{"sysctl", sysctl}, {"io_uring_works", src(f.kernel.io_uring_works)}};
    json out = {{"schema", f.schema}, {"root", f.root}, {"cpu", cpu}, {"numa", {{"source", f.numa.source}, {"nodes", nodes}}},
                {"memory", mem}, {"limits", limits}, {"kernel", kernel}};
    if (f.storage) {
        json res = json::array();
        for (const auto& r : f.storage->results) res.push_back(bandwidth(r));
        out["storage"] = {{"path", f.storage->path}, {"file", f.storage->file}, {"filesystem", src(f.storage->filesystem)},
                          {"free_bytes", src(f.storage->free_bytes)},
                          {"device", f.storage->device ? device(*f.storage->device) : json(nullptr)},
                          {"results", res}, {"notes", f.storage->notes}};
    }
    return out;
}

std::string to_yaml(const HostFacts& f) {
    YAML::Emitter out;
    emit(out, to_json(f));
    return std::string(out.c_str()) + "\n";
}

}  // namespace moe

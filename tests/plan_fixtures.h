// Fixture hosts and model facts the planner tests share (test_plan.cpp, test_plan_files.cpp).
#pragma once
#include <optional>
#include <string>

#include "probes/host_facts.h"
#include "probes/probes.h"
#include "engine/model/model_facts.h"
#include "tune/planner.h"

namespace moe::plan_fixtures {

inline std::string fixture(const std::string& name) { return std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/hosts/" + name; }

inline HostFacts fixture_host(const std::string& name, std::optional<int> disk_node = std::nullopt) {
    HostFacts h = probe_host({.root = fixture(name), .try_ring = false});
    h.limits.memlock_soft = h.limits.memlock_hard = {8ull << 20, "fixture"};
    StorageFacts s;
    BlockDeviceFacts d = probe_block_device(FsRoot(fixture(name)), "nvme0n1");
    if (disk_node) d.numa_node = {*disk_node, "fixture"};
    s.device = d;
    s.results = {{"fio", 128 << 10, 32, 2.0e9, 0, 0, 0, 5}, {"fio", 512 << 10, 32, 3.5e9, 0, 0, 0, 5}, {"fio", 1 << 20, 32, 3.0e9, 0, 0, 0, 5}};
    h.storage = s;
    return h;
}

inline ModelFacts moe_model(uint32_t layers, uint32_t dense, uint64_t expert_mib_per_layer, uint64_t resident) {
    ModelFacts m;
    m.arch = "qwen3moe";
    m.n_layer = layers;
    m.n_expert = 128;
    m.n_expert_used = 8;
    m.n_head_kv = 4;
    m.head_dim = 128;
    m.resident_bytes = resident;
    m.layer_expert_bytes.assign(layers, 0);
    for (uint32_t l = dense; l < layers; ++l) m.layer_expert_bytes[l] = expert_mib_per_layer << 20;
    m.expert_bytes = (layers - dense) * (expert_mib_per_layer << 20);
    m.first_moe_layer = dense;
    m.moe_layers = layers - dense;
    m.tensor_count = 1000;
    return m;
}

inline PlanOptions opts() {
    PlanOptions o;
    o.model_path = "/models/big.gguf";
    o.created_by = "test";
    return o;
}

}  // namespace moe::plan_fixtures

#include "tune/planner.h"

#include "engine/kernels/kv_cache_types.h"

#include <filesystem>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "probes/fs_root.h"
#include "tune/check.h"
#include "tune/gpu_plan.h"
#include "tune/perf_model.h"

namespace moe {
namespace {

std::string mib(uint64_t b) { return human_bytes(static_cast<double>(b)); }

uint64_t min_expert_cache(const ModelFacts& m) {
    uint64_t need = 0;
    for (uint32_t l = 0; l < m.n_layer; ++l) need = std::max<uint64_t>(need, m.bytes_per_expert(l) * m.n_expert_used);
    return need;
}

}  // namespace

std::map<int, uint64_t> parse_gpu_mem(const std::string& text) {
    std::map<int, uint64_t> out;
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, ',')) {
        auto eq = part.find('=');
        if (eq == std::string::npos) throw PlanError("--gpu-mem '" + part + "': expected GPU=SIZE, as 0=96G");
        int gpu;
        try {
            gpu = std::stoi(part.substr(0, eq));
        } catch (...) { throw PlanError("--gpu-mem '" + part + "': '" + part.substr(0, eq) + "' is not a GPU index"); }
        std::string size = part.substr(eq + 1);
        size_t used = 0;
        double v = 0;
        try {
            v = std::stod(size, &used);
        } catch (...) { throw PlanError("--gpu-mem '" + part + "': '" + size + "' is not a size"); }
        std::string unit = size.substr(used);
        double mult = unit == "G" || unit == "GiB" || unit == "g"   ? 1024.0 * 1024 * 1024
                      : unit == "M" || unit == "MiB" || unit == "m" ? 1024.0 * 1024
                      : unit.empty()                                ? 1.0
                                                                    : -1;
        if (mult < 0 || !(v > 0) || gpu < 0 || gpu > 63) throw PlanError("--gpu-mem '" + part + "' is not GPU=SIZE with SIZE in M or G");
        if (out.count(gpu)) throw PlanError("--gpu-mem names GPU " + std::to_string(gpu) + " twice");
        out[gpu] = static_cast<uint64_t>(v * mult);
    }
    if (out.empty()) throw PlanError("--gpu-mem is empty");
    return out;
}

Fingerprint fingerprint_of(const HostFacts& h, const std::string& model_path) {
    Fingerprint f;
    f.cpu_model = h.cpu.model.value.value_or("unknown");
    f.physical_cores = h.cpu.physical_cores.value.value_or(0);
    f.logical_cpus = h.cpu.logical_cpus.value.value_or(0);
    for (const auto& n : h.numa.nodes)
        f.numa_layout += (f.numa_layout.empty() ? "" : ";") + std::to_string(n.id) + ":" + format_cpu_list(n.cpus) + "/" +
                         (n.mem_total_bytes ? mib(*n.mem_total_bytes) : "?");
    f.ram_bytes = h.memory.total_bytes.value.value_or(0);
    if (h.storage && h.storage->device) {
        const auto& d = *h.storage->device;
        f.block_device = d.name + " " + d.model.value.value_or("?") + " " + (d.size_bytes.value ? mib(*d.size_bytes.value) : "?");
    }
    struct stat st {};
    if (!model_path.empty() && ::stat(model_path.c_str(), &st) == 0)
        f.model_file = model_path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtime);
    else f.model_file = model_path + " (not found)";
    return f;
}

namespace {
// Whether an unprivileged user could open the file: o+r on it and o+x on every directory above it.
bool readable_by_others(const std::string& path) {
    if (path.empty()) return true;
    std::error_code ec;
    auto st = std::filesystem::status(path, ec);
    if (ec) return true;  // not on this host (plan for another machine): nothing to say
    if ((st.permissions() & std::filesystem::perms::others_read) == std::filesystem::perms::none) return false;
    for (auto dir = std::filesystem::path(path).parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
        auto ds = std::filesystem::status(dir, ec);
        if (!ec && (ds.permissions() & std::filesystem::perms::others_exec) == std::filesystem::perms::none) return false;
    }
    return true;
}
}  // namespace

void host_sysctl(const HostFacts& h, size_t numa_nodes, Plan& p) {
    const uint64_t swap = h.memory.swap_total_bytes.value.value_or(0);
    if (swap > 0)
        p.sysctl.push_back({"vm.swappiness", "1", "swap of " + mib(swap) + " exists and the weights are anonymous memory: keep them in RAM"});
    else p.notes.push_back("vm.swappiness not set: no swap on this host");
    const uint64_t total_ram = h.memory.total_bytes.value.value_or(0);
    const uint64_t mfk = std::clamp<uint64_t>(total_ram / 100 / 1024, 65536, 2ull << 20);
    p.sysctl.push_back(
        {"vm.min_free_kbytes", std::to_string(mfk), "1% of " + mib(total_ram) + " RAM: reclaim stays ahead of the cache's allocation bursts"});
    if (numa_nodes > 1)
        p.sysctl.push_back({"kernel.numa_balancing", "0", std::to_string(numa_nodes) + " NUMA nodes: do not migrate the pinned memory"});
    if (auto it = h.kernel.sysctl.find("vm.overcommit_memory"); it != h.kernel.sysctl.end() && it->second.value == 2)
        p.sysctl.push_back({"vm.overcommit_memory", "0", "mode 2 (now set) refuses the cache's large allocations"});
}

Plan make_plan(const HostFacts& h, const ModelFacts& m, const PlanOptions& opt) {
    if (opt.target != "engine" && !is_llama_target(opt.target))
        throw PlanError("--target '" + opt.target + "' is not engine, llama-server or ik-llama-server");
    if (opt.target == "engine" && !m.supported)
        throw PlanError("the engine cannot run " + opt.model_path + ": " + m.unsupported_reason + " (plan with --target " +
                        (m.ik_tensor.empty() ? "llama-server" : "ik-llama-server") + ")");
    if (opt.target == "llama-server" && !m.ik_tensor.empty())
        throw PlanError("llama.cpp's llama-server cannot load " + opt.model_path + ": tensor " + m.ik_tensor +
                        " is an ik_llama.cpp type (plan with --target ik-llama-server)");
    Plan p;
    p.created_by = opt.created_by;
    p.target = opt.target;
    p.model_path = opt.model_path;
    p.model_arch = m.arch;
    p.resident_bytes = m.resident_bytes;
    p.expert_bytes = m.expert_bytes;
    p.fingerprint = fingerprint_of(h, opt.model_path);
    p.host = opt.host;
    p.port = opt.port;
    p.alias = opt.alias.empty() ? m.name : opt.alias;
    p.moestream_binary = opt.moestream_binary;
    p.llama_server_binary = opt.llama_server_binary;
    p.n_ctx = opt.n_ctx;
    p.profile_path = opt.profile_path;
    auto why = [&](const std::string& k, const std::string& v, const std::string& r) { p.reasons.push_back({k, {v, r}}); };

    // NUMA node: the one holding the model's disk.
    const auto& nodes = h.numa.nodes;
    const NumaNode* node = nullptr;
    if (nodes.size() > 1) {
        const auto* dev = h.storage && h.storage->device ? &*h.storage->device : nullptr;
        if (dev && dev->numa_node.value) {
            for (const auto& n : nodes)
                if (n.id == *dev->numa_node.value) node = &n;
            if (node)
                why("membind_node", std::to_string(node->id),
                    "the model's disk " + dev->name + " is on node " + std::to_string(node->id) + " (" + dev->numa_node.source + ")");
        }
        if (!node) {
            node = &*std::max_element(nodes.begin(), nodes.end(),
                                      [](const auto& a, const auto& b) { return a.mem_total_bytes.value_or(0) < b.mem_total_bytes.value_or(0); });
            why("membind_node", std::to_string(node->id), "the disk's node is unknown: the node with the most memory");
        }
        p.membind_node = node->id;
    } else {
        why("membind_node", "none", "one NUMA node: nothing to bind");
    }

    // Threads: one per physical core, on that node.
    std::vector<int> cores = h.cpu.first_thread_per_core;
    if (cores.empty())
        for (const auto& n : nodes) cores.insert(cores.end(), n.cpus.begin(), n.cpus.end());
    if (node) {
        std::vector<int> on_node;
        for (int c : cores)
            if (std::find(node->cpus.begin(), node->cpus.end(), c) != node->cpus.end()) on_node.push_back(c);
        cores = on_node;
    }
    std::sort(cores.begin(), cores.end());
    if (cores.empty()) throw PlanError("no CPUs found for the plan (CPU topology unreadable)");
    int threads = static_cast<int>(cores.size());
    if (opt.threads) {
        if (*opt.threads < 1) throw PlanError("--threads " + std::to_string(*opt.threads) + " must be at least 1");
        threads = std::min(threads, *opt.threads);
    }
    cores.resize(static_cast<size_t>(threads));
    p.threads = threads;
    p.cpus = format_cpu_list(cores);
    const bool smt = h.cpu.logical_cpus.value.value_or(0) > h.cpu.physical_cores.value.value_or(0);
    why("threads", std::to_string(threads),
        std::to_string(threads) + " physical cores" + (node ? " of node " + std::to_string(node->id) : "") +
            (smt ? "; SMT siblings left out (cpu0 shares a core with " + format_cpu_list(h.cpu.smt_siblings_of_cpu0) + ")" : ""));
    why("cpus", p.cpus, "one logical CPU per physical core");

    // Memory: resident weights, KV cache, OS reserve; the rest is expert cache.
    const uint64_t ram = node && node->mem_total_bytes ? *node->mem_total_bytes : h.memory.total_bytes.value.value_or(0);
    if (ram == 0) throw PlanError("RAM size unknown (/proc/meminfo unreadable): give --ram-budget");
    const uint64_t reserve = std::max<uint64_t>(1ull << 30, ram / 20);
    if (opt.parallel < 1 || opt.parallel > 256) throw PlanError("--parallel " + std::to_string(opt.parallel) + " is out of range (1..256)");
    p.parallel = opt.parallel;
    kernels::KvCacheTypes kv_types;  // the engine's cache types (llama-server's are read with the GPU plan below)
    if (opt.target == "engine") {
        auto type = [](const char* flag, const std::string& name) {
            if (auto t = kernels::parse_kv_cache_type(name)) return *t;
            throw PlanError(std::string(flag) + " " + name + " is not a cache type the engine computes (" + kernels::kv_cache_type_list() + ")");
        };
        kv_types = {type("--cache-type-k", opt.cache_type_k), type("--cache-type-v", opt.cache_type_v)};
        if (m.cache_k_elems_per_token && !m.cache_v_elems_per_token && kv_types.k != kv_types.v)
            throw PlanError("this model (MLA) keeps V inside the K cache, so --cache-type-k " + opt.cache_type_k + " and --cache-type-v " +
                            opt.cache_type_v + " must be the same type");
        p.cache_type_k = opt.cache_type_k;
        p.cache_type_v = opt.cache_type_v;
    }
    p.kv_bytes = m.kv_bytes(opt.n_ctx, kv_types) * static_cast<uint64_t>(opt.parallel);
    if (opt.ram_budget && *opt.ram_budget > ram)
        throw PlanError("--ram-budget " + mib(*opt.ram_budget) + " exceeds the " + mib(ram) + " of RAM" +
                        (node ? " on node " + std::to_string(node->id) : ""));
    const uint64_t budget = opt.ram_budget.value_or(ram > reserve ? ram - reserve : 0);
    if (opt.draft != "off" && opt.target != "engine")
        throw PlanError("--draft " + opt.draft + " is the engine's (serve --draft); --target " + opt.target + " is planned without drafts");
    if (opt.draft == "mtp" && !opt.draft_block_bytes)
        throw PlanError("--draft mtp: " + opt.model_path +
                        (m.n_layer_nextn ? " has a NextN block this engine does not run as drafts (" + m.arch + ")" : " has no NextN/MTP block"));
    p.draft = opt.draft;
    const uint64_t block = opt.draft == "mtp" ? opt.draft_block_bytes : 0;
    // The engine counts its working memory (and a draft block) in its budget too.
    const uint64_t working = opt.target == "engine" ? opt.engine_working_bytes + block : 0;
    if (budget < m.resident_bytes + p.kv_bytes + working)
        throw PlanError("--ram-budget " + mib(budget) + " is below the resident weights (" + mib(m.resident_bytes) + ") plus the KV cache for " +
                        std::to_string(opt.n_ctx) + " tokens (" + mib(p.kv_bytes) + ")" +
                        (working ? " plus the engine's working memory (" + mib(working) + ")" : std::string()));
    p.ram_budget_bytes = budget;
    p.expert_cache_bytes = std::min<uint64_t>(budget - m.resident_bytes - p.kv_bytes - working, m.expert_bytes);
    if (working)
        why("working_memory", std::to_string(working),
            "activations, scratch and logits for " + std::to_string(opt.parallel) + " slot(s), plus the process itself" +
                (block ? ", plus the NextN draft block (" + mib(block) + ": its weights and experts in RAM, a layer of KV, its runner)"
                       : std::string()) +
                ": inside the budget, so a cgroup of it holds");
    if (opt.target == "engine")
        why("draft", opt.draft,
            opt.draft == "mtp"   ? "drafts from the file's NextN block as the measured costs pay"
            : opt.draft == "off" ? "no speculative decoding (--draft auto: prompt-lookup drafts where the context repeats)"
                                 : "prompt-lookup drafts (" + opt.draft + ")");
    const uint64_t need = min_expert_cache(m);
    if (p.expert_cache_bytes < need)
        throw PlanError("--ram-budget " + mib(budget) + " leaves " + mib(p.expert_cache_bytes) +
                        " for the expert cache; one layer's selected experts need " + mib(need));
    why("ram_budget", std::to_string(budget),
        opt.ram_budget ? "given by --ram-budget" : mib(ram) + " RAM minus an OS reserve of " + mib(reserve) + " (5%, at least 1 GiB)");
    why("kv_cache", std::to_string(p.kv_bytes),
        (opt.parallel > 1 ? std::to_string(opt.parallel) + " slots x (" : "") + std::to_string(opt.n_ctx) + " positions x " +
            std::to_string(m.cache_bytes_per_token_as(kv_types)) + " bytes (" + m.cache_layout +
            (kv_types.f16() ? std::string() : "; stored as K " + opt.cache_type_k + ", V " + opt.cache_type_v) + ")" +
            (m.state_bytes
                 ? " + the recurrent state " + mib(m.state_bytes) + " x (1 + " + std::to_string(ModelFacts::kDefaultCheckpoints) + " checkpoints)"
                 : "") +
            (m.fixed_k_elems || m.fixed_f32_bytes ? " + " + mib(m.kv_bytes(0, kv_types, 0)) + " whatever the context" : "") +
            (m.ring_rows && opt.n_ctx > m.ring_rows
                 ? " + sliding-window rings of " + std::to_string(m.ring_rows) + " rows " + mib(m.ring_bytes(kv_types)) + " + their windows " +
                       mib(m.window_snapshot_bytes(kv_types)) + " x " + std::to_string(ModelFacts::kDefaultCheckpoints) + " checkpoints"
                 : "") +
            (opt.parallel > 1 ? ")" : "") + "; one sequence at 4k / 128k / 1M positions: " + mib(m.kv_bytes(4096, kv_types)) + " / " +
            mib(m.kv_bytes(131072, kv_types)) + " / " + mib(m.kv_bytes(1048576, kv_types)));
    why("expert_cache", std::to_string(p.expert_cache_bytes),
        "budget minus resident weights (" + mib(m.resident_bytes) + "), KV cache" + (working ? std::string(" and working memory") : std::string()) +
            "; holds " + std::to_string(static_cast<int>(m.expert_bytes ? 100.0 * p.expert_cache_bytes / m.expert_bytes : 100)) + "% of " +
            mib(m.expert_bytes) + " of experts");

    // I/O: the block size that read fastest in the probe's sweep (larger on near-ties), at its depth.
    const BandwidthResult* best = nullptr;
    if (h.storage)
        for (const auto& r : h.storage->results)
            if (r.tool == "fio" &&
                (!best || r.bytes_per_s > best->bytes_per_s * 1.05 || (r.bytes_per_s >= best->bytes_per_s * 0.95 && r.block_size > best->block_size)))
                best = &r;
    if (!best && h.storage)
        for (const auto& r : h.storage->results)
            if (!best || r.bytes_per_s > best->bytes_per_s) best = &r;
    char bw[64] = "not measured";
    if (best) {
        p.read_size = best->block_size;
        p.io_queue_depth = best->queue_depth;
        std::snprintf(bw, sizeof bw, "%.2f GB/s", best->bytes_per_s / 1e9);
        why("read_size", std::to_string(p.read_size), std::string(best->tool) + " measured " + bw + " at this size, the best of the sweep");
    } else {
        why("read_size", std::to_string(p.read_size), "storage not measured: 1 MiB default");
    }
    why("io_queue_depth", std::to_string(p.io_queue_depth), best ? "the depth the bandwidth was measured at" : "default");

    // mlock: the resident weights (and KV) must fit the memlock limit the unit and limits.d set.
    p.mlock_bytes = m.resident_bytes + p.kv_bytes;
    const uint64_t lock_mib = (p.mlock_bytes + (64ull << 20) + (1ull << 20) - 1) >> 20;
    p.memlock_limit = std::to_string(lock_mib) + "M";
    const uint64_t hard = h.limits.memlock_hard.value.value_or(0);
    why("mlock", std::to_string(p.mlock_bytes),
        "resident weights + KV cache; memlock raised to " + p.memlock_limit + " (now: hard " +
            (hard == UINT64_MAX ? std::string("unlimited") : mib(hard)) + (hard < p.mlock_bytes ? ", too low" : ", enough") + ")");

    // Prediction (design section 4).
    p.disk_bytes_per_s = best ? best->bytes_per_s : 0;
    DecodeEstimate e = estimate_decode(m, p.expert_cache_bytes, best ? best->bytes_per_s : 0, opt.mem_bytes_per_s);
    p.predicted_tok_s = e.tokens_per_s;
    p.prediction_formula = e.formula();

    // sysctl: only what this engine needs, with values derived from this host.
    host_sysctl(h, nodes.size(), p);
    if (!readable_by_others(opt.model_path))
        p.notes.push_back("the service runs as an unprivileged dynamic user, and others may not read " + opt.model_path +
                          ": chmod o+r on the file and o+x on its directories, or set serve.user in plan.yaml to a user that can");
    if (p.target == "engine") {
        p.notes.push_back("vm.max_map_count not set: the engine reads the model with pread/O_DIRECT, it maps nothing");
        p.notes.push_back("vm.vfs_cache_pressure not set: O_DIRECT reads leave no page cache of ours to protect");
    } else {
        const uint64_t maps = std::max<uint64_t>(65530, 4 * m.tensor_count + 1024);
        p.sysctl.push_back({"vm.max_map_count", std::to_string(maps),
                            "llama-server maps the model; room for " + std::to_string(m.tensor_count) + " tensors' mappings"});
        GpuPlanOptions go;
        go.gpu_mem = opt.gpu_mem;
        go.n_ctx = opt.n_ctx;
        go.n_batch = opt.n_batch;
        go.n_ubatch = opt.n_ubatch;
        go.layer_heat = opt.layer_heat;
        go.cache_type_k = parse_cache_type("--cache-type-k", opt.cache_type_k, p.target);
        go.cache_type_v = parse_cache_type("--cache-type-v", opt.cache_type_v, p.target);
        p.cache_type_k = opt.cache_type_k;
        p.cache_type_v = opt.cache_type_v;
        if (!opt.gpu_layers.empty()) go.pinned = parse_gpu_layers(opt.gpu_layers);
        if (opt.n_ubatch < 1 || opt.n_batch < opt.n_ubatch)
            throw PlanError("--ubatch-size " + std::to_string(opt.n_ubatch) + " must be at least 1 and at most --batch-size " +
                            std::to_string(opt.n_batch));
        p.gpus = plan_gpus(m, go);
        p.n_batch = opt.n_batch;
        p.n_ubatch = opt.n_ubatch;
        p.asked_gpu_layers = opt.gpu_layers;
        uint32_t on_gpu = 0;
        for (const auto& g : p.gpus) on_gpu += static_cast<uint32_t>(g.layers.size());
        why("gpu_layers", std::to_string(on_gpu),
            !opt.gpu_layers.empty()          ? "pinned by --gpu-layers " + opt.gpu_layers
            : !opt.layer_heat_reason.empty() ? opt.layer_heat_reason
            : opt.layer_heat.empty()         ? "head- and tail-biased: the first GPU's experts from the first MoE layers, the last GPU's from the "
                                               "last, each beside its layers' attention (users report this split best); a routing profile "
                                               "(moestream profile, then plan --profile) beats this guess"
                                             : "the most-routed layers of the profile " + opt.profile_path + " first");
        std::string split;
        for (const auto& g : p.gpus) split += (split.empty() ? "" : ",") + std::to_string(g.budget_bytes >> 20);
        why("tensor_split", split,
            "-ngl 999 offloads every layer; --tensor-split in proportion to --gpu-mem decides which GPU holds each "
            "layer's attention, dense and shared weights and KV (llama.cpp's layer split), so the plan knows each GPU's share");
        for (const auto& g : p.gpus) why("gpu" + std::to_string(g.gpu), std::to_string(g.used_bytes), describe_gpu(g));
        // The target's own options, each with its reason.
        auto arg = [&](const std::string& name, const std::string& flag, const std::string& value, const std::string& reason) {
            p.server_args.push_back(flag);
            if (!value.empty()) p.server_args.push_back(value);
            why(name, flag + (value.empty() ? "" : " " + value), reason);
        };
        const bool mla = m.cache_layout.rfind("MLA", 0) == 0;
        const std::string kv_figure = std::to_string(cache_bytes_per_token(m, go.cache_type_k, go.cache_type_v)) +
                                      " bytes per token of context on all layers (" + std::to_string(m.cache_bytes_per_token) +
                                      " in f16), in each GPU's KV figure above";
        if (opt.cache_type_k != "f16") arg("cache_type_k", "-ctk", opt.cache_type_k, "the K cache in " + opt.cache_type_k + ": " + kv_figure);
        if (opt.cache_type_v != "f16") {
            if (mla) p.notes.push_back("-ctv " + opt.cache_type_v + " not written: an MLA model keeps only its latent, in the K cache");
            else arg("cache_type_v", "-ctv", opt.cache_type_v, "the V cache in " + opt.cache_type_v + ": " + kv_figure);
        }
        const bool v_quantized = !mla && opt.cache_type_v != "f16" && opt.cache_type_v != "bf16" && opt.cache_type_v != "f32";
        if (p.target == "llama-server" && v_quantized) arg("flash_attn", "-fa", "on", "llama.cpp quantizes the V cache only with flash attention");
        if (p.target == "ik-llama-server") {
            // ik_llama.cpp's server options for a hybrid GPU/CPU MoE host (its docs/parameters.md).
            arg("threads_batch", "-tb", std::to_string(p.threads),
                "prompt processing runs the CPU-resident experts too: every physical core, as --threads");
            arg("flash_attn", "-fa", "on",
                "flash attention: less compute buffer and faster attention on the GPUs (ik's default, written so the plan does not depend on it)");
            if (mla) {
                arg("mla", "-mla", "3",
                    "MLA model: ik's mode 3 keeps only the compressed latent in the KV cache and picks the faster attention "
                    "path per batch (the KV figure above is the latent cache)");
                arg("attention_max_batch", "-amb", "512",
                    "caps attention's K*Q scratch at 512 MiB per batch for MLA, so large -ub does not "
                    "grow the compute buffer past the estimate");
            }
            p.notes.push_back("fused MoE up/gate is ik_llama.cpp's default (-no-fmoe turns it off); not written");
            p.notes.push_back("-ger (grouped expert routing) not written: ik_llama.cpp applies it to BailingMoeV2/V3 (Ling/Ring) only");
        }
        p.host_model_bytes = m.token_embd_bytes + m.expert_bytes;
        for (const auto& g : p.gpus) p.host_model_bytes -= g.expert_bytes;
        why("host_model_bytes", std::to_string(p.host_model_bytes),
            "left in RAM (llama.cpp's CPU/CUDA_Host buffer): the token embeddings (always on the CPU) and the routed experts of the layers no GPU took, " +
                mib(p.host_model_bytes));
    }
    return p;
}

}  // namespace moe

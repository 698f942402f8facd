#include "tune/check.h"

#include "engine/model/loader.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <map>
#include <cstdio>
#include <sstream>

#include "engine/kernels/cpu_choice.h"
#include "probes/probes.h"
#include "engine/kernels/kernels.h"
#include "probes/sysctl_d.h"
#include "tune/perf_model.h"

namespace moe {

const char* status_name(CheckStatus s) {
    switch (s) {
        case CheckStatus::Pass: return "PASS";
        case CheckStatus::Warn: return "WARN";
        case CheckStatus::Fail: return "FAIL";
        case CheckStatus::Unknown: return "UNKNOWN";
    }
    return "?";
}

std::string human_bytes(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
    return buf;
}

namespace {

// The probe's flag names (probes/cpu_probe.cpp). Facts written before f16c, bmi2 and avx512dq were probed
// lack them: every AVX2 CPU shipped has F16C and BMI2, every AVX-512 one DQ, so absent means "as avx2/avx512f".
kernels::CpuFeatures cpu_features_of(const std::map<std::string, bool>& simd) {
    auto has = [&](const char* k, const char* fallback = nullptr) {
        auto it = simd.find(k);
        if (it != simd.end()) return it->second;
        return fallback && simd.count(fallback) && simd.at(fallback);
    };
    kernels::CpuFeatures c;
    c.avx2 = has("avx2"), c.fma = has("fma"), c.f16c = has("f16c", "avx2"), c.bmi2 = has("bmi2", "avx2");
    c.avx512f = has("avx512f"), c.avx512dq = has("avx512dq", "avx512f"), c.avx512bw = has("avx512bw"), c.avx512vl = has("avx512vl");
    c.avx512vnni = has("avx512_vnni"), c.avx512bf16 = has("avx512_bf16"), c.avx512vbmi = has("avx512vbmi");
    return c;
}

std::string limit_str(uint64_t v) { return v == UINT64_MAX ? "unlimited" : human_bytes(static_cast<double>(v)); }
std::string gbps(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f GB/s", v / 1e9);
    return b;
}

// The sysctl values this engine wants, derived from the host (see docs/check.md for the reasons).
uint64_t wanted_min_free_kbytes(uint64_t ram) {
    // ~1% of RAM keeps reclaim ahead of our allocations; 64 MiB floor, 2 GiB ceiling.
    return std::clamp<uint64_t>(ram / 100 / 1024, 65536, 2ull << 20);
}

}  // namespace

bool tuned_running(const FsRoot& fs, std::string& profile) {
    profile = fs.read("/etc/tuned/active_profile").value_or("");
    if (auto pid = fs.read_int("/run/tuned/tuned.pid"))
        if (fs.exists("/proc/" + std::to_string(*pid))) return true;
    for (const auto& e : fs.list("/proc")) {
        if (e.empty() || !std::isdigit(static_cast<unsigned char>(e[0]))) continue;
        if (auto comm = fs.read("/proc/" + e + "/comm"); comm && *comm == "tuned") return true;
    }
    return false;
}

std::vector<CheckRow> run_checks(const CheckInput& in, const FsRoot& fs) {
    std::vector<CheckRow> rows;
    const HostFacts& h = in.host;
    auto add = [&](CheckRow r) { rows.push_back(std::move(r)); };
    const uint64_t ram = h.memory.total_bytes.value.value_or(0);
    const uint64_t avail = h.memory.available_bytes.value.value_or(0);

    // CPU kernels: the table and numerics the engine would choose from these facts, by the engine's own rule.
    std::string simd_list;
    for (const auto& [k, v] : h.cpu.simd)
        if (v) simd_list += (simd_list.empty() ? "" : " ") + k;
    const bool arm = h.cpu.simd.count("neon") && h.cpu.simd.at("neon");
    if (!arm && !simd_list.empty()) {
        const kernels::KernelChoice k = kernels::choose_kernels(cpu_features_of(h.cpu.simd));
        const bool simd = k.isa != kernels::Isa::Scalar;
        add({"kernels", "kernel table and numerics the engine runs here", simd ? CheckStatus::Pass : CheckStatus::Warn, k.why,
             "AVX2+FMA+F16C+BMI2 (AVX-512 with VNNI for the avx512 table)",
             simd ? "" : "a CPU with AVX2 (Haswell / Zen 1 or later): the scalar kernels run several times slower"});
    } else {
        add({"kernels", "kernel table and numerics the engine runs here", CheckStatus::Warn,
             simd_list.empty() ? "none detected (" + h.cpu.simd_source + ")" : simd_list, "AVX2+FMA+F16C+BMI2 (x86-64)",
             arm ? "the engine has SIMD kernels for x86-64 only: the scalar kernels run here, several times slower"
                 : "make /proc/cpuinfo readable to the probe (the engine itself reads CPUID)"});
    }

    // Threads: physical cores only
    if (h.cpu.physical_cores.value) {
        int phys = *h.cpu.physical_cores.value, logical = h.cpu.logical_cpus.value.value_or(phys);
        add({"cpu_cores", "threads on physical cores (no SMT siblings)", CheckStatus::Pass,
             std::to_string(phys) + " physical cores, " + std::to_string(logical) + " logical CPUs", "one thread per physical core",
             logical > phys ? "numactl --physcpubind=" + format_cpu_list(h.cpu.first_thread_per_core) +
                                  " (or CPUAffinity=" + format_cpu_list(h.cpu.first_thread_per_core) + ")"
                            : ""});
    } else {
        add({"cpu_cores", "threads on physical cores (no SMT siblings)", CheckStatus::Warn, h.cpu.physical_cores.source, "readable CPU topology",
             "check that /sys/devices/system/cpu/cpu*/topology is readable"});
    }

    // Memory: resident weights, KV cache and the expert cache must fit without swapping.
    if (in.model) {
        const ModelFacts& m = *in.model;
        add({"engine_support", "this engine runs the model", m.supported ? CheckStatus::Pass : CheckStatus::Fail,
             m.supported
                 ? m.arch +
                       (m.n_layer_nextn ? " (" + std::to_string(m.n_layer_nextn) + " NextN block of " + human_bytes(m.nextn_bytes) +
                                              " loaded only for --draft mtp" +
                                              (std::ranges::count(nextn_draft_architectures(), m.arch) ? ")" : ": not run for this architecture)")
                        : !m.nextn_file.empty()
                            ? " (its NextN block of " + human_bytes(m.nextn_file_bytes) + " in " + m.nextn_file + ", loaded only for --draft mtp)"
                            : "") +
                       (m.ik_tensor.empty() ? "" : "; ik_llama.cpp's types (" + m.ik_tensor + "), computed as its AVX2 build computes them")
                 : m.unsupported_reason,
             "a supported architecture and weight types",
             m.supported ? ""
             : m.unsupported_reason.find("ik_llama.cpp type") != std::string::npos
                 ? "serve this file with ik_llama.cpp: moestream plan --target ik-llama-server --gpu-mem 0=SIZE (this engine computes every weight "
                   "type ik_llama.cpp's llama-quantize writes, not this one)"
                 : "another quantization of the model, or plan for llama.cpp: moestream plan --target llama-server"});
        const kernels::KvCacheTypes types{in.cache_type_k, in.cache_type_v};
        if (!types.f16()) {  // the types asked for: whether this model can keep its cache in them, and what they save
            const std::string k = kernels::kv_cache_type_name(types.k), v = kernels::kv_cache_type_name(types.v);
            const bool mla = m.cache_k_elems_per_token && !m.cache_v_elems_per_token;
            const uint32_t block = std::max(type_info(types.k).block_elems, type_info(types.v).block_elems);
            std::string why;
            if (mla && types.k != types.v) why = "an MLA model keeps V inside the K cache: K and V must be the same type";
            else if (!mla && m.head_dim % block)
                why = "blocks of " + std::to_string(block) + " do not divide the head size " + std::to_string(m.head_dim);
            add({"kv_cache_types", "the KV cache can be stored as asked", why.empty() ? CheckStatus::Pass : CheckStatus::Fail,
                 k + "/" + v + ": " +
                     (why.empty() ? std::to_string(m.cache_bytes_per_token_as(types)) +
                                        " bytes per token (f16: " + std::to_string(m.cache_bytes_per_token) + ")"
                                  : why),
                 "a type the model's rows hold in whole blocks",
                 why.empty() ? ""
                 : mla       ? "--cache-type-v " + k
                             : "--cache-type-k f16 --cache-type-v f16"});
        }
        const uint64_t kv = m.kv_bytes(in.n_ctx, types), reserve = std::max<uint64_t>(ram / 20, 512ull << 20), work = in.working_bytes;
        const uint64_t need = m.resident_bytes + kv + work + reserve;
        CheckStatus st = ram == 0 ? CheckStatus::Unknown : need > ram ? CheckStatus::Fail : need > avail ? CheckStatus::Warn : CheckStatus::Pass;
        add({"ram_resident", "resident weights + KV cache fit in RAM", st,
             human_bytes(m.resident_bytes) + " resident + " + human_bytes(kv) + " KV (" + std::to_string(in.n_ctx) + " ctx" +
                 (in.cache_type_k == GgmlType::F16 && in.cache_type_v == GgmlType::F16
                      ? std::string()
                      : ", " + kernels::kv_cache_type_name(in.cache_type_k) + "/" + kernels::kv_cache_type_name(in.cache_type_v)) +
                 ") + " + (work ? human_bytes(work) + " engine working memory + " : std::string()) + human_bytes(reserve) + " reserve; " +
                 human_bytes(avail) + " available of " + human_bytes(ram),
             "<= available RAM",
             st == CheckStatus::Pass   ? ""
             : st == CheckStatus::Fail ? "a host with more RAM, or a smaller quantization of the model"
                                       : "free memory (stop other services) or use a shorter context (--ctx)"});
        // The smallest cache that works: one layer's selected experts.
        uint64_t min_cache = 0;
        for (uint32_t l = 0; l < m.n_layer; ++l) min_cache = std::max<uint64_t>(min_cache, m.bytes_per_expert(l) * m.n_expert_used);
        const uint64_t room = avail > need ? avail - need : 0;
        if (in.ram_budget) {
            // The budget is the engine's whole footprint, as in `moestream plan`: resident + KV + working + expert cache.
            const uint64_t b = *in.ram_budget, floor = m.resident_bytes + kv + work + min_cache;
            const uint64_t ceiling = avail > reserve ? avail - reserve : 0;
            CheckStatus bs = b < floor || b > ceiling ? CheckStatus::Fail : CheckStatus::Pass;
            add({"ram_budget", "RAM budget for the engine (--ram-budget)", bs, human_bytes(static_cast<double>(b)),
                 ">= " + human_bytes(floor) + " (resident " + human_bytes(m.resident_bytes) + " + KV " + human_bytes(kv) +
                     (work ? " + working memory " + human_bytes(work) : std::string()) + " + one layer's selected experts " + human_bytes(min_cache) +
                     ") and <= " + human_bytes(ceiling) + " (available minus reserve)",
                 bs == CheckStatus::Pass ? "" : "--ram-budget " + std::to_string(std::clamp(b, floor, std::max(floor, ceiling)))});
        }
        const uint64_t budget_cache = in.ram_budget && *in.ram_budget > m.resident_bytes + kv + work ? *in.ram_budget - m.resident_bytes - kv - work
                                                                                                     : 0;
        const uint64_t cache = std::min<uint64_t>(in.ram_budget ? budget_cache : room, m.expert_bytes);
        add({"experts_on_disk", "routed experts streamed from disk", CheckStatus::Pass,
             human_bytes(m.expert_bytes) + " of experts; the cache holds " + human_bytes(cache) + " (" +
                 std::to_string(static_cast<int>(m.expert_bytes ? 100.0 * cache / m.expert_bytes : 100)) + "%)",
             "-", ""});
        // mlock of the resident weights.
        const uint64_t soft = h.limits.memlock_soft.value.value_or(0), hard = h.limits.memlock_hard.value.value_or(0);
        CheckStatus ms = soft >= m.resident_bytes ? CheckStatus::Pass : CheckStatus::Warn;
        std::string fix = ms == CheckStatus::Pass
                              ? ""
                              : "/etc/security/limits.d/99-moestream.conf: '<user> - memlock unlimited', or LimitMEMLOCK=infinity in the unit";
        if (ms != CheckStatus::Pass && hard < m.resident_bytes && !h.limits.memlock_hard_raisable)
            fix += " (this process cannot raise its hard limit of " + limit_str(hard) + ": set it where the service starts)";
        add({"memlock", "resident weights can be mlock'd", ms, "soft " + limit_str(soft) + ", hard " + limit_str(hard),
             ">= " + human_bytes(m.resident_bytes) + " (resident weights)", fix});
    } else {
        const uint64_t soft = h.limits.memlock_soft.value.value_or(0), hard = h.limits.memlock_hard.value.value_or(0);
        CheckStatus ms = soft == UINT64_MAX || soft >= (1ull << 30) ? CheckStatus::Pass : CheckStatus::Warn;
        add({"memlock", "memlock limit (give --model for the exact need)", ms,
             "soft " + limit_str(soft) + ", hard " + limit_str(hard) +
                 (h.limits.memlock_hard_raisable ? "" : " (hard limit not raisable by this process)"),
             ">= the model's resident weights; unlimited is simplest",
             ms == CheckStatus::Pass ? "" : "/etc/security/limits.d/99-moestream.conf: '<user> - memlock unlimited', or LimitMEMLOCK=infinity"});
    }

    // Kernel settings
    auto sys = [&](const char* key) -> std::optional<int64_t> {
        auto it = h.kernel.sysctl.find(key);
        return it == h.kernel.sysctl.end() ? std::nullopt : it->second.value;
    };
    auto unreadable = [&](const char* id, const char* key, const char* what) {
        add({id, what, CheckStatus::Warn, h.kernel.sysctl.count(key) ? h.kernel.sysctl.at(key).source : std::string("not read"), "readable",
             std::string("check permissions of /proc/sys/") + key});
    };
    const uint64_t swap = h.memory.swap_total_bytes.value.value_or(0);
    if (auto sw = sys("vm.swappiness")) {
        CheckStatus st = swap > 0 && *sw > 10 ? CheckStatus::Warn : CheckStatus::Pass;
        add({"swappiness", "the kernel does not swap the model out", st,
             "vm.swappiness=" + std::to_string(*sw) + ", swap " + human_bytes(static_cast<double>(swap)), "<= 10 when swap exists",
             st == CheckStatus::Pass ? "" : "vm.swappiness = 1   # /etc/sysctl.d/60-moestream.conf"});
    } else {
        unreadable("swappiness", "vm.swappiness", "the kernel does not swap the model out");
    }
    if (auto oc = sys("vm.overcommit_memory")) {
        CheckStatus st = *oc == 2 ? CheckStatus::Warn : CheckStatus::Pass;
        add({"overcommit", "large allocations are not refused", st, "vm.overcommit_memory=" + std::to_string(*oc), "0 or 1",
             st == CheckStatus::Pass ? "" : "vm.overcommit_memory = 0   # /etc/sysctl.d/60-moestream.conf"});
    }
    if (auto mf = sys("vm.min_free_kbytes"); mf && ram) {
        const uint64_t want = wanted_min_free_kbytes(ram);
        CheckStatus st = static_cast<uint64_t>(*mf) * 2 < want ? CheckStatus::Warn : CheckStatus::Pass;
        add({"min_free_kbytes", "reclaim stays ahead of allocation bursts", st, "vm.min_free_kbytes=" + std::to_string(*mf),
             ">= " + std::to_string(want / 2) + " (about 1% of RAM is " + std::to_string(want) + ")",
             st == CheckStatus::Pass ? "" : "vm.min_free_kbytes = " + std::to_string(want) + "   # /etc/sysctl.d/60-moestream.conf"});
    }
    if (h.memory.thp_enabled.value) {
        CheckStatus st = *h.memory.thp_enabled.value == "always" ? CheckStatus::Warn : CheckStatus::Pass;
        add({"thp", "transparent huge pages do not stall on compaction", st, *h.memory.thp_enabled.value, "madvise or never",
             st == CheckStatus::Pass ? ""
                                     : "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (persist: kernel "
                                       "command line transparent_hugepage=madvise)"});
    } else {
        add({"thp", "transparent huge pages do not stall on compaction", CheckStatus::Warn, h.memory.thp_enabled.source, "readable",
             "check /sys/kernel/mm/transparent_hugepage/enabled"});
    }
    const size_t nodes = h.numa.nodes.size();
    if (auto nb = sys("kernel.numa_balancing"); nodes > 1) {
        CheckStatus st = nb && *nb != 0 ? CheckStatus::Warn : CheckStatus::Pass;
        add({"numa_balancing", "automatic NUMA balancing does not migrate pinned memory", st,
             nb ? "kernel.numa_balancing=" + std::to_string(*nb) : "absent", "0 on a multi-node host",
             st == CheckStatus::Pass ? "" : "kernel.numa_balancing = 0   # /etc/sysctl.d/60-moestream.conf"});
    }
    {
        auto dis = h.kernel.io_uring_disabled.value;
        const auto& works = h.kernel.io_uring_works;
        CheckStatus st = works.value ? (*works.value ? CheckStatus::Pass : CheckStatus::Warn) : CheckStatus::Unknown;
        add({"io_uring", "io_uring for expert reads", st,
             (works.value ? (*works.value ? "a ring was created" : works.source) : works.source) +
                 (dis ? ", kernel.io_uring_disabled=" + std::to_string(*dis) : ""),
             "a working ring (else buffered reads, slower)",
             st == CheckStatus::Warn ? "kernel.io_uring_disabled = 0   # /etc/sysctl.d/60-moestream.conf; and no seccomp "
                                       "filter blocking io_uring_setup (containers: allow the syscall)"
                                     : ""});
    }

    // What silently defeats tuning: later-sorting sysctl.d files and tuned.
    {
        std::vector<std::pair<std::string, std::string>> ours = {{"vm.swappiness", "1"}};
        if (ram) ours.emplace_back("vm.min_free_kbytes", std::to_string(wanted_min_free_kbytes(ram)));
        if (nodes > 1) ours.emplace_back("kernel.numa_balancing", "0");
        std::string found;
        for (const auto& [k, v] : ours)
            for (const auto& o : sysctl_overrides(fs, "60-moestream.conf", k, v))
                found += (found.empty() ? "" : "; ") + o.key + "=" + o.value + " in " + o.file;
        add({"sysctl_override", "no later sysctl.d file overrides 60-moestream.conf", found.empty() ? CheckStatus::Pass : CheckStatus::Warn,
             found.empty() ? "none" : found, "our keys set only by 60-moestream.conf",
             found.empty() ? "" : "remove or edit those lines (a symlink such as 99-sysctl.conf -> /etc/sysctl.conf counts)"});
    }
    add({"tuned", "tuned does not rewrite the values at run time", in.tuned_running ? CheckStatus::Warn : CheckStatus::Pass,
         in.tuned_running ? "tuned running (profile " + (in.tuned_profile.empty() ? "?" : in.tuned_profile) + ")" : "not running",
         "not running, or a profile that carries these values",
         in.tuned_running ? "put the vm.* values in a custom tuned profile ([sysctl] section) or systemctl disable --now tuned" : ""});

    // Storage
    if (h.storage) {
        const StorageFacts& s = *h.storage;
        const BandwidthResult* best = nullptr;
        for (const auto& r : s.results)
            if (r.block_size == (1u << 20) && (!best || (r.tool == "fio" && best->tool != "fio"))) best = &r;
        if (best) {
            CheckStatus st = best->bytes_per_s >= 1e9 ? CheckStatus::Pass : CheckStatus::Warn;
            add({"storage_bw", "random-read bandwidth of the model's disk", st,
                 gbps(best->bytes_per_s) + " (" + best->tool + ", 1M randread QD" + std::to_string(best->queue_depth) + ")",
                 ">= 1 GB/s for usable decode speed", st == CheckStatus::Pass ? "" : "put the model on a faster (NVMe) disk; decode is disk-bound"});
        }
        if (s.device) {
            const auto& d = *s.device;
            if (d.rotational.value && *d.rotational.value) {
                // Virtual disks often claim to be rotational; the measured bandwidth decides.
                const bool fast = best && best->bytes_per_s >= 5e8;
                add({"disk_type", "the model's disk is solid state", fast ? CheckStatus::Pass : CheckStatus::Warn,
                     d.name + " reports rotational" + (fast ? " but reads " + gbps(best->bytes_per_s) + " (virtual disk?)" : ""), "SSD/NVMe",
                     fast ? "" : "move the model to an SSD: random 1 MiB reads on a spinning disk give a few tok/min"});
            }
            if (nodes > 1) {
                if (d.numa_node.value)
                    add({"numa_disk", "threads and memory on the disk's NUMA node", CheckStatus::Pass,
                         d.name + " on node " + std::to_string(*d.numa_node.value), "bind to that node",
                         "numactl --cpunodebind=" + std::to_string(*d.numa_node.value) + " --membind=" + std::to_string(*d.numa_node.value)});
                else
                    add({"numa_disk", "threads and memory on the disk's NUMA node", CheckStatus::Warn, d.numa_node.source, "a known node",
                         "pick the node by hand: numactl --cpunodebind=N --membind=N"});
            }
        }
        if (s.free_bytes.value)
            add({"disk_free", "free space on the model's filesystem", *s.free_bytes.value < (1ull << 30) ? CheckStatus::Warn : CheckStatus::Pass,
                 human_bytes(static_cast<double>(*s.free_bytes.value)), ">= 1 GiB (logs, profiles)",
                 *s.free_bytes.value < (1ull << 30) ? "free space on " + s.path : ""});
        for (const auto& note : s.notes)
            if (note.find("fio not found") != std::string::npos)
                add({"fio", "fio for the bandwidth baseline", CheckStatus::Warn, "not installed", "installed", "apt-get install fio"});
    } else {
        add({"storage_bw", "random-read bandwidth of the model's disk", CheckStatus::Unknown, "not measured (--no-storage)", ">= 1 GB/s",
             "run without --no-storage"});
    }

    // Predicted decode speed
    if (in.model && h.storage) {
        double ssd = 0;
        for (const auto& r : h.storage->results)
            if (r.block_size == (1u << 20) && (ssd == 0 || r.tool == "fio")) ssd = r.bytes_per_s;
        const ModelFacts& m = *in.model;
        const uint64_t kv = m.kv_bytes(in.n_ctx, {in.cache_type_k, in.cache_type_v}), reserve = std::max<uint64_t>(ram / 20, 512ull << 20);
        const uint64_t fixed = m.resident_bytes + kv + in.working_bytes;
        const uint64_t room = avail > fixed + reserve ? avail - fixed - reserve : 0;
        const uint64_t budget_cache = in.ram_budget && *in.ram_budget > fixed ? *in.ram_budget - fixed : room;
        DecodeEstimate e = estimate_decode(m, std::min<uint64_t>(budget_cache, m.expert_bytes), ssd, in.mem_bytes_per_s);
        char buf[64];
        if (e.tokens_per_s > 0) std::snprintf(buf, sizeof buf, "%.2f tok/s (%s-bound)", e.tokens_per_s, e.bound.c_str());
        else std::snprintf(buf, sizeof buf, "unknown");
        add({"decode_estimate", "predicted decode speed (design section 4)", CheckStatus::Pass, buf, e.formula(), ""});
    }
    return rows;
}

CheckRow llama_binary_row(const std::string& host, const HostFacts& facts, const std::string& role, const std::string& path) {
    CheckRow r;
    r.id = "binary_" + role + "_" + host;
    r.what = host + ": " + role + " the plan starts";
    r.required = path + " exists and runs (--version)";
    const LlamaCppFacts& f = facts.llama_cpp;
    if (!f.probed) {
        r.status = CheckStatus::Warn;
        r.measured = "not known: " + f.source;
        r.fix = "run `moestream probe --json > FACTS` on " + host + " again (this moestream looks for llama.cpp's programs), then check again";
        return r;
    }
    std::string found;
    for (const auto& b : f.binaries)
        if (b.role == role && b.runs) found += (found.empty() ? "" : ", ") + b.path;
    for (const auto& b : f.binaries) {
        if (b.path != path) continue;
        r.measured = path + (b.runs ? " runs" : " does not run: " + b.detail) + (b.build.empty() ? "" : ", build " + b.build);
        r.status = b.runs ? CheckStatus::Pass : CheckStatus::Fail;
        if (!b.runs)
            r.fix = "reinstall llama.cpp on " + host + " (a build with -DGGML_RPC=ON)" +
                    (found.empty() ? "" : ", or plan again with --" + role + "-binary " + found.substr(0, found.find(',')));
        return r;
    }
    r.status = CheckStatus::Fail;
    r.measured = path + " not found on " + host + (found.empty() ? " (no " + role + " found there at all)" : "; found " + found);
    r.fix = found.empty() ? "install llama.cpp on " + host + " (cmake -DGGML_RPC=ON, cmake --install: " + role + " as " +
                                llama_cpp_names(role).front() + " in /usr/local/bin), or plan again with --" + role + "-binary PATH"
                          : "plan again with --" + role + "-binary " + found.substr(0, found.find(',')) +
                                " (moestream plan ... or edit the request in cluster.yaml and regen)";
    return r;
}

CheckRow prompt_cache_row(const std::string& dir, uint64_t limit_bytes) {
    namespace fs = std::filesystem;
    CheckRow r{"prompt_cache",
               "the prompt cache directory (--prompt-cache) can hold --prompt-cache-size",
               CheckStatus::Pass,
               "",
               "a writable directory with " + human_bytes(static_cast<double>(limit_bytes)) + " free beside its records",
               ""};
    std::error_code ec;
    const bool exists = fs::exists(dir, ec);
    if (exists && !fs::is_directory(dir, ec)) {
        r.status = CheckStatus::Fail;
        r.measured = dir + " is not a directory (the server would run without a prompt cache)";
        r.fix = "--prompt-cache a directory, e.g. /var/cache/moestream/prompts";
        return r;
    }
    if (!exists) {
        if (dir.rfind("/var/cache/", 0) == 0) {
            r.measured = dir + " absent: the unit's CacheDirectory= makes it at start";
        } else {
            r.status = CheckStatus::Warn;
            r.measured = dir + " absent";
            r.fix = "mkdir -p " + dir + " (writable by the service's user), or a directory under /var/cache/ that systemd makes";
        }
        return r;
    }
    uint64_t records = 0, held = 0;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".mspc") {
            ++records;
            held += e.file_size(ec);
        }
    struct statvfs sv {};
    const uint64_t free_bytes = ::statvfs(dir.c_str(), &sv) == 0 ? uint64_t{sv.f_bavail} * sv.f_frsize : 0;
    r.measured = std::to_string(records) + " records, " + human_bytes(static_cast<double>(held)) + "; " +
                 human_bytes(static_cast<double>(free_bytes)) + " free on its filesystem";
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        r.status = CheckStatus::Fail;
        r.measured += "; not writable: " + std::string(std::strerror(errno));
        r.fix = "chown the directory to the service's user, or use one under /var/cache/ (CacheDirectory=)";
    } else if (free_bytes + held < limit_bytes) {
        r.status = CheckStatus::Warn;
        r.fix = "--prompt-cache-size " + std::to_string((free_bytes + held) / 10 * 9) + " (90% of what its filesystem can give), or free space there";
    }
    return r;
}

CheckRow llama_builds_row(const std::vector<std::pair<std::string, std::string>>& host_builds) {
    CheckRow r{
        "llama_cpp_builds", "one llama.cpp build on every host (RPC refuses another protocol version)", CheckStatus::Pass, "", "the same build", ""};
    std::map<std::string, std::vector<std::string>> by_build;
    // A build from a source tree without git says "0 (unknown)": two such builds may still differ.
    const auto anonymous = [](const std::string& b) { return b.empty() || b == "unknown" || b.find("(unknown)") != std::string::npos; };
    for (const auto& [host, build] : host_builds) by_build[build.empty() ? "unknown" : build].push_back(host);
    bool any_anonymous = false;
    for (const auto& [build, hosts] : by_build) any_anonymous |= anonymous(build);
    for (const auto& [build, hosts] : by_build) {
        std::string names;
        for (const auto& h : hosts) names += (names.empty() ? "" : ", ") + h;
        r.measured += (r.measured.empty() ? "" : "; ") + build + " on " + names;
    }
    if (by_build.size() > 1 || any_anonymous) {
        r.status = CheckStatus::Warn;
        r.fix = by_build.size() > 1 ? "install the same llama.cpp build on every host: the head's llama-server and the workers' rpc-server must "
                                      "speak one RPC protocol version"
                                    : "the builds are not known (rpc-server reports none without a llama-server beside it; a build from a "
                                      "source tree without git reports 0 (unknown)): compare the builds by hand";
    }
    return r;
}

int check_exit_code(const std::vector<CheckRow>& rows) {
    bool warn = false, unknown = false;
    for (const auto& r : rows) {
        if (r.status == CheckStatus::Fail) return 2;
        warn |= r.status == CheckStatus::Warn;
        unknown |= r.status == CheckStatus::Unknown;
    }
    return warn ? 1 : unknown ? 3 : 0;
}

nlohmann::json rows_to_json(const std::vector<CheckRow>& rows) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : rows)
        arr.push_back(
            {{"id", r.id}, {"what", r.what}, {"status", status_name(r.status)}, {"measured", r.measured}, {"required", r.required}, {"fix", r.fix}});
    return {{"rows", arr}, {"exit_code", check_exit_code(rows)}};
}

std::string rows_to_table(const std::vector<CheckRow>& rows) {
    std::ostringstream out;
    for (const auto& r : rows) {
        char head[160];
        std::snprintf(head, sizeof head, "%-7s %-16s %s\n", status_name(r.status), r.id.c_str(), r.what.c_str());
        out << head << "        measured: " << r.measured << "\n        required: " << r.required << "\n";
        if (!r.fix.empty()) out << "        fix:      " << r.fix << "\n";
    }
    int code = check_exit_code(rows);
    int n[4] = {};
    for (const auto& r : rows) n[static_cast<int>(r.status)]++;
    out << "\n" << n[0] << " pass, " << n[1] << " warn, " << n[2] << " fail, " << n[3] << " unknown -> exit " << code << "\n";
    return out.str();
}

}  // namespace moe

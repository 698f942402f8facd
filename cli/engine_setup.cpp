#include "cli/engine_setup.h"

#include "engine/forward/runner.h"
#include "engine/forward/sequence_cache.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "engine/kernels/cpu_choice.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "engine/runtime/expert_cache.h"
#include "tune/check.h"

namespace po = boost::program_options;

namespace moe::cli {

void add_engine_options(po::options_description& opts, EngineFlags& f) {
    opts.add_options()("ram-budget", po::value(&f.ram_budget),
                       "RAM for the whole engine (resident + KV + expert cache); below the model's size experts stream from disk")(
        "io-depth", po::value(&f.io_depth)->default_value(32), "expert reads kept in flight")(
        "read-size", po::value(&f.read_size)->default_value("1M"), "largest single expert read (multiple of 4K)")(
        "policy", po::value(&f.policy)->default_value(policy_flag(kDefaultEvictionPolicy)),
        "expert cache eviction: lru | lru-freq | lru-freq-guard (lru-freq that keeps its set when a step asks for more experts than it holds)")(
        "no-uring", po::bool_switch(&f.no_uring), "read experts with pread instead of io_uring")(
        "io-sqpoll", po::bool_switch(&f.io_sqpoll), "io_uring SQPOLL: a kernel thread submits expert reads (measured: docs/streaming.md)")(
        "profile", po::value(&f.profile), "routing profile (moestream profile): keep its hottest experts resident")(
        "expert-store", po::value(&f.expert_store)->default_value("auto"),
        "expert-contiguous store (moestream repack): auto (MODEL.gguf.experts when valid) | off | PATH")(
        "numerics", po::value(&f.numerics),
        "follow the float arithmetic of llama.cpp's avx512 or avx2 CPU build "
        "(default: the build for this CPU, or MOESTREAM_NUMERICS)")(
        "routing-trace", po::value(&f.routing_trace),
        "append each forward step's routing and expert cache outcomes to FILE (moestream cache-sim replays it)")(
        "routing-trace-max", po::value(&f.routing_trace_max)->default_value("1G"), "size bound of the routing trace (oldest steps dropped)")(
        "cache-type-k", po::value(&f.cache_type_k)->default_value("f16"),
        "-ctk: the K cache's type (f32 f16 bf16 q8_0 q4_0 q4_1 iq4_nl q5_0 q5_1; q8_0 halves it), computed as llama.cpp does")(
        "cache-type-v", po::value(&f.cache_type_v)->default_value("f16"), "-ctv: the V cache's type (MLA and DeepSeek-V4 models: the same as K)")(
        "mtp-file", po::value(&f.mtp_file),
        "--draft mtp: the NextN/MTP block's own file where the model's holds none (default: mtp-<model file name> beside it)")(
        "swa-full", po::bool_switch(&f.swa_full),
        "sliding-window layers (gpt-oss) keep every position instead of a ring of window + batch rows, as llama.cpp's --swa-full: "
        "prefix reuse at any point without window checkpoints, for that much more memory");
}

void rewrite_llama_short_options(std::vector<std::string>& args) {
    for (auto& a : args) {
        if (a == "-ctk") a = "--cache-type-k";
        else if (a == "-ctv") a = "--cache-type-v";
    }
}

DraftMode parse_draft_flags(const std::string& draft, int draft_max, int draft_min) {
    if (draft_max < 1 || draft_max > 64) throw CliError("--draft-max " + std::to_string(draft_max) + " is out of range (1..64)");
    if (draft_min < 0 || draft_min > draft_max)
        throw CliError("--draft-min " + std::to_string(draft_min) + " is out of range (0..--draft-max " + std::to_string(draft_max) + ")");
    DraftMode mode;
    try {
        mode = parse_draft_mode(draft);
    } catch (const std::invalid_argument& e) { throw CliError(e.what()); }
    return mode;
}

void draft_flags_to_engine(DraftMode mode, EngineFlags& f) { f.load_mtp = f.require_mtp = mode == DraftMode::Mtp; }

nlohmann::json draft_json(const Drafter& d) {
    const DraftStats& s = d.stats();
    return {{"mode", draft_mode_name(d.mode())},
            {"steps", s.steps},
            {"drafted", s.drafted},
            {"accepted", s.accepted},
            {"acceptance", s.drafted ? static_cast<double>(s.accepted) / static_cast<double>(s.drafted) : 0.0},
            {"one_row_s", d.planner().one_row_seconds()},
            {"expert_share", d.planner().expert_share()}};
}

kernels::KvCacheTypes parse_kv_cache_types(const std::string& k, const std::string& v) {
    auto one = [](const char* flag, const std::string& name) {
        if (auto t = kernels::parse_kv_cache_type(name)) return *t;
        throw CliError(std::string(flag) + " " + name + " is not a cache type (" + kernels::kv_cache_type_list() + ")");
    };
    return {one("--cache-type-k", k), one("--cache-type-v", v)};
}

RoutingTraceHeader routing_trace_header(const EngineFlags& f, const GgufModel& file, const Model& m, int prefetch_layers) {
    RoutingTraceHeader h;
    h.arch = m.hp.arch;
    h.n_layer = m.hp.n_layer;
    h.n_expert = m.hp.moe.n_expert;
    h.n_expert_used = m.hp.moe.n_expert_used;
    h.model_hash = routing_model_hash(file);
    const std::vector<ExpertLayer> layers = expert_layers(m);
    const auto* streamed = dynamic_cast<const StreamingExpertSource*>(m.experts.get());
    h.slot_bytes = streamed ? streamed->slot_bytes() : StreamingExpertSource::slot_bytes_for(layers);
    if (streamed) {
        h.cache_bytes = streamed->bytes_in_ram();
        h.policy = f.policy;
        h.prefetch_layers = static_cast<uint32_t>(prefetch_layers);
        h.prefetch_cap = streamed->prefetch_cap();
    }
    h.load_bytes.resize(static_cast<size_t>(h.n_layer) * h.n_expert);
    for (uint32_t l = 0; l < h.n_layer; ++l)
        for (uint32_t e = 0; e < h.n_expert; ++e)
            h.load_bytes[static_cast<size_t>(l) * h.n_expert + e] = static_cast<uint32_t>(streamed ? streamed->load_bytes(l, e)
                                                                                          : layers[l].present()
                                                                                              ? StreamingExpertSource::gguf_load_bytes(layers[l], e)
                                                                                              : 0);
    return h;
}

std::unique_ptr<RoutingTraceWriter> open_routing_trace(const EngineFlags& f, const GgufModel& file, const Model& m, int prefetch_layers) {
    if (f.routing_trace.empty()) return nullptr;
    if (!m.hp.moe.n_expert) throw CliError("--routing-trace: " + m.hp.arch + " has no routed experts to trace");
    try {
        auto w = std::make_unique<RoutingTraceWriter>(f.routing_trace, routing_trace_header(f, file, m, prefetch_layers),
                                                      parse_bytes("--routing-trace-max", f.routing_trace_max));
        m.experts->set_event_sink(w.get());
        return w;
    } catch (const RoutingTraceError& e) { throw CliError(std::string("--routing-trace: ") + e.what()); }
}

std::unique_ptr<RoutingWindow> open_routing_window(const EngineFlags& f, const GgufModel& file, const Model& m, RoutingTraceWriter* trace,
                                                   int prefetch_layers) {
    if (!m.hp.moe.n_expert) return nullptr;
    auto w = std::make_unique<RoutingWindow>(routing_trace_header(f, file, m, prefetch_layers), RoutingWindow::kDefaultSteps, trace);
    m.experts->set_event_sink(w.get());
    return w;
}

std::vector<std::pair<uint32_t, uint32_t>> read_profile(const std::string& path) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    try {
        YAML::Node y = YAML::LoadFile(path);
        if (!y["hottest"] || !y["hottest"].IsSequence()) throw CliError(path + ": not a routing profile (no 'hottest' list)");
        for (const auto& e : y["hottest"]) out.emplace_back(e["layer"].as<uint32_t>(), e["expert"].as<uint32_t>());
    } catch (const YAML::Exception& e) { throw CliError(path + ": not a valid routing profile (" + e.msg + ")"); }
    return out;
}

ExpertSourceFactory streaming_experts(StreamingOptions so, const std::string& store, std::string* note) {
    return [so, store, note](const GgufModel& file, const std::vector<ExpertLayer>& layers, const Hparams& hp) -> std::unique_ptr<ExpertSource> {
        std::vector<std::string> paths;
        for (const auto& f : file.files) paths.push_back(f.path);
        StreamingOptions o = so;
        if (store == "off") {
            if (note) *note = "expert store off";
        } else {
            const bool automatic = store == "auto";
            const std::string path = automatic ? ExpertStore::path_for(paths.front()) : store;
            std::error_code ec;
            if (automatic && !std::filesystem::exists(path, ec)) {
                if (note) *note = "no expert store (moestream repack writes one: one read per expert instead of three)";
            } else {
                try {
                    o.store = std::make_shared<const ExpertStore>(path, file, layers);
                    if (note) *note = "expert store " + path;
                } catch (const ExpertStoreError& e) {
                    if (!automatic) throw CliError(std::string("--expert-store: ") + e.what());
                    if (note) *note = std::string("expert store not used, reading the GGUF: ") + e.what();
                }
            }
        }
        if (!o.warn) o.warn = [](const std::string& line) { std::cerr << "moestream: " << line << "\n"; };
        return std::make_unique<StreamingExpertSource>(paths, layers, hp.moe.n_expert, hp.moe.n_expert_used, o);
    };
}

uint64_t engine_working_bytes(const GgufModel& file, uint32_t n_ctx, int n_seq, int n_threads, kernels::KvCacheTypes kv_types) {
    RunnerOptions ro;
    ro.n_ctx = static_cast<int>(n_ctx);
    ro.n_seq = n_seq;
    ro.n_threads = std::max(n_threads, 1);
    ro.cache_type_k = kv_types.k, ro.cache_type_v = kv_types.v;
    return Runner::working_bytes(*load_model_layout(file), ro) + kProcessBaseBytes;
}

uint64_t draft_block_bytes(const GgufModel& file, const ModelFacts& facts, uint32_t n_ctx, int n_seq, kernels::KvCacheTypes kv_types) {
    if ((!facts.n_layer_nextn && facts.nextn_file.empty()) || !std::ranges::count(nextn_draft_architectures(), facts.arch)) return 0;
    RunnerOptions ro;
    ro.n_ctx = static_cast<int>(n_ctx);
    ro.n_seq = n_seq;
    const auto layout = load_model_layout(file);
    const uint64_t kv = facts.kv_bytes(n_ctx, kv_types) * static_cast<uint64_t>(n_seq);
    return facts.nextn_bytes + facts.nextn_file_bytes + kv / std::max(1u, facts.n_layer) + Runner::working_bytes(*layout, ro) +
           Runner::hidden_sink_bytes(*layout, ro);
}

uint64_t engine_working_bytes_or_base(const std::string& path, uint32_t n_ctx, int n_seq, int n_threads, kernels::KvCacheTypes kv_types) {
    try {
        return engine_working_bytes(open_gguf_model(path), n_ctx, n_seq, n_threads, kv_types);
    } catch (const std::exception&) { return kProcessBaseBytes; }
}

LoadedEngine load_engine(const std::string& path, const EngineFlags& f, uint32_t n_ctx, int n_seq, uint64_t extra_bytes) {
    LoadedEngine le;
    le.file = open_gguf_model(path);
    ModelFacts facts = model_facts(le.file);
    // The NextN block in a file of its own, named or found beside the model (read only where the model holds
    // none); its block counts as the model's for the budget.
    std::optional<GgufModel> block_file;
    if (f.load_mtp && !facts.n_layer_nextn) {
        find_nextn_file(path, facts);
        const std::string block_path = !f.mtp_file.empty() ? f.mtp_file : facts.nextn_file;
        if (!block_path.empty()) {
            block_file = open_gguf_model(block_path);
            facts.nextn_file = block_path, facts.nextn_file_bytes = model_facts(*block_file).nextn_bytes;
        }
    } else if (!f.mtp_file.empty()) {
        throw CliError("--mtp-file " + f.mtp_file + (f.load_mtp ? ": " + path + " holds its own NextN/MTP block" : " is read with --draft mtp only"));
    }
    le.swa_full = f.swa_full;
    if (f.swa_full) facts = facts.keeping_every_position();
    if (!f.numerics.empty()) {
        auto fl = kernels::parse_flavor(f.numerics);
        if (!fl) throw CliError("--numerics " + f.numerics + " is not avx512 or avx2");
        le.flavor = *fl;
    }
    {
        const char* isa = std::getenv("MOESTREAM_ISA");
        const char* env_numerics = std::getenv("MOESTREAM_NUMERICS");
        const std::string numerics = !f.numerics.empty() ? f.numerics : env_numerics ? env_numerics : "";
        le.kernels = kernels::choose_kernels(kernels::host_cpu_features(), isa ? isa : "", numerics,
                                             !f.numerics.empty() ? "--numerics " : "MOESTREAM_NUMERICS=")
                         .why;
        if (!facts.ik_tensor.empty()) {  // the Runner computes such a file in ik's AVX2 numerics, whatever was chosen
            le.kernels = le.kernels.substr(0, le.kernels.find("; ")) + "; ik_llama.cpp's AVX2 numerics: a file made by ik_llama.cpp (" +
                         facts.ik_tensor + ")";
            le.flavor = kernels::Flavor::Avx2;
        }
    }
    le.kv_types = parse_kv_cache_types(f.cache_type_k, f.cache_type_v);
    std::optional<StreamingOptions> streaming;
    if (!f.ram_budget.empty()) {
        const uint64_t budget = parse_bytes("--ram-budget", f.ram_budget);
        const uint64_t kv = facts.kv_bytes(n_ctx, le.kv_types) * static_cast<uint64_t>(n_seq);  // one cache per server slot
        // --draft mtp / auto: the NextN block's weights and experts stay in RAM, beside a cache of one more layer, a
        // runner of its own (scratch of the trunk's shape at most) and the trunk's hidden rows handed to it.
        const uint64_t mtp = f.load_mtp ? draft_block_bytes(le.file, facts, n_ctx, n_seq, le.kv_types) : 0;
        // The engine's own allocations come out of the budget too: a cgroup capped at it must not OOM-kill us.
        const uint64_t working = engine_working_bytes(le.file, n_ctx, n_seq, f.threads, le.kv_types) + extra_bytes + mtp;
        if (budget <= facts.resident_bytes + kv + working)
            throw CliError("--ram-budget " + human_bytes(static_cast<double>(budget)) + " is below the resident weights (" +
                           human_bytes(static_cast<double>(facts.resident_bytes)) + ") plus the KV cache (" + human_bytes(static_cast<double>(kv)) +
                           ") plus the engine's working memory (" + human_bytes(static_cast<double>(working - mtp)) + ")" +
                           (mtp ? " plus the NextN draft block (" + human_bytes(static_cast<double>(mtp)) + ")" : ""));
        const uint64_t cache = budget - facts.resident_bytes - kv - working;
        le.working_bytes = working;
        if (cache < facts.expert_bytes) {
            StreamingOptions so;
            so.cache_bytes = cache;
            so.read_size = parse_bytes("--read-size", f.read_size);
            if (so.read_size % 4096) throw CliError("--read-size " + f.read_size + " is not a multiple of 4K");
            if (!parse_policy_flag(f.policy, so.policy)) throw CliError("--policy " + f.policy + " is not lru, lru-freq or lru-freq-guard");
            if (f.io_depth < 1 || f.io_depth > 4096) throw CliError("--io-depth " + std::to_string(f.io_depth) + " is out of range");
            so.io.queue_depth = f.io_depth;
            so.io.use_uring = !f.no_uring;
            so.io.sqpoll = f.io_sqpoll;
            if (!f.profile.empty()) so.pinned = read_profile(f.profile);
            so.health = std::make_shared<DiskHealth>();
            le.disk_health = so.health;
            streaming = so;
            le.streaming = true;
            le.cache_bytes = cache;
        }
    }
    LoadOptions lo;
    lo.mtp = f.load_mtp;
    if (block_file) lo.mtp_file = &*block_file;
    std::string store_note;
    if (streaming) lo.experts = streaming_experts(*streaming, f.expert_store, &store_note);
    le.model = load_model(le.file, lo);
    if (const std::string why = kv_cache_types_problem(*le.model, le.kv_types); !why.empty()) throw CliError(why);
    if (f.require_mtp && !le.model->mtp) {
        std::string runs;
        for (const auto& a : nextn_draft_architectures()) runs += (runs.empty() ? "" : ", ") + a;
        throw CliError("--draft mtp: " + path +
                       (facts.n_layer_nextn ? " has a NextN/MTP block, but " + facts.arch + "'s are not run as drafts yet (" + runs + "'s are)"
                                            : " has no NextN/MTP block (nextn_predict_layers); --draft lookup drafts from the context"));
    }
    const uint64_t unlocked = le.model->resident->try_lock();
    std::string where;
    if (le.streaming) {
        auto& src = dynamic_cast<StreamingExpertSource&>(*le.model->experts);
        where = "experts streamed: " + std::to_string(src.slot_count()) + " slots of " + human_bytes(static_cast<double>(src.slot_bytes())) + " (" +
                human_bytes(static_cast<double>(src.bytes_in_ram())) + " of " + human_bytes(static_cast<double>(facts.expert_bytes)) + "), " +
                (src.uring() ? (src.sqpoll() ? "io_uring SQPOLL" : "io_uring") : "pread") + (src.direct_io() ? " O_DIRECT" : " buffered") +
                (src.registered_buffers() ? ", registered buffers" : "") + ", " + policy_name(streaming->policy) +
                (src.io_note().empty() ? "" : " (" + src.io_note() + ")") + (store_note.empty() ? "" : "; " + store_note);
    } else {
        where = "experts in RAM (" + human_bytes(static_cast<double>(facts.expert_bytes)) + ")";
    }
    le.summary = where + "; mlock: " +
                 (unlocked ? human_bytes(static_cast<double>(unlocked)) + " of " + human_bytes(static_cast<double>(le.model->resident->bytes())) +
                                 " resident bytes not locked (raise RLIMIT_MEMLOCK: LimitMEMLOCK= or limits.d)"
                           : "all " + human_bytes(static_cast<double>(le.model->resident->bytes())) + " resident bytes locked");
    if (!le.kv_types.f16())
        le.summary += "; KV cache " + kernels::kv_cache_type_name(le.kv_types.k) + "/" + kernels::kv_cache_type_name(le.kv_types.v) +
                      (kernels::kv_rotation_k(le.kv_types.k, static_cast<int>(le.model->hp.gqa.head_dim)) ? " (Hadamard-rotated, as llama.cpp)"
                                                                                                          : "") +
                      (le.kv_types.k == GgmlType::F32 || le.kv_types.v == GgmlType::F32
                           ? " (f32 is attended as f16, as llama.cpp casts it: twice f16's memory for f16's results)"
                           : "");
    return le;
}

}  // namespace moe::cli

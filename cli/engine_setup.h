// Loading a model the way `run`, `serve` and `bench` share: all experts in RAM, or streamed into a cache
// sized from --ram-budget (the engine's whole footprint, as `plan` computes it), with the I/O options.
#pragma once
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <memory>
#include <string>

#include "engine/forward/speculative.h"
#include "engine/gguf/gguf.h"
#include "engine/kernels/flavor.h"
#include "engine/kernels/kv_cache_types.h"
#include "engine/model/loader.h"
#include "engine/model/model.h"
#include "engine/runtime/cache_policy.h"
#include "engine/runtime/expert_cache.h"
#include "engine/runtime/routing_trace.h"
#include "engine/runtime/routing_window.h"

namespace moe::cli {

struct EngineFlags {
    std::string ram_budget;  // "" = everything in RAM
    int io_depth = 32;
    std::string read_size = "1M";
    std::string policy = policy_flag(kDefaultEvictionPolicy);
    bool no_uring = false;
    bool io_sqpoll = false;
    std::string profile;                                     // routing profile: its hottest experts stay resident
    std::string expert_store = "auto";                       // auto (MODEL.experts when present and valid) | off | a path
    std::string numerics;                                    // "" = the llama.cpp build of this host; avx512 | avx2
    std::string routing_trace;                               // --routing-trace FILE: append each step's routing ("" = none)
    std::string routing_trace_max = "1G";                    // its size bound (oldest steps dropped past it)
    std::string cache_type_k = "f16", cache_type_v = "f16";  // --cache-type-k / -v (-ctk / -ctv), as llama.cpp's
    bool swa_full = false;                                   // --swa-full: sliding-window layers keep every position
    // --draft mtp: load the NextN/MTP block (Model::mtp) where the engine runs the file's; require it.
    bool load_mtp = false, require_mtp = false;
    // --mtp-file: the NextN block in a file of its own (llama.cpp's deepseek4 converter writes mtp-<name>.gguf;
    // "" = that name beside the model, when present).
    std::string mtp_file;
    // The runner's threads (the command's --threads): in-RAM experts' per-thread rows count in the budget.
    int threads = 2;
};

void add_engine_options(boost::program_options::options_description& opts, EngineFlags& f);
// llama.cpp's spellings -ctk / -ctv as --cache-type-k / --cache-type-v (program_options has no multi-letter
// short options), in place.
void rewrite_llama_short_options(std::vector<std::string>& args);
// The cache types of --cache-type-k/-v, or CliError naming the flag, the value and the choices.
kernels::KvCacheTypes parse_kv_cache_types(const std::string& k, const std::string& v);

// --draft, --draft-max and --draft-min (run, serve, bench): the mode, or CliError naming the flag and value.
DraftMode parse_draft_flags(const std::string& draft, int draft_max, int draft_min = 0);
// What the mode asks of the load: the NextN block for mtp.
void draft_flags_to_engine(DraftMode mode, EngineFlags& f);
// What speculation did in a run or bench: the drafts verified and kept, and the planner's figures.
nlohmann::json draft_json(const Drafter& d);

struct LoadedEngine {
    GgufModel file;
    std::unique_ptr<Model> model;
    kernels::Flavor flavor = kernels::default_flavor();
    kernels::KvCacheTypes kv_types;  // checked against the model at load
    bool swa_full = false;           // RunnerOptions::swa_full, counted in the budget
    bool streaming = false;
    uint64_t cache_bytes = 0;
    std::shared_ptr<DiskHealth> disk_health;
    uint64_t working_bytes =
        0;  // streaming: what the budget kept for the engine's own allocations  // streaming: the expert reads' health (the server's /health)
    std::string summary;  // one line for the log: where experts live, I/O mode, mlock result
    std::string kernels;  // one line: the kernel table and numerics chosen, and why (cpu_choice.h)
};

// What the process allocates besides weights, KV and the expert cache, from the file's layout: the runner's
// activations, scratch and logits (Runner::working_bytes) plus kProcessBaseBytes.
constexpr uint64_t kProcessBaseBytes = 24ull << 20;  // code, libraries, heap, tokenizer, thread stacks, I/O rings
// (kv_types: an f32 cache adds the f16 copy its attention reads, Runner::working_bytes)
uint64_t engine_working_bytes(const GgufModel& file, uint32_t n_ctx, int n_seq, int n_threads = 2, kernels::KvCacheTypes kv_types = {});
// --draft mtp's NextN block in RAM: its weights and experts, a layer's share of the KV caches, its runner and the
// trunk's hidden rows handed to it; 0 where the file has no block the engine runs.
uint64_t draft_block_bytes(const GgufModel& file, const ModelFacts& facts, uint32_t n_ctx, int n_seq, kernels::KvCacheTypes kv_types);
// The same for plan and check, which read files the engine may not load: kProcessBaseBytes then (they say why).
uint64_t engine_working_bytes_or_base(const std::string& path, uint32_t n_ctx, int n_seq, int n_threads = 2, kernels::KvCacheTypes kv_types = {});

// Throws CliError for an unusable budget (naming the minimum), ModelError/GgufError for bad files.
// n_seq: sequences (server slots) whose KV caches come out of --ram-budget. extra_bytes: what else the command
// holds while the engine runs (bench's fio), kept out of the expert cache as well.
LoadedEngine load_engine(const std::string& path, const EngineFlags& f, uint32_t n_ctx, int n_seq = 1, uint64_t extra_bytes = 0);

// The expert source of a model streamed from disk into a cache of these options (tests use it too).
// `store`: "off", "auto" (the GGUF's `.experts` store when present and valid; `note` says why not otherwise)
// or a path (CliError when it is not usable).
ExpertSourceFactory streaming_experts(StreamingOptions so, const std::string& store = "off", std::string* note = nullptr);

// What a trace of this engine's routing says about the model and how it streams (open_routing_trace's, and the
// server's live window's).
RoutingTraceHeader routing_trace_header(const EngineFlags& f, const GgufModel& file, const Model& model, int prefetch_layers = 1);
// The routing trace --routing-trace names, for this engine (header: the model's identity, how experts are read
// and cached), attached to its expert source; null when no trace was asked for. The runner's options take it
// too (RunnerOptions::routing_trace). Throws CliError for an unusable file (another model's trace, locked).
std::unique_ptr<RoutingTraceWriter> open_routing_trace(const EngineFlags& f, const GgufModel& file, const Model& model, int prefetch_layers = 1);
// The run's recent steps in memory (RoutingWindow), recording in place of `trace` and forwarding each step to it
// (may be null): attached to the expert source; the runner's options take it. Null for a model without experts.
std::unique_ptr<RoutingWindow> open_routing_window(const EngineFlags& f, const GgufModel& file, const Model& model, RoutingTraceWriter* trace,
                                                   int prefetch_layers = 1);

// Reads `moestream profile` output: (layer, expert) hottest first.
std::vector<std::pair<uint32_t, uint32_t>> read_profile(const std::string& path);

}  // namespace moe::cli

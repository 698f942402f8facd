// `moestream bench`: prompt and generation tokens/s against the bound of ../shared/design.md section 4, in
// one run, and each weight type's kernel speed against the scalar reference. All in RAM: the bound is RAM bandwidth / active bytes. Streaming (--ram-budget below the model):
// also expert bytes read per token, achieved read GB/s as a ratio of fio's on the same file with the same
// read size and depth (run in the same invocation), hit rate, prefetch accuracy, time blocked on I/O, RSS.
#include <sys/stat.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/bench_kernels.h"
#include "cli/bench_serving.h"
#include "cli/bench_plot.h"
#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "engine/kernels/kernels.h"
#include "engine/model/model_facts.h"
#include "engine/runtime/cache_sim.h"
#include "engine/forward/runner.h"
#include "engine/forward/speculative.h"
#include "engine/forward/synthetic_depth.h"
#include "engine/sampler/sampler.h"
#include "probes/memory_bandwidth.h"
#include "probes/storage_probe.h"
#include "tune/check.h"
#include "tune/perf_model.h"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace moe::cli {

namespace {
constexpr uint64_t kFioBaseBytes = 32ull << 20;  // fio's two processes beside its I/O buffers (38.5 MiB RSS at 32 x 1 MiB)
}
namespace {

using Clock = std::chrono::steady_clock;

// A "Key: N kB" line of a /proc file, in bytes (0 when absent).
uint64_t proc_kib_field(const char* path, const std::string& field) {
    std::ifstream f(path);
    std::string key;
    uint64_t kb = 0;
    while (f >> key) {
        if (key == field) {
            f >> kb;
            break;
        }
        std::getline(f, key);
    }
    return kb * 1024;
}

uint64_t rss_bytes() { return proc_kib_field("/proc/self/status", "VmRSS:"); }
std::string fs_basename(const std::string& p) { return p.substr(p.rfind('/') + 1); }
uint64_t page_cache_bytes() { return proc_kib_field("/proc/meminfo", "Cached:"); }

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
    std::string model_path, fio_bin = "fio";
    int threads = 2, n_gen = 32, n_prompt = 64;
    double fio_seconds = 5, cache_fraction = 0;
    bool as_json = false, no_fio = false;
    std::string parallel_list = "1,2,4", mask_vocab, plot_path;
    int prefetch_layers = 1, draft_max = 8, draft_min = 0;
    std::string draft = "off", depth_fill = "real";
    EngineFlags ef;
    po::options_description opts("moestream bench options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model_path)->required(), "GGUF model")(
        "tokens", po::value(&n_gen)->default_value(32), "tokens to generate")("prompt-tokens", po::value(&n_prompt)->default_value(64),
                                                                              "prompt tokens")(
        "depth-fill", po::value(&depth_fill)->default_value("real"),
        "real: evaluate the prompt; synthetic: one token, then --prompt-tokens positions of random cache rows "
        "(decode speed at a depth without an O(depth^2) prompt; streamed experts start from one token's in the cache)")(
        "threads,t", po::value(&threads)->default_value(2), "threads")("json", po::bool_switch(&as_json), "JSON output")(
        "fio-seconds", po::value(&fio_seconds)->default_value(5), "length of the fio baseline run (streaming)")(
        "no-fio", po::bool_switch(&no_fio), "skip the fio baseline")("prefetch-layers", po::value(&prefetch_layers)->default_value(1),
                                                                     "streaming: MoE layers ahead to prefetch (1 or 2)")(
        "plot", po::value(&plot_path), "also draw the generation's tok/s, read GB/s and hit rate over time into this SVG file")(
        "mask-vocab", po::value(&mask_vocab),
        "GGUF whose vocabulary the grammar-mask figure uses (default: the model's; e.g. a 152k-token vocab-only file)")(
        "parallel", po::value(&parallel_list)->default_value("1,2,4"), "slot counts for the batched-decode section (serve --parallel); empty: skip")(
        "draft", po::value(&draft)->default_value("off"),
        "generation with speculative decoding: auto | lookup | mtp | off (greedy tokens unchanged; serve --help says more)")(
        "draft-min", po::value(&draft_min)->default_value(0), "auto / mtp: at least this many drafts a step")(
        "draft-max", po::value(&draft_max)->default_value(8), "most drafted tokens one step verifies (1..64)")(
        "cache-fraction", po::value(&cache_fraction),
        "stream experts through a cache of this share of their bytes (0..1); "
        "sets --ram-budget to resident + cache + that");
    add_engine_options(opts, ef);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (threads < 1 || threads > 1024) throw CliError("--threads " + std::to_string(threads) + " is out of range");
    ef.threads = threads;
    if (n_gen < 2 || n_prompt < 1 || n_gen + n_prompt > 1 << 20) throw CliError("--tokens/--prompt-tokens out of range");
    const DraftMode draft_mode = parse_draft_flags(draft, draft_max, draft_min);
    if (depth_fill != "real" && depth_fill != "synthetic") throw CliError("--depth-fill '" + depth_fill + "' is not real or synthetic");
    const bool synthetic = depth_fill == "synthetic";
    if (synthetic && draft_mode != DraftMode::Off)
        throw CliError("--depth-fill synthetic: --draft needs the prompt's real tokens; use --depth-fill real");
    std::vector<int> slot_counts;
    for (size_t pos = 0; pos < parallel_list.size();) {
        const size_t comma = std::min(parallel_list.find(',', pos), parallel_list.size());
        const std::string item = parallel_list.substr(pos, comma - pos);
        const int v = std::atoi(item.c_str());
        if (v < 1 || v > 64 || item.find_first_not_of("0123456789") != std::string::npos)
            throw CliError("--parallel '" + parallel_list + "': '" + item + "' is not a slot count in 1..64");
        slot_counts.push_back(v);
        pos = comma + 1;
    }

    const uint32_t n_ctx = static_cast<uint32_t>(n_prompt + n_gen + 1);
    // Under a budget, what the bench holds beside the main runner comes out of it too: the slot section's runner
    // (its KV caches and scratch, while the main one lives) and fio (its buffers, queue depth x block size).
    const bool budgeted = !ef.ram_budget.empty() || vm.count("cache-fraction");
    const kernels::KvCacheTypes kv_types = parse_kv_cache_types(ef.cache_type_k, ef.cache_type_v);
    uint64_t beside = 0;
    if (budgeted) {
        const GgufModel header = open_gguf_model(model_path);
        const int max_slots = slot_counts.empty() ? 0 : *std::max_element(slot_counts.begin(), slot_counts.end());
        if (max_slots > 0)
            beside += engine_working_bytes(header, n_ctx, max_slots, threads, kv_types) - kProcessBaseBytes +
                      model_facts(header).kv_bytes(n_ctx, kv_types) * static_cast<uint64_t>(max_slots);
        if (!no_fio) beside += static_cast<uint64_t>(ef.io_depth) * parse_bytes("--read-size", ef.read_size) + kFioBaseBytes;
        if (vm.count("cache-fraction")) {
            if (!ef.ram_budget.empty()) throw CliError("give --cache-fraction or --ram-budget, not both");
            if (!(cache_fraction > 0 && cache_fraction < 1))
                throw CliError("--cache-fraction " + std::to_string(cache_fraction) + " is not in (0, 1)");
            const ModelFacts f = model_facts(header);
            ef.ram_budget = std::to_string(f.resident_bytes + f.kv_bytes(n_ctx, kv_types) +
                                           engine_working_bytes(header, n_ctx, 1, threads, kv_types) + beside +
                                           static_cast<uint64_t>(cache_fraction * static_cast<double>(f.expert_bytes)));
        }
    }
    // RAM bandwidth first, with a buffer far larger than the caches, and freed before the model loads (a
    // benchmark inside a cgroup memory limit has no room for it next to the expert cache).
    // Under a budget the buffer stays within half of it: a bench inside a memory cgroup of that size must not
    // be killed by its own measurement (64 MiB is still far beyond the CPU caches).
    size_t bw_buffer = size_t{256} << 20;
    if (!ef.ram_budget.empty())
        bw_buffer = std::clamp<size_t>(static_cast<size_t>(parse_bytes("--ram-budget", ef.ram_budget) / 2), size_t{64} << 20, bw_buffer);
    const double bw = measure_memory_read_bandwidth(threads, bw_buffer);
    const uint64_t cache_before = page_cache_bytes();
    draft_flags_to_engine(draft_mode, ef);
    LoadedEngine le = load_engine(model_path, ef, n_ctx, 1, beside);
    ModelFacts facts = model_facts(le.file);
    if (prefetch_layers < 0 || prefetch_layers > 4)
        throw CliError("--prefetch-layers " + std::to_string(prefetch_layers) + " is out of range (0..4)");
    const auto trace = open_routing_trace(ef, le.file, *le.model, prefetch_layers);
    // The run's routing in memory too (forwarded to --routing-trace's file when given): the workload's skew and
    // consecutive-token overlap go beside the result, since a cache's figures mean little without them.
    const auto routing = open_routing_window(ef, le.file, *le.model, trace.get(), prefetch_layers);
    RoutingRecorder* recorder = routing ? static_cast<RoutingRecorder*>(routing.get()) : trace.get();
    Runner runner(*le.model, {.n_ctx = static_cast<int>(n_ctx),
                              .n_threads = threads,
                              .flavor = le.flavor,
                              .prefetch_layers = prefetch_layers,
                              .routing_trace = recorder,
                              .cache_type_k = le.kv_types.k,
                              .cache_type_v = le.kv_types.v,
                              .swa_full = le.swa_full});
    std::unique_ptr<MtpDraft> mtp;
    if (le.model->mtp) {
        mtp = std::make_unique<MtpDraft>(*le.model, RunnerOptions{.n_ctx = static_cast<int>(n_ctx),
                                                                  .n_threads = threads,
                                                                  .flavor = le.flavor,
                                                                  .cache_type_k = le.kv_types.k,
                                                                  .cache_type_v = le.kv_types.v,
                                                                  .swa_full = le.swa_full});
        runner.set_hidden_sink(mtp->hidden_sink());
    }
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int i = 0; i < n_prompt; ++i) prompt[i] = (i * 7919 + 13) % static_cast<int>(le.model->hp.n_vocab);
    auto t0 = Clock::now();
    if (synthetic) {
        // One real token (its logits start the generation, its recurrent state is kept), then random rows.
        runner.eval(std::span<const int32_t>(prompt.data(), 1));
        if (const std::string why = synthetic_depth_problem(runner, n_prompt); !why.empty()) throw CliError("--depth-fill synthetic: " + why);
        fill_synthetic_depth(runner, n_prompt);
    } else {
        runner.eval(prompt);
    }
    const double t_pp = std::chrono::duration<double>(Clock::now() - t0).count();
    const ExpertSourceStats s0 = le.model->experts->stats();
    const RunnerStats r0 = runner.stats();
    std::vector<ReadRecord> reads;  // the generation's disk reads, for fio to replay
    le.model->experts->trace_reads(&reads);
    std::vector<BenchPoint> timeline{BenchPoint{}};
    auto t1 = Clock::now();
    auto record_point = [&] {
        if (plot_path.empty()) return;
        const ExpertSourceStats s = le.model->experts->stats();
        timeline.push_back({std::chrono::duration<double>(Clock::now() - t1).count(), static_cast<double>(s.bytes_read - s0.bytes_read),
                            static_cast<double>(s.hits - s0.hits), static_cast<double>((s.hits - s0.hits) + (s.misses - s0.misses))});
    };
    std::optional<Drafter> drafter;
    if (draft_mode == DraftMode::Off) {
        for (int i = 0; i < n_gen; ++i) {
            int32_t next = argmax({runner.logits(), le.model->hp.n_vocab});
            runner.eval(std::span<const int32_t>(&next, 1));
            record_point();
        }
    } else {
        // The same greedy tokens, n_gen of them evaluated, in verification steps of the pending token and its drafts.
        Sampler greedy({.temperature = 0.f});
        drafter.emplace(draft_mode, draft_max, step_cost_of(facts, le.streaming));
        drafter->use_mtp(mtp.get(), 0);
        drafter->set_min_drafts(draft_min);
        std::vector<int32_t> history = prompt;
        history.push_back(argmax({runner.logits(), le.model->hp.n_vocab}));
        for (int evaluated = 0; evaluated < n_gen;) {
            const std::vector<int32_t> drafts = drafter->propose(history, n_gen - evaluated - 1);
            evaluated += 1 + drafter->step(runner, greedy, history, drafts, [](int32_t, std::span<const float>) { return true; }).accepted;
            record_point();
        }
    }
    const double t_tg = std::chrono::duration<double>(Clock::now() - t1).count();
    le.model->experts->trace_reads(nullptr);
    const ExpertSourceStats s1 = le.model->experts->stats();
    const RunnerStats r1 = runner.stats();
    const uint64_t rss = rss_bytes(), cache_after = page_cache_bytes();
    const double pp = n_prompt / t_pp, tg = n_gen / t_tg;

    json out = {{"model", model_path},
                {"arch", facts.arch},
                {"threads", threads},
                {"kernels", kernels::isa_name(kernels::active_table(le.flavor).isa)},
                {"cache_bytes_per_token", facts.cache_bytes_per_token_as(le.kv_types)},
                {"cache_layout", facts.cache_layout},
                {"cache_types", kernels::kv_cache_type_name(le.kv_types.k) + "/" + kernels::kv_cache_type_name(le.kv_types.v)},
                {"cache_bytes_4k", facts.kv_bytes(4096, le.kv_types)},
                {"cache_bytes_32k", facts.kv_bytes(32768, le.kv_types)},
                {"experts", le.summary},
                {"depth_fill", depth_fill},
                {"gen_tokens_per_s", tg},
                {"memory_read_bytes_per_s", bw},
                {"active_bytes_per_token", facts.active_bytes_per_token()},
                {"rss_bytes", rss}};
    if (!synthetic) out["prompt_tokens_per_s"] = pp;
    if (drafter) out["draft"] = draft_json(*drafter);
    if (routing) {
        const RoutingWindow::Recent recent = routing->recent();
        const RoutingWorkload w = measure_workload(recent.trace);
        out["routing"] = {{"hot10_share", w.hot10_share},
                          {"consecutive_overlap", w.consecutive_overlap},
                          {"distant_overlap", w.distant_overlap},
                          {"steps", w.steps},
                          {"tokens", w.tokens},
                          {"first_step", recent.first_step}};
    }
    // Where the prompt's time went (shares of the runner's eval time; the rest: embeddings, norms, output head).
    if (r0.eval_seconds > 0 && !synthetic)
        out["prompt_split"] = {{"attention", r0.attention_seconds / r0.eval_seconds},
                               {"feed_forward", r0.feed_forward_seconds / r0.eval_seconds},
                               {"eval_seconds", r0.eval_seconds}};
    if (!le.streaming) {
        const double bound = bw / static_cast<double>(facts.active_bytes_per_token());
        out["gen_bound_tokens_per_s"] = bound;
        out["gen_ratio_of_bound"] = tg / bound;
    } else {
        const double bytes = static_cast<double>(s1.bytes_read - s0.bytes_read);
        const uint64_t lookups = (s1.hits - s0.hits) + (s1.misses - s0.misses);
        const double hit = lookups ? static_cast<double>(s1.hits - s0.hits) / static_cast<double>(lookups) : 0;
        const double wait_s = static_cast<double>(s1.wait_ns - s0.wait_ns) / 1e9;
        const uint64_t pred_total = r1.prefetch_predicted_total - r0.prefetch_predicted_total;
        const double pred = pred_total
                                ? static_cast<double>(r1.prefetch_predicted_hits - r0.prefetch_predicted_hits) / static_cast<double>(pred_total)
                                : 0;
        out["expert_bytes_read_per_token"] = bytes / n_gen;
        out["reads_per_token"] = static_cast<double>(s1.reads_submitted - s0.reads_submitted) / n_gen;
        out["expert_loads_per_token"] = static_cast<double>(s1.misses - s0.misses + s1.prefetch_issued - s0.prefetch_issued) / n_gen;
        out["store_loads"] = s1.store_loads - s0.store_loads;
        out["store_bad_records"] = s1.store_bad_records;
        out["read_bytes_per_s_wall"] = bytes / t_tg;
        out["read_bytes_per_s_while_waiting"] = wait_s > 0 ? bytes / wait_s : 0.0;
        out["cache_hit_rate"] = hit;
        out["prefetch_prediction_accuracy"] = pred;
        out["prefetch_issued"] = s1.prefetch_issued - s0.prefetch_issued;
        out["prefetch_used"] = s1.prefetch_used - s0.prefetch_used;
        out["seconds_blocked_on_io"] = wait_s;
        out["seconds_computing"] = t_tg - wait_s;
        out["expert_cache_bytes"] = le.cache_bytes;
        out["page_cache_growth_bytes"] = static_cast<int64_t>(cache_after) - static_cast<int64_t>(cache_before);
        double fio_bw = 0;
        if (!no_fio) {
            struct stat st {};
            ::stat(model_path.c_str(), &st);
            std::string why;
            const uint64_t bs = parse_bytes("--read-size", ef.read_size);
            try {
                if (auto r = run_fio(fio_bin, model_path, static_cast<uint64_t>(st.st_size) / bs * bs, true, bs, ef.io_depth, fio_seconds, why)) {
                    fio_bw = r->bytes_per_s;
                    out["fio_bytes_per_s"] = fio_bw;
                    out["engine_read_ratio_of_fio"] = fio_bw > 0 ? (bytes / t_tg) / fio_bw : 0.0;
                } else {
                    out["fio_note"] = why;
                }
            } catch (const StorageProbeError& e) { out["fio_note"] = e.what(); }
            // The same reads the engine issued, in its order and at its depth, with no compute between them.
            try {
                const auto& read_files = dynamic_cast<const StreamingExpertSource&>(*le.model->experts).read_files();
                if (auto r = run_fio_replay(fio_bin, read_files, reads, ef.io_depth, why)) {
                    out["fio_replay_bytes_per_s"] = r->bytes_per_s;
                    out["fio_replay_reads"] = reads.size();
                    out["engine_read_ratio_of_replay"] = r->bytes_per_s > 0 ? (bytes / t_tg) / r->bytes_per_s : 0.0;
                } else {
                    out["fio_replay_note"] = why;
                }
            } catch (const StorageProbeError& e) { out["fio_replay_note"] = e.what(); }
        }
        out["bound_tokens_per_s"] = 0.0;
        if (fio_bw > 0) {
            DecodeEstimate e = estimate_decode_with_hit_rate(facts, hit, fio_bw, bw);  // the hit rate measured in this run
            out["bound_tokens_per_s"] = e.tokens_per_s;
            out["bound_formula"] = e.formula();
            out["gen_ratio_of_bound"] = e.tokens_per_s > 0 ? tg / e.tokens_per_s : 0.0;
        }
    }
    // After the timed generation, so that its cache and branch state do not colour the figures above.
    out["weight_kernels"] = bench_weight_kernels(le.file, le.flavor);
    // The slot section evaluates its prompts for real: at a synthetic depth that is the hour the fill avoids.
    if (!slot_counts.empty() && synthetic) out["parallel_slots_note"] = "not run under --depth-fill synthetic";
    else if (!slot_counts.empty()) out["parallel_slots"] = bench_parallel_slots(le, threads, n_ctx, n_prompt, n_gen, slot_counts);
    try {
        out["grammar_mask"] = mask_vocab.empty() ? bench_grammar_mask(le.file.meta(), 1000.0 / tg)
                                                 : bench_grammar_mask(read_gguf_header(mask_vocab), 1000.0 / tg);
    } catch (const std::exception& e) { out["grammar_mask"] = {{"note", e.what()}}; }
    if (!plot_path.empty()) {
        std::ofstream svg(plot_path);
        svg << render_bench_svg(timeline, out.value("fio_bytes_per_s", 0.0),
                                "moestream bench: " + fs_basename(model_path) + ", " + std::to_string(threads) + " threads");
        if (!svg) throw CliError("--plot " + plot_path + ": cannot write");
        out["plot"] = plot_path;
    }
    if (as_json) {
        std::cout << out.dump(2) << "\n";
        return 0;
    }
    char prompt_line[160];
    if (synthetic)
        std::snprintf(prompt_line, sizeof prompt_line, "depth            %d positions of random cache rows (--depth-fill synthetic)\n", n_prompt);
    else std::snprintf(prompt_line, sizeof prompt_line, "prompt           %d tokens, %.1f tok/s\n", n_prompt, pp);
    std::printf(
        "model            %s (%s)\nkernels          %s, %d threads\nexperts          %s\n"
        "context cache    %s per token (%s; K/V %s): %s at 4k, %s at 32k\n%s"
        "generation       %d tokens, %.1f tok/s\nmemory bandwidth %.2f GB/s (read, %d threads)\nRSS              %s\n",
        model_path.c_str(), facts.arch.c_str(), kernels::isa_name(kernels::active_table(le.flavor).isa), threads, le.summary.c_str(),
        human_bytes(static_cast<double>(facts.cache_bytes_per_token_as(le.kv_types))).c_str(), facts.cache_layout.c_str(),
        out["cache_types"].get<std::string>().c_str(), human_bytes(static_cast<double>(facts.kv_bytes(4096, le.kv_types))).c_str(),
        human_bytes(static_cast<double>(facts.kv_bytes(32768, le.kv_types))).c_str(), prompt_line, n_gen, tg, bw / 1e9, threads,
        human_bytes(static_cast<double>(rss)).c_str());
    if (out.contains("routing"))
        std::printf(
            "routing          the hottest 10%% of each layer's experts take %.1f%% of routings; consecutive tokens share %.1f%%, tokens %zu "
            "apart %.1f%% (%llu steps)\n",
            100 * out["routing"]["hot10_share"].get<double>(), 100 * out["routing"]["consecutive_overlap"].get<double>(),
            RoutingWorkload::kDistantTokens, 100 * out["routing"]["distant_overlap"].get<double>(),
            static_cast<unsigned long long>(out["routing"]["steps"].get<uint64_t>()));
    if (out.contains("draft")) {
        const json& d = out["draft"];
        std::printf("drafts           %s: %llu of %llu kept (%.0f%%) over %llu verification steps\n", d["mode"].get<std::string>().c_str(),
                    static_cast<unsigned long long>(d["accepted"].get<uint64_t>()), static_cast<unsigned long long>(d["drafted"].get<uint64_t>()),
                    100 * d["acceptance"].get<double>(), static_cast<unsigned long long>(d["steps"].get<uint64_t>()));
    }
    if (out.contains("prompt_split")) {
        const json& split = out["prompt_split"];
        const double att = split["attention"].get<double>(), ffn = split["feed_forward"].get<double>();
        std::printf("prompt split     attention %.1f%%, feed-forward %.1f%%, rest %.1f%%\n", 100 * att, 100 * ffn, 100 * (1 - att - ffn));
    }
    print_weight_kernels(out["weight_kernels"]);
    if (out.contains("parallel_slots"))
        for (const auto& row : out["parallel_slots"])
            std::printf("slots %-10d %.1f tok/s summed, expert reads %s per token (%.2f of 1 slot's), %.1f expert loads per token\n",
                        row["slots"].get<int>(), row["gen_tokens_per_s"].get<double>(),
                        human_bytes(row["expert_bytes_read_per_token"].get<double>()).c_str(), row["expert_bytes_ratio_of_first"].get<double>(),
                        row["expert_loads_per_token"].get<double>());
    if (out["grammar_mask"].contains("mask_ms_mean"))
        std::printf("grammar mask     %.2f ms per full mask (worst %.2f) over %d tokens = %.1f%% of a decode step\n",
                    out["grammar_mask"]["mask_ms_mean"].get<double>(), out["grammar_mask"]["mask_ms_worst"].get<double>(),
                    out["grammar_mask"]["vocab"].get<int>(), 100 * out["grammar_mask"]["mask_ratio_of_decode"].get<double>());
    if (!le.streaming) {
        std::printf("bound            %.1f tok/s = bandwidth / active bytes (%s per token)\nratio            %.2f of the bound\n",
                    out["gen_bound_tokens_per_s"].get<double>(), human_bytes(static_cast<double>(facts.active_bytes_per_token())).c_str(),
                    out["gen_ratio_of_bound"].get<double>());
        return 0;
    }
    std::printf(
        "expert reads     %s per token, %.2f GB/s over the generation, %.2f GB/s while waiting\n"
        "read requests    %.1f per token for %.1f expert loads (%s)\n",
        human_bytes(out["expert_bytes_read_per_token"].get<double>()).c_str(), out["read_bytes_per_s_wall"].get<double>() / 1e9,
        out["read_bytes_per_s_while_waiting"].get<double>() / 1e9, out["reads_per_token"].get<double>(), out["expert_loads_per_token"].get<double>(),
        out["store_loads"].get<uint64_t>() ? "one store record each" : "three GGUF windows each");
    std::printf("cache            %.1f%% hits; prefetch: router prediction %.1f%% right, %llu issued, %llu used\n",
                100 * out["cache_hit_rate"].get<double>(), 100 * out["prefetch_prediction_accuracy"].get<double>(),
                static_cast<unsigned long long>(out["prefetch_issued"].get<uint64_t>()),
                static_cast<unsigned long long>(out["prefetch_used"].get<uint64_t>()));
    std::printf("time             %.3f s blocked on I/O, %.3f s computing\npage cache       %+.1f MiB during the run\n",
                out["seconds_blocked_on_io"].get<double>(), out["seconds_computing"].get<double>(),
                out["page_cache_growth_bytes"].get<int64_t>() / 1048576.0);
    if (out.contains("fio_bytes_per_s"))
        std::printf("fio baseline     %.2f GB/s (randread, O_DIRECT, io_uring, bs %s, depth %d, this file)\nengine/fio       %.2f\n",
                    out["fio_bytes_per_s"].get<double>() / 1e9, ef.read_size.c_str(), ef.io_depth, out["engine_read_ratio_of_fio"].get<double>());
    if (out.contains("fio_replay_bytes_per_s"))
        std::printf("fio replay       %.2f GB/s (the generation's %llu reads, same order and depth, no compute between)\nengine/replay    %.2f\n",
                    out["fio_replay_bytes_per_s"].get<double>() / 1e9, static_cast<unsigned long long>(out["fio_replay_reads"].get<uint64_t>()),
                    out["engine_read_ratio_of_replay"].get<double>());
    else if (out.contains("fio_replay_note")) std::printf("fio replay       not run: %s\n", out["fio_replay_note"].get<std::string>().c_str());
    if (!out.contains("fio_bytes_per_s") && out.contains("fio_note"))
        std::printf("fio baseline     not run: %s\n", out["fio_note"].get<std::string>().c_str());
    if (out["bound_tokens_per_s"].get<double>() > 0)
        std::printf("bound            %.2f tok/s = %s\nratio            %.2f of the bound\n", out["bound_tokens_per_s"].get<double>(),
                    out["bound_formula"].get<std::string>().c_str(), out["gen_ratio_of_bound"].get<double>());
    else std::printf("bound            not computed: it needs the fio baseline's bandwidth\n");
    return 0;
}

}  // namespace moe::cli

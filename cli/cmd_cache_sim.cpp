// `moestream cache-sim`: replays routing traces (--routing-trace of run, serve, bench) against the engine's
// eviction policies and Belady's MIN at several budgets; prints hit rate, bytes read per token, predicted
// tok/s, and the budget and policy it recommends. The engine's own figures for the recorded budget are printed
// beside the simulator's, so the model can be judged against the run it came from.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/bench_plot.h"
#include "cli/commands.h"
#include "engine/gguf/gguf.h"
#include "engine/runtime/cache_sim.h"
#include "probes/host_facts.h"
#include "tune/check.h"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace moe::cli {
namespace {

std::string read_text(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw CliError(path + ": cannot read");
    return {std::istreambuf_iterator<char>(f), {}};
}

// "5%,10%,256M": shares of every routed expert once, or sizes.
std::vector<uint64_t> parse_budgets(const std::string& text, uint64_t total) {
    std::vector<uint64_t> out;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        if (item.empty()) continue;
        if (item.back() == '%') {
            char* end = nullptr;
            const double pct = std::strtod(item.c_str(), &end);
            if (end != item.c_str() + item.size() - 1 || !(pct > 0) || pct > 100)
                throw CliError("--budgets: " + item + " is not a share in (0, 100]%");
            out.push_back(static_cast<uint64_t>(static_cast<double>(total) * pct / 100));
        } else {
            out.push_back(parse_bytes("--budgets", item));
        }
    }
    if (out.empty()) throw CliError("--budgets: no budget given");
    return out;
}

json result_json(const CacheSimResult& r, double belady_hits, double predicted) {
    json j = {{"policy", r.policy},
              {"budget_bytes", r.budget_bytes},
              {"slots", r.slots},
              {"lookups", r.lookups},
              {"hits", r.hits},
              {"hit_rate", r.hit_rate()},
              {"bytes_read", r.bytes_read},
              {"bytes_per_token", r.bytes_per_token()},
              {"decode_bytes_per_token", r.decode_bytes_per_token()},
              {"prefetch_issued", r.prefetch_issued},
              {"prefetch_used", r.prefetch_used},
              {"prefetch_unused_bytes", r.prefetch_unused_bytes}};
    if (belady_hits > 0) j["retained_hits_ratio_of_belady"] = static_cast<double>(r.retained_hits()) / belady_hits;
    if (predicted > 0) j["predicted_tokens_per_s"] = predicted;
    return j;
}

}  // namespace

int cmd_cache_sim(const std::vector<std::string>& args) {
    std::vector<std::string> traces;
    std::string model_path, budgets_text = "5%,10%,20%,30%,50%,75%", host_path, plot_path;
    double disk_gbps = 0;
    bool as_json = false, no_prefetch = false;
    po::options_description opts("moestream cache-sim options");
    opts.add_options()("help,h", "show this help")("trace", po::value(&traces)->multitoken()->required(),
                                                   "routing trace(s) of one model (--routing-trace of run, serve, bench)")(
        "model,m", po::value(&model_path), "the GGUF the traces were recorded on (checked against their model hash)")(
        "budgets", po::value(&budgets_text)->default_value(budgets_text),
        "expert cache budgets: shares of every routed expert once (20%) or sizes (8G); the recorded budget is added")(
        "disk-gbps", po::value(&disk_gbps), "disk read bandwidth for the predicted tok/s, GB/s")(
        "host", po::value(&host_path), "host facts (probe --json) whose measured storage bandwidth to use")(
        "no-prefetch", po::bool_switch(&no_prefetch), "simulate demand reads only (ignore the traces' predictions)")(
        "json", po::bool_switch(&as_json), "JSON output")("plot", po::value(&plot_path), "write hit rate against budget as an SVG");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);

    RoutingTrace trace;
    try {
        trace = read_routing_traces(traces);
    } catch (const RoutingTraceError& e) { throw CliError(e.what()); }
    const RoutingTraceHeader& h = trace.header;
    if (trace.steps.empty()) throw CliError(traces.front() + ": the routing trace has no steps");
    if (!model_path.empty()) {
        GgufModel file;
        try {
            file = open_gguf_model(model_path);
        } catch (const std::exception& e) { throw CliError(e.what()); }
        if (routing_model_hash(file) != h.model_hash)
            throw CliError(model_path + ": not the model the routing trace was recorded on (" + h.arch + ", model hash " +
                           std::to_string(h.model_hash) + ")");
    }
    const RoutingWorkload w = measure_workload(trace);

    // Disk bandwidth for the prediction: given, measured by probe, else what the recording read while blocked.
    double disk = disk_gbps * 1e9;
    std::string disk_source = "--disk-gbps";
    if (disk <= 0 && !host_path.empty()) {
        const HostFacts facts = host_facts_from_text(read_text(host_path), host_path);
        if (facts.storage)
            for (const auto& r : facts.storage->results) disk = std::max(disk, r.bytes_per_s);
        if (disk <= 0) throw CliError(host_path + ": no measured storage bandwidth (probe --json with a storage measurement)");
        disk_source = host_path + " (measured by probe)";
    }
    const CacheSimResult recorded = recorded_cache(trace);
    if (disk <= 0 && h.cache_bytes) {
        uint64_t wait_ns = 0;
        for (const auto& s : trace.steps) wait_ns += s.io_wait_ns;
        if (wait_ns > 0 && recorded.bytes_read > 0) {
            disk = static_cast<double>(recorded.bytes_read) / (static_cast<double>(wait_ns) / 1e9);
            disk_source = "the recording's bytes read per second blocked on reads (an upper bound when reads overlapped compute)";
        }
    }
    auto predict = [&](const CacheSimResult& r) {
        if (disk <= 0 || w.compute_ns_per_token <= 0) return 0.0;
        return 1e9 / (w.compute_ns_per_token + r.decode_bytes_per_token() / disk * 1e9);
    };

    std::vector<uint64_t> budgets = parse_budgets(budgets_text, w.total_expert_bytes);
    if (h.cache_bytes) budgets.push_back(h.cache_bytes);
    std::sort(budgets.begin(), budgets.end());
    budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
    const uint64_t min_budget = h.slot_bytes * h.n_expert_used;
    budgets.erase(std::remove_if(budgets.begin(), budgets.end(), [&](uint64_t b) { return b < min_budget; }), budgets.end());
    if (budgets.empty())
        throw CliError("--budgets: every budget is below one layer's selected experts (" + human_bytes(static_cast<double>(min_budget)) + ")");

    struct Row {
        uint64_t budget;
        CacheSimResult belady;
        std::vector<CacheSimResult> policies;
    };
    std::vector<Row> rows;
    for (uint64_t b : budgets) {
        Row row{b, simulate_belady(trace, b), {}};
        for (EvictionPolicy p : {EvictionPolicy::Lru, EvictionPolicy::LruFrequency, EvictionPolicy::LruFrequencyGuard})
            row.policies.push_back(simulate_engine_cache(trace, p, b, !no_prefetch));
        rows.push_back(std::move(row));
    }
    // Recommendation: the smallest budget whose best policy reaches 90% of the best predicted speed (of the
    // best hit rate when there is no prediction); bigger budgets buy little more.
    auto score = [&](const CacheSimResult& r) { return disk > 0 ? predict(r) : r.hit_rate(); };
    double best_score = 0;
    for (const auto& row : rows)
        for (const auto& r : row.policies) best_score = std::max(best_score, score(r));
    const Row* pick = nullptr;
    const CacheSimResult* pick_policy = nullptr;
    for (const auto& row : rows) {
        const CacheSimResult* best = &row.policies.front();
        for (const auto& r : row.policies)
            if (score(r) >= score(*best)) best = &r;  // on a tie the later policy: the default (lru+freq+guard) is last
        if (score(*best) >= 0.9 * best_score) {
            pick = &row;
            pick_policy = best;
            break;
        }
    }
    const CacheSimResult* same_as_recorded = nullptr;
    for (const auto& row : rows)
        if (row.budget == h.cache_bytes)
            for (const auto& r : row.policies)
                if (EvictionPolicy p; parse_policy_flag(h.policy, p) && r.policy == policy_name(p)) same_as_recorded = &r;

    if (!plot_path.empty()) {
        std::vector<HitRateCurve> curves;
        for (size_t p = 0; p < rows.front().policies.size(); ++p) {
            HitRateCurve c{rows.front().policies[p].policy, {}, false};
            for (const auto& row : rows) c.points.emplace_back(static_cast<double>(row.budget), row.policies[p].hit_rate());
            curves.push_back(std::move(c));
        }
        HitRateCurve bound{"belady (bound)", {}, true};
        for (const auto& row : rows) bound.points.emplace_back(static_cast<double>(row.budget), row.belady.hit_rate());
        curves.push_back(std::move(bound));
        std::ofstream(plot_path) << render_hit_rate_svg(curves, "expert cache hit rate: " + h.arch + ", " + std::to_string(w.tokens) + " tokens");
        if (!std::ifstream(plot_path)) throw CliError(plot_path + ": cannot write the plot");
    }

    if (as_json) {
        json out = {{"traces", traces},
                    {"arch", h.arch},
                    {"layers", h.n_layer},
                    {"experts", h.n_expert},
                    {"experts_used", h.n_expert_used},
                    {"steps", w.steps},
                    {"tokens", w.tokens},
                    {"steps_dropped", h.steps_dropped},
                    {"slot_bytes", h.slot_bytes},
                    {"total_expert_bytes", w.total_expert_bytes},
                    {"prefetch", !no_prefetch},
                    {"workload",
                     {{"hot10_share", w.hot10_share},
                      {"consecutive_overlap", w.consecutive_overlap},
                      {"distant_overlap", w.distant_overlap},
                      {"compute_ns_per_token", w.compute_ns_per_token}}},
                    {"disk_bytes_per_s", disk},
                    {"disk_source", disk > 0 ? disk_source : ""},
                    {"budgets", json::array()}};
        if (h.cache_bytes) {
            out["recorded"] = result_json(recorded, 0, predict(recorded));
            if (same_as_recorded) out["simulated_at_recorded"] = result_json(*same_as_recorded, 0, predict(*same_as_recorded));
        }
        for (const auto& row : rows) {
            json b = {{"budget_bytes", row.budget},
                      {"share", static_cast<double>(row.budget) / static_cast<double>(w.total_expert_bytes)},
                      {"belady", result_json(row.belady, 0, predict(row.belady))},
                      {"policies", json::array()}};
            for (const auto& r : row.policies) b["policies"].push_back(result_json(r, static_cast<double>(row.belady.hits), predict(r)));
            out["budgets"].push_back(b);
        }
        if (pick) out["recommended"] = {{"budget_bytes", pick->budget}, {"policy", pick_policy->policy}};
        std::cout << out.dump(2) << "\n";
        return 0;
    }

    char line[512];
    std::printf("trace: %s, %u layers x %u experts (%u used), %llu steps, %llu tokens%s\n", h.arch.c_str(), h.n_layer, h.n_expert, h.n_expert_used,
                static_cast<unsigned long long>(w.steps), static_cast<unsigned long long>(w.tokens),
                h.steps_dropped ? (", " + std::to_string(h.steps_dropped) + " oldest steps dropped").c_str() : "");
    std::printf(
        "workload: the hottest 10%% of each layer's experts take %.1f%% of routings; consecutive tokens share %.1f%% of experts, "
        "tokens %zu apart %.1f%%; compute %.2f ms per token\n",
        100 * w.hot10_share, 100 * w.consecutive_overlap, RoutingWorkload::kDistantTokens, 100 * w.distant_overlap, w.compute_ns_per_token / 1e6);
    if (disk > 0) std::printf("disk: %.2f GB/s from %s\n", disk / 1e9, disk_source.c_str());
    else std::printf("disk: unknown (--disk-gbps or --host): no speed prediction\n");
    std::printf(
        "\n(hit: lookups served from RAM, prefetched ones included; of MIN: hits on experts kept from an earlier use,\n"
        " against Belady's MIN, which keeps the best possible set and does not prefetch; unused: share of the bytes read\n"
        " that were prefetched and never asked for)\n");
    std::printf("%10s %6s %6s  %-14s %7s %8s %11s %7s %10s\n", "budget", "share", "slots", "policy", "hit", "of MIN", "MiB/token", "unused",
                "pred tok/s");
    for (const auto& row : rows) {
        const double share = 100.0 * static_cast<double>(row.budget) / static_cast<double>(w.total_expert_bytes);
        auto print = [&](const CacheSimResult& r, bool first) {
            // Hits kept from earlier uses against MIN's (prefetched hits are bought with reads MIN does not make).
            const std::string of_min = row.belady.hits ? std::to_string(static_cast<int>(std::lround(100.0 * static_cast<double>(r.retained_hits()) /
                                                                                                     static_cast<double>(row.belady.hits)))) +
                                                             "%"
                                                       : "-";
            const double pred = predict(r);
            char pred_text[32] = "-";
            if (pred > 0) std::snprintf(pred_text, sizeof pred_text, "%.2f", pred);
            // Share of the bytes read that were prefetched and never used.
            const double unused = r.bytes_read ? 100.0 * static_cast<double>(r.prefetch_unused_bytes) / static_cast<double>(r.bytes_read) : 0;
            std::snprintf(line, sizeof line, "%10s %5.1f%% %6llu  %-14s %6.1f%% %8s %11.3f %6.1f%% %10s\n",
                          first ? human_bytes(static_cast<double>(row.budget)).c_str() : "", share, static_cast<unsigned long long>(r.slots),
                          r.policy.c_str(), 100 * r.hit_rate(), r.policy == "belady" ? "" : of_min.c_str(), r.decode_bytes_per_token() / (1 << 20),
                          unused, pred_text);
            std::fputs(line, stdout);
        };
        for (size_t i = 0; i < row.policies.size(); ++i) print(row.policies[i], i == 0);
        print(row.belady, false);
    }
    if (h.cache_bytes) {
        std::printf("\nrecorded run: %s at %s: hit %.2f%%, %.3f MiB read per decode token", h.policy.c_str(),
                    human_bytes(static_cast<double>(h.cache_bytes)).c_str(), 100 * recorded.hit_rate(),
                    recorded.decode_bytes_per_token() / (1 << 20));
        if (same_as_recorded)
            std::printf("; simulated: hit %.2f%%, %.3f MiB per decode token", 100 * same_as_recorded->hit_rate(),
                        same_as_recorded->decode_bytes_per_token() / (1 << 20));
        std::printf("\n");
    }
    if (pick)
        std::printf("recommended: %s (%.0f%% of the experts) with %s: %s\n", human_bytes(static_cast<double>(pick->budget)).c_str(),
                    100.0 * static_cast<double>(pick->budget) / static_cast<double>(w.total_expert_bytes), pick_policy->policy.c_str(),
                    disk > 0 ? "the smallest budget within 10% of the best predicted tok/s" : "the smallest budget within 10% of the best hit rate");
    return 0;
}

}  // namespace moe::cli

// `moestream profile`: run prompts through the model and record how often the router picks each expert.
// The hottest experts are what `--profile` keeps resident in the expert cache (and what a llama-server
// plan could put on GPUs instead of the leading-layers guess).
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "engine/forward/runner.h"
#include "engine/runtime/routing_trace.h"
#include "engine/sampler/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace moe::cli {

namespace {

// Selections per (layer, expert) from routing traces' route records: the traffic a server really saw.
std::vector<uint64_t> counts_from_traces(const RoutingTrace& t, uint64_t& tokens) {
    std::vector<uint64_t> totals(static_cast<size_t>(t.header.n_layer) * t.header.n_expert, 0);
    for (const auto& step : t.steps) {
        tokens += step.n_tokens;
        for (const auto& ev : step.events)
            if (ev.kind == 'R')
                for (uint16_t e : ev.experts) totals[static_cast<size_t>(ev.layer) * t.header.n_expert + e]++;
    }
    return totals;
}

// The hottest (layer, expert) pairs first, and every layer's counts.
int write_profile(const std::string& out, const std::string& source, size_t prompts, uint64_t tokens, uint32_t n_layer, uint32_t n_expert,
                  const std::vector<uint64_t>& totals) {
    struct Hot {
        uint32_t layer, expert;
        uint64_t count;
    };
    std::vector<Hot> hot;
    for (uint32_t l = 0; l < n_layer; ++l)
        for (uint32_t e = 0; e < n_expert; ++e)
            if (uint64_t c = totals[size_t{l} * n_expert + e]) hot.push_back({l, e, c});
    std::stable_sort(hot.begin(), hot.end(), [](const Hot& a, const Hot& b) { return a.count > b.count; });
    YAML::Emitter y;
    y << YAML::BeginMap << YAML::Key << "moestream_profile" << YAML::Value << 1 << YAML::Key << "model" << YAML::Value << source << YAML::Key
      << "prompts" << YAML::Value << prompts << YAML::Key << "tokens" << YAML::Value << tokens << YAML::Key << "layers" << YAML::Value << n_layer
      << YAML::Key << "experts" << YAML::Value << n_expert << YAML::Key << "counts" << YAML::Value << YAML::BeginSeq;
    for (uint32_t l = 0; l < n_layer; ++l) {
        std::vector<uint64_t> row(totals.begin() + static_cast<long>(size_t{l} * n_expert),
                                  totals.begin() + static_cast<long>(size_t{l + 1} * n_expert));
        y << YAML::Flow << row;
    }
    y << YAML::EndSeq << YAML::Key << "hottest" << YAML::Value << YAML::BeginSeq;
    for (const auto& h : hot)
        y << YAML::Flow << YAML::BeginMap << YAML::Key << "layer" << YAML::Value << h.layer << YAML::Key << "expert" << YAML::Value << h.expert
          << YAML::Key << "count" << YAML::Value << h.count << YAML::EndMap;
    y << YAML::EndSeq << YAML::EndMap;
    std::ofstream(out) << y.c_str() << "\n";
    std::cerr << "profile: " << prompts << " prompts, " << tokens << " tokens, " << hot.size() << " experts used; wrote " << out << "\n";
    return 0;
}

}  // namespace

int cmd_profile(const std::vector<std::string>& args) {
    std::string model_path, prompts_path, out;
    std::vector<std::string> traces;
    int gen = 16, threads = 2, n_ctx = 4096;
    EngineFlags ef;
    po::options_description opts("moestream profile options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model_path), "GGUF model (with --prompts)")(
        "prompts", po::value(&prompts_path), "text file, one prompt per line")(
        "trace", po::value(&traces)->multitoken(), "count routing traces (--routing-trace of run, serve, bench) instead of running prompts")(
        "tokens", po::value(&gen)->default_value(16), "tokens generated (greedy) after each prompt")(
        "threads,t", po::value(&threads)->default_value(2), "threads")("ctx", po::value(&n_ctx)->default_value(4096), "context")(
        "out", po::value(&out)->required(), "profile.yaml to write");
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
    if (!traces.empty() && vm.count("prompts")) throw CliError("give either --trace or --model with --prompts");
    if (traces.empty() && (model_path.empty() || prompts_path.empty())) throw CliError("give --model and --prompts, or --trace");
    if (!traces.empty()) {
        RoutingTrace t;
        try {
            t = read_routing_traces(traces);
        } catch (const RoutingTraceError& e) { throw CliError(e.what()); }
        uint64_t tokens = 0;
        const auto totals = counts_from_traces(t, tokens);
        return write_profile(out, traces.front(), 0, tokens, t.header.n_layer, t.header.n_expert, totals);
    }
    if (gen < 0 || gen > 100000) throw CliError("--tokens " + std::to_string(gen) + " is out of range");
    std::ifstream in(prompts_path);
    if (!in) throw CliError(prompts_path + ": cannot read");
    std::vector<std::string> prompts;
    for (std::string line; std::getline(in, line);)
        if (line.find_first_not_of(" \t\r") != std::string::npos) prompts.push_back(line);
    if (prompts.empty()) throw CliError(prompts_path + ": no prompts (one per line)");

    LoadedEngine le = load_engine(model_path, ef, static_cast<uint32_t>(n_ctx));
    auto tok = Tokenizer::from_gguf(le.file.meta());
    const auto& hp = le.model->hp;
    std::vector<uint64_t> totals(size_t{hp.n_layer} * hp.moe.n_expert, 0);
    uint64_t tokens = 0;
    for (const auto& p : prompts) {
        Runner r(*le.model, {.n_ctx = n_ctx,
                             .n_threads = threads,
                             .flavor = le.flavor,
                             .cache_type_k = le.kv_types.k,
                             .cache_type_v = le.kv_types.v,
                             .swa_full = le.swa_full});
        auto ids = tok->encode(p, true, true);
        if (ids.empty()) continue;
        if (static_cast<int>(ids.size()) + gen > n_ctx) ids.resize(static_cast<size_t>(std::max(1, n_ctx - gen)));
        r.eval(ids);
        for (int i = 0; i < gen; ++i) {
            int32_t next = argmax({r.logits(), static_cast<size_t>(r.n_vocab())});
            if (tok->is_eog(next)) break;
            r.eval(std::span<const int32_t>(&next, 1));
        }
        tokens += static_cast<uint64_t>(r.n_past());
        for (size_t i = 0; i < totals.size(); ++i) totals[i] += r.expert_selections()[i];
    }
    return write_profile(out, model_path, prompts.size(), tokens, hp.n_layer, hp.moe.n_expert, totals);
}

}  // namespace moe::cli

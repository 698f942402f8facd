// `moestream tokenize`, `run` and `bench`: the engine from the command line.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstring>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "engine/kernels/kernels.h"
#include "engine/model/model_facts.h"
#include "engine/forward/reference.h"
#include "engine/forward/runner.h"
#include "engine/forward/speculative.h"
#include "engine/sampler/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace moe::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int32_t> parse_token_list(const std::string& s) {
    std::vector<int32_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            size_t used = 0;
            long v = std::stol(item, &used);
            if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument("");
            out.push_back(static_cast<int32_t>(v));
        } catch (const std::exception&) { throw CliError("--tokens: '" + item + "' is not a token id"); }
    }
    if (out.empty()) throw CliError("--tokens is empty");
    return out;
}

std::string read_stdin() { return std::string(std::istreambuf_iterator<char>(std::cin), {}); }

struct Loaded {
    GgufModel file;
    std::unique_ptr<Model> model;
    kernels::Flavor flavor = kernels::default_flavor();
    kernels::KvCacheTypes kv_types;
    bool swa_full = false;
    bool streaming = false;
    std::shared_ptr<const Tokenizer> tok;
    std::string summary;
    std::string kernels;
};

Loaded load(const std::string& path, const EngineFlags& ef, uint32_t n_ctx) {
    Loaded l;
    LoadedEngine e = load_engine(path, ef, n_ctx);
    l.file = std::move(e.file);
    l.model = std::move(e.model);
    l.flavor = e.flavor;
    l.kv_types = e.kv_types;
    l.swa_full = e.swa_full;
    l.streaming = e.streaming;
    l.summary = e.summary;
    l.kernels = e.kernels;
    l.tok = Tokenizer::from_gguf(l.file.meta());
    if (l.tok->n_vocab() != static_cast<int32_t>(l.model->hp.n_vocab))
        throw CliError(path + ": the tokenizer has " + std::to_string(l.tok->n_vocab()) + " tokens, the model " +
                       std::to_string(l.model->hp.n_vocab));
    return l;
}

// A piece can be a fragment of a UTF-8 character (byte tokens): its exact bytes go beside the text, and the
// text is printed with U+FFFD for the invalid bytes, as llama.cpp's outputs do.
json piece_json(const Tokenizer& tok, int32_t id) {
    const std::string piece = tok.piece(id, true);
    return {{"id", id}, {"piece", piece}, {"bytes", std::vector<uint8_t>(piece.begin(), piece.end())}};
}

std::string json_text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json top_json(const Tokenizer& tok, std::span<const float> logits, int n) {
    json arr = json::array();
    for (auto [id, p] : top_probs(logits, n)) {
        json e = piece_json(tok, id);
        e["logit"] = logits[id];
        e["prob"] = p;
        arr.push_back(std::move(e));
    }
    return arr;
}

}  // namespace

int cmd_tokenize(const std::vector<std::string>& args) {
    std::string model, prompt;
    bool as_json = false, no_special = false, no_bos = false;
    po::options_description opts("moestream tokenize options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model)->required(), "GGUF model or vocab file")(
        "prompt,p", po::value(&prompt), "text (default: standard input)")("json", po::bool_switch(&as_json), "JSON output")(
        "no-special", po::bool_switch(&no_special), "treat control-token text as plain text")("no-bos", po::bool_switch(&no_bos), "never add BOS");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (!vm.count("prompt")) prompt = read_stdin();
    auto tok = Tokenizer::from_gguf(read_gguf_header(model));
    auto ids = tok->encode(prompt, !no_bos, !no_special);
    if (as_json) {
        json out = {{"tokens", ids}, {"pieces", json::array()}};
        for (int32_t id : ids) out["pieces"].push_back(tok->token_text(id));
        std::cout << json_text(out) << "\n";
    } else {
        for (int32_t id : ids) std::cout << id << " -> '" << tok->piece(id, true) << "'\n";
        std::cout << ids.size() << " tokens\n";
    }
    return 0;
}

int cmd_run(const std::vector<std::string>& args) {
    std::string model_path, prompt, token_list;
    int n_predict = 32, threads = 2, n_ctx = 4096, top_n = 5;
    bool as_json = false, score = false, use_ref = false, no_bos = false;
    std::string draft = "off", draft_reference;
    int draft_max = 8, draft_min = 0;
    SamplerParams sp;
    EngineFlags ef;
    po::options_description opts("moestream run options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model_path)->required(), "GGUF model")(
        "prompt,p", po::value(&prompt), "prompt text")("tokens", po::value(&token_list), "prompt as token ids: 1,2,3")(
        "n-predict,n", po::value(&n_predict)->default_value(32), "tokens to generate")("temp", po::value(&sp.temperature)->default_value(0.f),
                                                                                       "temperature (0: greedy)")(
        "top-k", po::value(&sp.top_k)->default_value(40), "top-k (0: off)")("top-p", po::value(&sp.top_p)->default_value(0.95f), "top-p (1: off)")(
        "min-p", po::value(&sp.min_p)->default_value(0.05f), "min-p (0: off)")("repeat-penalty", po::value(&sp.repeat_penalty)->default_value(1.f),
                                                                               "repetition penalty (1: off)")(
        "seed", po::value(&sp.seed)->default_value(0), "sampling seed")("threads,t", po::value(&threads)->default_value(2), "threads")(
        "ctx,c", po::value(&n_ctx)->default_value(4096), "context positions")(
        "json", po::bool_switch(&as_json), "JSON: token ids and top probabilities per step")("top", po::value(&top_n)->default_value(5),
                                                                                             "entries per step in --json/--score output")(
        "score", po::bool_switch(&score), "feed the whole prompt and print the top entries after every position (JSON)")(
        "ref", po::bool_switch(&use_ref), "use the scalar reference forward (slow; for checking)")("no-bos", po::bool_switch(&no_bos),
                                                                                                   "do not add BOS to a text prompt")(
        "draft", po::value(&draft)->default_value("off"),
        "speculative decoding: auto (prompt-lookup drafts as the measured cost pays) | lookup (always) | mtp (the file's NextN block, as "
        "the measured cost pays) | off")("draft-min", po::value(&draft_min)->default_value(0),
                                         "auto / mtp: at least this many drafts a step, whatever the measured cost")(
        "draft-max", po::value(&draft_max)->default_value(8), "most drafted tokens one step verifies (1..64)")(
        "draft-reference", po::value(&draft_reference),
        "benchmarks: drafts are these token ids (1,2,3: a previous run's output) after the tokens generated so far, "
        "--draft-max of them every step (perfect drafts when it is this run's own greedy output)");
    add_engine_options(opts, ef);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (vm.count("prompt") == vm.count("tokens")) throw CliError("give exactly one of -p TEXT and --tokens IDS");
    if (n_predict < 0 || n_predict > 1'000'000) throw CliError("-n " + std::to_string(n_predict) + " is out of range");
    if (threads < 1 || threads > 1024) throw CliError("--threads " + std::to_string(threads) + " is out of range");
    ef.threads = threads;
    if (top_n < 1 || top_n > 1000) throw CliError("--top " + std::to_string(top_n) + " is out of range (1..1000)");
    const DraftMode draft_mode = parse_draft_flags(draft, draft_max, draft_min);
    const std::vector<int32_t> reference = draft_reference.empty() ? std::vector<int32_t>{} : parse_token_list(draft_reference);
    if (!reference.empty() && draft_mode != DraftMode::Lookup) throw CliError("--draft-reference needs --draft lookup (drafts every step)");
    if (use_ref && draft_mode != DraftMode::Off) throw CliError("--draft verifies on the fast forward; drop --ref");

    draft_flags_to_engine(draft_mode, ef);
    Loaded L = load(model_path, ef, static_cast<uint32_t>(std::max(1, n_ctx)));
    const auto& hp = L.model->hp;
    if (n_ctx < 1 || static_cast<uint32_t>(n_ctx) > std::max<uint32_t>(hp.n_ctx_train, 1u << 20))
        throw CliError("--ctx " + std::to_string(n_ctx) + " is out of range");
    std::vector<int32_t> prompt_ids = vm.count("tokens") ? parse_token_list(token_list) : L.tok->encode(prompt, !no_bos, true);
    if (prompt_ids.empty()) throw CliError("the prompt is empty");
    for (int32_t id : prompt_ids)
        if (id >= static_cast<int32_t>(hp.n_vocab))
            throw CliError("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(hp.n_vocab) + " tokens)");
    if (prompt_ids.size() + static_cast<size_t>(score ? 0 : n_predict) > static_cast<size_t>(n_ctx))
        throw CliError("the prompt (" + std::to_string(prompt_ids.size()) + " tokens) plus -n " + std::to_string(n_predict) +
                       " does not fit the context of " + std::to_string(n_ctx) + " positions (--ctx)");

    // Both paths behind one small interface: evaluate tokens, read logits.
    if (use_ref && !ef.routing_trace.empty()) throw CliError("--routing-trace records the fast forward; drop --ref");
    std::unique_ptr<RoutingTraceWriter> trace;
    std::unique_ptr<Runner> runner;
    std::unique_ptr<MtpDraft> mtp;
    RefState ref_state;
    std::vector<float> ref_logits;
    std::vector<std::vector<float>> ref_all;
    if (use_ref) {
        ref_state = make_ref_state(*L.model, n_ctx, L.flavor, L.kv_types);
        ref_logits.resize(hp.n_vocab);
    } else {
        trace = open_routing_trace(ef, L.file, *L.model);
        RunnerOptions ro{.n_ctx = n_ctx,
                         .n_threads = threads,
                         .flavor = L.flavor,
                         .routing_trace = trace.get(),
                         .cache_type_k = L.kv_types.k,
                         .cache_type_v = L.kv_types.v,
                         .swa_full = L.swa_full};
        runner = std::make_unique<Runner>(*L.model, ro);
        if (L.model->mtp) {
            mtp = std::make_unique<MtpDraft>(*L.model, ro);
            runner->set_hidden_sink(mtp->hidden_sink());
        }
    }
    auto eval = [&](std::span<const int32_t> toks, bool all) {
        if (runner) return runner->eval(toks, all);
        // The reference is told what the fast path's batches and threads would be (llama.cpp splits a long
        // attention row into one chunk per thread, and converts a large batch's rows by the threads' share).
        const size_t kBatch = static_cast<size_t>(RunnerOptions{}.n_batch);
        ref_all.clear();
        for (size_t i = 0; i < toks.size(); ++i) {
            const int n = static_cast<int>(std::min(kBatch, toks.size() - i / kBatch * kBatch)), index = static_cast<int>(i % kBatch);
            forward_ref(*L.model, ref_state, toks[i], ref_logits.data(),
                        {.n_tok = n, .index = index, .n_out = all ? n : 1, .out_index = all ? index : 0, .n_threads = threads});
            if (all) ref_all.push_back(ref_logits);
        }
    };
    auto logits_at = [&](int i) -> std::span<const float> {
        if (runner) return {runner->logits(i), hp.n_vocab};
        return i < 0 ? std::span<const float>(ref_logits) : std::span<const float>(ref_all[i]);
    };

    if (score) {
        auto t0 = Clock::now();
        eval(prompt_ids, true);
        double dt = seconds_since(t0);
        json out = {{"tokens", prompt_ids}, {"positions", json::array()}, {"seconds", dt}};
        for (size_t i = 0; i < prompt_ids.size(); ++i)
            out["positions"].push_back({{"pos", i}, {"top", top_json(*L.tok, logits_at(static_cast<int>(i)), top_n)}});
        std::cout << json_text(out) << "\n";
        return 0;
    }

    Sampler sampler(sp);
    std::vector<int32_t> history = prompt_ids, generated;
    json steps = json::array();
    StreamDecoder stream(*L.tok);
    auto t0 = Clock::now();
    eval(prompt_ids, false);
    const double t_prompt = seconds_since(t0);
    // Generation's expert work: distinct experts fetched per batch (a verification batch's union counts once)
    // and bytes read from disk.
    const ExpertSourceStats io_before = L.model->experts->stats();
    const uint64_t loads_before = runner ? runner->stats().expert_loads : 0;
    auto t1 = Clock::now();
    bool stopped_eog = false;
    // Each token as it is chosen (history already holds it); false once generation is over.
    auto emit = [&](int32_t next, std::span<const float> logits) {
        if (as_json) {
            json step = piece_json(*L.tok, next);
            step["top"] = top_json(*L.tok, logits, top_n);
            steps.push_back(std::move(step));
        }
        generated.push_back(next);
        if (L.tok->is_eog(next)) {
            stopped_eog = true;
            return false;
        }
        if (!as_json) std::cout << stream.push(next) << std::flush;
        return static_cast<int>(generated.size()) < n_predict;
    };
    Drafter drafter(draft_mode, draft_max, step_cost_of(model_facts(L.file), L.streaming));
    drafter.use_mtp(mtp.get(), 0);
    drafter.set_min_drafts(draft_min);
    bool more = false;
    if (n_predict > 0) {
        history.push_back(sampler.sample(logits_at(-1), history));
        more = emit(history.back(), logits_at(-1));
    }
    while (more) {
        if (!runner) {  // the reference: one token at a time
            eval(std::span<const int32_t>(&history.back(), 1), false);
            history.push_back(sampler.sample(logits_at(-1), history));
            more = emit(history.back(), logits_at(-1));
            continue;
        }
        // Drafts never run past -n or the context: a step yields its kept drafts and one token more.
        const int limit = std::min(n_predict - static_cast<int>(generated.size()), n_ctx - runner->n_past()) - 1;
        std::vector<int32_t> drafts;
        if (!reference.empty()) {
            const size_t from = std::min(generated.size(), reference.size());
            drafts.assign(reference.begin() + static_cast<long>(from),
                          reference.begin() +
                              static_cast<long>(std::min(reference.size(), from + static_cast<size_t>(std::max(0, std::min(limit, draft_max))))));
        } else {
            drafts = drafter.propose(history, limit);
        }
        more = !drafter.step(*runner, sampler, history, drafts, emit).stopped;
    }
    const double t_gen = seconds_since(t1);
    const double pp = prompt_ids.size() / std::max(t_prompt, 1e-9);
    const double tg = generated.size() > 1 ? (generated.size() - 1) / std::max(t_gen, 1e-9) : 0.0;
    if (as_json) {
        json out = {{"prompt_tokens", prompt_ids},
                    {"tokens", generated},
                    {"text", L.tok->decode(generated)},
                    {"stopped_eog", stopped_eog},
                    {"steps", steps},
                    {"timings", {{"prompt_tokens_per_s", pp}, {"gen_tokens_per_s", tg}, {"prompt_s", t_prompt}, {"gen_s", t_gen}}},
                    {"draft", draft_json(drafter)},
                    {"generation_experts",
                     {{"expert_loads", runner ? runner->stats().expert_loads - loads_before : 0},
                      {"bytes_read", L.model->experts->stats().bytes_read - io_before.bytes_read}}},
                    {"kernels", kernels::isa_name(kernels::active_table(L.flavor).isa)},
                    {"numerics", kernels::flavor_name(L.flavor)},
                    {"kernels_why", L.kernels},
                    {"reference", use_ref}};
        std::cout << json_text(out) << "\n";
    } else {
        std::cout << stream.flush() << "\n";
        std::cerr << L.summary << "\n" << L.kernels << "\n";
        std::cerr << "prompt: " << prompt_ids.size() << " tokens, " << pp << " tok/s | generation: " << generated.size() << " tokens, " << tg
                  << " tok/s | kernels: " << kernels::isa_name(kernels::active_table(L.flavor).isa) << (use_ref ? " (reference)" : "") << "\n";
        if (draft_mode != DraftMode::Off) {
            const DraftStats& d = drafter.stats();
            std::cerr << "drafts (" << draft_mode_name(draft_mode) << "): " << d.accepted << " of " << d.drafted << " kept over " << d.steps
                      << " verification steps\n";
        }
    }
    return 0;
}

}  // namespace moe::cli

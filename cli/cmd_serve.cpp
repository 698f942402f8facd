// `moestream serve`: the OpenAI-compatible endpoint. Listens first (so /health says 503 while loading),
// loads the model, then serves until SIGTERM/SIGINT. Talks sd_notify when started by systemd.
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <atomic>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/server/generation.h"
#include "engine/server/http_server.h"
#include "engine/server/prompt_cache.h"
#include "engine/runtime/routing_trace.h"
#include "engine/server/api_service.h"
#include "engine/model/model_facts.h"
#include "tune/plan_io.h"
#include <cstring>
#include "engine/tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace moe::cli {
namespace {

bool is_loopback(const std::string& host) { return host == "127.0.0.1" || host == "::1" || host.rfind("127.", 0) == 0 || host == "localhost"; }

std::string read_key_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw CliError("--api-key-file " + path + ": cannot read");
    std::string key;
    std::getline(f, key);
    while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
    if (key.empty()) throw CliError("--api-key-file " + path + ": the first line is empty");
    return key;
}

std::string status_field(const char* name) {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind(name, 0) == 0) {
            const size_t v = line.find_first_not_of(" \t", std::strlen(name));
            return v == std::string::npos ? "" : line.substr(v);
        }
    return "";
}

// What the web page shows beside the measured figures: this server's configuration and its plan's decisions.
nlohmann::json engine_view_config(const std::string& name, const LoadedEngine& engine, const EngineFlags& ef, const std::string& plan_path,
                                  int threads, int parallel, int n_ctx) {
    const ModelFacts facts = model_facts(engine.file);
    nlohmann::json c = {{"model", name},
                        {"arch", facts.arch},
                        {"threads", threads},
                        {"parallel", parallel},
                        {"n_ctx", n_ctx},
                        {"resident_bytes", facts.resident_bytes},
                        {"kv_bytes", facts.kv_bytes(static_cast<uint32_t>(n_ctx), engine.kv_types) * static_cast<uint64_t>(parallel)},
                        {"cache_types", kernels::kv_cache_type_name(engine.kv_types.k) + "/" + kernels::kv_cache_type_name(engine.kv_types.v)},
                        {"expert_bytes", facts.expert_bytes},
                        {"expert_cache_bytes", engine.streaming ? engine.cache_bytes : facts.expert_bytes},
                        {"streaming", engine.streaming},
                        {"experts", engine.summary},
                        {"kernels", engine.kernels},
                        {"cpus_allowed", status_field("Cpus_allowed_list:")},
                        {"mems_allowed", status_field("Mems_allowed_list:")}};
    if (!ef.ram_budget.empty()) c["ram_budget_bytes"] = parse_bytes("--ram-budget", ef.ram_budget);
    if (!plan_path.empty()) {
        const Plan p = load_plan(plan_path);
        c["plan"] = {{"path", plan_path},
                     {"threads", p.threads},
                     {"cpus", p.cpus},
                     {"ram_budget_bytes", p.ram_budget_bytes},
                     {"kv_bytes", p.kv_bytes},
                     {"expert_cache_bytes", p.expert_cache_bytes},
                     {"predicted_tok_s", p.predicted_tok_s},
                     {"disk_bytes_per_s", p.disk_bytes_per_s},
                     {"io_queue_depth", p.io_queue_depth},
                     {"read_size", p.read_size},
                     {"parallel", p.parallel}};
        c["plan"]["membind_node"] = p.membind_node ? nlohmann::json(*p.membind_node) : nlohmann::json(nullptr);
    }
    return c;
}

}  // namespace

int cmd_serve(const std::vector<std::string>& args) {
    std::string model_path, host = "127.0.0.1", alias, api_key, key_file, port_file;
    EngineFlags ef;
    int parallel = 1;
    int port = 8000, threads = 2, n_ctx = 4096, max_queue = 16, max_tokens = 256, checkpoints = ModelFacts::kDefaultCheckpoints;
    size_t max_body = 4u << 20;
    HttpServerOptions http_opt;
    std::string reasoning_format = "deepseek", plan_path, prompt_cache_dir, prompt_cache_size = "8G", prompt_cache_rate = "128M";
    int prompt_cache_min = 256, draft_max = 8, draft_min = 0;
    std::string draft = "off";
    po::options_description opts("moestream serve options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model_path)->required(), "GGUF model")(
        "host", po::value(&host)->default_value("127.0.0.1"), "address to bind")("port", po::value(&port)->default_value(8000),
                                                                                 "port (0: any free port; see --port-file)")(
        "alias", po::value(&alias), "model id reported by /v1/models (default: general.name)")(
        "api-key", po::value(&api_key), "require Authorization: Bearer KEY (also MOESTREAM_API_KEY)")(
        "api-key-file", po::value(&key_file), "read the key from the first line of this file")(
        "threads,t", po::value(&threads)->default_value(2), "threads")("ctx,c", po::value(&n_ctx)->default_value(4096), "context positions")(
        "parallel", po::value(&parallel)->default_value(1),
        "slots: requests generated at once, their decode steps batched (each slot holds a KV cache of --ctx)")(
        "max-queue", po::value(&max_queue)->default_value(16), "requests waiting beyond those in slots (then 503)")(
        "ctx-checkpoints", po::value(&checkpoints)->default_value(ModelFacts::kDefaultCheckpoints),
        "recurrent models: state snapshots kept for prefix reuse (0: none; a changed prefix then re-evaluates from the start)")(
        "prompt-cache", po::value(&prompt_cache_dir),
        "directory where long prompt prefixes' KV caches are saved in the background and restored after a restart")(
        "prompt-cache-size", po::value(&prompt_cache_size)->default_value("8G"),
        "bytes the prompt cache may take on disk (least recently used dropped)")(
        "prompt-cache-rate", po::value(&prompt_cache_rate)->default_value("128M"), "bytes per second the prompt cache writes at most (0: unbounded)")(
        "prompt-cache-min", po::value(&prompt_cache_min)->default_value(256), "new prompt tokens a prefix must add to be saved")(
        "draft", po::value(&draft)->default_value("off"),
        "speculative decoding: auto (prompt-lookup drafts as the measured cost pays) | lookup (always) | mtp (the file's NextN block, as "
        "the measured cost pays) | off")("draft-min", po::value(&draft_min)->default_value(0),
                                         "auto / mtp: at least this many drafts a step, whatever the measured cost")(
        "draft-max", po::value(&draft_max)->default_value(8), "most drafted tokens one step verifies (1..64)")(
        "max-body", po::value(&max_body)->default_value(4u << 20), "largest request body in bytes (then 413)")(
        "max-tokens", po::value(&max_tokens)->default_value(256), "default max_tokens")(
        "plan", po::value(&plan_path), "plan.yaml this server runs (moestream plan): the web page shows its decisions beside the measured figures")(
        "reasoning-format", po::value(&reasoning_format)->default_value("deepseek"),
        "deepseek: think blocks returned as reasoning_content (Anthropic: thinking blocks); none: left in the answer")(
        "max-connections", po::value(&http_opt.max_connections)->default_value(128), "open connections (then the longest-idle one is closed)")(
        "max-connections-per-client", po::value(&http_opt.max_connections_per_client)->default_value(32), "open connections per client address")(
        "header-timeout", po::value(&http_opt.header_timeout_s)->default_value(10), "seconds to receive a request's header")(
        "body-timeout", po::value(&http_opt.body_timeout_s)->default_value(60), "seconds to receive a request's body, at most")(
        "body-grace", po::value(&http_opt.body_grace_s)->default_value(10), "seconds a body has before --min-body-rate applies")(
        "min-body-rate", po::value(&http_opt.min_body_rate)->default_value(500), "bytes per second a body must keep up after --body-grace (0: off)")(
        "idle-timeout", po::value(&http_opt.idle_timeout_s)->default_value(60), "seconds a keep-alive connection may wait for its next request")(
        "port-file", po::value(&port_file), "write the bound port here once listening");
    add_engine_options(opts, ef);
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (port < 0 || port > 65535) throw CliError("--port " + std::to_string(port) + " is not a port");
    if (parallel < 1 || parallel > 256) throw CliError("--parallel " + std::to_string(parallel) + " is out of range (1..256)");
    if (threads < 1 || threads > 1024) throw CliError("--threads " + std::to_string(threads) + " is out of range");
    ef.threads = threads;
    if (max_queue < 0 || max_queue > 100000) throw CliError("--max-queue " + std::to_string(max_queue) + " is out of range");
    if (checkpoints < 0 || checkpoints > 1024) throw CliError("--ctx-checkpoints " + std::to_string(checkpoints) + " is out of range (0..1024)");
    PromptCacheOptions pc_opt{.dir = prompt_cache_dir,
                              .max_bytes = parse_bytes("--prompt-cache-size", prompt_cache_size),
                              .write_bytes_per_s = parse_bytes("--prompt-cache-rate", prompt_cache_rate),
                              .min_tokens = prompt_cache_min,
                              .disk_busy = {}};
    const DraftMode draft_mode = parse_draft_flags(draft, draft_max, draft_min);
    if (prompt_cache_min < 1) throw CliError("--prompt-cache-min " + std::to_string(prompt_cache_min) + " must be at least 1");
    if (!plan_path.empty()) {
        // Only the web page reads the plan: an unreadable one is reported and serving goes on without it.
        try {
            load_plan(plan_path);
        } catch (const std::exception& e) {
            std::cerr << "moestream serve: WARNING: --plan: " << e.what() << " (the web page shows no plan)\n";
            plan_path.clear();
        }
    }
    if (reasoning_format != "deepseek" && reasoning_format != "none")
        throw CliError("--reasoning-format " + reasoning_format + " is not deepseek or none");
    if (http_opt.max_connections < 1 || http_opt.max_connections > 100000)
        throw CliError("--max-connections " + std::to_string(http_opt.max_connections) + " is out of range");
    if (http_opt.max_connections_per_client < 1) throw CliError("--max-connections-per-client must be at least 1");
    for (const auto& [name, v] : {std::pair{"--header-timeout", http_opt.header_timeout_s},
                                  {"--body-timeout", http_opt.body_timeout_s},
                                  {"--idle-timeout", http_opt.idle_timeout_s},
                                  {"--body-grace", http_opt.body_grace_s}})
        if (!(v > 0 && v <= 86400)) throw CliError(std::string(name) + " " + std::to_string(v) + " is out of range (0, 86400]");
    if (!(http_opt.min_body_rate >= 0)) throw CliError("--min-body-rate " + std::to_string(http_opt.min_body_rate) + " must be 0 or more");
    if (!key_file.empty()) api_key = read_key_file(key_file);
    if (api_key.empty())
        if (const char* env = std::getenv("MOESTREAM_API_KEY")) api_key = env;
    if (!is_loopback(host) && api_key.empty())
        std::cerr << "moestream serve: WARNING: listening on " << host << " without an API key: anyone who can reach this "
                  << "address can use the model (set --api-key, --api-key-file or MOESTREAM_API_KEY)\n";

    // Signals are taken by one thread (sigwait), so block them before any thread starts.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    GgufModel file = open_gguf_model(model_path);  // header: name and template now, weights after listen
    auto tok = Tokenizer::from_gguf(file.meta());
    const std::string name = alias.empty() ? file.meta().get_string("general.name").value_or("moestream") : alias;
    ApiOptions api{.alias = name,
                   .model_file = model_path,
                   .api_key = api_key,
                   .family = chat_family_of(file.meta().get_string("tokenizer.chat_template").value_or(""),
                                            file.meta().get_string("general.architecture").value_or("")),
                   .bos_text = tok->bos() >= 0 ? tok->token_text(tok->bos()) : "",
                   .max_tokens_default = max_tokens,
                   .split_reasoning = reasoning_format != "none"};
    ApiService service(api, tok, nullptr);
    std::atomic<Generator*> served{nullptr};
    service.extra_metrics = [&]() -> std::string {
        Generator* g = served.load();
        if (!g) return "";
        const auto st = g->expert_stats();
        std::string m;
        auto metric = [&](const char* name, const char* type, const char* help, double v) { m += prometheus_metric(name, type, help, v); };
        metric("moestream_expert_cache_hits_total", "counter", "Expert lookups served from RAM.", static_cast<double>(st.hits));
        metric("moestream_expert_cache_misses_total", "counter", "Expert lookups that read from disk.", static_cast<double>(st.misses));
        metric("moestream_expert_bytes_read_total", "counter", "Expert bytes read from disk.", static_cast<double>(st.bytes_read));
        metric("moestream_expert_read_wait_seconds_total", "counter", "Time decode waited for expert reads.", st.wait_ns / 1e9);
        metric("moestream_expert_read_gbps", "gauge", "Expert bytes read per second of waiting (GB/s).",
               st.wait_ns ? static_cast<double>(st.bytes_read) / static_cast<double>(st.wait_ns) : 0.0);
        metric("moestream_expert_prefetch_issued_total", "counter", "Speculative expert reads.", static_cast<double>(st.prefetch_issued));
        metric("moestream_expert_prefetch_used_total", "counter", "Speculative reads the router then asked for.",
               static_cast<double>(st.prefetch_used));
        metric("moestream_expert_read_requests_total", "counter", "I/O requests submitted for experts.", static_cast<double>(st.reads_submitted));
        metric("moestream_expert_store_loads_total", "counter", "Experts read as one record of the expert store (moestream repack).",
               static_cast<double>(st.store_loads));
        metric("moestream_expert_store_bad_records_total", "counter", "Expert store records that failed their checksum (read from the GGUF instead).",
               static_cast<double>(st.store_bad_records));
        if (const PromptCache* pc = g->prompt_cache()) m += prompt_cache_metrics(*pc, g->prompt_seconds_per_token());
        return m + g->request_io_metrics();
    };
    http_opt.host = host;
    http_opt.port = port;
    http_opt.max_body_bytes = max_body;
    HttpServer server(http_opt, [&](const HttpRequest& rq, HttpResponder& rs) { service.handle(rq, rs); });
    try {
        server.listen();
    } catch (const std::runtime_error& e) { throw CliError(e.what()); }
    if (!port_file.empty()) std::ofstream(port_file) << server.port() << "\n";
    std::cerr << "moestream serve: listening on " << host << ":" << server.port() << " (model loading; /health is 503 until ready)\n";
    std::thread http([&] { server.run(); });

    // Loading: tell systemd it may take a while (assume 200 MB/s as a floor for reading the weights).
    const uint64_t load_us = std::max<uint64_t>(30'000'000, file.total_bytes() / 200 * 1);
    sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=loading %s", static_cast<unsigned long long>(load_us), model_path.c_str());
    LoadedEngine engine;
    std::unique_ptr<RoutingTraceWriter> trace;      // before gen: outlives the runner that writes it
    std::unique_ptr<RoutingWindow> recent_routing;  // the engine view's live bound (streaming only); forwards to trace
    std::unique_ptr<PromptCache> prompt_cache;      // before gen: its writer reads the slots' rows until gen ends it
    std::unique_ptr<Generator> gen;
    try {
        draft_flags_to_engine(draft_mode, ef);
        engine = load_engine(model_path, ef, static_cast<uint32_t>(n_ctx), parallel);
        if (tok->n_vocab() != static_cast<int32_t>(engine.model->hp.n_vocab)) throw CliError("tokenizer and model disagree on the vocabulary size");
        std::cerr << "moestream serve: " << engine.summary << "\n"
                  << "moestream serve: " << engine.kernels << "\n";
        trace = open_routing_trace(ef, engine.file, *engine.model);
        RoutingRecorder* recorder = trace.get();
        if (engine.streaming && (recent_routing = open_routing_window(ef, engine.file, *engine.model, trace.get()))) recorder = recent_routing.get();
        gen = std::make_unique<Generator>(*engine.model, tok,
                                          RunnerOptions{.n_ctx = n_ctx,
                                                        .n_threads = threads,
                                                        .flavor = engine.flavor,
                                                        .max_checkpoints = checkpoints,
                                                        .n_seq = parallel,
                                                        .routing_trace = recorder,
                                                        .cache_type_k = engine.kv_types.k,
                                                        .cache_type_v = engine.kv_types.v,
                                                        .swa_full = engine.swa_full},
                                          static_cast<size_t>(max_queue));
        // Streaming, an extra row's experts are mostly new reads: assume a whole step until measured.
        if (draft_mode != DraftMode::Off) gen->use_drafts(draft_mode, draft_max, step_cost_of(model_facts(engine.file), engine.streaming), draft_min);
        if (!prompt_cache_dir.empty()) {
            // Serving goes on without it when DIR cannot be used: a cold prompt is slower, not wrong.
            try {
                if (engine.streaming) pc_opt.disk_busy = [g = gen.get()] { return g->busy(); };
                prompt_cache = std::make_unique<PromptCache>(pc_opt, routing_model_hash(engine.file),
                                                             SequenceCache::make(*engine.model, 1, engine.kv_types),
                                                             [](const std::string& line) { std::cerr << "moestream serve: " << line << "\n"; });
                gen->use_prompt_cache(prompt_cache.get());
            } catch (const std::exception& e) {  // PromptCacheError, or the directory failing while it is listed
                std::cerr << "moestream serve: WARNING: " << e.what() << ": serving without a prompt cache\n";
            }
        }
    } catch (...) {
        server.stop();
        http.join();
        throw;
    }
    served = gen.get();
    service.set_generator(gen.get());
    nlohmann::json view_config = engine_view_config(name, engine, ef, plan_path, threads, parallel, n_ctx);
    if (prompt_cache) view_config["prompt_cache"] = {{"dir", prompt_cache_dir}, {"limit_bytes", pc_opt.max_bytes}};
    view_config["draft"] = draft_mode_name(draft_mode);
    EngineMonitor monitor(gen.get(), view_config, {engine.model->hp.n_layer, engine.model->hp.moe.n_expert},
                          ef.profile.empty() ? std::vector<std::pair<uint32_t, uint32_t>>{} : read_profile(ef.profile), recent_routing.get());
    service.set_monitor(&monitor);
    service.set_disk_health(engine.disk_health);
    service.set_ready(true);
    sd_notify(0, "READY=1\nSTATUS=serving");
    std::cerr << "moestream serve: ready: " << name << " (" << family_name(api.family) << " chat template) on " << host << ":" << server.port()
              << "\n";

    // Watchdog pings while serving, when the unit asks for them.
    uint64_t wd_usec = 0;
    std::atomic<bool> done{false};
    std::thread watchdog;
    if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0)
        watchdog = std::thread([&] {
            while (!done) {
                sd_notify(0, "WATCHDOG=1");
                for (uint64_t waited = 0; waited < wd_usec / 2 && !done; waited += 100'000) ::usleep(100'000);
            }
        });
    // systemd's status line follows the expert reads' health (`systemctl status` shows why requests fail).
    std::thread disk_status;
    if (engine.disk_health)
        disk_status = std::thread([&] {
            bool was_degraded = false;
            while (!done) {
                const DiskHealth::State d = engine.disk_health->state();
                if (d.degraded != was_degraded) {
                    was_degraded = d.degraded;
                    const std::string line = d.degraded ? "STATUS=degraded: " + d.reason : std::string("STATUS=serving");
                    sd_notify(0, line.c_str());
                    std::cerr << "moestream serve: " << (d.degraded ? "degraded: expert reads fail: " + d.reason : "expert reads succeed again")
                              << "\n";
                }
                ::usleep(200'000);
            }
        });
    std::thread signals([&] {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (done) return;
        std::cerr << "moestream serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ": finishing\n";
        sd_notify(0, "STOPPING=1");
        gen->shutdown();  // cancels the running generation, fails the queued ones with 503
        server.stop();
    });
    http.join();
    done = true;
    if (watchdog.joinable()) watchdog.join();
    if (disk_status.joinable()) disk_status.join();
    ::kill(::getpid(), SIGTERM);  // wake the signal thread if the server stopped another way
    signals.join();
    service.set_monitor(nullptr);
    monitor.stop();
    gen.reset();
    std::cerr << "moestream serve: stopped\n";
    return 0;
}

}  // namespace moe::cli

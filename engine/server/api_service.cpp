#include "engine/server/api_service.h"

#include <sstream>

#include "engine/server/web_page.h"

namespace moe {

namespace {

json openai_error(const ApiError& e) {
    json err = {{"message", e.message}, {"type", e.type}};
    err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
    err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
    return {{"error", err}};
}

// Anthropic's shape: {"type":"error","error":{"type":...,"message":...}} with its own type names.
json anthropic_error(const ApiError& e) {
    const char* type = e.status == 401   ? "authentication_error"
                       : e.status == 404 ? "not_found_error"
                       : e.status == 413 ? "request_too_large"
                       : e.status == 429 ? "rate_limit_error"
                       : e.status == 503 ? "overloaded_error"
                       : e.status >= 500 ? "api_error"
                                         : "invalid_request_error";
    return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

}  // namespace

bool keys_equal(const std::string& a, const std::string& b) {
    unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
    const std::string& longer = a.size() >= b.size() ? a : b;
    for (size_t i = 0; i < longer.size(); ++i) diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

bool SseStream::start(const std::string& opening) {
    std::lock_guard<std::mutex> lk(mu_);
    ok_ = res_.begin_stream("text/event-stream");
    if (ok_ && !opening.empty()) ok_ = res_.write_chunk(opening);
    if (ok_ && !held_.empty()) ok_ = res_.write_chunk(held_);
    held_.clear();
    started_ = true;
    return ok_;
}

bool SseStream::send(const std::string& event) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!started_) {
        held_ += event;
        return true;
    }
    ok_ = ok_ && res_.write_chunk(event);
    return ok_;
}

bool SseStream::ok() const {
    std::lock_guard<std::mutex> lk(mu_);
    return ok_;
}

ApiService::ApiService(ApiOptions opt, std::shared_ptr<const Tokenizer> tok, Generator* gen)
    : opt_(std::move(opt)), tok_(std::move(tok)), gen_(gen) {}

void ApiService::count(int status) {
    std::lock_guard<std::mutex> lk(status_mu_);
    by_status_[status]++;
}

void ApiService::handle(const HttpRequest& req, HttpResponder& res) {
    const bool anthropic = req.target.rfind("/v1/messages", 0) == 0;
    auto send_json = [&](int status, const json& body, const std::map<std::string, std::string>& extra = {}) {
        count(status);
        res.send(status, "application/json", wire(body), extra);
    };
    auto method = [&](const char* m) {
        if (req.method != m) throw ApiError{405, std::string("use ") + m, "invalid_request_error", "", ""};
    };
    try {
        if (req.target == "/" || req.target == "/index.html") {  // static; its data calls carry the key
            method("GET");
            count(200);
            return res.send(200, "text/html; charset=utf-8", web_page_html(),
                            {{"Content-Security-Policy",
                              "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'"},
                             {"X-Content-Type-Options", "nosniff"}});
        }
        if (req.target == "/favicon.ico") {  // browsers ask unprompted: no icon, and no 401 in their console
            count(204);
            return res.send(204, "image/x-icon", "");
        }
        if (req.target == "/health") {
            method("GET");
            if (!ready_) return send_json(503, {{"status", "loading"}});
            if (disk_health_) {
                const DiskHealth::State d = disk_health_->state();
                if (d.degraded) return send_json(503, {{"status", "degraded"}, {"error", d.reason}, {"failed_expert_loads", d.failed_loads}});
            }
            return send_json(200, {{"status", "ok"}});
        }
        if (!opt_.api_key.empty()) {
            // OpenAI clients send "Authorization: Bearer KEY", Anthropic's send "x-api-key: KEY"; either works.
            auto header = [&](const char* name) {
                auto it = req.headers.find(name);
                return it == req.headers.end() ? std::string() : it->second;
            };
            const bool bearer_ok = keys_equal(header("authorization"), "Bearer " + opt_.api_key);
            const bool x_key_ok = keys_equal(header("x-api-key"), opt_.api_key);
            if (!bearer_ok && !x_key_ok)
                throw ApiError{401, "missing or wrong API key (Authorization: Bearer <key> or x-api-key: <key>)", "invalid_request_error", "",
                               "invalid_api_key"};
        }
        if (req.target == "/metrics") {
            count(200);
            return res.send(200, "text/plain; version=0.0.4", metrics_text());
        }
        if (req.target == "/v1/models") {
            method("GET");
            return send_json(200, {{"object", "list"},
                                   {"data", json::array({{{"id", opt_.alias},
                                                          {"object", "model"},
                                                          {"created", 0},
                                                          {"owned_by", "moestream"},
                                                          {"type", "model"},
                                                          {"display_name", opt_.alias}}})}});
        }
        if (req.target == "/v1/engine/stats" || req.target == "/v1/engine/stats/stream") {
            method("GET");
            if (!monitor_.load()) throw ApiError{503, "the model is still loading", "server_error", "", ""};
            return engine_stats(res, req.target == "/v1/engine/stats/stream");
        }
        using Handler = void (ApiService::*)(const HttpRequest&, HttpResponder&);
        static const std::map<std::string, Handler> routes = {{"/v1/chat/completions", &ApiService::openai_chat},
                                                              {"/v1/completions", &ApiService::openai_completions},
                                                              {"/v1/messages", &ApiService::anthropic_messages},
                                                              {"/v1/messages/count_tokens", &ApiService::anthropic_count_tokens}};
        if (auto it = routes.find(req.target); it != routes.end()) {
            method("POST");
            if (!ready_) throw ApiError{503, "the model is still loading", "server_error", "", ""};
            return (this->*(it->second))(req, res);
        }
        throw ApiError{404, "no route " + req.method + " " + req.target, "invalid_request_error", "", ""};
    } catch (const ApiError& e) {
        std::map<std::string, std::string> extra;
        if (e.status == 503) extra["Retry-After"] = "1";
        if (e.status == 401) extra["WWW-Authenticate"] = "Bearer";
        send_json(e.status, anthropic ? anthropic_error(e) : openai_error(e), extra);
    }
}

void ApiService::check_model(const ordered_json& body) {
    if (!body.contains("model")) return;
    if (!body["model"].is_string()) throw bad("model must be a string", "model");
    const std::string m = body["model"].get<std::string>();
    const std::string base = opt_.model_file.substr(opt_.model_file.rfind('/') + 1);
    if (m != opt_.alias && m != base && m != opt_.model_file)
        throw ApiError{404, "model '" + m + "' does not exist; this server serves '" + opt_.alias + "'", "invalid_request_error", "model",
                       "model_not_found"};
}

RequestLimits ApiService::limits() const {
    RequestLimits l;
    l.n_ctx = gen_->n_ctx();
    l.max_tokens_default = opt_.max_tokens_default;
    return l;
}

GenerationRequest ApiService::generation_request(const ApiRequest& a) {
    GenerationRequest g;
    g.sampling = a.sampling;
    g.max_tokens = a.max_tokens;
    g.stop = a.stop;
    g.ignore_eos = a.ignore_eos;
    g.logprobs = a.logprobs;
    return g;
}

PreparedChat ApiService::prepare(const ChatInput& in, GenerationRequest& g, const std::string& param) {
    PreparedChat chat;
    try {
        chat = prepare_chat(in, format(), *tok_, gen_->recurrent());
    } catch (const GrammarError& e) { throw bad(std::string("response_format: ") + e.what(), "response_format"); }
    g.grammar = chat.grammar;
    const int n_ctx = gen_->n_ctx();
    if (static_cast<int>(chat.prompt.size()) + 1 > n_ctx)
        throw bad("the prompt has " + std::to_string(chat.prompt.size()) + " tokens; the context holds " + std::to_string(n_ctx), param,
                  "context_length_exceeded");
    g.prompt = chat.prompt;
    g.checkpoint_at = chat.checkpoint_at;
    g.shown_controls = chat.shown_controls;
    g.max_tokens = std::min(g.max_tokens, n_ctx - static_cast<int>(g.prompt.size()));
    return chat;
}

void ApiService::remember(const ChatOutputParser& parser, const PreparedChat& chat, const GenerationResult& r) {
    if (r.finish_reason == FinishReason::Cancelled || r.finish_reason == FinishReason::Error) return;
    if (chat.prefill.empty()) return gen_->remember_turn(turn_key(parser.content(), parser.calls()), r.tokens);
    // A forced call's opening sits in the prompt: the turn is the prompt's tail from the splice point on.
    if (chat.splice_from < 0) return;
    std::vector<int32_t> turn(chat.prompt.begin() + chat.splice_from, chat.prompt.end());
    turn.insert(turn.end(), r.tokens.begin(), r.tokens.end());
    gen_->remember_turn(turn_key(parser.content(), parser.calls()), turn);
}

std::optional<std::vector<int32_t>> ApiService::recall(const std::string& content, const std::vector<ToolCall>& calls) const {
    if (auto t = gen_->remembered_turn(turn_key(content, calls))) return t;
    return calls.empty() ? std::nullopt : gen_->remembered_turn(turn_key(strip_thinking(content), calls));
}

void ApiService::engine_stats(HttpResponder& res, bool stream) {
    EngineMonitor* m = monitor_.load();
    if (!stream) {
        count(200);
        return res.send(200, "application/json", wire(m->snapshot()));
    }
    count(200);
    if (!res.begin_stream("text/event-stream")) return;
    uint64_t seq = 0;
    // One event per sample until the client goes or the server stops (the monitor then stops too); a comment
    // line on quiet seconds finds a vanished client.
    for (;;) {
        if (res.client_gone()) break;
        const json sample = m->next_sample(seq, std::chrono::milliseconds(1500));
        if (!monitor_.load() || m->stopped()) break;
        if (!res.write_chunk(sample.is_null() ? ": idle\n\n" : "data: " + wire(sample) + "\n\n")) return;
        if (sample.is_null() && !ready_) break;
    }
    res.end_stream();
}

bool ApiService::ended_in_error(const GenerationResult& r, bool stream, SseStream& sse, const std::string& error_event) {
    if (r.finish_reason != FinishReason::Error && (r.finish_reason != FinishReason::Cancelled || r.error.empty())) return false;
    if (!stream) throw ApiError{r.finish_reason == FinishReason::Error ? 500 : 503, r.error, "server_error", "", ""};
    if (sse.ok()) sse.send(error_event);
    sse.end();
    return true;
}

GenerationResult ApiService::generate(GenerationRequest g, HttpResponder& res, SseStream* stream, const std::string& opening) {
    auto cancel = g.cancel;
    auto fut = gen_->submit(std::move(g));
    if (!fut) throw ApiError{503, "the request queue is full; retry shortly", "server_error", "", ""};
    if (stream) {
        if (!stream->start(opening)) cancel->store(true);
        count(200);
    }
    // Non-streaming: watch for the client going away while the worker computes.
    while (fut->wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
        if ((!stream && res.client_gone()) || (stream && !stream->ok())) cancel->store(true);
    return fut->get();
}

std::string ApiService::metrics_text() {
    std::ostringstream m;
    m << "# HELP moestream_ready 1 once the model is loaded.\n# TYPE moestream_ready gauge\nmoestream_ready " << (ready_ ? 1 : 0) << "\n";
    if (!gen_) return m.str();
    auto& s = gen_->stats();
    auto metric = [&](const char* name, const char* type, const char* help, double v) { m << prometheus_metric(name, type, help, v); };
    metric("moestream_prompt_tokens_total", "counter", "Prompt tokens received.", static_cast<double>(s.prompt_tokens.load()));
    metric("moestream_prompt_tokens_reused_total", "counter", "Prompt tokens taken from the KV cache.", static_cast<double>(s.prompt_reused.load()));
    metric("moestream_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.generated_tokens.load()));
    metric("moestream_generation_tokens_per_second", "gauge", "Decode speed of the last request.", s.last_tok_per_s.load());
    metric("moestream_queue_depth", "gauge", "Requests waiting for the generator.", static_cast<double>(gen_->queued()));
    metric("moestream_busy", "gauge", "1 while a generation runs.", gen_->busy() ? 1 : 0);
    metric("moestream_slots", "gauge", "Slots (--parallel): requests generated at once.", gen_->slots());
    metric("moestream_slots_busy", "gauge", "Slots generating now.", gen_->slots_busy());
    metric("moestream_grammar_tokens_total", "counter", "Tokens drawn under a grammar (response_format, forced tool calls).",
           static_cast<double>(s.grammar_tokens.load()));
    metric("moestream_grammar_masks_total", "counter", "Full vocabulary masks built (the drawn token was not allowed).",
           static_cast<double>(s.grammar_masks.load()));
    metric("moestream_grammar_seconds_total", "counter", "Time spent checking and masking tokens.", static_cast<double>(s.grammar_ns.load()) / 1e9);
    if (gen_->draft_mode() != DraftMode::Off) {
        metric("moestream_draft_steps_total", "counter", "Decode steps that verified drafted tokens.", static_cast<double>(s.draft_steps.load()));
        metric("moestream_draft_tokens_total", "counter", "Drafted tokens verified.", static_cast<double>(s.draft_tokens.load()));
        metric("moestream_draft_accepted_total", "counter", "Drafted tokens kept.", static_cast<double>(s.draft_accepted.load()));
    }
    const auto& rs = gen_->runner_stats();
    metric("moestream_expert_loads_total", "counter", "Experts fetched (once per batch each).", static_cast<double>(rs.expert_loads));
    metric("moestream_expert_activations_total", "counter", "Token-expert pairs computed.", static_cast<double>(rs.expert_activations));
    if (disk_health_) {
        const DiskHealth::State d = disk_health_->state();
        metric("moestream_disk_degraded", "gauge", "1 while expert reads fail (until one completes again).", d.degraded ? 1 : 0);
        metric("moestream_expert_load_failures_total", "counter", "Expert loads whose reads failed.", static_cast<double>(d.failed_loads));
        metric("moestream_store_read_fallbacks_total", "counter", "Expert store records that could not be read and came from the GGUF.",
               static_cast<double>(d.fallbacks));
    }
    if (extra_metrics) m << extra_metrics();
    m << "# HELP moestream_requests_total Requests answered, by HTTP status.\n# TYPE moestream_requests_total counter\n";
    std::lock_guard<std::mutex> lk(status_mu_);
    for (const auto& [status, n] : by_status_) m << "moestream_requests_total{status=\"" << status << "\"} " << n << "\n";
    return m.str();
}

}  // namespace moe

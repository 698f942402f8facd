#include "engine/server/openai_api.h"

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

namespace moe {

using json = nlohmann::json;

namespace {

// A request the client got wrong: status plus OpenAI's error fields.
struct ApiError {
    int status;
    std::string message, type, param, code;
};

ApiError bad(const std::string& msg, const std::string& param = "", const std::string& code = "") {
    return {400, msg, "invalid_request_error", param, code};
}

json error_body(const ApiError& e) {
    json err = {{"message", e.message}, {"type", e.type}};
    err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
    err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
    return {{"error", err}};
}

// Model output may hold bytes that are not UTF-8 (a byte-level vocabulary can emit any byte): replace them
// with U+FFFD rather than fail the response.
std::string wire(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string text_of(const json& content, const std::string& param) {
    if (content.is_string()) return content.get<std::string>();
    if (content.is_null()) return "";
    if (content.is_array()) {  // [{"type":"text","text":"..."}]
        std::string s;
        for (const auto& part : content) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
                throw bad(param + ": only text content parts are supported", param);
            s += part["text"].get<std::string>();
        }
        return s;
    }
    throw bad(param + " must be a string or an array of text parts", param);
}

template <typename T>
std::optional<T> number(const json& body, const char* key, T lo, T hi) {
    if (!body.contains(key) || body[key].is_null()) return std::nullopt;
    if (!body[key].is_number()) throw bad(std::string(key) + " must be a number", key);
    const double v = body[key].get<double>();
    if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)))
        throw bad(std::string(key) + " = " + body[key].dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", key);
    if constexpr (std::is_integral_v<T>)
        if (v != static_cast<double>(static_cast<T>(v))) throw bad(std::string(key) + " must be an integer", key);
    return static_cast<T>(v);
}

}  // namespace

bool keys_equal(const std::string& a, const std::string& b) {
    unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
    const std::string& longer = a.size() >= b.size() ? a : b;
    for (size_t i = 0; i < longer.size(); ++i)
        diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
    return diff == 0;
}

OpenAiService::OpenAiService(ApiOptions opt, std::shared_ptr<const Tokenizer> tok, Generator* gen)
    : opt_(std::move(opt)), tok_(std::move(tok)), gen_(gen) {}

void OpenAiService::count(int status) {
    std::lock_guard<std::mutex> lk(status_mu_);
    by_status_[status]++;
}

void OpenAiService::handle(const HttpRequest& req, HttpResponder& res) {
    auto send_json = [&](int status, const json& body, const std::map<std::string, std::string>& extra = {}) {
        count(status);
        res.send(status, "application/json", wire(body), extra);
    };
    try {
        if (req.target == "/health") {
            if (req.method != "GET") throw ApiError{405, "use GET", "invalid_request_error", "", ""};
            if (!ready_) return send_json(503, {{"status", "loading"}});
            return send_json(200, {{"status", "ok"}});
        }
        if (!opt_.api_key.empty()) {
            auto it = req.headers.find("authorization");
            const std::string given = it == req.headers.end() ? "" : it->second;
            if (!keys_equal(given, "Bearer " + opt_.api_key))
                throw ApiError{401, "missing or wrong API key (Authorization: Bearer <key>)", "invalid_request_error", "", "invalid_api_key"};
        }
        if (req.target == "/metrics") {
            count(200);
            return res.send(200, "text/plain; version=0.0.4", metrics_text());
        }
        if (req.target == "/v1/models") {
            if (req.method != "GET") throw ApiError{405, "use GET", "invalid_request_error", "", ""};
            return send_json(200, {{"object", "list"},
                                   {"data", json::array({{{"id", opt_.alias}, {"object", "model"}, {"created", 0}, {"owned_by", "moestream"}}})}});
        }
        if (req.target == "/v1/chat/completions" || req.target == "/v1/completions") {
            if (req.method != "POST") throw ApiError{405, "use POST", "invalid_request_error", "", ""};
            if (!ready_) throw ApiError{503, "the model is still loading", "server_error", "", ""};
            return completions(req, res, req.target == "/v1/chat/completions");
        }
        throw ApiError{404, "no route " + req.method + " " + req.target, "invalid_request_error", "", ""};
    } catch (const ApiError& e) {
        std::map<std::string, std::string> extra;
        if (e.status == 503) extra["Retry-After"] = "1";
        if (e.status == 401) extra["WWW-Authenticate"] = "Bearer";
        send_json(e.status, error_body(e), extra);
    }
}

void OpenAiService::completions(const HttpRequest& req, HttpResponder& res, bool chat) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw bad("the body is not valid JSON");
    if (!body.is_object()) throw bad("the body must be a JSON object");
    if (body.contains("model")) {
        if (!body["model"].is_string()) throw bad("model must be a string", "model");
        const std::string m = body["model"].get<std::string>();
        const std::string base = opt_.model_file.substr(opt_.model_file.rfind('/') + 1);
        if (m != opt_.alias && m != base && m != opt_.model_file)
            throw ApiError{404, "model '" + m + "' does not exist; this server serves '" + opt_.alias + "'", "invalid_request_error", "model", "model_not_found"};
    }
    bool stream = false;
    if (body.contains("stream") && !body["stream"].is_null()) {
        if (!body["stream"].is_boolean()) throw bad("stream must be a boolean", "stream");
        stream = body["stream"].get<bool>();
    }
    GenerationRequest g;
    const int n_ctx = gen_->n_ctx();
    auto mt = number<int>(body, "max_tokens", 1, n_ctx);
    if (!mt) mt = number<int>(body, "max_completion_tokens", 1, n_ctx);
    g.max_tokens = mt.value_or(opt_.max_tokens_default);
    g.sampling.temperature = number<float>(body, "temperature", 0.f, 2.f).value_or(1.f);
    g.sampling.top_p = number<float>(body, "top_p", 0.f, 1.f).value_or(1.f);
    g.sampling.top_k = number<int>(body, "top_k", 0, 1 << 20).value_or(0);
    g.sampling.min_p = number<float>(body, "min_p", 0.f, 1.f).value_or(0.f);
    g.sampling.repeat_penalty = number<float>(body, "repetition_penalty", 0.1f, 10.f).value_or(1.f);
    g.sampling.seed = number<uint64_t>(body, "seed", 0, UINT64_MAX >> 11).value_or(static_cast<uint64_t>(now_s()));
    if (body.contains("stop") && !body["stop"].is_null()) {
        if (body["stop"].is_string()) g.stop.push_back(body["stop"].get<std::string>());
        else if (body["stop"].is_array() && body["stop"].size() <= 4) {
            for (const auto& s : body["stop"]) {
                if (!s.is_string()) throw bad("stop entries must be strings", "stop");
                g.stop.push_back(s.get<std::string>());
            }
        } else {
            throw bad("stop must be a string or up to 4 strings", "stop");
        }
    }

    // Prompt tokens.
    if (chat) {
        if (!body.contains("messages") || !body["messages"].is_array()) throw bad("messages must be an array", "messages");
        if (body["messages"].empty()) throw bad("messages is empty", "messages");
        std::vector<ChatMessage> msgs;
        for (size_t i = 0; i < body["messages"].size(); ++i) {
            const auto& m = body["messages"][i];
            const std::string where = "messages[" + std::to_string(i) + "]";
            if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad(where + ".role must be a string", where);
            ChatMessage cm;
            cm.role = m["role"].get<std::string>();
            if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool" && cm.role != "developer")
                throw bad(where + ".role '" + cm.role + "' is not system, user, assistant or tool", where);
            if (cm.role == "developer") cm.role = "system";
            cm.content = text_of(m.contains("content") ? m["content"] : json(nullptr), where + ".content");
            if (cm.role == "assistant") cm.generated = gen_->remembered_turn(cm.content);
            msgs.push_back(std::move(cm));
        }
        std::optional<bool> thinking;
        if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object()) {
            const json& kw = body["chat_template_kwargs"];
            for (const char* key : {"enable_thinking", "thinking"})
                if (kw.contains(key) && kw[key].is_boolean()) thinking = kw[key].get<bool>();
        }
        auto tokens_of = [&](const std::vector<ChatMessage>& ms, bool generation_prompt) {
            std::vector<int32_t> out;
            for (const auto& seg : render_chat(opt_.family, ms, {.add_generation_prompt = generation_prompt, .enable_thinking = thinking,
                                                                 .bos_text = opt_.bos_text})) {
                if (!seg.tokens.empty()) out.insert(out.end(), seg.tokens.begin(), seg.tokens.end());
                else {
                    auto ids = tok_->encode(seg.text, out.empty(), true);
                    out.insert(out.end(), ids.begin(), ids.end());
                }
            }
            return out;
        };
        g.prompt = tokens_of(msgs, true);
        // A recurrent model keeps a state snapshot where the last user message starts: the next conversation
        // with the same system prompt and history, or a retry of this turn, restarts from there.
        if (gen_->recurrent()) {
            size_t last_user = msgs.size();
            while (last_user > 0 && msgs[last_user - 1].role != "user") --last_user;
            if (last_user > 1) {
                const auto head = tokens_of(std::vector<ChatMessage>(msgs.begin(), msgs.begin() + static_cast<long>(last_user - 1)), false);
                if (!head.empty() && head.size() < g.prompt.size() && std::equal(head.begin(), head.end(), g.prompt.begin()))
                    g.checkpoint_at.push_back(static_cast<int>(head.size()));
            }
        }
    } else {
        if (!body.contains("prompt")) throw bad("prompt is required", "prompt");
        if (body["prompt"].is_string()) {
            g.prompt = tok_->encode(body["prompt"].get<std::string>(), true, true);
        } else if (body["prompt"].is_array() && !body["prompt"].empty() && body["prompt"][0].is_number_integer()) {
            for (const auto& t : body["prompt"]) {
                if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok_->n_vocab())
                    throw bad("prompt token " + t.dump() + " is outside the vocabulary", "prompt");
                g.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
            }
        } else {
            throw bad("prompt must be a string or an array of token ids", "prompt");
        }
        if (g.prompt.empty()) throw bad("prompt is empty", "prompt");
    }
    if (static_cast<int>(g.prompt.size()) + 1 > n_ctx)
        throw bad("the prompt has " + std::to_string(g.prompt.size()) + " tokens; the context holds " + std::to_string(n_ctx),
                  chat ? "messages" : "prompt", "context_length_exceeded");
    g.max_tokens = std::min(g.max_tokens, n_ctx - static_cast<int>(g.prompt.size()));

    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    const int64_t created = now_s();
    auto chunk = [&](const json& delta_or_text, const json& finish) {
        json c = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created}, {"model", opt_.alias}};
        json choice = {{"index", 0}, {"finish_reason", finish}};
        if (chat) choice["delta"] = delta_or_text;
        else choice["text"] = delta_or_text;
        c["choices"] = json::array({choice});
        return c;
    };
    // Streaming: the worker thread produces pieces while this thread writes the response header, so every
    // socket write goes through one lock, and pieces that arrive before the header are held until it is out.
    struct StreamState {
        std::mutex mu;
        bool started = false, ok = true;
        std::string held;
    };
    auto ss = std::make_shared<StreamState>();
    if (stream) {
        g.on_text = [&res, ss, chunk, chat](const std::string& piece) {
            const std::string event = "data: " + wire(chunk(chat ? json{{"content", piece}} : json(piece), nullptr)) + "\n\n";
            std::lock_guard<std::mutex> lk(ss->mu);
            if (!ss->started) {
                ss->held += event;
                return true;
            }
            ss->ok = ss->ok && res.write_chunk(event);
            return ss->ok;
        };
    }
    auto cancel = g.cancel;
    auto fut = gen_->submit(std::move(g));
    if (!fut) throw ApiError{503, "the request queue is full; retry shortly", "server_error", "", ""};
    if (stream) {
        std::lock_guard<std::mutex> lk(ss->mu);
        ss->ok = res.begin_stream("text/event-stream");
        if (ss->ok && chat) ss->ok = res.write_chunk("data: " + wire(chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr)) + "\n\n");
        if (ss->ok && !ss->held.empty()) ss->ok = res.write_chunk(ss->held);
        ss->held.clear();
        ss->started = true;
        if (!ss->ok) cancel->store(true);
        count(200);
    }
    // Non-streaming: watch for the client going away while the worker computes.
    while (fut->wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
        if (!stream && res.client_gone()) cancel->store(true);
    GenerationResult r = fut->get();
    const bool stream_ok = ss->ok;
    if (r.finish_reason == "error" || (r.finish_reason == "cancelled" && !r.error.empty())) {
        if (stream) {
            if (stream_ok) res.write_chunk("data: " + wire(error_body({500, r.error, "server_error", "", ""})) + "\n\n");
            res.end_stream();
            return;
        }
        throw ApiError{r.finish_reason == "error" ? 500 : 503, r.error, "server_error", "", ""};
    }
    const json usage = {{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens},
                        {"total_tokens", r.prompt_tokens + r.completion_tokens}};
    const json timings = {{"prompt_n", r.prompt_tokens - r.prompt_reused}, {"prompt_reused", r.prompt_reused}, {"prompt_ms", r.prompt_ms},
                          {"predicted_n", r.completion_tokens}, {"predicted_ms", r.gen_ms},
                          {"predicted_per_second", r.completion_tokens > 1 && r.gen_ms > 0 ? (r.completion_tokens - 1) * 1000.0 / r.gen_ms : 0.0}};
    const std::string finish = r.finish_reason == "cancelled" ? "stop" : r.finish_reason;
    if (stream) {
        if (stream_ok) {
            json last = chunk(chat ? json::object() : json(""), finish);
            last["usage"] = usage;
            last["timings"] = timings;
            res.write_chunk("data: " + wire(last) + "\n\n");
            res.write_chunk("data: [DONE]\n\n");
        }
        res.end_stream();
        return;
    }
    json out = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created}, {"model", opt_.alias},
                {"usage", usage}, {"timings", timings}};
    json choice = {{"index", 0}, {"finish_reason", finish}};
    if (chat) choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    else choice["text"] = r.text;
    out["choices"] = json::array({choice});
    count(200);
    res.send(200, "application/json", wire(out));
}

std::string OpenAiService::metrics_text() {
    std::ostringstream m;
    m << "# HELP moestream_ready 1 once the model is loaded.\n# TYPE moestream_ready gauge\nmoestream_ready " << (ready_ ? 1 : 0) << "\n";
    if (!gen_) return m.str();
    auto& s = gen_->stats();
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
        m << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << v << "\n";
    };
    metric("moestream_prompt_tokens_total", "counter", "Prompt tokens received.", static_cast<double>(s.prompt_tokens.load()));
    metric("moestream_prompt_tokens_reused_total", "counter", "Prompt tokens taken from the KV cache.", static_cast<double>(s.prompt_reused.load()));
    metric("moestream_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.generated_tokens.load()));
    metric("moestream_generation_tokens_per_second", "gauge", "Decode speed of the last request.", s.last_tok_per_s.load());
    metric("moestream_queue_depth", "gauge", "Requests waiting for the generator.", static_cast<double>(gen_->queued()));
    metric("moestream_busy", "gauge", "1 while a generation runs.", gen_->busy() ? 1 : 0);
    const auto& rs = gen_->runner_stats();
    metric("moestream_expert_loads_total", "counter", "Experts fetched (once per batch each).", static_cast<double>(rs.expert_loads));
    metric("moestream_expert_activations_total", "counter", "Token-expert pairs computed.", static_cast<double>(rs.expert_activations));
    if (extra_metrics) m << extra_metrics();
    m << "# HELP moestream_requests_total Requests answered, by HTTP status.\n# TYPE moestream_requests_total counter\n";
    std::lock_guard<std::mutex> lk(status_mu_);
    for (const auto& [status, n] : by_status_) m << "moestream_requests_total{status=\"" << status << "\"} " << n << "\n";
    return m.str();
}

}  // namespace moe

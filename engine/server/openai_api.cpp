// OpenAI's chat completions and completions: request fields to a ChatInput / GenerationRequest, the output
// parser's events to message fields or chat.completion.chunk deltas (reasoning_content, content, tool_calls).
#include <mutex>

#include "engine/server/api_service.h"

namespace moe {

namespace {

std::string text_of(const ordered_json& content, const std::string& param) {
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

void read_sampling(const json& body, GenerationRequest& g, int n_ctx, int max_tokens_default) {
    auto mt = number<int>(body, "max_tokens", 1, n_ctx);
    if (!mt) mt = number<int>(body, "max_completion_tokens", 1, n_ctx);
    g.max_tokens = mt.value_or(max_tokens_default);
    g.sampling.temperature = number<float>(body, "temperature", 0.f, 2.f).value_or(1.f);
    g.sampling.top_p = number<float>(body, "top_p", 0.f, 1.f).value_or(1.f);
    g.sampling.top_k = number<int>(body, "top_k", 0, 1 << 20).value_or(0);
    g.sampling.min_p = number<float>(body, "min_p", 0.f, 1.f).value_or(0.f);
    g.sampling.repeat_penalty = number<float>(body, "repetition_penalty", 0.1f, 10.f).value_or(1.f);
    g.sampling.seed = number<uint64_t>(body, "seed", 0, UINT64_MAX >> 11).value_or(static_cast<uint64_t>(now_s()));
    if (body.contains("ignore_eos")) {
        if (!body["ignore_eos"].is_boolean()) throw bad("ignore_eos must be true or false", "ignore_eos");
        g.ignore_eos = body["ignore_eos"].get<bool>();
    }
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
}

// tools: [{"type":"function","function":{"name","description","parameters"}}], key order kept for the prompt.
std::vector<ToolSpec> read_tools(const ordered_json& body) {
    return read_tool_list(body, [](const ordered_json& t, const std::string& where) {
        if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object())
            throw bad(where + " must be {\"type\": \"function\", \"function\": {...}}", where);
        const auto& f = t["function"];
        if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
            throw bad(where + ".function.name must be a non-empty string", where);
        if (f.contains("parameters") && !f["parameters"].is_object()) throw bad(where + ".function.parameters must be a JSON schema object", where);
        return ToolSpec{f["name"].get<std::string>(), f.contains("description") && f["description"].is_string() ? f["description"].get<std::string>() : "", t,
                        f.value("parameters", ordered_json::object())};
    });
}

void read_tool_choice(const json& body, ChatInput& in) {
    if (body.contains("parallel_tool_calls")) in.parallel_tool_calls = boolean(body, "parallel_tool_calls").value_or(true);
    if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return;
    const json& c = body["tool_choice"];
    if (c.is_string()) {
        const std::string s = c.get<std::string>();
        if (s == "none") in.tool_choice = ToolChoice::None;
        else if (s == "auto") in.tool_choice = ToolChoice::Auto;
        else if (s == "required") in.tool_choice = ToolChoice::Required;
        else throw bad("tool_choice '" + s + "' is not none, auto, required or a named function", "tool_choice");
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("name") && c["function"]["name"].is_string()) {
        in.tool_choice = ToolChoice::Named;
        in.forced_tool = c["function"]["name"].get<std::string>();
        if (!find_tool(in.tools, in.forced_tool)) throw bad("tool_choice names '" + in.forced_tool + "', which is not in tools", "tool_choice");
    } else {
        throw bad("tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
    }
    if (in.tool_choice != ToolChoice::None && in.tool_choice != ToolChoice::Auto && in.tools.empty())
        throw bad("tool_choice asks for a tool call but tools is empty", "tool_choice");
}

json token_json(const Tokenizer& tok, int32_t id, double logprob) {
    const std::string piece = tok.piece(id);
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    return {{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
}

json logprob_content(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
    json content = json::array();
    for (const auto& t : lps) {
        json e = token_json(tok, t.id, t.logprob);
        e["top_logprobs"] = json::array();
        for (const auto& [id, lp] : t.top) e["top_logprobs"].push_back(token_json(tok, id, lp));
        content.push_back(std::move(e));
    }
    return content;
}

json tool_call_json(const ToolCall& c) {
    return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

json usage_json(const GenerationResult& r) {
    return {{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens}, {"total_tokens", r.prompt_tokens + r.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", r.prompt_reused}}}};
}

json timings_json(const GenerationResult& r) {
    return {{"prompt_n", r.prompt_tokens - r.prompt_reused}, {"prompt_reused", r.prompt_reused}, {"prompt_ms", r.prompt_ms},
            {"predicted_n", r.completion_tokens}, {"predicted_ms", r.gen_ms},
            {"predicted_per_second", r.completion_tokens > 1 && r.gen_ms > 0 ? (r.completion_tokens - 1) * 1000.0 / r.gen_ms : 0.0}};
}

void read_logprobs(const json& body, GenerationRequest& g, bool chat) {
    if (chat) {
        const bool on = boolean(body, "logprobs").value_or(false);
        const auto top = number<int>(body, "top_logprobs", 0, 20);
        if (top && !on) throw bad("top_logprobs needs logprobs: true", "top_logprobs");
        if (on) g.logprobs = top.value_or(0);
    } else if (auto n = number<int>(body, "logprobs", 0, 5)) {
        g.logprobs = *n;
    }
}

}  // namespace

void ApiService::openai_chat(const HttpRequest& req, HttpResponder& res) {
    const ordered_json body = ordered_json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw bad("the body is not valid JSON");
    if (!body.is_object()) throw bad("the body must be a JSON object");
    const json flat = json::parse(req.body);  // the same, for the typed readers
    check_model(flat);
    const bool stream = boolean(flat, "stream").value_or(false);
    GenerationRequest g;
    read_sampling(flat, g, gen_->n_ctx(), opt_.max_tokens_default);
    read_logprobs(flat, g, true);
    ChatInput in;
    if (flat.contains("response_format") && !flat["response_format"].is_null()) {
        const json& rf = flat["response_format"];
        if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) throw bad("response_format must be {\"type\": ...}", "response_format");
        const std::string type = rf["type"].get<std::string>();
        if (type == "json_object") {
            in.response_schema = json{{"type", "object"}};
        } else if (type == "json_schema") {
            if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema"))
                throw bad("response_format.json_schema.schema is required", "response_format");
            in.response_schema = rf["json_schema"]["schema"];
        } else if (type != "text") {
            throw bad("response_format type '" + type + "' is not text, json_object or json_schema", "response_format");
        }
    }

    in.tools = read_tools(body);
    read_tool_choice(flat, in);
    if (!flat.contains("messages") || !flat["messages"].is_array()) throw bad("messages must be an array", "messages");
    if (flat["messages"].empty()) throw bad("messages is empty", "messages");
    for (size_t i = 0; i < body["messages"].size(); ++i) {
        const auto& m = body["messages"][i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad(where + ".role must be a string", where);
        ChatMessage cm;
        cm.role = m["role"].get<std::string>();
        if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool" && cm.role != "developer")
            throw bad(where + ".role '" + cm.role + "' is not system, user, assistant or tool", where);
        if (cm.role == "developer") cm.role = "system";
        cm.content = text_of(m.contains("content") ? m["content"] : ordered_json(nullptr), where + ".content");
        if (cm.role == "tool" && m.contains("tool_call_id") && m["tool_call_id"].is_string()) cm.tool_call_id = m["tool_call_id"].get<std::string>();
        if (cm.role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array()) {
            for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
                const auto& tc = m["tool_calls"][k];
                const std::string w = where + ".tool_calls[" + std::to_string(k) + "]";
                if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object() || !tc["function"].contains("name") || !tc["function"]["name"].is_string())
                    throw bad(w + ".function.name must be a string", w);
                const auto& f = tc["function"];
                std::string args = f.contains("arguments") ? (f["arguments"].is_string() ? f["arguments"].get<std::string>() : f["arguments"].dump()) : "{}";
                cm.tool_calls.push_back({tc.value("id", ""), f["name"].get<std::string>(), args});
            }
        }
        if (cm.role == "assistant") {
            cm.generated = recall(cm.content, cm.tool_calls);
            // Reasoning a client sends back separately goes where the templates look for it.
            if (m.contains("reasoning_content") && m["reasoning_content"].is_string() && !m["reasoning_content"].get<std::string>().empty() &&
                cm.content.find("</think>") == std::string::npos)
                cm.content = "<think>\n" + m["reasoning_content"].get<std::string>() + "\n</think>\n\n" + cm.content;
        }
        in.messages.push_back(std::move(cm));
    }
    if (flat.contains("chat_template_kwargs") && flat["chat_template_kwargs"].is_object()) {
        const json& kw = flat["chat_template_kwargs"];
        for (const char* key : {"enable_thinking", "thinking"})
            if (kw.contains(key) && kw[key].is_boolean()) in.thinking = kw[key].get<bool>();
    }
    const PreparedChat chat = prepare(in, g, "messages");

    const std::string id = "chatcmpl-" + std::to_string(next_id_++);
    const int64_t created = now_s();
    auto chunk = [&, id, created](const json& delta, const json& finish) {
        return json{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", opt_.alias},
                    {"choices", json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
    };
    // Output events, from the worker thread while it generates and from this thread at the end.
    OutputParserOptions popt = chat.parser;
    popt.call_id_prefix = "call_" + id.substr(9) + "_";
    auto parser = std::make_shared<ChatOutputParser>(opt_.family, popt);
    SseStream sse(res);
    std::vector<TokenLogprob> pending_lp;  // streaming: logprobs not yet attached to a chunk
    CallGate gate{!in.parallel_tool_calls, g.finish_now};
    auto handle_events = [&](const std::vector<OutputEvent>& events) {
        for (const auto& e : events) {
            if (e.kind == OutputEvent::Call) {
                if (!gate.admit()) continue;
                json tc = tool_call_json(e.call);
                tc["index"] = gate.sent - 1;
                if (stream) sse.send("data: " + wire(chunk({{"tool_calls", json::array({tc})}}, nullptr)) + "\n\n");
                continue;
            }
            if (!stream) continue;
            json c = chunk({{e.kind == OutputEvent::Reasoning ? "reasoning_content" : "content", e.text}}, nullptr);
            if (!pending_lp.empty()) {
                c["choices"][0]["logprobs"] = {{"content", logprob_content(*tok_, pending_lp)}};
                pending_lp.clear();
            }
            if (!sse.send("data: " + wire(c) + "\n\n")) return false;
        }
        return true;
    };
    parser->push(chat.prefill);
    const bool want_logprobs = g.logprobs >= 0;
    g.on_text = [&](const std::string& piece) { return handle_events(parser->push(piece)); };
    if (stream && g.logprobs >= 0) g.on_logprob = [&](const TokenLogprob& t) { pending_lp.push_back(t); };
    GenerationResult r = generate(std::move(g), res, stream ? &sse : nullptr,
                                  stream ? "data: " + wire(chunk({{"role", "assistant"}, {"content", ""}}, nullptr)) + "\n\n" : "");
    if (ended_in_error(r, stream, sse, "data: " + wire(json{{"error", {{"message", r.error}, {"type", "server_error"}}}}) + "\n\n")) return;
    if (r.finish_reason != "cancelled") handle_events(parser->finish());
    remember(*parser, chat, r);
    std::vector<ToolCall> calls = parser->calls();
    if (gate.one_call && calls.size() > 1) calls.resize(1);
    const std::string finish = !calls.empty() ? "tool_calls" : r.finish_reason == "cancelled" ? "stop" : r.finish_reason;
    if (stream) {
        if (sse.ok()) {
            json last = chunk(json::object(), finish);
            if (!pending_lp.empty()) last["choices"][0]["logprobs"] = {{"content", logprob_content(*tok_, pending_lp)}};
            last["usage"] = usage_json(r);
            last["timings"] = timings_json(r);
            sse.send("data: " + wire(last) + "\n\n");
            sse.send("data: [DONE]\n\n");
        }
        sse.end();
        return;
    }
    json message = {{"role", "assistant"}, {"content", calls.empty() || !parser->content().empty() ? json(parser->content()) : json(nullptr)}};
    if (!parser->reasoning().empty()) message["reasoning_content"] = parser->reasoning();
    if (!calls.empty()) {
        message["tool_calls"] = json::array();
        for (const auto& c : calls) message["tool_calls"].push_back(tool_call_json(c));
    }
    json choice = {{"index", 0}, {"message", message}, {"finish_reason", finish}};
    choice["logprobs"] = !want_logprobs ? json(nullptr) : json{{"content", logprob_content(*tok_, r.logprobs)}};
    json out = {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", opt_.alias}, {"choices", json::array({choice})},
                {"usage", usage_json(r)}, {"timings", timings_json(r)}};
    count(200);
    res.send(200, "application/json", wire(out));
}

void ApiService::openai_completions(const HttpRequest& req, HttpResponder& res) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw bad("the body is not valid JSON");
    if (!body.is_object()) throw bad("the body must be a JSON object");
    check_model(body);
    const bool stream = boolean(body, "stream").value_or(false);
    GenerationRequest g;
    const int n_ctx = gen_->n_ctx();
    read_sampling(body, g, n_ctx, opt_.max_tokens_default);
    read_logprobs(body, g, false);
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
    if (static_cast<int>(g.prompt.size()) + 1 > n_ctx)
        throw bad("the prompt has " + std::to_string(g.prompt.size()) + " tokens; the context holds " + std::to_string(n_ctx), "prompt",
                  "context_length_exceeded");
    g.max_tokens = std::min(g.max_tokens, n_ctx - static_cast<int>(g.prompt.size()));
    const int logprobs = g.logprobs;

    const std::string id = "cmpl-" + std::to_string(next_id_++);
    const int64_t created = now_s();
    auto chunk = [&, id, created](const std::string& text, const json& finish) {
        return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", opt_.alias},
                    {"choices", json::array({{{"index", 0}, {"text", text}, {"finish_reason", finish}}})}};
    };
    // The legacy completions logprobs shape: parallel arrays.
    auto legacy_logprobs = [&](const std::vector<TokenLogprob>& lps) {
        json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}};
        for (const auto& t : lps) {
            out["tokens"].push_back(tok_->piece(t.id));
            out["token_logprobs"].push_back(t.logprob);
            json top = json::object();
            for (const auto& [tid, lp] : t.top) top[tok_->piece(tid)] = lp;
            out["top_logprobs"].push_back(top);
        }
        return out;
    };
    SseStream sse(res);
    if (stream) g.on_text = [&sse, chunk](const std::string& piece) { return sse.send("data: " + wire(chunk(piece, nullptr)) + "\n\n"); };
    GenerationResult r = generate(std::move(g), res, stream ? &sse : nullptr, "");
    if (ended_in_error(r, stream, sse, "data: " + wire(json{{"error", {{"message", r.error}, {"type", "server_error"}}}}) + "\n\n")) return;
    const std::string finish = r.finish_reason == "cancelled" ? "stop" : r.finish_reason;
    json last = chunk(stream ? "" : r.text, finish);
    if (logprobs >= 0) last["choices"][0]["logprobs"] = legacy_logprobs(r.logprobs);
    last["usage"] = usage_json(r);
    last["timings"] = timings_json(r);
    if (stream) {
        if (sse.ok()) {
            sse.send("data: " + wire(last) + "\n\n");
            sse.send("data: [DONE]\n\n");
        }
        sse.end();
        return;
    }
    count(200);
    res.send(200, "application/json", wire(last));
}

}  // namespace moe

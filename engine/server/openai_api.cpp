// OpenAI's chat completions and completions: request fields to a ChatInput / GenerationRequest, the output
// parser's events to message fields or chat.completion.chunk deltas (reasoning_content, content, tool_calls).
#include <mutex>

#include "engine/server/api_service.h"

namespace moe {

namespace {

// OpenAI's finish_reason ("tool_calls" is decided by the caller): a cancelled generation reads as stopped.
std::string openai_finish(FinishReason f) { return f == FinishReason::Cancelled ? "stop" : finish_reason_name(f); }

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

json tool_call_json(const ToolCall& c) { return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}}; }

json usage_json(const GenerationResult& r) {
    return {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", r.prompt_reused}}},
            {"moestream", expert_usage_json(r.experts)}};
}

json timings_json(const GenerationResult& r) {
    return {{"prompt_n", r.prompt_tokens - r.prompt_reused},
            {"prompt_reused", r.prompt_reused},
            {"prompt_restored", r.prompt_restored},
            {"prompt_ms", r.prompt_ms},
            {"predicted_n", r.completion_tokens},
            {"predicted_ms", r.gen_ms},
            {"draft_n", r.drafted},
            {"draft_n_accepted", r.draft_accepted},  // llama-server's names
            {"predicted_per_second", r.completion_tokens > 1 && r.gen_ms > 0 ? (r.completion_tokens - 1) * 1000.0 / r.gen_ms : 0.0}};
}

}  // namespace

void ApiService::openai_chat(const HttpRequest& req, HttpResponder& res) {
    const ordered_json body = parse_request_body(req.body, limits());
    check_model(body);
    ApiRequest a = read_openai_chat(body, limits(),
                                    [this](const std::string& content, const std::vector<ToolCall>& calls) { return recall(content, calls); });
    const bool stream = a.stream;
    GenerationRequest g = generation_request(a);
    const ChatInput& in = a.chat;
    const PreparedChat chat = prepare(in, g, "messages");

    const std::string id = "chatcmpl-" + std::to_string(next_id_++);
    const int64_t created = now_s();
    auto chunk = [&, id, created](const json& delta, const json& finish) {
        return json{{"id", id},
                    {"object", "chat.completion.chunk"},
                    {"created", created},
                    {"model", opt_.alias},
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
    if (r.finish_reason != FinishReason::Cancelled) handle_events(parser->finish());
    remember(*parser, chat, r);
    std::vector<ToolCall> calls = parser->calls();
    if (gate.one_call && calls.size() > 1) calls.resize(1);
    const std::string finish = !calls.empty() ? "tool_calls" : openai_finish(r.finish_reason);
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
    json out = {{"id", id},
                {"object", "chat.completion"},
                {"created", created},
                {"model", opt_.alias},
                {"choices", json::array({choice})},
                {"usage", usage_json(r)},
                {"timings", timings_json(r)}};
    count(200);
    res.send(200, "application/json", wire(out));
}

void ApiService::openai_completions(const HttpRequest& req, HttpResponder& res) {
    const ordered_json body = parse_request_body(req.body, limits());
    check_model(body);
    const ApiRequest a = read_openai_completion(body, limits());
    const bool stream = a.stream;
    GenerationRequest g = generation_request(a);
    const int n_ctx = gen_->n_ctx();
    if (!a.prompt_is_ids) {
        g.prompt = tok_->encode(a.prompt_text, true, true);
    } else {
        for (int64_t t : a.prompt_ids) {
            if (t < 0 || t >= tok_->n_vocab()) throw bad("prompt token " + std::to_string(t) + " is outside the vocabulary", "prompt");
            g.prompt.push_back(static_cast<int32_t>(t));
        }
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
        return json{{"id", id},
                    {"object", "text_completion"},
                    {"created", created},
                    {"model", opt_.alias},
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
    const std::string finish = openai_finish(r.finish_reason);
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

// Anthropic's Messages API (what Claude Code speaks): system, messages of text / tool_use / tool_result /
// thinking blocks, tools with input_schema, tool_choice, stop_sequences; answers as content blocks, or as
// the message_start / content_block_* / message_delta / message_stop event stream.
#include "engine/server/api_service.h"

namespace moe {

void ApiService::anthropic_count_tokens(const HttpRequest& req, HttpResponder& res) { anthropic_messages(req, res); }

void ApiService::anthropic_messages(const HttpRequest& req, HttpResponder& res) {
    const bool count_only = req.target == "/v1/messages/count_tokens";
    const ordered_json body = parse_request_body(req.body, limits());
    check_model(body);
    ApiRequest a = read_anthropic_messages(
        body, limits(), [this](const std::string& content, const std::vector<ToolCall>& calls) { return recall(content, calls); }, count_only);
    GenerationRequest g = generation_request(a);
    const ChatInput& in = a.chat;
    if (count_only) {
        const PreparedChat chat = prepare_chat(in, format(), *tok_, false);
        count(200);
        return res.send(200, "application/json", wire(json{{"input_tokens", chat.prompt.size()}}));
    }
    const bool stream = a.stream;
    const PreparedChat chat = prepare(in, g, "messages");
    const std::string id = "msg_" + std::to_string(next_id_++);

    OutputParserOptions popt = chat.parser;
    popt.call_id_prefix = "toolu_" + id.substr(4) + "_";
    ChatOutputParser parser(opt_.family, popt);
    parser.push(chat.prefill);
    SseStream sse(res);
    auto event = [](const char* name, const json& data) { return std::string("event: ") + name + "\ndata: " + wire(data) + "\n\n"; };
    // Streaming: one open content block at a time; a change of kind closes it and opens the next.
    int block = -1;
    std::string open_kind;
    auto close_block = [&] {
        if (!open_kind.empty()) sse.send(event("content_block_stop", {{"type", "content_block_stop"}, {"index", block}}));
        open_kind.clear();
    };
    auto open_block = [&](const std::string& kind, const json& start) {
        close_block();
        ++block;
        open_kind = kind;
        sse.send(event("content_block_start", {{"type", "content_block_start"}, {"index", block}, {"content_block", start}}));
    };
    CallGate gate{!in.parallel_tool_calls, g.finish_now};
    auto handle_events = [&](const std::vector<OutputEvent>& events) {
        for (const auto& e : events) {
            if (e.kind == OutputEvent::Call) {
                if (!gate.admit() || !stream) continue;
                open_block("tool_use", {{"type", "tool_use"}, {"id", e.call.id}, {"name", e.call.name}, {"input", json::object()}});
                sse.send(event("content_block_delta", {{"type", "content_block_delta"},
                                                       {"index", block},
                                                       {"delta", {{"type", "input_json_delta"}, {"partial_json", e.call.arguments}}}}));
                close_block();
                continue;
            }
            if (!stream) continue;
            const bool thinking = e.kind == OutputEvent::Reasoning;
            const std::string kind = thinking ? "thinking" : "text";
            if (open_kind != kind)
                open_block(kind, thinking ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}} : json{{"type", "text"}, {"text", ""}});
            json delta = thinking ? json{{"type", "thinking_delta"}, {"thinking", e.text}} : json{{"type", "text_delta"}, {"text", e.text}};
            if (!sse.send(event("content_block_delta", {{"type", "content_block_delta"}, {"index", block}, {"delta", delta}}))) return false;
        }
        return true;
    };
    g.on_text = [&](const std::string& piece) { return handle_events(parser.push(piece)); };
    const json start_message = {{"id", id},
                                {"type", "message"},
                                {"role", "assistant"},
                                {"model", opt_.alias},
                                {"content", json::array()},
                                {"stop_reason", nullptr},
                                {"stop_sequence", nullptr},
                                {"usage", {{"input_tokens", chat.prompt.size()}, {"output_tokens", 0}}}};
    GenerationResult r = generate(
        std::move(g), res, stream ? &sse : nullptr,
        stream ? event("message_start", {{"type", "message_start"}, {"message", start_message}}) + event("ping", {{"type", "ping"}}) : "");
    if (ended_in_error(r, stream, sse, event("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", r.error}}}}))) return;
    if (r.finish_reason != FinishReason::Cancelled) handle_events(parser.finish());
    remember(parser, chat, r);
    std::vector<ToolCall> calls = parser.calls();
    if (gate.one_call && calls.size() > 1) calls.resize(1);
    const std::string stop_reason = !calls.empty()                            ? "tool_use"
                                    : r.finish_reason == FinishReason::Length ? "max_tokens"
                                    : !r.stop_string.empty()                  ? "stop_sequence"
                                                                              : "end_turn";
    const json stop_sequence = r.stop_string.empty() ? json(nullptr) : json(r.stop_string);
    const json usage = {{"input_tokens", r.prompt_tokens - r.prompt_reused},
                        {"cache_read_input_tokens", r.prompt_reused},
                        {"cache_creation_input_tokens", 0},
                        {"output_tokens", r.completion_tokens},
                        {"moestream", expert_usage_json(r.experts)}};
    if (stream) {
        if (sse.ok()) {
            close_block();
            sse.send(
                event("message_delta",
                      {{"type", "message_delta"}, {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence}}}, {"usage", usage}}));
            sse.send(event("message_stop", {{"type", "message_stop"}}));
        }
        sse.end();
        return;
    }
    json content = json::array();
    if (!parser.reasoning().empty()) content.push_back({{"type", "thinking"}, {"thinking", parser.reasoning()}, {"signature", ""}});
    if (!parser.content().empty()) content.push_back({{"type", "text"}, {"text", parser.content()}});
    for (const auto& c : calls) content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::parse(c.arguments)}});
    json out = start_message;
    out["content"] = content;
    out["stop_reason"] = stop_reason;
    out["stop_sequence"] = stop_sequence;
    out["usage"] = usage;
    count(200);
    res.send(200, "application/json", wire(out));
}

}  // namespace moe

// Anthropic's Messages API (what Claude Code speaks): system, messages of text / tool_use / tool_result /
// thinking blocks, tools with input_schema, tool_choice, stop_sequences; answers as content blocks, or as
// the message_start / content_block_* / message_delta / message_stop event stream.
#include "engine/server/api_service.h"

namespace moe {

namespace {

std::string block_text(const ordered_json& content, const std::string& where) {
    if (content.is_string()) return content.get<std::string>();
    if (content.is_null()) return "";
    if (!content.is_array()) throw bad(where + " must be a string or an array of content blocks", where);
    std::string s;
    for (size_t i = 0; i < content.size(); ++i) {
        const auto& b = content[i];
        if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string())
            throw bad(where + "[" + std::to_string(i) + "]: only text blocks are supported here", where);
        s += b["text"].get<std::string>();
    }
    return s;
}

// Anthropic messages to chat messages: tool_result blocks become tool turns (before the user's text, as
// Anthropic orders them), an assistant's thinking / text / tool_use blocks one assistant turn.
void read_message(const ordered_json& m, const std::string& where, std::vector<ChatMessage>& out, std::string& reasoning) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad(where + ".role must be a string", where);
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant") throw bad(where + ".role '" + role + "' is not user or assistant", where);
    if (!m.contains("content")) throw bad(where + ".content is required", where);
    const auto& content = m["content"];
    if (content.is_string()) {
        out.emplace_back(role, content.get<std::string>());
        return;
    }
    if (!content.is_array()) throw bad(where + ".content must be a string or an array of content blocks", where);
    ChatMessage msg(role, "");
    reasoning.clear();
    for (size_t i = 0; i < content.size(); ++i) {
        const auto& b = content[i];
        const std::string w = where + ".content[" + std::to_string(i) + "]";
        const std::string type = b.is_object() ? b.value("type", "") : "";
        if (type == "text") {
            if (!b.contains("text") || !b["text"].is_string()) throw bad(w + ".text must be a string", w);
            msg.content += b["text"].get<std::string>();
        } else if (type == "thinking" && role == "assistant") {
            if (b.contains("thinking") && b["thinking"].is_string()) reasoning += b["thinking"].get<std::string>();
        } else if (type == "redacted_thinking" && role == "assistant") {
        } else if (type == "tool_use" && role == "assistant") {
            if (!b.contains("name") || !b["name"].is_string()) throw bad(w + ".name must be a string", w);
            const ordered_json input = b.contains("input") ? b["input"] : ordered_json::object();
            if (!input.is_object()) throw bad(w + ".input must be an object", w);
            msg.tool_calls.push_back({b.value("id", ""), b["name"].get<std::string>(), input.dump()});
        } else if (type == "tool_result" && role == "user") {
            ChatMessage result("tool", block_text(b.contains("content") ? b["content"] : ordered_json(nullptr), w + ".content"));
            result.tool_call_id = b.value("tool_use_id", "");
            out.push_back(std::move(result));
        } else {
            throw bad(w + ": block type '" + type + "' is not supported in a " + role + " message", w);
        }
    }
    if (role == "user" && msg.content.empty() && !out.empty() && out.back().role == "tool") return;  // only tool results
    out.push_back(std::move(msg));
}

std::vector<ToolSpec> read_tools(const ordered_json& body) {
    return read_tool_list(body, [](const ordered_json& t, const std::string& where) {
        if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty())
            throw bad(where + ".name must be a non-empty string", where);
        const ordered_json schema = t.contains("input_schema") ? t["input_schema"] : ordered_json::object();
        if (!schema.is_object()) throw bad(where + ".input_schema must be a JSON schema object", where);
        const std::string name = t["name"].get<std::string>(), description = t.contains("description") && t["description"].is_string() ? t["description"].get<std::string>() : "";
        // Declared to the model exactly as the same tool from an OpenAI client.
        ordered_json declaration = {{"type", "function"}, {"function", {{"name", name}, {"description", description}, {"parameters", schema}}}};
        return ToolSpec{name, description, declaration, schema};
    });
}

}  // namespace

void ApiService::anthropic_count_tokens(const HttpRequest& req, HttpResponder& res) {
    anthropic_messages(req, res);
}

void ApiService::anthropic_messages(const HttpRequest& req, HttpResponder& res) {
    const bool count_only = req.target == "/v1/messages/count_tokens";
    const ordered_json body = ordered_json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw bad("the body is not valid JSON");
    if (!body.is_object()) throw bad("the body must be a JSON object");
    const json flat = json::parse(req.body);
    check_model(flat);
    const int n_ctx = gen_->n_ctx();
    GenerationRequest g;
    const auto max_tokens = number<int>(flat, "max_tokens", 1, n_ctx);
    if (!max_tokens && !count_only) throw bad("max_tokens is required", "max_tokens");
    g.max_tokens = max_tokens.value_or(1);
    g.sampling.temperature = number<float>(flat, "temperature", 0.f, 1.f).value_or(1.f);
    g.sampling.top_p = number<float>(flat, "top_p", 0.f, 1.f).value_or(1.f);
    g.sampling.top_k = number<int>(flat, "top_k", 0, 1 << 20).value_or(0);
    g.sampling.min_p = 0.f;
    g.sampling.seed = static_cast<uint64_t>(now_s());
    if (flat.contains("stop_sequences") && !flat["stop_sequences"].is_null()) {
        if (!flat["stop_sequences"].is_array()) throw bad("stop_sequences must be an array of strings", "stop_sequences");
        for (const auto& s : flat["stop_sequences"]) {
            if (!s.is_string()) throw bad("stop_sequences entries must be strings", "stop_sequences");
            g.stop.push_back(s.get<std::string>());
        }
    }

    ChatInput in;
    in.tools = read_tools(body);
    if (flat.contains("tool_choice") && !flat["tool_choice"].is_null()) {
        const json& c = flat["tool_choice"];
        const std::string type = c.is_object() ? c.value("type", "") : "";
        if (type == "auto") in.tool_choice = ToolChoice::Auto;
        else if (type == "any") in.tool_choice = ToolChoice::Required;
        else if (type == "none") in.tool_choice = ToolChoice::None;
        else if (type == "tool" && c.contains("name") && c["name"].is_string()) {
            in.tool_choice = ToolChoice::Named;
            in.forced_tool = c["name"].get<std::string>();
            if (!find_tool(in.tools, in.forced_tool)) throw bad("tool_choice names '" + in.forced_tool + "', which is not in tools", "tool_choice");
        } else {
            throw bad("tool_choice must be {\"type\": \"auto\" | \"any\" | \"none\" | \"tool\", \"name\": ...}", "tool_choice");
        }
        if (c.contains("disable_parallel_tool_use") && c["disable_parallel_tool_use"].is_boolean())
            in.parallel_tool_calls = !c["disable_parallel_tool_use"].get<bool>();
        if ((in.tool_choice == ToolChoice::Required || in.tool_choice == ToolChoice::Named) && in.tools.empty())
            throw bad("tool_choice asks for a tool call but tools is empty", "tool_choice");
    }
    if (flat.contains("thinking") && flat["thinking"].is_object()) in.thinking = flat["thinking"].value("type", "") == "enabled";
    if (body.contains("system") && !body["system"].is_null()) {
        const std::string system = block_text(body["system"], "system");
        if (!system.empty()) in.messages.emplace_back("system", system);
    }
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) throw bad("messages must be a non-empty array", "messages");
    for (size_t i = 0; i < body["messages"].size(); ++i) {
        std::string reasoning;
        read_message(body["messages"][i], "messages[" + std::to_string(i) + "]", in.messages, reasoning);
        ChatMessage& m = in.messages.back();
        if (m.role == "assistant") {
            m.generated = recall(m.content, m.tool_calls);
            if (!reasoning.empty()) m.content = "<think>\n" + reasoning + "\n</think>\n\n" + m.content;
        }
    }
    if (count_only) {
        const PreparedChat chat = prepare_chat(in, format(), *tok_, false);
        count(200);
        return res.send(200, "application/json", wire(json{{"input_tokens", chat.prompt.size()}}));
    }
    const bool stream = boolean(flat, "stream").value_or(false);
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
                sse.send(event("content_block_delta", {{"type", "content_block_delta"}, {"index", block},
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
    const json start_message = {{"id", id}, {"type", "message"}, {"role", "assistant"}, {"model", opt_.alias}, {"content", json::array()},
                                {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                                {"usage", {{"input_tokens", chat.prompt.size()}, {"output_tokens", 0}}}};
    GenerationResult r = generate(std::move(g), res, stream ? &sse : nullptr,
                                  stream ? event("message_start", {{"type", "message_start"}, {"message", start_message}}) + event("ping", {{"type", "ping"}}) : "");
    if (ended_in_error(r, stream, sse, event("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", r.error}}}}))) return;
    if (r.finish_reason != "cancelled") handle_events(parser.finish());
    remember(parser, chat, r);
    std::vector<ToolCall> calls = parser.calls();
    if (gate.one_call && calls.size() > 1) calls.resize(1);
    const std::string stop_reason = !calls.empty() ? "tool_use" : r.finish_reason == "length" ? "max_tokens" : !r.stop_string.empty() ? "stop_sequence" : "end_turn";
    const json stop_sequence = r.stop_string.empty() ? json(nullptr) : json(r.stop_string);
    const json usage = {{"input_tokens", r.prompt_tokens - r.prompt_reused}, {"cache_read_input_tokens", r.prompt_reused},
                        {"cache_creation_input_tokens", 0}, {"output_tokens", r.completion_tokens}};
    if (stream) {
        if (sse.ok()) {
            close_block();
            sse.send(event("message_delta", {{"type", "message_delta"}, {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence}}}, {"usage", usage}}));
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

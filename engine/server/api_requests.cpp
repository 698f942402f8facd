#include "engine/server/api_requests.h"

namespace moe {

namespace {

// obj[key] as a string: `fallback` when absent or null, an ApiError naming the field when not a string (a bare
// .value() would throw nlohmann's type_error, which the server could only answer with a 500).
std::string string_field(const ordered_json& obj, const char* key, const std::string& where, const std::string& fallback = "") {
    if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
    if (!obj[key].is_string()) throw bad(where + "." + key + " must be a string", where);
    return obj[key].get<std::string>();
}

void check_count(size_t n, size_t limit, const char* what) {
    if (n > limit) throw bad(std::string(what) + " has " + std::to_string(n) + " entries; this server takes at most " + std::to_string(limit), what);
}

void check_schema_size(const ordered_json& schema, size_t limit, const std::string& where) {
    const size_t n = schema.dump().size();
    if (n > limit)
        throw bad(where + " is a schema of " + std::to_string(n) + " bytes (compact JSON); this server takes at most " + std::to_string(limit),
                  where);
}

// OpenAI message content: a string, null, or [{"type":"text","text":"..."}].
std::string text_of(const ordered_json& content, const std::string& param) {
    if (content.is_string()) return content.get<std::string>();
    if (content.is_null()) return "";
    if (content.is_array()) {
        std::string s;
        for (const auto& part : content) {
            if (!part.is_object() || string_field(part, "type", param) != "text" || !part.contains("text") || !part["text"].is_string())
                throw bad(param + ": only text content parts are supported", param);
            s += part["text"].get<std::string>();
        }
        return s;
    }
    throw bad(param + " must be a string or an array of text parts", param);
}

void read_stop_list(const ordered_json& list, const char* key, size_t max_count, const RequestLimits& limits, std::vector<std::string>& out) {
    check_count(list.size(), max_count, key);
    for (const auto& s : list) {
        if (!s.is_string()) throw bad(std::string(key) + " entries must be strings", key);
        if (s.get_ref<const std::string&>().size() > limits.max_stop_bytes)
            throw bad(std::string(key) + " entry of " + std::to_string(s.get_ref<const std::string&>().size()) + " bytes; the limit is " +
                          std::to_string(limits.max_stop_bytes),
                      key);
        out.push_back(s.get<std::string>());
    }
}

void read_openai_sampling(const ordered_json& body, ApiRequest& r, const RequestLimits& limits) {
    auto mt = number<int>(body, "max_tokens", 1, limits.n_ctx);
    if (!mt) mt = number<int>(body, "max_completion_tokens", 1, limits.n_ctx);
    r.max_tokens = mt.value_or(limits.max_tokens_default);
    r.sampling.temperature = number<float>(body, "temperature", 0.f, 2.f).value_or(1.f);
    r.sampling.top_p = number<float>(body, "top_p", 0.f, 1.f).value_or(1.f);
    r.sampling.top_k = number<int>(body, "top_k", 0, 1 << 20).value_or(0);
    r.sampling.min_p = number<float>(body, "min_p", 0.f, 1.f).value_or(0.f);
    r.sampling.repeat_penalty = number<float>(body, "repetition_penalty", 0.1f, 10.f).value_or(1.f);
    const auto seed = number<uint64_t>(body, "seed", 0, UINT64_MAX >> 11);
    r.seeded = seed.has_value();
    r.sampling.seed = seed.value_or(static_cast<uint64_t>(now_s()));
    r.ignore_eos = boolean(body, "ignore_eos").value_or(false);
    if (body.contains("stop") && !body["stop"].is_null()) {
        if (body["stop"].is_string()) {
            const ordered_json one = ordered_json::array({body["stop"]});
            read_stop_list(one, "stop", 4, limits, r.stop);
        } else if (body["stop"].is_array()) {
            read_stop_list(body["stop"], "stop", 4, limits, r.stop);
        } else {
            throw bad("stop must be a string or up to 4 strings", "stop");
        }
    }
}

void read_openai_logprobs(const ordered_json& body, ApiRequest& r, bool chat) {
    if (chat) {
        const bool on = boolean(body, "logprobs").value_or(false);
        const auto top = number<int>(body, "top_logprobs", 0, 20);
        if (top && !on) throw bad("top_logprobs needs logprobs: true", "top_logprobs");
        if (on) r.logprobs = top.value_or(0);
    } else if (auto n = number<int>(body, "logprobs", 0, 5)) {
        r.logprobs = *n;
    }
}

// tools: [{"type":"function","function":{"name","description","parameters"}}], key order kept for the prompt.
std::vector<ToolSpec> read_openai_tools(const ordered_json& body, const RequestLimits& limits) {
    if (body.contains("tools") && body["tools"].is_array()) check_count(body["tools"].size(), limits.max_tools, "tools");
    return read_tool_list(body, [&limits](const ordered_json& t, const std::string& where) {
        if (!t.is_object() || string_field(t, "type", where) != "function" || !t.contains("function") || !t["function"].is_object())
            throw bad(where + " must be {\"type\": \"function\", \"function\": {...}}", where);
        const auto& f = t["function"];
        if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
            throw bad(where + ".function.name must be a non-empty string", where);
        if (f.contains("parameters") && !f["parameters"].is_object()) throw bad(where + ".function.parameters must be a JSON schema object", where);
        if (f.contains("parameters")) check_schema_size(f["parameters"], limits.max_schema_bytes, where + ".function.parameters");
        return ToolSpec{f["name"].get<std::string>(),
                        f.contains("description") && f["description"].is_string() ? f["description"].get<std::string>() : "", t,
                        f.contains("parameters") ? f["parameters"] : ordered_json::object()};
    });
}

void read_openai_tool_choice(const ordered_json& body, ChatInput& in) {
    if (body.contains("parallel_tool_calls")) in.parallel_tool_calls = boolean(body, "parallel_tool_calls").value_or(true);
    if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return;
    const ordered_json& c = body["tool_choice"];
    if (c.is_string()) {
        const std::string s = c.get<std::string>();
        if (s == "none") in.tool_choice = ToolChoice::None;
        else if (s == "auto") in.tool_choice = ToolChoice::Auto;
        else if (s == "required") in.tool_choice = ToolChoice::Required;
        else throw bad("tool_choice '" + s + "' is not none, auto, required or a named function", "tool_choice");
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
        in.tool_choice = ToolChoice::Named;
        in.forced_tool = c["function"]["name"].get<std::string>();
        if (!find_tool(in.tools, in.forced_tool)) throw bad("tool_choice names '" + in.forced_tool + "', which is not in tools", "tool_choice");
    } else {
        throw bad("tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
    }
    if (in.tool_choice != ToolChoice::None && in.tool_choice != ToolChoice::Auto && in.tools.empty())
        throw bad("tool_choice asks for a tool call but tools is empty", "tool_choice");
}

void read_response_format(const ordered_json& body, ChatInput& in, const RequestLimits& limits) {
    if (!body.contains("response_format") || body["response_format"].is_null()) return;
    const ordered_json& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) throw bad("response_format must be {\"type\": ...}", "response_format");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object" || type == "json_schema") in.response_format = type;
    if (type == "json_object") {
        in.response_schema = json{{"type", "object"}};
    } else if (type == "json_schema") {
        if (!rf.contains("json_schema") || !rf["json_schema"].is_object() || !rf["json_schema"].contains("schema"))
            throw bad("response_format.json_schema.schema is required", "response_format");
        check_schema_size(rf["json_schema"]["schema"], limits.max_schema_bytes, "response_format.json_schema.schema");
        in.response_schema = json::parse(rf["json_schema"]["schema"].dump());
    } else if (type != "text") {
        throw bad("response_format type '" + type + "' is not text, json_object or json_schema", "response_format");
    }
}

ChatMessage read_openai_message(const ordered_json& m, const std::string& where, const TurnRecall& recall) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad(where + ".role must be a string", where);
    ChatMessage cm;
    cm.role = m["role"].get<std::string>();
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool" && cm.role != "developer")
        throw bad(where + ".role '" + cm.role + "' is not system, user, assistant or tool", where);
    if (cm.role == "developer") cm.role = "system";
    cm.content = text_of(m.contains("content") ? m["content"] : ordered_json(nullptr), where + ".content");
    if (cm.role == "tool") cm.tool_call_id = string_field(m, "tool_call_id", where);
    cm.name = string_field(m, "name", where);
    if (cm.role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array()) {
        for (size_t k = 0; k < m["tool_calls"].size(); ++k) {
            const auto& tc = m["tool_calls"][k];
            const std::string w = where + ".tool_calls[" + std::to_string(k) + "]";
            if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object() || !tc["function"].contains("name") ||
                !tc["function"]["name"].is_string())
                throw bad(w + ".function.name must be a string", w);
            const auto& f = tc["function"];
            std::string args = f.contains("arguments") ? (f["arguments"].is_string() ? f["arguments"].get<std::string>() : f["arguments"].dump())
                                                       : "{}";
            cm.tool_calls.push_back({string_field(tc, "id", w), f["name"].get<std::string>(), args});
        }
    }
    if (cm.role == "assistant") {
        if (recall) cm.generated = recall(cm.content, cm.tool_calls);
        // Reasoning a client sends back separately goes where the templates look for it.
        const std::string reasoning = string_field(m, "reasoning_content", where);
        if (!reasoning.empty() && cm.content.find("</think>") == std::string::npos)
            cm.content = "<think>\n" + reasoning + "\n</think>\n\n" + cm.content;
    }
    return cm;
}

// Anthropic text: a string, null, or an array of text blocks.
std::string block_text(const ordered_json& content, const std::string& where) {
    if (content.is_string()) return content.get<std::string>();
    if (content.is_null()) return "";
    if (!content.is_array()) throw bad(where + " must be a string or an array of content blocks", where);
    std::string s;
    for (size_t i = 0; i < content.size(); ++i) {
        const auto& b = content[i];
        const std::string w = where + "[" + std::to_string(i) + "]";
        if (!b.is_object() || string_field(b, "type", w) != "text" || !b.contains("text") || !b["text"].is_string())
            throw bad(w + ": only text blocks are supported here", where);
        s += b["text"].get<std::string>();
    }
    return s;
}

// Anthropic messages to chat messages: tool_result blocks become tool turns (before the user's text, as
// Anthropic orders them), an assistant's thinking / text / tool_use blocks one assistant turn.
void read_anthropic_message(const ordered_json& m, const std::string& where, const TurnRecall& recall, std::vector<ChatMessage>& out) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad(where + ".role must be a string", where);
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant") throw bad(where + ".role '" + role + "' is not user or assistant", where);
    if (!m.contains("content")) throw bad(where + ".content is required", where);
    const auto& content = m["content"];
    ChatMessage msg(role, "");
    std::string reasoning;
    if (content.is_string()) {
        msg.content = content.get<std::string>();
    } else if (!content.is_array()) {
        throw bad(where + ".content must be a string or an array of content blocks", where);
    } else {
        for (size_t i = 0; i < content.size(); ++i) {
            const auto& b = content[i];
            const std::string w = where + ".content[" + std::to_string(i) + "]";
            const std::string type = b.is_object() ? string_field(b, "type", w) : "";
            if (type == "text") {
                if (!b.contains("text") || !b["text"].is_string()) throw bad(w + ".text must be a string", w);
                msg.content += b["text"].get<std::string>();
            } else if (type == "thinking" && role == "assistant") {
                reasoning += string_field(b, "thinking", w);
            } else if (type == "redacted_thinking" && role == "assistant") {
            } else if (type == "tool_use" && role == "assistant") {
                if (!b.contains("name") || !b["name"].is_string()) throw bad(w + ".name must be a string", w);
                const ordered_json input = b.contains("input") ? b["input"] : ordered_json::object();
                if (!input.is_object()) throw bad(w + ".input must be an object", w);
                msg.tool_calls.push_back({string_field(b, "id", w), b["name"].get<std::string>(), input.dump()});
            } else if (type == "tool_result" && role == "user") {
                ChatMessage result("tool", block_text(b.contains("content") ? b["content"] : ordered_json(nullptr), w + ".content"));
                result.tool_call_id = string_field(b, "tool_use_id", w);
                out.push_back(std::move(result));
            } else {
                throw bad(w + ": block type '" + type + "' is not supported in a " + role + " message", w);
            }
        }
        if (role == "user" && msg.content.empty() && !out.empty() && out.back().role == "tool") return;  // only tool results
    }
    if (role == "assistant") {
        if (recall) msg.generated = recall(msg.content, msg.tool_calls);
        if (!reasoning.empty()) msg.content = "<think>\n" + reasoning + "\n</think>\n\n" + msg.content;
    }
    out.push_back(std::move(msg));
}

std::vector<ToolSpec> read_anthropic_tools(const ordered_json& body, const RequestLimits& limits) {
    if (body.contains("tools") && body["tools"].is_array()) check_count(body["tools"].size(), limits.max_tools, "tools");
    return read_tool_list(body, [&limits](const ordered_json& t, const std::string& where) {
        if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty())
            throw bad(where + ".name must be a non-empty string", where);
        const ordered_json schema = t.contains("input_schema") ? t["input_schema"] : ordered_json::object();
        if (!schema.is_object()) throw bad(where + ".input_schema must be a JSON schema object", where);
        check_schema_size(schema, limits.max_schema_bytes, where + ".input_schema");
        const std::string name = t["name"].get<std::string>(),
                          description = t.contains("description") && t["description"].is_string() ? t["description"].get<std::string>() : "";
        // Declared to the model exactly as the same tool from an OpenAI client.
        ordered_json declaration = {{"type", "function"}, {"function", {{"name", name}, {"description", description}, {"parameters", schema}}}};
        return ToolSpec{name, description, declaration, schema};
    });
}

void read_anthropic_tool_choice(const ordered_json& body, ChatInput& in) {
    if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return;
    const ordered_json& c = body["tool_choice"];
    const std::string type = c.is_object() ? string_field(c, "type", "tool_choice") : "";
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

// The deepest nesting of arrays and objects in JSON text, stopping once past `limit` (strings skipped): checked
// before parsing, since printing and schema walks recurse once per level.
int nesting_depth(const std::string& text, int limit) {
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
            if (deepest > limit) break;
        } else if (c == ']' || c == '}') --depth;
    }
    return deepest;
}

}  // namespace

ordered_json parse_request_body(const std::string& body, const RequestLimits& limits) {
    if (const int depth = nesting_depth(body, limits.max_json_depth); depth > limits.max_json_depth)
        throw bad("the body nests JSON deeper than " + std::to_string(limits.max_json_depth) + " levels");
    ordered_json parsed = ordered_json::parse(body, nullptr, false);
    if (parsed.is_discarded()) throw bad("the body is not valid JSON");
    if (!parsed.is_object()) throw bad("the body must be a JSON object");
    return parsed;
}

ApiRequest read_openai_chat(const ordered_json& body, const RequestLimits& limits, const TurnRecall& recall) {
    ApiRequest r;
    r.stream = boolean(body, "stream").value_or(false);
    read_openai_sampling(body, r, limits);
    read_openai_logprobs(body, r, true);
    ChatInput& in = r.chat;
    read_response_format(body, in, limits);
    in.tools = read_openai_tools(body, limits);
    read_openai_tool_choice(body, in);
    if (!body.contains("messages") || !body["messages"].is_array()) throw bad("messages must be an array", "messages");
    if (body["messages"].empty()) throw bad("messages is empty", "messages");
    check_count(body["messages"].size(), limits.max_messages, "messages");
    for (size_t i = 0; i < body["messages"].size(); ++i)
        in.messages.push_back(read_openai_message(body["messages"][i], "messages[" + std::to_string(i) + "]", recall));
    // The reasoning effort (gpt-oss, Kimi K3): OpenAI's reasoning_effort, or the templates' own kwargs
    // (reasoning_effort for gpt-oss, thinking_effort for Kimi K3).
    auto effort = [&](const ordered_json& obj, const std::string& where, const char* key) {
        if (!obj.contains(key)) return;
        const std::string e = string_field(obj, key, where.empty() ? "request" : "chat_template_kwargs");
        if (e == "low") in.reasoning_effort = ReasoningEffort::Low;
        else if (e == "medium") in.reasoning_effort = ReasoningEffort::Medium;
        else if (e == "high") in.reasoning_effort = ReasoningEffort::High;
        else if (e == "max") in.reasoning_effort = ReasoningEffort::Max;
        else throw bad(std::string(key) + " '" + e + "' is not low, medium, high or max", where + key);
    };
    effort(body, "", "reasoning_effort");
    if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object()) {
        const ordered_json& kw = body["chat_template_kwargs"];
        for (const char* key : {"enable_thinking", "thinking"})
            if (kw.contains(key) && kw[key].is_boolean()) in.thinking = kw[key].get<bool>();
        effort(kw, "chat_template_kwargs.", "reasoning_effort");
        effort(kw, "chat_template_kwargs.", "thinking_effort");
    }
    return r;
}

ApiRequest read_openai_completion(const ordered_json& body, const RequestLimits& limits) {
    ApiRequest r;
    r.stream = boolean(body, "stream").value_or(false);
    read_openai_sampling(body, r, limits);
    read_openai_logprobs(body, r, false);
    if (!body.contains("prompt")) throw bad("prompt is required", "prompt");
    const ordered_json& p = body["prompt"];
    if (p.is_string()) {
        r.prompt_text = p.get<std::string>();
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
        r.prompt_is_ids = true;
        for (const auto& t : p) {
            if (!t.is_number_integer()) throw bad("prompt token " + t.dump() + " is not an integer", "prompt");
            r.prompt_ids.push_back(t.get<int64_t>());
        }
    } else {
        throw bad("prompt must be a string or an array of token ids", "prompt");
    }
    return r;
}

ApiRequest read_anthropic_messages(const ordered_json& body, const RequestLimits& limits, const TurnRecall& recall, bool count_only) {
    ApiRequest r;
    const auto max_tokens = number<int>(body, "max_tokens", 1, limits.n_ctx);
    if (!max_tokens && !count_only) throw bad("max_tokens is required", "max_tokens");
    r.max_tokens = max_tokens.value_or(1);
    r.sampling.temperature = number<float>(body, "temperature", 0.f, 1.f).value_or(1.f);
    r.sampling.top_p = number<float>(body, "top_p", 0.f, 1.f).value_or(1.f);
    r.sampling.top_k = number<int>(body, "top_k", 0, 1 << 20).value_or(0);
    r.sampling.min_p = 0.f;
    r.sampling.seed = static_cast<uint64_t>(now_s());
    if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
        if (!body["stop_sequences"].is_array()) throw bad("stop_sequences must be an array of strings", "stop_sequences");
        read_stop_list(body["stop_sequences"], "stop_sequences", limits.max_stop, limits, r.stop);
    }
    ChatInput& in = r.chat;
    in.tools = read_anthropic_tools(body, limits);
    read_anthropic_tool_choice(body, in);
    if (body.contains("thinking") && body["thinking"].is_object()) in.thinking = string_field(body["thinking"], "type", "thinking") == "enabled";
    if (body.contains("system") && !body["system"].is_null()) {
        const std::string system = block_text(body["system"], "system");
        if (!system.empty()) in.messages.emplace_back("system", system);
    }
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
        throw bad("messages must be a non-empty array", "messages");
    check_count(body["messages"].size(), limits.max_messages, "messages");
    for (size_t i = 0; i < body["messages"].size(); ++i)
        read_anthropic_message(body["messages"][i], "messages[" + std::to_string(i) + "]", recall, in.messages);
    r.stream = boolean(body, "stream").value_or(false);
    return r;
}

}  // namespace moe

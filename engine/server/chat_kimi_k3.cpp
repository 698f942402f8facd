// Kimi K3: tagged messages, <|open|>TAG ATTRS<|sep|> ... <|close|>TAG<|sep|>, each ended by <|end_of_msg|>; an
// assistant turn holds a think channel (while thinking is on), a response channel and a tools section whose calls
// carry one element per argument, typed. As llama.cpp's models/templates/Kimi-K3.jinja renders it
// (tests/fixtures/chat_tools/kimi-k3.txt).
#include <algorithm>
#include <cctype>

#include "engine/server/chat_family.h"

namespace moe::kimi {
namespace {
using namespace moe::chat;

const std::string kSep = "<|sep|>", kEndOfMsg = "<|end_of_msg|>";
const std::string kToolsOpen = "<|open|>tools<|sep|>", kToolsClose = "<|close|>tools<|sep|>";
const std::string kResponseOpen = "<|open|>response<|sep|>", kResponseClose = "<|close|>response<|sep|>";
const std::string kMessageClose = "<|close|>message<|sep|>";
const std::string kCallOpen = "<|open|>call", kCallClose = "<|close|>call<|sep|>";
const std::string kArgumentOpen = "<|open|>argument", kArgumentClose = "<|close|>argument<|sep|>";
const std::string kJsonOpen = "<|open|>json", kJsonClose = "<|close|>json<|sep|>";

std::string escape_attr(const std::string& v) {
    std::string s;
    for (const char c : v) s += c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
    return s;
}

std::string unescape_attr(const std::string& v) {
    std::string s = v;
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"&quot;", "\""}, {"&amp;", "&"}})
        for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
    return s;
}

using Attrs = std::vector<std::pair<std::string, std::string>>;
std::string open_tag(const std::string& tag, const Attrs& attrs = {}) {
    std::string s = "<|open|>" + tag;
    for (const auto& [k, v] : attrs) s += " " + k + "=\"" + escape_attr(v) + "\"";
    return s + kSep;
}
std::string close_tag(const std::string& tag) { return "<|close|>" + tag + kSep; }
std::string message(const Attrs& attrs, const std::string& body) { return open_tag("message", attrs) + body + kMessageClose + kEndOfMsg; }

// The template's json_sorted: every object's keys in jinja's dictsort order (case-insensitive, stable), no
// spaces; scalars as json.dumps writes them.
std::string json_sorted(const ordered_json& v) {
    if (v.is_object()) {
        std::vector<std::string> keys;
        for (const auto& [k, x] : v.items()) keys.push_back(k);
        auto lower = [](std::string s) {
            for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            return s;
        };
        std::stable_sort(keys.begin(), keys.end(), [&](const std::string& a, const std::string& b) { return lower(a) < lower(b); });
        std::string s = "{";
        for (size_t i = 0; i < keys.size(); ++i) s += (i ? "," : "") + python_json(keys[i]) + ":" + json_sorted(v[keys[i]]);
        return s + "}";
    }
    if (v.is_array()) {
        std::string s = "[";
        for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json_sorted(v[i]);
        return s + "]";
    }
    return python_json(v);
}

const char* xtml_type(const ordered_json& v) {
    if (v.is_boolean()) return "boolean";
    if (v.is_null()) return "null";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    return v.is_object() ? "object" : "array";
}

std::string calls_text(const std::vector<ToolCall>& calls) {
    std::string s = kToolsOpen;
    for (size_t i = 0; i < calls.size(); ++i) {
        s += open_tag("call", {{"tool", calls[i].name}, {"index", std::to_string(i + 1)}});
        const ordered_json args = ordered_json::parse(calls[i].arguments, nullptr, false);
        if (args.is_object()) {
            for (const auto& [k, v] : args.items())
                s += open_tag("argument", {{"key", k}, {"type", xtml_type(v)}}) + (v.is_string() ? v.get<std::string>() : python_json(v)) +
                     kArgumentClose;
        } else if (!trim(calls[i].arguments).empty()) {  // arguments that are not a JSON object go as the template's JSON block
            s += open_tag("json", {{"type", "object"}}) + calls[i].arguments + kJsonClose;
        }
        s += kCallClose;
    }
    return s + kToolsClose;
}

std::vector<ChatSegment> render(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& opt) {
    Out o;
    const bool thinking = opt.enable_thinking.value_or(true);
    if (!opt.tools.empty()) {
        ordered_json list = ordered_json::array();
        for (const ToolSpec& t : opt.tools) list.push_back(t.declaration);
        o.text(message({{"role", "system"}, {"type", "tool-declare"}},
                       "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" + json_sorted(list) + "\n```"));
    }
    if (thinking) {
        const std::string effort = opt.reasoning_effort == ReasoningEffort::Unset ? "max" : effort_name(opt.reasoning_effort);
        o.text(message({{"role", "system"}, {"type", "thinking-effort"}},
                       "`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), "
                       "supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort=" +
                           effort + "`."));
    }
    const std::string turn_start = open_tag("message", {{"role", "assistant"}}) + (thinking ? open_tag("think") : kResponseOpen);
    const std::vector<ToolCall>* calls = nullptr;  // of the latest assistant turn: tool results answer them
    int tool_index = 0;                            // results since that turn
    for (size_t i = 0; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        // A message's name is an attribute of its tag (escaped like every attribute).
        Attrs attrs{{"role", m.role}};
        if (!m.name.empty()) attrs.push_back({"name", m.name});
        if (m.role == "user" || m.role == "system") {
            o.text(message(attrs, m.content));
        } else if (m.role == "assistant") {
            calls = &m.tool_calls;
            tool_index = 0;
            if (m.generated && !m.generated->empty()) {  // what followed the generation prompt, as generated
                o.text(turn_start);
                o.tokens(*m.generated);
                o.text(kEndOfMsg);
                continue;
            }
            const auto [reasoning, answer] = split_thinking(m.content);
            std::string body = thinking ? open_tag("think") + (trim(reasoning).empty() ? "" : reasoning) + close_tag("think") : "";
            body += kResponseOpen + answer + kResponseClose + (m.tool_calls.empty() ? "" : calls_text(m.tool_calls));
            o.text(message(attrs, body));
        } else if (m.role == "tool" && (i == 0 || ms[i - 1].role != "tool")) {
            // A run of results: in the order of the calls they answer when every one names its call, else as sent,
            // each named by its own `name`, else by its position among the calls.
            size_t end = i;
            while (end < ms.size() && ms[end].role == "tool") ++end;
            auto call_of = [&](const ChatMessage& r) -> const ToolCall* {
                if (!calls || r.tool_call_id.empty()) return nullptr;
                for (const ToolCall& c : *calls)
                    if (!c.id.empty() && c.id == r.tool_call_id) return &c;
                return nullptr;
            };
            bool all_named = true;
            for (size_t k = i; k < end; ++k) all_named = all_named && call_of(ms[k]);
            auto result = [&](const ChatMessage& r, const std::string& name) {
                ++tool_index;
                o.text(message({{"role", "tool"}, {"tool", name}, {"index", std::to_string(tool_index)}}, r.content));
            };
            if (all_named) {
                std::vector<std::string> emitted;
                for (const ToolCall& c : *calls) {
                    if (c.id.empty() || std::find(emitted.begin(), emitted.end(), c.id) != emitted.end()) continue;
                    emitted.push_back(c.id);
                    for (size_t k = i; k < end; ++k)
                        if (ms[k].tool_call_id == c.id) result(ms[k], c.name);
                }
            } else {
                for (size_t k = i; k < end; ++k) {
                    const size_t n = static_cast<size_t>(tool_index);  // this result's position among the calls
                    result(ms[k], !ms[k].name.empty() ? ms[k].name : calls && n < calls->size() ? (*calls)[n].name : "unknown");
                }
            }
        }
    }
    if (opt.tool_choice == "required")
        o.text(message({{"role", "system"}, {"type", "tool-choice"}},
                       "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message."));
    else if (opt.tool_choice == "none")
        o.text(message({{"role", "system"}, {"type", "tool-choice"}},
                       "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message."));
    const std::string raw = "The system is invoked with `response_format=" + opt.response_format +
                            "`.\nYour response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";
    if (opt.response_format == "json_object") o.text(message({{"role", "system"}, {"type", "response-format"}}, raw));
    else if (opt.response_format == "json_schema")
        o.text(message({{"role", "system"}, {"type", "response-format"}},
                       raw + "\nThe JSON data must match the following schema:\n```json\n" + json_sorted(opt.response_schema) + "\n```"));
    if (opt.add_generation_prompt) o.text(turn_start);
    return o.take();
}

// The value of `name="..."` in a tag's attributes.
std::string attribute(const std::string& attrs, const std::string& name) {
    const size_t a = attrs.find(" " + name + "=\"");
    if (a == std::string::npos) return "";
    const size_t from = a + name.size() + 3, to = attrs.find('"', from);
    return to == std::string::npos ? "" : unescape_attr(attrs.substr(from, to - from));
}

// One element `open ATTRS<|sep|>BODY close` at `pos` (whitespace before it skipped); false if there is none.
bool element(const std::string& s, size_t& pos, const std::string& open, const std::string& close, std::string& attrs, std::string& body) {
    const size_t start = s.find_first_not_of(" \t\r\n", pos);
    if (start == std::string::npos || s.compare(start, open.size(), open) != 0) return false;
    const size_t sep = s.find(kSep, start + open.size());
    const size_t end = sep == std::string::npos ? sep : s.find(close, sep + kSep.size());
    if (end == std::string::npos) return false;
    attrs = s.substr(start + open.size(), sep - start - open.size());
    body = s.substr(sep + kSep.size(), end - sep - kSep.size());
    pos = end + close.size();
    return true;
}

// A tools section's body: <|open|>call tool="NAME" index="N"<|sep|> ARGUMENTS <|close|>call<|sep|>, ...; the
// arguments one typed element each, or one JSON block.
bool parse_calls(const std::string& body, const std::string&, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    std::vector<ToolCall> calls;
    size_t pos = 0;
    std::string attrs, inner;
    while (element(body, pos, kCallOpen, kCallClose, attrs, inner)) {
        ToolCall call;
        call.name = attribute(attrs, "tool");
        const ToolSpec* tool = find_tool(tools, call.name);
        ordered_json args = ordered_json::object();
        size_t p = 0;
        std::string arg_attrs, value;
        if (element(inner, p, kJsonOpen, kJsonClose, arg_attrs, value)) {
            if (!json_object(value, args)) return false;
        } else {
            while (element(inner, p, kArgumentOpen, kArgumentClose, arg_attrs, value)) {
                const std::string key = attribute(arg_attrs, "key"), type = attribute(arg_attrs, "type");
                ordered_json v = type == "string" || type.empty() ? ordered_json() : ordered_json::parse(value, nullptr, false);
                args[key] = type == "string"                                        ? ordered_json(value)
                            : (v.is_discarded() || (v.is_null() && type != "null")) ? tag_argument_value(tool, key, value)
                                                                                    : v;
            }
        }
        if (!trim(inner.substr(p)).empty() || !finish_call(call, args, tools)) return false;
        calls.push_back(std::move(call));
    }
    if (calls.empty() || !trim(body.substr(pos)).empty()) return false;
    for (auto& c : calls) out.push_back(std::move(c));
    return true;
}

// A forced call: the response channel closes empty and the call's arguments go as a JSON block, which the
// template renders too and the grammar can hold to the tool's schema.
std::string call_head(const std::string& name) { return open_tag("call", {{"tool", name}, {"index", "1"}}) + open_tag("json", {{"type", "object"}}); }

}  // namespace

const ChatFamilyFormat kK3{"kimi-k3",
                           render,
                           {kResponseClose + kToolsOpen, kJsonClose + kCallClose + kToolsClose, true},
                           call_head,
                           {kToolsOpen},
                           kToolsClose,
                           parse_calls,
                           {"<|open|>think<|sep|>", "<|close|>think<|sep|>"},
                           "",
                           false,
                           {kResponseOpen, kResponseClose, kMessageClose, kEndOfMsg}};

}  // namespace moe::kimi

#include "engine/server/chat_minimax.h"

namespace moe::minimax {
namespace {

const std::string kBegin = "]~!b[", kTurn = "]~b]", kEnd = "[e~[";

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

std::string calls_text(const std::vector<ToolCall>& calls) {
    std::string s = "\n" + std::string(kCallOpen) + "\n";
    for (const ToolCall& c : calls) {
        s += call_head(c.name);
        const ordered_json args = arguments_object(c.arguments);
        for (const auto& [k, v] : args.items())
            s += "<parameter name=\"" + k + "\">" + (v.is_string() ? v.get<std::string>() : python_json(v)) + "</parameter>\n";
        s += "</invoke>\n";
    }
    // The newline before the turn's end is the template's (a comment line after the closing tag).
    return s + kCallClose + "\n";
}

}  // namespace

std::string call_head(const std::string& name) { return "<invoke name=\"" + name + "\">\n"; }

std::vector<ChatSegment> render(const std::vector<ChatMessage>& ms, const ChatRenderOptions& opt) {
    std::vector<ChatSegment> segs;
    auto text = [&segs](const std::string& s) {
        if (segs.empty() || !segs.back().tokens.empty()) segs.push_back({});
        segs.back().text += s;
    };
    const bool system_first = !ms.empty() && ms[0].role == "system";
    const size_t first = system_first ? 1 : 0;
    std::string s = kBegin + kTurn + "system\n" + (system_first && !ms[0].content.empty() ? ms[0].content : "You are a helpful assistant.");
    if (!opt.tools.empty()) {
        s += "\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the tools available in JSONSchema format:\n"
             "\n<tools>\n";
        for (const ToolSpec& t : opt.tools) s += "<tool>" + python_json(t.declaration.value("function", ordered_json::object())) + "</tool>\n";
        s += "</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n\n" + std::string(kCallOpen) +
             "\n<invoke name=\"tool-name-1\">\n<parameter name=\"param-key-1\">param-value-1</parameter>\n"
             "<parameter name=\"param-key-2\">param-value-2</parameter>\n...\n</invoke>\n" +
             kCallClose;
    }
    text(s + kEnd + "\n");
    size_t last_user = first;
    bool any_user = false;
    for (size_t i = first; i < ms.size(); ++i)
        if (ms[i].role == "user") last_user = i, any_user = true;
    for (size_t i = first; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        if (m.role == "assistant") {
            if ((!any_user || i > last_user) && m.generated && !m.generated->empty()) {  // what followed the generation prompt's "<think>\n"
                text(kTurn + "ai\n<think>\n");
                segs.push_back({"", *m.generated});
                text(kEnd + "\n");
                continue;
            }
            // The template means to split a think block off and show it only after the last user message, but its
            // `set`s inside a for loop do not leave the loop (jinja2's scoping): the text comes out as it was sent.
            text(kTurn + "ai\n" + m.content + (m.tool_calls.empty() ? "" : calls_text(m.tool_calls)) + kEnd + "\n");
        } else if (m.role == "tool") {
            std::string t = i == first || ms[i - 1].role != "tool" ? kTurn + "tool" : "";
            t += "\n<response>" + m.content + "</response>";
            if (i + 1 == ms.size() || ms[i + 1].role != "tool") t += kEnd + "\n";
            text(t);
        } else if (m.role == "user") {
            text(kTurn + "user\n" + m.content + kEnd + "\n");
        }
    }
    // The template always opens a think block; with thinking off it is closed at once (as the other families do).
    if (opt.add_generation_prompt) text(kTurn + "ai\n<think>\n" + (opt.enable_thinking == false ? "\n</think>\n\n" : ""));
    return segs;
}

bool parse_calls(const std::string& body, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    const std::string open = "<invoke name=\"", param = "<parameter name=\"";
    size_t pos = 0;
    std::vector<ToolCall> calls;
    while (!blank(body.substr(pos))) {
        const size_t start = body.find(open, pos);
        if (start == std::string::npos || !blank(body.substr(pos, start - pos))) return false;
        const size_t name_end = body.find("\">", start);
        const size_t close = body.find("</invoke>", start);
        if (name_end == std::string::npos || close == std::string::npos || name_end > close) return false;
        ToolCall c;
        c.name = body.substr(start + open.size(), name_end - start - open.size());
        const ToolSpec* tool = find_tool(tools, c.name);
        if (c.name.empty() || (!tools.empty() && !tool)) return false;
        ordered_json args = ordered_json::object();
        size_t p = name_end + 2;
        while (p < close) {
            const size_t k = body.find(param, p);
            if (k == std::string::npos || k > close) {
                if (!blank(body.substr(p, close - p))) return false;
                break;
            }
            if (!blank(body.substr(p, k - p))) return false;
            const size_t key_end = body.find("\">", k);
            const size_t value_end = key_end == std::string::npos ? key_end : body.find("</parameter>", key_end);
            if (value_end == std::string::npos || value_end > close) return false;
            const std::string key = body.substr(k + param.size(), key_end - k - param.size());
            args[key] = tag_argument_value(tool, key, body.substr(key_end + 2, value_end - key_end - 2));
            p = value_end + 12;
        }
        c.arguments = args.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
        calls.push_back(std::move(c));
        pos = close + 9;
    }
    if (calls.empty()) return false;
    for (auto& c : calls) out.push_back(std::move(c));
    return true;
}

}  // namespace moe::minimax

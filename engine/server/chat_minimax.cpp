#include "engine/server/chat_minimax.h"

#include "engine/server/chat_family.h"

#include <functional>

namespace moe::minimax {
namespace {

const std::string kBegin = "]~!b[", kTurn = "]~b]", kEnd = "[e~[";

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

std::string strip_newlines(const std::string& s) {
    const size_t a = s.find_first_not_of('\n'), b = s.find_last_not_of('\n');
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

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

// The M3 template's to_xml: objects and arrays as elements (null members left out), booleans as JSON, other
// scalars as Python's str().
std::string to_xml(const ordered_json& v) {
    std::string s;
    if (v.is_object()) {
        for (const auto& [k, x] : v.items())
            if (!x.is_null()) s += kNs + std::string("<") + k + ">" + to_xml(x) + kNs + "</" + k + ">";
    } else if (v.is_array()) {
        for (const auto& x : v) s += kNs + std::string("<item>") + to_xml(x) + kNs + "</item>";
    } else if (v.is_boolean()) {
        s = v.get<bool>() ? "true" : "false";
    } else if (!v.is_null()) {
        s = python_str(v);
    }
    return s;
}

// Text between an element's open tag and its matching close (same name, nesting counted); npos if unclosed.
size_t element_end(const std::string& s, size_t from, const std::string& open, const std::string& close) {
    int depth = 1;
    for (size_t p = from;;) {
        const size_t o = s.find(open, p), c = s.find(close, p);
        if (c == std::string::npos) return std::string::npos;
        if (o != std::string::npos && o < c) {
            ++depth, p = o + open.size();
            continue;
        }
        if (--depth == 0) return c;
        p = c + close.size();
    }
}

// The inverse of to_xml for one value, typed by its schema where there is one: text for strings, elements for
// objects (named children) and arrays (<item> children), else JSON when the text parses.
bool from_xml(const std::string& text, const ordered_json& schema, ordered_json& out) {
    const std::string ns = kNs;
    const std::string type = schema.is_object() && schema.contains("type") && schema["type"].is_string() ? schema["type"].get<std::string>() : "";
    if (type == "string") {
        out = text;
        return true;
    }
    if (!blank(text) && text.find_first_not_of(" \t\r\n") == text.find(ns + "<")) {  // child elements
        const bool items = text.compare(text.find(ns), ns.size() + 6, ns + "<item>") == 0;
        out = items ? ordered_json::array() : ordered_json::object();
        size_t pos = 0;
        while (!blank(text.substr(pos))) {
            const size_t a = text.find(ns + "<", pos);
            if (a == std::string::npos || !blank(text.substr(pos, a - pos))) return false;
            const size_t gt = text.find('>', a + ns.size());
            if (gt == std::string::npos) return false;
            const std::string name = text.substr(a + ns.size() + 1, gt - a - ns.size() - 1);
            if (name.empty() || name[0] == '/' || (items != (name == "item"))) return false;
            const std::string open = ns + "<" + name + ">", close = ns + "</" + name + ">";
            const size_t end = element_end(text, gt + 1, open, close);
            if (end == std::string::npos) return false;
            ordered_json child_schema;
            if (items && schema.is_object() && schema.contains("items")) child_schema = schema["items"];
            if (!items && schema.is_object() && schema.contains("properties") && schema["properties"].contains(name))
                child_schema = schema["properties"][name];
            ordered_json child;
            if (!from_xml(text.substr(gt + 1, end - gt - 1), child_schema, child)) return false;
            if (items) out.push_back(std::move(child));
            else out[name] = std::move(child);
            pos = end + close.size();
        }
        return true;
    }
    ordered_json v = ordered_json::parse(text, nullptr, false);
    out = v.is_discarded() || (type.empty() && v.is_object()) ? ordered_json(text) : v;
    return true;
}

}  // namespace

std::string call_head(const std::string& name) { return "<invoke name=\"" + name + "\">\n"; }
std::string call_head_m3(const std::string& name) { return kNs + std::string("<invoke name=\"") + name + "\">"; }

std::vector<ChatSegment> render(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& opt) {
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

std::vector<ChatSegment> render_m3(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& opt) {
    std::vector<ChatSegment> segs;
    auto text = [&segs](const std::string& s) {
        if (segs.empty() || !segs.back().tokens.empty()) segs.push_back({});
        segs.back().text += s;
    };
    const std::string ns = kNs;
    // thinking_mode: enable_thinking true / false is "enabled" / "disabled"; unset, the template's adaptive default.
    const char* mode = !opt.enable_thinking   ? "adaptive. You are encouraged to think for complex decision-making, multi-step reasoning, or when "
                                                "analyzing function/tool results.\n"
                       : *opt.enable_thinking ? "enabled. You MUST think step by step before every response, including after receiving "
                                                "function/tool results.\n"
                                              : "disabled. Do not output any thinking process.\n";
    std::string s = kBegin + kTurn +
                    "system\nYour model version is MiniMax-M3, developed by MiniMax. Knowledge cutoff: January 2026. Founded in early 2022, "
                    "MiniMax is a global AI foundation model company committed to advancing the frontiers of AI towards AGI.\n\n"
                    "<thinking_instructions>\nYou have a thinking capability that allows you to reason step by step before responding. "
                    "When thinking is enabled, wrap your reasoning in <mm:think></mm:think> tags before your response. When thinking is "
                    "disabled, begin your response directly after the </mm:think> prefix. When thinking is adaptive, decide on your own "
                    "whether to think for the current turn.\nCurrent thinking mode: " +
                    std::string(mode) + "</thinking_instructions>" + kEnd + "\n";
    // The request's system (or developer) message goes to the developer turn, with the tools.
    const bool developer_first = !ms.empty() && (ms[0].role == "system" || ms[0].role == "developer");
    s += kTurn + "developer\n" + (developer_first && !ms[0].content.empty() ? ms[0].content : "You are a helpful assistant.");
    if (!opt.tools.empty()) {
        s += "\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the tools available in JSONSchema format:\n"
             "\n<tools>\n";
        for (const ToolSpec& t : opt.tools) s += "<tool>" + python_json(t.declaration.value("function", ordered_json::object())) + "</tool>\n";
        s += "</tools>\n\nTo call tools, wrap all invocations in a single " + std::string(kM3CallOpen) + kM3CallClose +
             " block. Parameter values containing nested objects or arrays are recursively expanded into XML elements. Example:\n\n" + kM3CallOpen +
             "\n" + ns + "<invoke name=\"tool-name-1\">" + ns + "<param-1>value-1" + ns + "</param-1>" + ns + "<param-2>" + ns + "<item>" + ns +
             "<key-a>val-a" + ns + "</key-a>" + ns + "<key-b>val-b" + ns + "</key-b>" + ns + "</item>" + ns + "</param-2>" + ns + "</invoke>\n" + ns +
             "<invoke name=\"tool-name-2\">" + ns + "<param-1>value-1" + ns + "</param-1>" + ns + "</invoke>\n" + kM3CallClose;
    }
    text(s + kEnd + "\n");
    for (size_t i = developer_first ? 1 : 0; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        if (m.role == "assistant") {
            // Every turn shows its reasoning (or a bare </mm:think>); this engine's own turns are its tokens.
            if (m.generated && !m.generated->empty()) {
                text(kTurn + "ai\n");
                segs.push_back({"", *m.generated});
                text(kEnd + "\n");
                continue;
            }
            std::string reasoning, content = m.content;
            if (const size_t close = content.find("</mm:think>"); close != std::string::npos) {
                reasoning = strip_newlines(content.substr(0, close));
                if (const size_t open = reasoning.rfind("<mm:think>"); open != std::string::npos)
                    reasoning = strip_newlines(reasoning.substr(open + 10));
                content = strip_newlines(content.substr(content.rfind("</mm:think>") + 11));
            }
            std::string body = kTurn + "ai\n" + (reasoning.empty() ? "</mm:think>" : "<mm:think>" + reasoning + "</mm:think>") + content;
            if (!m.tool_calls.empty()) {
                body += std::string(kM3CallOpen) + "\n";
                for (const ToolCall& c : m.tool_calls) {
                    body += call_head_m3(c.name);
                    const ordered_json args = arguments_object(c.arguments);
                    for (const auto& [k, v] : args.items())
                        if (!v.is_null()) body += ns + "<" + k + ">" + to_xml(v) + ns + "</" + k + ">";
                    body += ns + "</invoke>\n";
                }
                body += kM3CallClose;
            }
            text(body + kEnd + "\n");
        } else if (m.role == "tool") {
            std::string t = i == 0 || ms[i - 1].role != "tool" ? kTurn + "tool" : "";
            t += "\n<response>" + m.content + "</response>";
            if (i + 1 == ms.size() || ms[i + 1].role != "tool") t += kEnd + "\n";
            text(t);
        } else if (m.role == "user") {
            text(kTurn + "user\n" + m.content + kEnd + "\n");
        }
    }
    if (opt.add_generation_prompt) text(kTurn + "ai\n" + (!opt.enable_thinking ? "" : *opt.enable_thinking ? "<mm:think>" : "</mm:think>"));
    return segs;
}

namespace {

// The invoke elements of a call section, `open` NAME `">` ARGS `close` with only whitespace around them; each
// one's ARGS read by `args_of` (the dialect's parameters, typed by the tool's schema when declared).
using ArgsFn = std::function<bool(const std::string& inner, const ToolSpec* tool, ordered_json& args)>;
bool parse_invokes(const std::string& body, const std::vector<ToolSpec>& tools, const std::string& open, const std::string& close,
                   const ArgsFn& args_of, std::vector<ToolCall>& out) {
    size_t pos = 0;
    std::vector<ToolCall> calls;
    while (!blank(body.substr(pos))) {
        const size_t start = body.find(open, pos);
        if (start == std::string::npos || !blank(body.substr(pos, start - pos))) return false;
        const size_t name_end = body.find("\">", start);
        const size_t end = body.find(close, start);
        if (name_end == std::string::npos || end == std::string::npos || name_end > end) return false;
        ToolCall c;
        c.name = body.substr(start + open.size(), name_end - start - open.size());
        const ToolSpec* tool = find_tool(tools, c.name);
        if (c.name.empty() || (!tools.empty() && !tool)) return false;
        ordered_json args = ordered_json::object();
        if (!args_of(body.substr(name_end + 2, end - name_end - 2), tool, args)) return false;
        c.arguments = args.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
        calls.push_back(std::move(c));
        pos = end + close.size();
    }
    if (calls.empty()) return false;
    for (auto& c : calls) out.push_back(std::move(c));
    return true;
}

}  // namespace

bool parse_calls_m3(const std::string& body, const std::string&, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    const std::string ns = kNs;
    return parse_invokes(
        body, tools, ns + "<invoke name=\"", ns + "</invoke>",
        [](const std::string& inner, const ToolSpec* tool, ordered_json& args) {
            return blank(inner) || (from_xml(inner, tool ? tool->parameters : ordered_json::object(), args) && args.is_object());
        },
        out);
}

// M2: <parameter name="K">V</parameter> per argument.
bool parse_calls(const std::string& body, const std::string&, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    return parse_invokes(
        body, tools, "<invoke name=\"", "</invoke>",
        [](const std::string& inner, const ToolSpec* tool, ordered_json& args) {
            const std::string param = "<parameter name=\"";
            size_t p = 0;
            while (p < inner.size()) {
                const size_t k = inner.find(param, p);
                if (k == std::string::npos) return blank(inner.substr(p));
                if (!blank(inner.substr(p, k - p))) return false;
                const size_t key_end = inner.find("\">", k);
                const size_t value_end = key_end == std::string::npos ? key_end : inner.find("</parameter>", key_end);
                if (value_end == std::string::npos) return false;
                const std::string key = inner.substr(k + param.size(), key_end - k - param.size());
                args[key] = tag_argument_value(tool, key, inner.substr(key_end + 2, value_end - key_end - 2));
                p = value_end + 12;
            }
            return true;
        },
        out);
}

const ChatFamilyFormat kM2{
    "minimax",
    render,
    {std::string(kCallOpen) + "\n", "", false, TagArguments{"<parameter name=\"", "\">", "</parameter>\n", "</invoke>\n" + std::string(kCallClose)}},
    call_head,
    {kCallOpen},
    kCallClose,
    parse_calls};
const ChatFamilyFormat kM3{
    "minimax-m3",
    render_m3,
    {std::string(kM3CallOpen) + "\n", "", false,
     TagArguments{std::string(kNs) + "<", ">", std::string(kNs) + "</", std::string(kNs) + "</invoke>\n" + kM3CallClose, true, true}},
    call_head_m3,
    {kM3CallOpen},
    kM3CallClose,
    parse_calls_m3,
    {"<mm:think>", "</mm:think>"}};

}  // namespace moe::minimax

// ChatML, Qwen3 and Qwen3.5: <|im_start|>role ... <|im_end|> turns; tools declared in the system turn; calls in
// <tool_call> blocks (Qwen3: a JSON object; Qwen3.5: <function=NAME> with one <parameter=KEY> per argument);
// tool results as <tool_response> blocks inside one user turn.
#include "engine/server/chat_family.h"

namespace moe::qwen {
namespace {
using namespace moe::chat;

const char* const kQwen3ToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const char* const kQwen3ToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
const char* const kQwen35ToolsIntro = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
const char* const kQwen35ToolsOutro =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n"
    "</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>";
std::string qwen3_calls(const std::vector<ToolCall>& calls, bool has_content) {
    std::string s;
    for (size_t k = 0; k < calls.size(); ++k)
        s += std::string(k || has_content ? "\n" : "") + "<tool_call>\n{\"name\": \"" + calls[k].name +
             "\", \"arguments\": " + python_json(arguments_object(calls[k].arguments)) + "}\n</tool_call>";
    return s;
}

std::string qwen35_calls(const std::vector<ToolCall>& calls, bool has_content) {
    std::string s;
    for (size_t k = 0; k < calls.size(); ++k) {
        s += std::string(k ? "\n" : has_content ? "\n\n" : "") + "<tool_call>\n<function=" + calls[k].name + ">\n";
        const ordered_json args = arguments_object(calls[k].arguments);  // (kept alive for the loop)
        for (const auto& [key, v] : args.items()) s += "<parameter=" + key + ">\n" + argument_text(v, false) + "\n</parameter>\n";
        s += "</function>\n</tool_call>";
    }
    return s;
}

// Tool results grouped in one user turn as <tool_response> blocks (Qwen3, Qwen3.5, ChatML).
void qwen_tool_result(Out& o, const std::vector<ChatMessage>& ms, size_t i, const std::string& content) {
    if (i == 0 || ms[i - 1].role != "tool") o.text("<|im_start|>user");
    o.text("\n<tool_response>\n" + content + "\n</tool_response>");
    if (i + 1 == ms.size() || ms[i + 1].role != "tool") o.text("<|im_end|>\n");
}

std::vector<ChatSegment> render_qwen3(ChatFamily family, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    const bool thinking = options.enable_thinking.value_or(true);
    const auto& tools = options.tools;
    const size_t lu = last_user(ms);
    const bool system_first = !ms.empty() && ms[0].role == "system";
    size_t first = 0;
    if (!tools.empty()) {
        o.text("<|im_start|>system\n" + (system_first ? ms[0].content + "\n\n" : "") + kQwen3ToolsIntro + tool_lines(tools, "\n", "") +
               kQwen3ToolsOutro);
        first = system_first ? 1 : 0;
    }
    for (size_t i = first; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        if (m.role == "assistant") {
            o.text("<|im_start|>assistant\n");
            // Qwen3 shows earlier turns without their reasoning; the turn after the last user message keeps it.
            std::string body = family == ChatFamily::Qwen3 && i < lu ? strip_thinking(m.content) : m.content;
            o.assistant_body(m, body + qwen3_calls(m.tool_calls, !strip_thinking(m.content).empty()));
            o.text("<|im_end|>\n");
        } else if (m.role == "tool") {
            qwen_tool_result(o, ms, i, m.content);
        } else {
            o.text("<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n");
        }
    }
    if (options.add_generation_prompt) {
        o.text("<|im_start|>assistant\n");
        if (family == ChatFamily::Qwen3 && !thinking) o.text("<think>\n\n</think>\n\n");
    }
    return o.take();
}

// Qwen3.5: contents trimmed; the turns after the last real user query (not a tool result) show
// "<think>\n" reasoning "\n</think>\n\n" and their answer, earlier ones only the answer; the generation
// prompt opens a think block (or pre-fills an empty one when thinking is off).
std::vector<ChatSegment> render_qwen35(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    const bool thinking = options.enable_thinking.value_or(true);
    const auto& tools = options.tools;
    const bool system_first = !ms.empty() && ms[0].role == "system";
    size_t first = 0;
    if (!tools.empty()) {
        const std::string system = system_first ? trim(ms[0].content) : "";
        o.text(std::string("<|im_start|>system\n") + kQwen35ToolsIntro + tool_lines(tools, "\n", "") + kQwen35ToolsOutro +
               (system.empty() ? "" : "\n\n" + system) + "<|im_end|>\n");
        first = system_first ? 1 : 0;
    }
    size_t last_query = ms.size();
    for (size_t i = ms.size(); i-- > 0;) {
        if (ms[i].role != "user") continue;
        const std::string c = trim(ms[i].content);
        const bool tool_result = c.rfind("<tool_response>", 0) == 0 && c.size() >= 16 && c.substr(c.size() - 16) == "</tool_response>";
        if (!tool_result) {
            last_query = i;
            break;
        }
    }
    for (size_t i = first; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        std::string content = trim(m.content);
        if (m.role == "assistant") {
            const bool keeps_thinking = last_query < ms.size() && i > last_query;
            if (keeps_thinking && m.generated && !m.generated->empty()) {  // what followed the "<think>\n" prefill
                o.text("<|im_start|>assistant\n<think>\n");
                o.tokens(*m.generated);
                o.text("<|im_end|>\n");
                continue;
            }
            std::string reasoning;
            if (const size_t close = content.find("</think>"); close != std::string::npos) {
                std::string before = content.substr(0, close);
                while (!before.empty() && before.back() == '\n') before.pop_back();
                const size_t open = before.rfind("<think>");
                reasoning = lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7));
                content = lstrip_newlines(content.substr(content.rfind("</think>") + 8));
            }
            o.text(keeps_thinking ? "<|im_start|>assistant\n<think>\n" + trim(reasoning) + "\n</think>\n\n" + content
                                  : "<|im_start|>assistant\n" + content);
            o.text(qwen35_calls(m.tool_calls, !trim(content).empty()) + "<|im_end|>\n");
        } else if (m.role == "tool") {
            qwen_tool_result(o, ms, i, content);
        } else {
            o.text("<|im_start|>" + m.role + "\n" + content + "<|im_end|>\n");
        }
    }
    if (options.add_generation_prompt) o.text(thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    return o.take();
}

// {"name": ..., "arguments": {...}} (or "parameters"; arguments as an object or as its JSON text).
bool parse_json_call(const std::string& text, const std::string&, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    return parse_each({text}, tools, out, [&](const std::string& body, ToolCall& call, ordered_json& args) {
        ordered_json j = ordered_json::parse(body, nullptr, false);
        if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
        call.name = j["name"].get<std::string>();
        const ordered_json a = j.contains("arguments") ? j["arguments"] : j.value("parameters", ordered_json::object());
        if (a.is_string()) {
            if (!json_object(a.get<std::string>(), args)) return false;
        } else if (a.is_object()) {
            args = a;
        } else {
            return false;
        }
        return true;
    });
}

// <function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>
bool parse_xml_call(const std::string& text, const std::string&, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    return parse_each({text}, tools, out, [&](const std::string& body, ToolCall& call, ordered_json& args) {
        if (!starts_with(body, "<function=")) return false;
        const size_t gt = body.find('>');
        if (gt == std::string::npos) return false;
        call.name = trim(body.substr(10, gt - 10));
        const ToolSpec* tool = find_tool(tools, call.name);
        size_t pos = gt + 1;
        for (;;) {
            const size_t p = body.find("<parameter=", pos);
            if (p == std::string::npos) break;
            if (!trim(body.substr(pos, p - pos)).empty()) return false;
            const size_t name_end = body.find('>', p);
            const size_t close = name_end == std::string::npos ? std::string::npos : body.find("</parameter>", name_end);
            if (close == std::string::npos) return false;
            const std::string key = trim(body.substr(p + 11, name_end - p - 11));
            std::string value = body.substr(name_end + 1, close - name_end - 1);
            if (starts_with(value, "\n")) value.erase(0, 1);
            if (!value.empty() && value.back() == '\n') value.pop_back();
            args[key] = tag_argument_value(tool, key, value);
            pos = close + 12;
        }
        const std::string tail = trim(body.substr(pos));
        if (!tail.empty() && tail != "</function>") return false;
        return true;
    });
}

std::string json_call_head(const std::string& name) { return name + "\", \"arguments\": "; }
std::string xml_call_head(const std::string& name) { return name + ">\n"; }

// ChatML and Qwen3 share the JSON call format.
const CallSyntax kJsonCall{"<tool_call>\n{\"name\": \"", "}\n</tool_call>", true};

}  // namespace

const ChatFamilyFormat kChatMl{"chatml", render_qwen3, kJsonCall, json_call_head, {"<tool_call>"}, "</tool_call>", parse_json_call};
const ChatFamilyFormat kQwen3{"qwen3", render_qwen3, kJsonCall, json_call_head, {"<tool_call>"}, "</tool_call>", parse_json_call};
const ChatFamilyFormat kQwen35{
    "qwen3.5",
    render_qwen35,
    {"<tool_call>\n<function=", "", false, TagArguments{"<parameter=", ">\n", "\n</parameter>\n", "</function>\n</tool_call>"}},
    xml_call_head,
    {"<tool_call>"},
    "</tool_call>",
    parse_xml_call};

}  // namespace moe::qwen

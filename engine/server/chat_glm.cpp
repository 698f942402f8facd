// GLM-4.5/4.6 (Glm4) and GLM-4.7 / GLM-5.x (Glm47): [gMASK]<sop>, <|system|> <|user|> <|assistant|>
// <|observation|> turns; calls as NAME<arg_key>K</arg_key><arg_value>V</arg_value>... in <tool_call> blocks.
#include "engine/server/chat_family.h"

namespace moe::glm {
namespace {
using namespace moe::chat;

const char* const kGlmToolsIntro =
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n";
const char* const kGlm4ToolsOutro =
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
    "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>";
const char* const kGlm47ToolsOutro =
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>"
    "<arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>";

std::string glm_calls(const std::vector<ToolCall>& calls, bool newlines) {
    const std::string nl = newlines ? "\n" : "";
    std::string s;
    for (const auto& c : calls) {
        s += nl + "<tool_call>" + c.name + nl;
        const ordered_json args = arguments_object(c.arguments);
        for (const auto& [key, v] : args.items())
            s += "<arg_key>" + key + "</arg_key>" + nl + "<arg_value>" + argument_text(v, true) + "</arg_value>" + nl;
        s += "</tool_call>";
    }
    return s;
}

// GLM-4.5/4.6: no newline after <|assistant|> in the generation prompt; history turns carry an empty think
// block (the turns after the last user message their reasoning); with thinking off, user turns end in /nothink.
std::vector<ChatSegment> render_glm4(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    const bool thinking = options.enable_thinking.value_or(true);
    const auto& tools = options.tools;
    const size_t lu = last_user(ms);
    o.text("[gMASK]<sop>");
    if (!tools.empty()) o.text(kGlmToolsIntro + tool_lines(tools, "", "\n") + kGlm4ToolsOutro);
    for (size_t i = 0; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        if (m.role == "assistant") {
            o.text("<|assistant|>");
            if (m.generated && !m.generated->empty()) {
                o.tokens(*m.generated);
            } else {
                const auto [reasoning, answer] = split_thinking(m.content);
                const std::string r = trim(reasoning), a = trim(answer);
                o.text(i > lu && !r.empty() ? "\n<think>" + r + "</think>" : "\n<think></think>");
                if (!a.empty()) o.text("\n" + a);
                o.text(glm_calls(m.tool_calls, true));
            }
        } else if (m.role == "system") {
            o.text("<|system|>\n" + m.content);
        } else if (m.role == "tool") {
            if (i == 0 || ms[i - 1].role != "tool") o.text("<|observation|>");
            o.text("\n<tool_response>\n" + m.content + "\n</tool_response>");
        } else {
            const bool nothink = !thinking && (m.content.size() < 8 || m.content.substr(m.content.size() - 8) != "/nothink");
            o.text("<|user|>\n" + m.content + (nothink ? "/nothink" : ""));
        }
    }
    if (options.add_generation_prompt) o.text(thinking ? "<|assistant|>" : "<|assistant|>\n<think></think>");
    return o.take();
}

// GLM-4.7 / GLM-5.x: no newlines after role tags; a history turn shows "</think>" and its answer, the turns
// after the last user message keep their reasoning; tool results are <tool_response> blocks.
std::vector<ChatSegment> render_glm47(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    const bool thinking = options.enable_thinking.value_or(true);
    const auto& tools = options.tools;
    const size_t lu = last_user(ms);
    const std::string prefill = thinking ? "<think>" : "</think>";
    o.text("[gMASK]<sop>");
    if (!tools.empty()) o.text(kGlmToolsIntro + tool_lines(tools, "", "\n") + kGlm47ToolsOutro);
    for (size_t i = 0; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        if (m.role == "assistant") {
            o.text("<|assistant|>");
            if (m.generated && !m.generated->empty()) {
                o.text(prefill);
                o.tokens(*m.generated);
                continue;
            }
            const auto [reasoning, answer] = split_thinking(m.content);
            const std::string r = trim(reasoning);
            o.text(i > lu && !r.empty() ? "<think>" + r + "</think>" : "</think>");
            o.text(trim(answer) + glm_calls(m.tool_calls, false));
        } else if (m.role == "system") {
            o.text("<|system|>" + m.content);
        } else if (m.role == "tool") {
            if (i == 0 || ms[i - 1].role != "tool") o.text("<|observation|>");
            o.text("<tool_response>" + m.content + "</tool_response>");
        } else {
            o.text("<|user|>" + m.content);
        }
    }
    if (options.add_generation_prompt) o.text("<|assistant|>" + prefill);
    return o.take();
}

// NAME<arg_key>K</arg_key><arg_value>V</arg_value>...
bool parse_call(const std::string& text, const std::string&, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    return parse_each({text}, tools, out, [&](const std::string& body, ToolCall& call, ordered_json& args) {
        const size_t first_key = body.find("<arg_key>");
        call.name = trim(body.substr(0, first_key));
        const ToolSpec* tool = find_tool(tools, call.name);
        size_t pos = first_key == std::string::npos ? body.size() : first_key;
        while (pos < body.size()) {
            const size_t k = body.find("<arg_key>", pos);
            if (k == std::string::npos || !trim(body.substr(pos, k - pos)).empty()) return false;
            const size_t ke = body.find("</arg_key>", k);
            const size_t v = ke == std::string::npos ? ke : body.find("<arg_value>", ke);
            const size_t ve = v == std::string::npos ? v : body.find("</arg_value>", v);
            if (ve == std::string::npos || !trim(body.substr(ke + 10, v - ke - 10)).empty()) return false;
            const std::string key = trim(body.substr(k + 9, ke - k - 9));
            args[key] = tag_argument_value(tool, key, body.substr(v + 11, ve - v - 11));
            pos = ve + 12;
            if (trim(body.substr(pos)).empty()) break;
        }
        return true;
    });
}

std::string glm4_call_head(const std::string& name) { return name + "\n"; }
std::string glm47_call_head(const std::string& name) { return name; }

}  // namespace

const ChatFamilyFormat kGlm4{"glm4",
                             render_glm4,
                             {"\n<tool_call>", "", false, TagArguments{"<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n", "</tool_call>"}},
                             glm4_call_head,
                             {"<tool_call>"},
                             "</tool_call>",
                             parse_call};
const ChatFamilyFormat kGlm47{
    "glm47",         render_glm47,    {"<tool_call>", "", false, TagArguments{"<arg_key>", "</arg_key><arg_value>", "</arg_value>", "</tool_call>"}},
    glm47_call_head, {"<tool_call>"}, "</tool_call>",
    parse_call};

}  // namespace moe::glm

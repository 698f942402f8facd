// DeepSeek-V3/R1 (V3) and DeepSeek-V3.1 and later (V31): <｜User｜> / <｜Assistant｜> turns after the system
// text; tools described after the system prompt (the templates declare none); calls in a
// <｜tool▁calls▁begin｜> section of <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜> pieces (V3:
// function<｜tool▁sep｜>NAME and a fenced JSON block).
#include "engine/server/chat_family.h"

namespace moe::deepseek {
namespace {
using namespace moe::chat;

const std::string kCallsBegin = "<｜tool▁calls▁begin｜>", kCallBegin = "<｜tool▁call▁begin｜>", kCallEnd = "<｜tool▁call▁end｜>",
                  kSep = "<｜tool▁sep｜>", kCallsEnd = "<｜tool▁calls▁end｜>";

// V3.1's split: whatever follows the first </think>, as it is.
std::string after_think(const std::string& content) {
    const size_t close = content.find("</think>");
    return close == std::string::npos ? content : content.substr(close + 8);
}

// DeepSeek's templates declare no tools; the model card's tool description follows the system prompt.
std::string deepseek_tools(const std::vector<ToolSpec>& tools) {
    std::string s = "## Tools\nYou have access to the following tools:\n";
    for (const auto& t : tools) s += "\n### " + t.name + "\nDescription: " + t.description + "\n\nParameters: " + python_json(t.parameters) + "\n";
    return s +
           "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\n"
           "Where:\n\n"
           "- `tool_call_name` must be an exact match to one of the available tools\n"
           "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
           "- For multiple tool calls, chain them directly without separators or spaces\n";
}

std::string deepseek_calls(const std::vector<ToolCall>& calls, bool v3) {
    std::string s = "<｜tool▁calls▁begin｜>";
    for (size_t k = 0; k < calls.size(); ++k) {
        const std::string args = python_json(arguments_object(calls[k].arguments));
        s += v3 ? std::string(k ? "\n" : "") + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + calls[k].name + "\n```json\n" + args +
                      "\n```<｜tool▁call▁end｜>"
                : "<｜tool▁call▁begin｜>" + calls[k].name + "<｜tool▁sep｜>" + args + "<｜tool▁call▁end｜>";
    }
    return s + "<｜tool▁calls▁end｜>";
}

std::vector<ChatSegment> render_v3(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    const auto& tools = options.tools;
    const bool system_first = !ms.empty() && ms[0].role == "system";
    o.text(options.bos_text);
    for (const ChatMessage& m : ms)
        if (m.role == "system") o.text(m.content);
    if (!tools.empty()) o.text(std::string(system_first ? "\n\n" : "") + deepseek_tools(tools));
    for (const ChatMessage& m : ms) {
        if (m.role == "user") {
            o.text("<｜User｜>" + m.content);
        } else if (m.role == "assistant") {
            o.text("<｜Assistant｜>");
            o.assistant_body(m, strip_thinking(m.content) + (m.tool_calls.empty() ? "" : deepseek_calls(m.tool_calls, true)));
            o.text("<｜end▁of▁sentence｜>");
        } else if (m.role == "tool") {
            o.text("<｜tool▁output▁begin｜>" + m.content + "<｜tool▁output▁end｜>");
        }
    }
    if (options.add_generation_prompt) o.text("<｜Assistant｜>");
    return o.take();
}

// V3.1: system prompts joined first; an assistant turn right after a user turn opens with <｜Assistant｜></think>
// (thinking off, the default) and shows only the answer; after a tool result the turn continues bare.
std::vector<ChatSegment> render_v31(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    const bool thinking = options.enable_thinking.value_or(false);
    const auto& tools = options.tools;
    const std::string prefill = thinking ? "<think>" : "</think>";
    o.text(options.bos_text);
    std::string system;
    for (const ChatMessage& m : ms)
        if (m.role == "system") system += (system.empty() ? "" : "\n\n") + m.content;
    if (!tools.empty()) system += (system.empty() ? "" : "\n\n") + deepseek_tools(tools);
    o.text(system);
    bool last_user = false, after_tool = false;
    for (const ChatMessage& m : ms) {
        if (m.role == "user") {
            o.text("<｜User｜>" + m.content);
            last_user = true;
            after_tool = false;
        } else if (m.role == "assistant") {
            // A turn this server generated went out after the generation prompt's prefill; any other
            // history turn shows "</think>" and its answer.
            const bool spliced = m.generated && !m.generated->empty();
            if (last_user) o.text("<｜Assistant｜>" + (spliced ? prefill : std::string("</think>")));
            last_user = false;
            if (spliced) o.tokens(*m.generated);
            else if (!m.tool_calls.empty()) o.text(after_think(m.content) + deepseek_calls(m.tool_calls, false));
            else o.text(after_tool ? m.content : after_think(m.content));
            o.text("<｜end▁of▁sentence｜>");
            after_tool = false;
        } else if (m.role == "tool") {
            o.text("<｜tool▁output▁begin｜>" + m.content + "<｜tool▁output▁end｜>");
            last_user = false;
            after_tool = true;
        }
    }
    if (options.add_generation_prompt && last_user) o.text("<｜Assistant｜>" + prefill);
    return o.take();
}

// NAME<sep>ARGS (V3.1) or function<sep>NAME\n```json\nARGS\n``` (V3), each piece of the section.
bool parse_calls(const std::string& text, const std::string& opened_by, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    return parse_section(text, opened_by, kCallBegin, kCallEnd, tools, out, [&](const std::string& body, ToolCall& call, ordered_json& args) {
        const size_t sep = body.find(kSep);
        if (sep == std::string::npos) return false;
        const std::string head = trim(body.substr(0, sep)), rest = body.substr(sep + kSep.size());
        if (head == "function") {
            const size_t nl = rest.find('\n'), fence = rest.find("```json"), fence_end = rest.rfind("```");
            if (nl == std::string::npos || fence == std::string::npos || fence_end <= fence) return false;
            call.name = trim(rest.substr(0, nl));
            if (!json_object(rest.substr(fence + 7, fence_end - fence - 7), args)) return false;
        } else {
            call.name = head;
            if (!json_object(rest, args)) return false;
        }
        return true;
    });
}

std::string call_head(const std::string& name) { return name + kSep; }

}  // namespace

const ChatFamilyFormat kV3{"deepseek", render_v3,  {kCallsBegin + kCallBegin, kCallEnd + kCallsEnd, true}, call_head, {kCallsBegin, kCallBegin},
                           kCallsEnd,  parse_calls};
const ChatFamilyFormat kV31{"deepseek-v3.1", render_v31, {kCallsBegin + kCallBegin, kCallEnd + kCallsEnd, true}, call_head, {kCallsBegin, kCallBegin},
                            kCallsEnd,       parse_calls};

}  // namespace moe::deepseek

// Kimi-K2 (and Kimi K3): a role header, <|im_middle|>, the content, <|im_end|>; a default system prompt when
// none is given; calls numbered across the conversation (functions.NAME:N) in a <|tool_calls_section_begin|>
// section, results answering them in order.
#include <deque>

#include "engine/server/chat_family.h"

namespace moe::kimi {
namespace {
using namespace moe::chat;

const std::string kSectionBegin = "<|tool_calls_section_begin|>", kCallBegin = "<|tool_call_begin|>", kArgs = "<|tool_call_argument_begin|>",
                  kCallEnd = "<|tool_call_end|>", kSectionEnd = "<|tool_calls_section_end|>";

std::vector<ChatSegment> render(ChatFamily, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    const auto& tools = options.tools;
    if (!tools.empty()) {
        std::string list = "[";
        for (size_t k = 0; k < tools.size(); ++k) list += (k ? ", " : "") + python_json(tools[k].declaration);
        o.text("<|im_system|>tool_declare<|im_middle|>" + list + "]<|im_end|>");
    }
    std::deque<std::string> pending_ids;
    int counter = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
        const ChatMessage& m = ms[i];
        if (i == 0 && m.role != "system") o.text("<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>");
        if (m.role == "system") o.text("<|im_system|>system<|im_middle|>" + m.content + "<|im_end|>");
        else if (m.role == "user") o.text("<|im_user|>user<|im_middle|>" + m.content + "<|im_end|>");
        else if (m.role == "tool") {
            std::string id = "functions.unknown:" + std::to_string(counter);
            if (!pending_ids.empty()) {
                id = pending_ids.front();
                pending_ids.pop_front();
            }
            o.text("<|im_system|>tool<|im_middle|>## Return of " + id + "\n" + m.content + "<|im_end|>");
        } else if (m.role == "assistant") {
            o.text("<|im_assistant|>assistant<|im_middle|>");
            std::string body = m.content;
            if (!m.tool_calls.empty()) {
                body += "<|tool_calls_section_begin|>";
                for (const auto& c : m.tool_calls) {
                    const std::string id = "functions." + c.name + ":" + std::to_string(counter++);
                    pending_ids.push_back(id);
                    body += "<|tool_call_begin|>" + id + "<|tool_call_argument_begin|>" + python_json(arguments_object(c.arguments)) +
                            "<|tool_call_end|>";
                }
                body += "<|tool_calls_section_end|>";
            }
            o.assistant_body(m, body);
            o.text("<|im_end|>");
        }
    }
    if (options.add_generation_prompt) o.text("<|im_assistant|>assistant<|im_middle|>");
    return o.take();
}

// functions.NAME:N<|tool_call_argument_begin|>ARGS, each piece of the section.
bool parse_calls(const std::string& text, const std::string& opened_by, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out) {
    return parse_section(text, opened_by, kCallBegin, kCallEnd, tools, out, [&](const std::string& body, ToolCall& call, ordered_json& args) {
        const size_t a = body.find(kArgs);
        if (a == std::string::npos) return false;
        std::string id = trim(body.substr(0, a));
        if (starts_with(id, "functions.")) id.erase(0, 10);
        if (const size_t colon = id.rfind(':'); colon != std::string::npos && id.find_first_not_of("0123456789", colon + 1) == std::string::npos)
            id.resize(colon);
        call.name = id;
        if (!json_object(body.substr(a + kArgs.size()), args)) return false;
        return true;
    });
}

std::string call_head(const std::string& name) { return name + ":0" + kArgs; }

}  // namespace

const ChatFamilyFormat kK2{
    "kimi-k2",   render,     {kSectionBegin + kCallBegin + "functions.", kCallEnd + kSectionEnd, true}, call_head, {kSectionBegin, kCallBegin},
    kSectionEnd, parse_calls};

}  // namespace moe::kimi

#include "engine/server/chat_template.h"

#include "engine/server/chat_harmony.h"
#include "engine/server/chat_minimax.h"

#include <deque>

namespace moe {

const char* family_name(ChatFamily f) {
    switch (f) {
        case ChatFamily::ChatML: return "chatml";
        case ChatFamily::Qwen3: return "qwen3";
        case ChatFamily::Qwen35: return "qwen3.5";
        case ChatFamily::Glm4: return "glm4";
        case ChatFamily::Glm47: return "glm47";
        case ChatFamily::DeepSeek: return "deepseek";
        case ChatFamily::DeepSeekV31: return "deepseek-v3.1";
        case ChatFamily::KimiK2: return "kimi-k2";
        case ChatFamily::Harmony: return "harmony";
        case ChatFamily::MiniMax: return "minimax";
        case ChatFamily::MiniMaxM3: return "minimax-m3";
    }
    return "?";
}

const char* effort_name(ReasoningEffort e) {
    switch (e) {
        case ReasoningEffort::Low: return "low";
        case ReasoningEffort::High: return "high";
        default: return "medium";
    }
}

ChatFamily detect_chat_family(const std::string& t) {
    auto has = [&t](const char* s) { return t.find(s) != std::string::npos; };
    // DeepSeek-V3.1 and later close the think block after <｜Assistant｜> unless thinking is asked for.
    if (has("<｜User｜>") || has("<｜Assistant｜>")) return has("</think>") && has("thinking") ? ChatFamily::DeepSeekV31 : ChatFamily::DeepSeek;
    if (has("<|im_middle|>")) return ChatFamily::KimiK2;
    if (has("<|start|>") && has("<|channel|>")) return ChatFamily::Harmony;
    if (has("]~b]") && has("[e~[")) return has("]<]minimax[>[") ? ChatFamily::MiniMaxM3 : ChatFamily::MiniMax;
    // GLM-4.5/4.6 end user turns in /nothink to switch thinking off; GLM-4.7 and GLM-5.x use </think>.
    if (has("[gMASK]") || (has("<|user|>") && has("<|assistant|>"))) return has("/nothink") ? ChatFamily::Glm4 : ChatFamily::Glm47;
    // Qwen3.5: XML tool calls (<function=...>) and a think block opened by the generation prompt.
    if (has("<|im_start|>") && has("<function=") && has("<think>")) return ChatFamily::Qwen35;
    if (t.find("<|im_start|>") != std::string::npos)
        return t.find("<think>") != std::string::npos || t.find("enable_thinking") != std::string::npos ? ChatFamily::Qwen3 : ChatFamily::ChatML;
    return ChatFamily::ChatML;
}

ThinkMarkers think_markers(ChatFamily family) {
    if (family == ChatFamily::MiniMaxM3) return {"<mm:think>", "</mm:think>"};
    return {"<think>", "</think>"};
}

std::string strip_thinking(const std::string& content) {
    auto end = content.rfind("</think>");
    if (end == std::string::npos) return content;
    std::string rest = content.substr(end + 8);
    size_t first = rest.find_first_not_of("\n");
    return first == std::string::npos ? std::string() : rest.substr(first);
}

namespace {

class Out {
public:
    void text(const std::string& s) {
        if (segs_.empty() || !segs_.back().tokens.empty()) segs_.push_back({});
        segs_.back().text += s;
    }
    void tokens(const std::vector<int32_t>& t) { segs_.push_back({"", t}); }
    // An assistant turn's body: its generated tokens when we made it, else the family's rendering of the text.
    void assistant_body(const ChatMessage& m, const std::string& rendered_text) {
        if (m.generated && !m.generated->empty()) tokens(*m.generated);
        else text(rendered_text);
    }
    std::vector<ChatSegment> take() { return std::move(segs_); }

private:
    std::vector<ChatSegment> segs_;
};

std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\n\r"), b = s.find_last_not_of(" \t\n\r");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

std::string lstrip_newlines(const std::string& s) {
    const size_t p = s.find_first_not_of('\n');
    return p == std::string::npos ? std::string() : s.substr(p);
}

// A turn's reasoning and answer as GLM's templates split them: around the first </think>, the reasoning after
// its <think>, newlines at the seams dropped.
std::pair<std::string, std::string> split_thinking(const std::string& content) {
    const size_t close = content.find("</think>");
    if (close == std::string::npos) return {"", content};
    std::string before = content.substr(0, close);
    while (!before.empty() && before.back() == '\n') before.pop_back();
    const size_t open = before.rfind("<think>");
    return {lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7)), lstrip_newlines(content.substr(close + 8))};
}

// DeepSeek-V3.1's split: whatever follows the first </think>, as it is.
std::string after_think(const std::string& content) {
    const size_t close = content.find("</think>");
    return close == std::string::npos ? content : content.substr(close + 8);
}

// Index of the last user message: assistant turns before it are history.
size_t last_user(const std::vector<ChatMessage>& ms) {
    size_t idx = ms.size();
    for (size_t i = 0; i < ms.size(); ++i)
        if (ms[i].role == "user") idx = i;
    return idx;
}

// The tool declarations, one JSON object per line, as Qwen's and GLM's templates list them.
std::string tool_lines(const std::vector<ToolSpec>& tools, const char* before, const char* after) {
    std::string s;
    for (const auto& t : tools) s += before + python_json(t.declaration) + after;
    return s;
}

// A call's argument value as GLM's and Qwen3.5's templates write it: strings bare.
std::string argument_text(const ordered_json& v, bool glm) {
    if (v.is_string()) return v.get<std::string>();
    return glm || v.is_object() || v.is_array() ? python_json(v) : python_str(v);
}

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

// Earlier calls in each family's own format (the arguments as the template's tojson writes the object).
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

// Tool results grouped in one user turn as <tool_response> blocks (Qwen3, Qwen3.5, ChatML).
void qwen_tool_result(Out& o, const std::vector<ChatMessage>& ms, size_t i, const std::string& content) {
    if (i == 0 || ms[i - 1].role != "tool") o.text("<|im_start|>user");
    o.text("\n<tool_response>\n" + content + "\n</tool_response>");
    if (i + 1 == ms.size() || ms[i + 1].role != "tool") o.text("<|im_end|>\n");
}

}  // namespace

CallSyntax call_syntax(ChatFamily family) {
    switch (family) {
        case ChatFamily::ChatML:
        case ChatFamily::Qwen3: return {"<tool_call>\n{\"name\": \"", "}\n</tool_call>", true};
        case ChatFamily::Qwen35: return {"<tool_call>\n<function=", "", false};
        case ChatFamily::Glm4: return {"\n<tool_call>", "", false};
        case ChatFamily::Glm47: return {"<tool_call>", "", false};
        case ChatFamily::DeepSeek:
        case ChatFamily::DeepSeekV31: return {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", true};
        case ChatFamily::KimiK2:
            return {"<|tool_calls_section_begin|><|tool_call_begin|>functions.", "<|tool_call_end|><|tool_calls_section_end|>", true};
        case ChatFamily::Harmony: return {harmony::kCallOpen, harmony::kCallTail, true};
        case ChatFamily::MiniMax: return {std::string(minimax::kCallOpen) + "\n", "", false};
        case ChatFamily::MiniMaxM3: return {std::string(minimax::kM3CallOpen) + "\n", "", false};
    }
    return {};
}

std::string call_head(ChatFamily family, const std::string& name) {
    switch (family) {
        case ChatFamily::ChatML:
        case ChatFamily::Qwen3: return name + "\", \"arguments\": ";
        case ChatFamily::Qwen35: return name + ">\n";
        case ChatFamily::Glm4: return name + "\n";
        case ChatFamily::Glm47: return name;
        case ChatFamily::DeepSeek:
        case ChatFamily::DeepSeekV31: return name + "<｜tool▁sep｜>";
        case ChatFamily::KimiK2: return name + ":0<|tool_call_argument_begin|>";
        case ChatFamily::Harmony: return harmony::call_head(name);
        case ChatFamily::MiniMax: return minimax::call_head(name);
        case ChatFamily::MiniMaxM3: return minimax::call_head_m3(name);
    }
    return name;
}

std::string forced_call_prefix(ChatFamily family, const std::string& name) {
    return call_syntax(family).open + (name.empty() ? "" : call_head(family, name));
}

std::string constrained_answer_prefix(ChatFamily family) { return family == ChatFamily::Harmony ? harmony::kFinalHeader : ""; }

std::vector<ChatSegment> render_chat(ChatFamily family, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    if (family == ChatFamily::Harmony) return harmony::render(ms, options);
    if (family == ChatFamily::MiniMax) return minimax::render(ms, options);
    if (family == ChatFamily::MiniMaxM3) return minimax::render_m3(ms, options);
    Out o;
    struct {
        bool add_generation_prompt, enable_thinking;
        std::string bos_text;
    } opt{options.add_generation_prompt, options.enable_thinking.value_or(family != ChatFamily::DeepSeekV31), options.bos_text};
    const auto& tools = options.tools;
    const size_t lu = last_user(ms);
    // Families that fold the first system message into the tool declaration skip it in the loop.
    const bool system_first = !ms.empty() && ms[0].role == "system";
    switch (family) {
        case ChatFamily::Harmony:
        case ChatFamily::MiniMax:
        case ChatFamily::MiniMaxM3: break;  // rendered above
        case ChatFamily::ChatML:
        case ChatFamily::Qwen3: {
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
            if (opt.add_generation_prompt) {
                o.text("<|im_start|>assistant\n");
                if (family == ChatFamily::Qwen3 && !opt.enable_thinking) o.text("<think>\n\n</think>\n\n");
            }
            break;
        }
        case ChatFamily::Qwen35: {
            // Qwen3.5: contents trimmed; the turns after the last real user query (not a tool result) show
            // "<think>\n" reasoning "\n</think>\n\n" and their answer, earlier ones only the answer; tool
            // results are <tool_response> blocks inside one user turn; the generation prompt opens a think block
            // (or pre-fills an empty one when thinking is off).
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
            if (opt.add_generation_prompt)
                o.text(opt.enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
            break;
        }
        case ChatFamily::Glm4: {
            // GLM-4.5/4.6: no newline after <|assistant|> in the generation prompt; history turns carry an
            // empty think block (the turns after the last user message their reasoning); with thinking off, user
            // turns end in /nothink.
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
                    const bool nothink = !opt.enable_thinking && (m.content.size() < 8 || m.content.substr(m.content.size() - 8) != "/nothink");
                    o.text("<|user|>\n" + m.content + (nothink ? "/nothink" : ""));
                }
            }
            if (opt.add_generation_prompt) o.text(opt.enable_thinking ? "<|assistant|>" : "<|assistant|>\n<think></think>");
            break;
        }
        case ChatFamily::Glm47: {
            // GLM-4.7 / GLM-5.x: no newlines after role tags; a history turn shows "</think>" and its answer, the
            // turns after the last user message keep their reasoning; tool results are <tool_response> blocks.
            const std::string prefill = opt.enable_thinking ? "<think>" : "</think>";
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
            if (opt.add_generation_prompt) o.text("<|assistant|>" + prefill);
            break;
        }
        case ChatFamily::DeepSeekV31: {
            // System prompts joined first; an assistant turn right after a user turn opens with <｜Assistant｜></think>
            // (thinking off, the default) and shows only the answer; after a tool result the turn continues bare.
            const std::string prefill = opt.enable_thinking ? "<think>" : "</think>";
            o.text(opt.bos_text);
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
            if (opt.add_generation_prompt && last_user) o.text("<｜Assistant｜>" + prefill);
            break;
        }
        case ChatFamily::KimiK2: {
            // Kimi-K2: role header, <|im_middle|>, content, <|im_end|>; a default system prompt when none is given;
            // calls numbered across the conversation (functions.NAME:N), results answering them in order.
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
            if (opt.add_generation_prompt) o.text("<|im_assistant|>assistant<|im_middle|>");
            break;
        }
        case ChatFamily::DeepSeek: {
            o.text(opt.bos_text);
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
            if (opt.add_generation_prompt) o.text("<｜Assistant｜>");
            break;
        }
    }
    return o.take();
}

std::string segments_text(const std::vector<ChatSegment>& segs) {
    std::string s;
    for (const auto& seg : segs) s += seg.tokens.empty() ? seg.text : "<tokens:" + std::to_string(seg.tokens.size()) + ">";
    return s;
}

}  // namespace moe

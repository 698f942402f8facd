// The families' table and what reads it: names, detection from the template text, rendering, forced-call
// syntax. Each family's own rendering and call parsing is in its file (chat_family.h lists them).
#include "engine/server/chat_template.h"

#include "engine/server/chat_family.h"

namespace moe {

const ChatFamilyFormat& chat_format(ChatFamily family) {
    switch (family) {
        case ChatFamily::ChatML: return qwen::kChatMl;
        case ChatFamily::Qwen3: return qwen::kQwen3;
        case ChatFamily::Qwen35: return qwen::kQwen35;
        case ChatFamily::Glm4: return glm::kGlm4;
        case ChatFamily::Glm47: return glm::kGlm47;
        case ChatFamily::DeepSeek: return deepseek::kV3;
        case ChatFamily::DeepSeekV31: return deepseek::kV31;
        case ChatFamily::DeepSeekV4: return deepseek::kV4;
        case ChatFamily::KimiK2: return kimi::kK2;
        case ChatFamily::KimiK3: return kimi::kK3;
        case ChatFamily::Harmony: return harmony::kHarmony;
        case ChatFamily::MiniMax: return minimax::kM2;
        case ChatFamily::MiniMaxM3: return minimax::kM3;
    }
    return qwen::kChatMl;
}

const char* family_name(ChatFamily f) { return chat_format(f).name; }

const char* effort_name(ReasoningEffort e) {
    switch (e) {
        case ReasoningEffort::Low: return "low";
        case ReasoningEffort::High: return "high";
        case ReasoningEffort::Max: return "max";
        default: return "medium";
    }
}

ChatFamily detect_chat_family(const std::string& t) {
    auto has = [&t](const char* s) { return t.find(s) != std::string::npos; };
    // DeepSeek-V3.1 and later close the think block after <｜Assistant｜> unless thinking is asked for.
    // DeepSeek-V4's DSML calls open with <｜DSML｜tool_calls> (V3.2's with <｜DSML｜function_calls>).
    if (has("｜DSML｜") && has("tool_calls>") && !has("function_calls>")) return ChatFamily::DeepSeekV4;
    if (has("<｜User｜>") || has("<｜Assistant｜>")) return has("</think>") && has("thinking") ? ChatFamily::DeepSeekV31 : ChatFamily::DeepSeek;
    if (has("<|im_middle|>")) return ChatFamily::KimiK2;
    if (has("<|open|>") && has("<|sep|>") && has("<|close|>")) return ChatFamily::KimiK3;
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

ChatFamily chat_family_of(const std::string& chat_template, const std::string& arch) {
    if (chat_template.empty() && arch == "deepseek4") return ChatFamily::DeepSeekV4;
    return detect_chat_family(chat_template);
}

ThinkMarkers think_markers(ChatFamily family) { return chat_format(family).think; }

std::vector<std::string> output_markers(ChatFamily family) {
    const ChatFamilyFormat& f = chat_format(family);
    std::vector<std::string> m = {f.think.open, f.think.close, f.syntax.open, f.syntax.tail, f.call_head("x"), f.call_close, f.answer_prefix};
    m.insert(m.end(), f.call_open.begin(), f.call_open.end());
    m.insert(m.end(), f.frame.begin(), f.frame.end());
    m.insert(m.end(), f.markers.begin(), f.markers.end());
    return m;
}

std::string strip_thinking(const std::string& content) {
    auto end = content.rfind("</think>");
    if (end == std::string::npos) return content;
    std::string rest = content.substr(end + 8);
    size_t first = rest.find_first_not_of("\n");
    return first == std::string::npos ? std::string() : rest.substr(first);
}

CallSyntax call_syntax(ChatFamily family) { return chat_format(family).syntax; }

std::string call_head(ChatFamily family, const std::string& name) { return chat_format(family).call_head(name); }

std::string forced_call_prefix(ChatFamily family, const std::string& name) {
    return call_syntax(family).open + (name.empty() ? "" : call_head(family, name));
}

std::string constrained_answer_prefix(ChatFamily family) { return chat_format(family).answer_prefix; }

std::vector<ChatSegment> render_chat(ChatFamily family, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    return chat_format(family).render(family, ms, options);
}

std::string segments_text(const std::vector<ChatSegment>& segs) {
    std::string s;
    for (const auto& seg : segs) s += seg.tokens.empty() ? seg.text : "<tokens:" + std::to_string(seg.tokens.size()) + ">";
    return s;
}

namespace chat {

std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\n\r"), b = s.find_last_not_of(" \t\n\r");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

std::string lstrip_newlines(const std::string& s) {
    const size_t p = s.find_first_not_of('\n');
    return p == std::string::npos ? std::string() : s.substr(p);
}

std::pair<std::string, std::string> split_thinking(const std::string& content) {
    const size_t close = content.find("</think>");
    if (close == std::string::npos) return {"", content};
    std::string before = content.substr(0, close);
    while (!before.empty() && before.back() == '\n') before.pop_back();
    const size_t open = before.rfind("<think>");
    return {lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7)), lstrip_newlines(content.substr(close + 8))};
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

size_t last_user(const std::vector<ChatMessage>& ms) {
    size_t idx = ms.size();
    for (size_t i = 0; i < ms.size(); ++i)
        if (ms[i].role == "user") idx = i;
    return idx;
}

std::string tool_lines(const std::vector<ToolSpec>& tools, const char* before, const char* after) {
    std::string s;
    for (const auto& t : tools) s += before + python_json(t.declaration) + after;
    return s;
}

std::string argument_text(const ordered_json& v, bool glm) {
    if (v.is_string()) return v.get<std::string>();
    return glm || v.is_object() || v.is_array() ? python_json(v) : python_str(v);
}

bool split_section(const std::string& text, const std::string& begin, const std::string& end, std::vector<std::string>& parts) {
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t b = text.find(begin, pos);
        if (b == std::string::npos) return trim(text.substr(pos)).empty() && !parts.empty();
        if (!trim(text.substr(pos, b - pos)).empty()) return false;
        const size_t e = text.find(end, b + begin.size());
        parts.push_back(text.substr(b + begin.size(), (e == std::string::npos ? text.size() : e) - b - begin.size()));
        pos = e == std::string::npos ? text.size() : e + end.size();
    }
    return !parts.empty();
}

bool finish_call(ToolCall& call, const ordered_json& args, const std::vector<ToolSpec>& tools) {
    if (call.name.empty() || (!tools.empty() && !find_tool(tools, call.name))) return false;
    call.arguments = args.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    return true;
}

bool json_object(const std::string& text, ordered_json& args) {
    ordered_json j = ordered_json::parse(trim(text), nullptr, false);
    if (!j.is_object()) return false;
    args = std::move(j);
    return true;
}

}  // namespace chat
}  // namespace moe

#include "engine/server/chat_template.h"

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
    }
    return "?";
}

ChatFamily detect_chat_family(const std::string& t) {
    auto has = [&t](const char* s) { return t.find(s) != std::string::npos; };
    // DeepSeek-V3.1 and later close the think block after <｜Assistant｜> unless thinking is asked for.
    if (has("<｜User｜>") || has("<｜Assistant｜>")) return has("</think>") && has("thinking") ? ChatFamily::DeepSeekV31 : ChatFamily::DeepSeek;
    if (has("<|im_middle|>")) return ChatFamily::KimiK2;
    // GLM-4.5/4.6 end user turns in /nothink to switch thinking off; GLM-4.7 and GLM-5.x use </think>.
    if (has("[gMASK]") || (has("<|user|>") && has("<|assistant|>"))) return has("/nothink") ? ChatFamily::Glm4 : ChatFamily::Glm47;
    // Qwen3.5: XML tool calls (<function=...>) and a think block opened by the generation prompt.
    if (has("<|im_start|>") && has("<function=") && has("<think>")) return ChatFamily::Qwen35;
    if (t.find("<|im_start|>") != std::string::npos)
        return t.find("<think>") != std::string::npos || t.find("enable_thinking") != std::string::npos ? ChatFamily::Qwen3
                                                                                                         : ChatFamily::ChatML;
    return ChatFamily::ChatML;
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

}  // namespace

std::vector<ChatSegment> render_chat(ChatFamily family, const std::vector<ChatMessage>& ms, const ChatRenderOptions& options) {
    Out o;
    struct {
        bool add_generation_prompt, enable_thinking;
        std::string bos_text;
    } opt{options.add_generation_prompt, options.enable_thinking.value_or(family != ChatFamily::DeepSeekV31), options.bos_text};
    const size_t lu = last_user(ms);
    switch (family) {
        case ChatFamily::ChatML:
        case ChatFamily::Qwen3: {
            for (size_t i = 0; i < ms.size(); ++i) {
                const ChatMessage& m = ms[i];
                if (m.role == "assistant") {
                    o.text("<|im_start|>assistant\n");
                    // Qwen3 shows earlier turns without their reasoning; the turn after the last user message keeps it.
                    std::string body = family == ChatFamily::Qwen3 && i < lu ? strip_thinking(m.content) : m.content;
                    o.assistant_body(m, body);
                    o.text("<|im_end|>\n");
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
            for (size_t i = 0; i < ms.size(); ++i) {
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
                    o.text("<|im_end|>\n");
                } else if (m.role == "tool") {
                    if (i > 0 && ms[i - 1].role != "tool") o.text("<|im_start|>user");
                    o.text("\n<tool_response>\n" + content + "\n</tool_response>");
                    if (i + 1 == ms.size() || ms[i + 1].role != "tool") o.text("<|im_end|>\n");
                } else {
                    o.text("<|im_start|>" + m.role + "\n" + content + "<|im_end|>\n");
                }
            }
            if (opt.add_generation_prompt) o.text(opt.enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
            break;
        }
        case ChatFamily::Glm4: {
            // GLM-4.5/4.6: no newline after <|assistant|> in the generation prompt; history turns carry an
            // empty think block; with thinking off, user turns end in /nothink.
            o.text("[gMASK]<sop>");
            for (size_t i = 0; i < ms.size(); ++i) {
                const ChatMessage& m = ms[i];
                if (m.role == "assistant") {
                    o.text("<|assistant|>");
                    if (m.generated && !m.generated->empty()) {
                        o.tokens(*m.generated);
                    } else {
                        o.text("\n<think></think>");
                        std::string body = strip_thinking(m.content);
                        const size_t a = body.find_first_not_of(" \n\t"), b = body.find_last_not_of(" \n\t");
                        if (a != std::string::npos) o.text("\n" + body.substr(a, b - a + 1));
                    }
                } else if (m.role == "system") {
                    o.text("<|system|>\n" + m.content);
                } else if (m.role == "tool") {
                    o.text("<|observation|>\n" + m.content);
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
                    o.text(trim(answer));
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
            // Kimi-K2: role header, <|im_middle|>, content, <|im_end|>; a default system prompt when none is given.
            for (size_t i = 0; i < ms.size(); ++i) {
                const ChatMessage& m = ms[i];
                if (i == 0 && m.role != "system") o.text("<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>");
                if (m.role == "system") o.text("<|im_system|>system<|im_middle|>" + m.content + "<|im_end|>");
                else if (m.role == "user") o.text("<|im_user|>user<|im_middle|>" + m.content + "<|im_end|>");
                else if (m.role == "tool") o.text("<|im_system|>tool<|im_middle|>" + m.content + "<|im_end|>");
                else if (m.role == "assistant") {
                    o.text("<|im_assistant|>assistant<|im_middle|>");
                    o.assistant_body(m, m.content);
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
            for (const ChatMessage& m : ms) {
                if (m.role == "user") {
                    o.text("<｜User｜>" + m.content);
                } else if (m.role == "assistant") {
                    o.text("<｜Assistant｜>");
                    o.assistant_body(m, strip_thinking(m.content));
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

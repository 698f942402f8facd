#include "engine/server/chat_template.h"

namespace moe {

const char* family_name(ChatFamily f) {
    switch (f) {
        case ChatFamily::ChatML: return "chatml";
        case ChatFamily::Qwen3: return "qwen3";
        case ChatFamily::Glm4: return "glm4";
        case ChatFamily::DeepSeek: return "deepseek";
    }
    return "?";
}

ChatFamily detect_chat_family(const std::string& t) {
    if (t.find("<｜User｜>") != std::string::npos || t.find("<｜Assistant｜>") != std::string::npos) return ChatFamily::DeepSeek;
    if (t.find("[gMASK]") != std::string::npos || (t.find("<|user|>") != std::string::npos && t.find("<|assistant|>") != std::string::npos))
        return ChatFamily::Glm4;
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

// Index of the last user message: assistant turns before it are history.
size_t last_user(const std::vector<ChatMessage>& ms) {
    size_t idx = ms.size();
    for (size_t i = 0; i < ms.size(); ++i)
        if (ms[i].role == "user") idx = i;
    return idx;
}

}  // namespace

std::vector<ChatSegment> render_chat(ChatFamily family, const std::vector<ChatMessage>& ms, const ChatRenderOptions& opt) {
    Out o;
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

// Chat templates of the families the engine serves, rendered natively (no Jinja): Qwen3 ChatML (with and
// without thinking), plain ChatML, GLM-4.x and DeepSeek-V3/R1, chosen from `tokenizer.chat_template`.
//
// Rendering yields segments: text (tokenized with special tokens parsed) or exact token ids. Earlier
// assistant turns the server generated itself are spliced in as the very tokens it generated, so a
// conversation's prompt shares its prefix with the KV cache even where re-tokenizing the text, or a client
// dropping the <think> block, would change it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moe {

enum class ChatFamily { ChatML, Qwen3, Glm4, DeepSeek };
const char* family_name(ChatFamily f);
// Picks the family from the template text (markers each family's template contains); ChatML otherwise.
ChatFamily detect_chat_family(const std::string& chat_template);

struct ChatMessage {
    std::string role;     // system | user | assistant | tool
    std::string content;
    std::optional<std::vector<int32_t>> generated;  // assistant turns this server produced: its exact tokens
};

struct ChatSegment {
    std::string text;             // used when tokens is empty
    std::vector<int32_t> tokens;  // exact ids (spliced assistant turn)
};

struct ChatRenderOptions {
    bool add_generation_prompt = true;
    bool enable_thinking = true;  // Qwen3 / GLM: false pre-fills an empty think block
    std::string bos_text;         // the model's BOS text for families that write it (DeepSeek)
};

std::vector<ChatSegment> render_chat(ChatFamily family, const std::vector<ChatMessage>& messages, const ChatRenderOptions& opt);
// The segments as one string (spliced turns shown as `<tokens:N>`), for tests and logs.
std::string segments_text(const std::vector<ChatSegment>& segs);

// What a family's template shows of an earlier assistant turn: the answer after any think block.
std::string strip_thinking(const std::string& content);

}  // namespace moe

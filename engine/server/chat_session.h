// A chat request in the terms both APIs (OpenAI chat completions, Anthropic messages) share: messages, tools
// and the tool choice, turned into prompt tokens and the options of the output parser. Also the key under
// which a generated turn is remembered, so the next request can splice its exact tokens back.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/server/chat_output.h"
#include "engine/server/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace moe {

enum class ToolChoice { Auto, None, Required, Named };

struct ChatInput {
    std::vector<ChatMessage> messages;
    std::vector<ToolSpec> tools;
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string forced_tool;           // ToolChoice::Named
    bool parallel_tool_calls = true;
    std::optional<bool> thinking;      // unset: the family's default
};

struct PreparedChat {
    std::vector<int32_t> prompt;
    std::vector<int> checkpoint_at;    // recurrent models: where the last user message starts
    OutputParserOptions parser;
    // A forced tool call's opening, already at the end of the prompt: fed to the parser before the output.
    std::string prefill;
};

struct ChatFormat {
    ChatFamily family = ChatFamily::ChatML;
    std::string bos_text;
    bool split_reasoning = true;
};

PreparedChat prepare_chat(const ChatInput& in, const ChatFormat& format, const Tokenizer& tok, bool recurrent);

// Where a generated turn is remembered: its answer text, plus each call's name and arguments (canonical JSON)
// when it called tools. A turn without calls is keyed by its text alone.
std::string turn_key(const std::string& content, const std::vector<ToolCall>& calls);

}  // namespace moe

// A chat request in the terms both APIs (OpenAI chat completions, Anthropic messages) share: messages, tools
// and the tool choice, turned into prompt tokens and the options of the output parser. Also the key under
// which a generated turn is remembered, so the next request can splice its exact tokens back.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/server/chat_output.h"
#include "engine/sampler/json_grammar.h"
#include "engine/server/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace moe {

enum class ToolChoice { Auto, None, Required, Named };

struct ChatInput {
    std::vector<ChatMessage> messages;
    std::vector<ToolSpec> tools;
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string forced_tool;  // ToolChoice::Named
    bool parallel_tool_calls = true;
    std::optional<bool> thinking;                               // unset: the family's default
    ReasoningEffort reasoning_effort = ReasoningEffort::Unset;  // gpt-oss, Kimi K3
    // response_format: the answer is JSON matching this schema ({"type": "object"} for json_object).
    std::optional<nlohmann::json> response_schema;
    std::string response_format;  // json_object | json_schema (templates that state it: Kimi K3)
};

struct PreparedChat {
    std::vector<int32_t> prompt;
    std::vector<int> checkpoint_at;  // recurrent models: where the last user message starts
    OutputParserOptions parser;
    // A forced tool call's opening, already at the end of the prompt: fed to the parser before the output.
    std::string prefill;
    // What the output is held to: the response schema, or a forced call's arguments and closing text.
    std::shared_ptr<const JsonGrammar> grammar;
    // Where a turn spliced into the next request's history starts in this prompt (-1: unknown). A forced
    // call's turn is remembered as prompt[splice_from:] + its generated tokens, so its opening comes back too.
    int splice_from = -1;
    // Control tokens of the family's markers: their text goes into the output, where the parser reads it.
    std::vector<int32_t> shown_controls;
};

struct ChatFormat {
    ChatFamily family = ChatFamily::ChatML;
    std::string bos_text;
    bool split_reasoning = true;
};

// The control tokens among the family's output markers (output_markers), end-of-generation tokens excepted.
std::vector<int32_t> shown_control_tokens(ChatFamily family, const Tokenizer& tok);

// What a forced call (tool_choice required or named) is held to after its opening: the name's head where any
// tool may be called, the arguments (JSON held to the schema, or the family's tags: string parameters as text,
// enums as their values, others as JSON), the closing text. Null for a family whose calls have neither form.
std::shared_ptr<const JsonGrammar> forced_call_grammar(const ChatInput& in, ChatFamily family);

// Throws GrammarError when response_schema uses what constrained decoding does not support.
PreparedChat prepare_chat(const ChatInput& in, const ChatFormat& format, const Tokenizer& tok, bool recurrent);

// parallel_tool_calls: false: the first complete call is the last one; the generation is told to end there.
struct CallGate {
    bool one_call = false;
    std::shared_ptr<std::atomic<bool>> finish_now;
    int sent = 0;
    // Whether this call goes out (counted), ending the generation when only one is wanted.
    bool admit() {
        if (one_call && sent > 0) return false;
        if (one_call) finish_now->store(true);
        ++sent;
        return true;
    }
};

// Where a generated turn is remembered: its answer text, plus each call's name and arguments (canonical JSON)
// when it called tools. A turn without calls is keyed by its text alone.
std::string turn_key(const std::string& content, const std::vector<ToolCall>& calls);

}  // namespace moe

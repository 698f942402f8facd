// gpt-oss's Harmony format, one file for the family: the prompt as its reference template renders it (llama.cpp's
// models/templates/openai-gpt-oss-120b.jinja, tests/fixtures/chat_tools/gpt-oss.txt), and the output's messages
// split by channel: analysis is the reasoning, final (and commentary without a recipient) the answer, commentary
// addressed to functions.NAME a tool call.
//
// Output shape (after the generation prompt `<|start|>assistant`):
//   <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>
//   <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
#pragma once
#include <string>
#include <vector>

#include "engine/server/chat_output.h"

namespace moe::harmony {

// The opening a forced call's prefill writes: `open + head(name)`, then JSON arguments, then `tail`.
constexpr const char* kCallOpen = "<|channel|>commentary to=functions.";
constexpr const char* kCallTail = "<|call|>";
std::string call_head(const std::string& name);
// What a constrained answer (response_format) starts with: the final channel's header.
constexpr const char* kFinalHeader = "<|channel|>final<|message|>";

// Incremental: text pieces in, reasoning / answer / call events out, markers never split across events.
class OutputParser {
public:
    explicit OutputParser(OutputParserOptions opt) : opt_(std::move(opt)) {}
    void push(const std::string& piece, std::vector<OutputEvent>& out, std::vector<ToolCall>& calls, bool final);

private:
    enum class State { Header, Body };
    void end_message(std::vector<OutputEvent>& out, std::vector<ToolCall>& calls);

    OutputParserOptions opt_;
    State state_ = State::Header;
    bool at_start_ = true;  // only the first header may begin with its recipient (" to=...")
    std::string buf_;
    std::string channel_, recipient_;  // of the message being read
    std::string call_body_;            // a call's arguments so far
};

}  // namespace moe::harmony

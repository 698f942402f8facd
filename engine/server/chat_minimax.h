// MiniMax-M2 / M3's chat format, one file for the family: the prompt as its reference template renders it
// (llama.cpp's models/templates/unsloth-MiniMax-M2.jinja, tests/fixtures/chat_tools/minimax-m2.txt) and its
// XML tool calls parsed back. Turns are `]~b]ROLE\n ... [e~[\n` after a leading `]~!b[`; the generation prompt
// opens a think block; earlier assistant turns come back as sent (this engine's own turns after the last user
// message as the tokens it generated).
//
// Output shape (after the generation prompt `]~b]ai\n<think>\n`):
//   reasoning\n</think>\n\nanswer
//   <minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>
#pragma once
#include <string>
#include <vector>

#include "engine/server/chat_template.h"

namespace moe::minimax {

std::vector<ChatSegment> render(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options);

constexpr const char* kCallOpen = "<minimax:tool_call>";
constexpr const char* kCallClose = "</minimax:tool_call>";
// One call's opening inside a section: `<invoke name="NAME">\n`.
std::string call_head(const std::string& name);
// The calls between kCallOpen and kCallClose: one or more <invoke> elements with only whitespace between,
// parameter values typed by the declared tools' schemas (text for string parameters, else JSON when it parses).
// False when the text is not that (the caller shows it as text).
bool parse_calls(const std::string& body, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out);

}  // namespace moe::minimax

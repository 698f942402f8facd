// MiniMax's chat formats, one file for the family: the prompt as each reference template renders it, and the
// XML tool calls parsed back. Turns are `]~b]ROLE\n ... [e~[\n` after a leading `]~!b[`.
//
// MiniMax-M2 (llama.cpp's models/templates/unsloth-MiniMax-M2.jinja, tests/fixtures/chat_tools/minimax-m2.txt):
// the generation prompt opens a think block; earlier assistant turns come back as sent (this engine's own turns
// after the last user message as the tokens it generated). Output after `]~b]ai\n<think>\n`:
//   reasoning\n</think>\n\nanswer
//   <minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>
//
// MiniMax-M3 (its HF template, tests/fixtures/chat_tools/minimax-m3.txt): a system turn with thinking
// instructions, the request's system message and tools in a developer turn, <mm:think> reasoning on every
// assistant turn (or a bare </mm:think>), and every tag of a call behind the namespace token ]<]minimax[>[,
// arguments named by their element and nested objects and arrays expanded into elements (<item> for arrays):
//   </mm:think>answer]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris
//   ]<]minimax[>[</city>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>
#pragma once
#include <string>
#include <vector>

#include "engine/server/chat_template.h"

namespace moe::minimax {

constexpr const char* kCallOpen = "<minimax:tool_call>";
constexpr const char* kCallClose = "</minimax:tool_call>";
constexpr const char* kNs = "]<]minimax[>[";
constexpr const char* kM3CallOpen = "]<]minimax[>[<tool_call>";
constexpr const char* kM3CallClose = "]<]minimax[>[</tool_call>";
// One call's opening inside a section: `<invoke name="NAME">\n` (M2), `]<]minimax[>[<invoke name="NAME">` (M3).
std::string call_head(const std::string& name);
std::string call_head_m3(const std::string& name);
// The calls between a section's open and close markers: one or more invoke elements with only whitespace
// between, values typed by the declared tools' schemas (text for string parameters, else JSON when it parses;
// M3's nested elements as objects and arrays). False when the text is not that (the caller shows it as text).

}  // namespace moe::minimax

// Chat templates of the families the engine serves, rendered natively (no Jinja): Qwen3 ChatML (with and
// without thinking), Qwen3.5, plain ChatML, GLM-4.5/4.6, GLM-4.7/GLM-5.x, DeepSeek-V3/R1, DeepSeek-V3.1, Kimi-K2, Kimi K3 and
// gpt-oss's Harmony (chat_harmony.h),
// chosen from `tokenizer.chat_template`.
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

#include "engine/server/chat_tools.h"

namespace moe {

enum class ChatFamily { ChatML, Qwen3, Qwen35, Glm4, Glm47, DeepSeek, DeepSeekV31, DeepSeekV4, KimiK2, Harmony, MiniMax, MiniMaxM3, KimiK3 };
constexpr int kChatFamilyCount = static_cast<int>(ChatFamily::KimiK3) + 1;  // (keep KimiK3 last)
const char* family_name(ChatFamily f);
// Picks the family from the template text (markers each family's template contains); ChatML otherwise.
ChatFamily detect_chat_family(const std::string& chat_template);
// The family for a file: from its template, or where it has none, the architecture's own format when its
// makers ship it as code instead of a template (DeepSeek-V4).
ChatFamily chat_family_of(const std::string& chat_template, const std::string& arch);

struct ChatMessage {
    ChatMessage() = default;
    ChatMessage(std::string r, std::string c, std::optional<std::vector<int32_t>> g = {}, std::vector<ToolCall> calls = {})
        : role(std::move(r)), content(std::move(c)), generated(std::move(g)), tool_calls(std::move(calls)) {}
    std::string role;  // system | user | assistant | tool
    std::string content;
    std::optional<std::vector<int32_t>> generated;  // assistant turns this server produced: its exact tokens
    std::vector<ToolCall> tool_calls;               // assistant turns that called tools
    std::string tool_call_id;                       // tool results: the call they answer
    std::string name;                               // the message's `name` (a participant; a tool result's tool)
};

struct ChatSegment {
    std::string text;             // used when tokens is empty
    std::vector<int32_t> tokens;  // exact ids (spliced assistant turn)
};

// Unset: the family's default (gpt-oss medium, Kimi K3 max).
// Max: Kimi K3's highest (its template's default); Harmony renders the name as given, as its template does.
enum class ReasoningEffort { Unset, Low, Medium, High, Max };
const char* effort_name(ReasoningEffort e);

struct ChatRenderOptions {
    bool add_generation_prompt = true;
    // Thinking on or off (chat_template_kwargs.enable_thinking / thinking); unset: the family's own default (on
    // for Qwen3 and GLM, off for DeepSeek-V3.1). Off pre-fills an empty or closed think block.
    std::optional<bool> enable_thinking;
    std::string bos_text;         // the model's BOS text for families that write it (DeepSeek)
    std::vector<ToolSpec> tools;  // declared in the prompt as the family's template does
    // Harmony (gpt-oss): how long it reasons, and the day its system message names (0: today, UTC). Scalars, so
    // that designated initializers may leave them out.
    ReasoningEffort reasoning_effort = ReasoningEffort::Unset;
    int64_t date_unix = 0;
    // What Kimi K3's template states at the end of the prompt: tool_choice "required" / "none" (else empty), and
    // response_format json_object / json_schema with its schema.
    std::string tool_choice = {};
    std::string response_format = {};
    ordered_json response_schema = {};
};

std::vector<ChatSegment> render_chat(ChatFamily family, const std::vector<ChatMessage>& messages, const ChatRenderOptions& opt);
// The segments as one string (spliced turns shown as `<tokens:N>`), for tests and logs.
std::string segments_text(const std::vector<ChatSegment>& segs);

// A tag-style call's arguments (Qwen3.5, GLM, MiniMax-M2/M3): each as `key_open + KEY + key_close + VALUE +
// value_close`, the value as text for a string parameter (tag_argument_value) and as JSON otherwise; `end`
// closes the call. MiniMax-M3 closes each value by its name (`value_close + KEY + key_close`) and writes
// objects and arrays as nested elements, which are held only to end at their closing tag.
struct TagArguments {
    std::string key_open, key_close, value_close, end;
    bool close_names_key = false;
    bool nested_values = false;
    // Where a string parameter's key closes differently (DeepSeek-V4's string="true" against "false"); empty:
    // key_close for every parameter.
    std::string key_close_string = {};
};
// A family's call format for forcing a call: `open` + call_head(name) + arguments + `tail`. Where the
// arguments are JSON (json_arguments) or tags, a grammar holds the model to the tool's schema.
struct CallSyntax {
    std::string open, tail;
    bool json_arguments = false;
    std::optional<TagArguments> tags = std::nullopt;
};
CallSyntax call_syntax(ChatFamily family);
std::string call_head(ChatFamily family, const std::string& name);
// Text that opens a tool call in the family's own format, appended after the generation prompt to make the
// model call a tool (`name` given: that function; empty: any). Thinking is off for such a turn.
std::string forced_call_prefix(ChatFamily family, const std::string& name);

// Text a constrained answer (response_format) starts with after the generation prompt: Harmony's final-channel
// header; nothing for the other families.
std::string constrained_answer_prefix(ChatFamily family);

// The tags around a family's reasoning: <think> </think>, MiniMax-M3's <mm:think> </mm:think>.
struct ThinkMarkers {
    std::string open, close;
};
ThinkMarkers think_markers(ChatFamily family);

// Every marker the family's output parser reads (think tags, call openings and closings, answer framing):
// where a file makes them control tokens, the server still shows their text (llama-server's preserved tokens).
std::vector<std::string> output_markers(ChatFamily family);

// What a family's template shows of an earlier assistant turn: the answer after any think block.
std::string strip_thinking(const std::string& content);

}  // namespace moe

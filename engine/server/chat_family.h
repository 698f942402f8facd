// Each chat family's format in one record: how a conversation renders, what opens and closes a tool call in
// the model's output and how its calls parse, the syntax a forced call follows, the reasoning tags. Every
// family lives in a file of its own (chat_qwen, chat_glm, chat_deepseek, chat_deepseek_v4, chat_kimi, chat_kimi_k3, chat_harmony,
// chat_minimax); chat_template.cpp holds the table, and the public functions of chat_template.h and the
// output parser read it. A new family is one file and one row.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/server/chat_template.h"

namespace moe {

struct ChatFamilyFormat {
    const char* name;
    std::vector<ChatSegment> (*render)(ChatFamily family, const std::vector<ChatMessage>& messages, const ChatRenderOptions& options);
    CallSyntax syntax;                                  // a forced call: open + call_head(name) + arguments + tail
    std::string (*call_head)(const std::string& name);  // what follows `syntax.open` for a named tool
    std::vector<std::string> call_open;                 // output markers that start a call, or a section of calls
    std::string call_close;
    // The calls of a finished call body (`opened_by`: the marker that began it); false: not a valid call.
    bool (*parse_calls)(const std::string& body, const std::string& opened_by, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out);
    ThinkMarkers think = {"<think>", "</think>"};
    const char* answer_prefix = "";  // a constrained answer starts with it after the generation prompt
    bool channels = false;           // Harmony: the output is channels, read by harmony::OutputParser
    // Markers that frame the answer and are dropped from it (Kimi K3's response channel and message close).
    std::vector<std::string> frame = {};
    // Further markers the output parser reads (Harmony's headers), beyond those above.
    std::vector<std::string> markers = {};
};

const ChatFamilyFormat& chat_format(ChatFamily family);

// The rows, one per family file.
namespace qwen {
extern const ChatFamilyFormat kChatMl, kQwen3, kQwen35;
}
namespace glm {
extern const ChatFamilyFormat kGlm4, kGlm47;
}
namespace deepseek {
extern const ChatFamilyFormat kV3, kV31, kV4;
}
namespace kimi {
extern const ChatFamilyFormat kK2, kK3;
}
namespace harmony {
extern const ChatFamilyFormat kHarmony;
}
namespace minimax {
extern const ChatFamilyFormat kM2, kM3;
}

// Pieces the family files share.
namespace chat {

// A rendered prompt under construction: text, and assistant turns this server generated as their exact tokens.
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

std::string trim(const std::string& s);
std::string lstrip_newlines(const std::string& s);
bool starts_with(const std::string& s, const std::string& prefix);
// A turn's reasoning and answer split around the first </think>: the reasoning after its <think>, newlines at
// the seams dropped (GLM's and Qwen3.5's templates).
std::pair<std::string, std::string> split_thinking(const std::string& content);
// Index of the last user message: assistant turns before it are history.
size_t last_user(const std::vector<ChatMessage>& ms);
// The tool declarations, one JSON object per entry between `before` and `after` (Qwen's and GLM's lists).
std::string tool_lines(const std::vector<ToolSpec>& tools, const char* before, const char* after);
// A call's argument value as GLM's and Qwen3.5's templates write it: strings bare.
std::string argument_text(const ordered_json& v, bool glm);
// The calls in a section (DeepSeek, Kimi): call-begin ... call-end pieces with only whitespace between them.
bool split_section(const std::string& text, const std::string& begin, const std::string& end, std::vector<std::string>& parts);
// A parsed call's arguments as its JSON text; false when the name is empty or not among the declared tools.
bool finish_call(ToolCall& call, const ordered_json& args, const std::vector<ToolSpec>& tools);
// `text` trimmed, as a JSON object into `args`; false when it is not one.
bool json_object(const std::string& text, ordered_json& args);
// Each piece of a section parsed by `one` into a call.
template <class One>
bool parse_each(const std::vector<std::string>& parts, const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out, One&& one) {
    std::vector<ToolCall> calls;
    for (const auto& p : parts) {
        ToolCall c;
        ordered_json args = ordered_json::object();
        if (!one(trim(p), c, args) || !finish_call(c, args, tools)) return false;
        calls.push_back(std::move(c));
    }
    for (auto& c : calls) out.push_back(std::move(c));
    return !calls.empty();
}

// A section's calls (DeepSeek, Kimi): split at call_begin ... call_end (the body may have been opened by
// call_begin itself), each piece parsed by `one`.
template <class One>
bool parse_section(const std::string& text, const std::string& opened_by, const std::string& call_begin, const std::string& call_end,
                   const std::vector<ToolSpec>& tools, std::vector<ToolCall>& out, One&& one) {
    std::vector<std::string> parts;
    if (!split_section(opened_by == call_begin ? call_begin + text : text, call_begin, call_end, parts)) return false;
    return parse_each(parts, tools, out, one);
}

}  // namespace chat
}  // namespace moe

// The model's output split the way agents expect it: reasoning (the think block), the answer, and tool calls
// parsed from each family's own call format into OpenAI's {id, name, arguments}. It works on a stream of text
// pieces, so a streaming response sends reasoning and answer as they come and each call once it is complete;
// text that could be the start of a marker is held back until it is known not to be one. A call that cannot be
// parsed comes back as answer text, never as an error.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/server/chat_template.h"

namespace moe {

struct OutputEvent {
    enum Kind { Reasoning, Content, Call } kind;
    std::string text;  // Reasoning, Content
    ToolCall call;     // Call
};

struct OutputParserOptions {
    bool split_reasoning = true;       // false: think blocks stay in the answer (--reasoning-format none)
    bool starts_in_reasoning = false;  // the prompt ended by opening a think block
    bool parse_tools = false;          // the request declared tools
    std::vector<ToolSpec> tools;       // their schemas type the values of tag-style calls
    std::string call_id_prefix = "call_";
};

struct ChatFamilyFormat;
namespace harmony {
class OutputParser;
}

// Length of the longest tail of `s` that is a proper beginning of one of the markers (text held back in a stream).
size_t partial_marker_tail(const std::string& s, const std::vector<std::string>& markers);

class ChatOutputParser {
public:
    ChatOutputParser(ChatFamily family, OutputParserOptions opt);
    ChatOutputParser(ChatOutputParser&&) noexcept;
    ChatOutputParser& operator=(ChatOutputParser&&) noexcept;
    ~ChatOutputParser();
    std::vector<OutputEvent> push(const std::string& piece);
    // The end of the output: what was held back, and a call cut short (parsed if it is whole, else text).
    std::vector<OutputEvent> finish();

    const std::string& reasoning() const { return reasoning_; }
    const std::string& content() const { return content_; }
    const std::vector<ToolCall>& calls() const { return calls_; }

private:
    enum class State { Start, Reasoning, Content, Call };
    void step(std::vector<OutputEvent>& out, bool final);
    void emit_text(std::vector<OutputEvent>& out, OutputEvent::Kind kind, std::string text, bool section_end);
    bool parse_call_body(const std::string& body, std::vector<ToolCall>& out) const;
    std::vector<OutputEvent> harmony_step(const std::string& piece, bool final);

    const ChatFamilyFormat* format_;
    OutputParserOptions opt_;
    std::vector<std::string> call_open_;  // markers that start a call (or a section of calls)
    std::string call_close_;
    ThinkMarkers think_;  // the family's reasoning tags
    State state_ = State::Start;
    std::string buf_;          // received, not yet handled
    std::string open_marker_;  // the marker that opened the current call
    std::string held_space_;   // trailing whitespace of the current section: sent only if more text follows
    bool section_started_ = false;
    std::string reasoning_, content_;
    std::vector<ToolCall> calls_;
    std::unique_ptr<harmony::OutputParser> harmony_;  // gpt-oss's channels (chat_harmony.h)
};

}  // namespace moe

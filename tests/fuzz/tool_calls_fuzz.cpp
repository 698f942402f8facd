// libFuzzer target for each chat family's output parser (reasoning, answer and tool-call text from the
// model, which a client can steer): any text in any chunking must parse without a crash, and the parse must
// not depend on how the text was cut into pieces (a streamed response equals a whole one).
// Input: byte 0 picks the family, byte 1 the piece length, the rest is the model's text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/server/chat_output.h"

namespace {

struct Parsed {
    std::string reasoning, content, calls;
};

Parsed parse(moe::ChatFamily family, const std::string& text, size_t piece) {
    moe::OutputParserOptions o;
    o.parse_tools = true;
    moe::ToolSpec weather;
    weather.name = "get_weather";
    weather.parameters = moe::ordered_json::parse(R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}})");
    o.tools.push_back(weather);
    moe::ChatOutputParser p(family, o);
    for (size_t i = 0; i < text.size(); i += piece) p.push(text.substr(i, piece));
    p.finish();
    Parsed r{p.reasoning(), p.content(), ""};
    for (const auto& c : p.calls()) r.calls += c.name + "\x1f" + c.arguments + "\x1e";
    return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    const auto family = static_cast<moe::ChatFamily>(data[0] % moe::kChatFamilyCount);
    const size_t piece = 1 + data[1] % 16;
    const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
    const Parsed whole = parse(family, text, text.size() + 1), pieces = parse(family, text, piece);
    if (whole.reasoning != pieces.reasoning || whole.content != pieces.content || whole.calls != pieces.calls) std::abort();
    return 0;
}

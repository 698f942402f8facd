// libFuzzer target for the request bodies any client sends (OpenAI chat completions and completions,
// Anthropic messages and count_tokens) and the chat rendering of what they carry: any bytes must be read into
// a request or rejected with an ApiError (another exception would reach the client as a 500), and a read
// chat must render in every family and compile its schemas or raise GrammarError.
// Input: byte 0 picks the API, byte 1 the chat family, the rest is the body.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/server/api_requests.h"

namespace {

void render(moe::ChatFamily family, const moe::ApiRequest& r) {
    moe::ChatRenderOptions opt;
    opt.tools = r.chat.tools;
    opt.enable_thinking = r.chat.thinking;
    const std::string text = moe::segments_text(moe::render_chat(family, r.chat.messages, opt));
    // A user's words reach the model whole, whatever they contain (markers included); Qwen3.5's template trims
    // the whitespace around each message.
    for (const auto& m : r.chat.messages) {
        const size_t a = m.content.find_first_not_of(" \t\r\n"), b = m.content.find_last_not_of(" \t\r\n");
        const std::string words = a == std::string::npos ? std::string() : m.content.substr(a, b - a + 1);
        if (m.role == "user" && text.find(words) == std::string::npos) std::abort();
    }
    if (r.chat.tool_choice == moe::ToolChoice::Named) (void)moe::forced_call_prefix(family, r.chat.forced_tool);
    auto compile = [](const nlohmann::json& schema) {
        try {
            moe::JsonGrammar g;
            g.set_root(g.from_schema(schema));
        } catch (const moe::GrammarError&) {}
    };
    if (r.chat.response_schema) compile(*r.chat.response_schema);
    for (const auto& t : r.chat.tools) compile(nlohmann::json::parse(t.parameters.dump()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    const int api = data[0] % 4;
    const auto family = static_cast<moe::ChatFamily>(data[1] % moe::kChatFamilyCount);
    const std::string body(reinterpret_cast<const char*>(data + 2), size - 2);
    moe::RequestLimits limits;
    limits.n_ctx = 512;
    limits.max_json_depth = 32;
    limits.max_messages = 64;
    limits.max_tools = 16;
    const moe::TurnRecall no_recall;
    try {
        const moe::ordered_json j = moe::parse_request_body(body, limits);
        if (api == 1) {
            const moe::ApiRequest r = moe::read_openai_completion(j, limits);
            if (r.max_tokens < 1 || r.max_tokens > limits.n_ctx) std::abort();
            return 0;
        }
        const moe::ApiRequest r = api == 0 ? moe::read_openai_chat(j, limits, no_recall)
                                           : moe::read_anthropic_messages(j, limits, no_recall, api == 3);
        if (r.max_tokens < 1 || r.max_tokens > limits.n_ctx || r.chat.messages.size() > 2 * limits.max_messages) std::abort();
        render(family, r);
    } catch (const moe::ApiError&) {}
    return 0;
}

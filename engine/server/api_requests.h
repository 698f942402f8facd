// Request bodies of the three APIs (OpenAI chat completions and completions, Anthropic messages and
// count_tokens) read into one plain struct, with no model in reach: the part of the server that any client's
// bytes reach first, kept pure so it can be fuzzed on its own (tests/fuzz/api_requests_fuzz.cpp). Every
// rejection is an ApiError naming the field, or the limit and its value; nothing else escapes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler/sampler.h"
#include "engine/server/api_common.h"
#include "engine/server/chat_session.h"

namespace moe {

// What one request may ask of the server. Each bounds work a client can cause beyond the body size: nesting
// (recursive schema and template walks), per-token stop-string scans, prompt declarations of tools.
struct RequestLimits {
    int n_ctx = 4096;  // max_tokens may not exceed the context
    int max_tokens_default = 256;
    int max_json_depth = 128;
    size_t max_messages = 10000;
    size_t max_tools = 512;
    size_t max_stop = 16;          // stop_sequences (OpenAI's own limit, 4, applies to `stop`)
    size_t max_stop_bytes = 1024;  // one stop string
    // One JSON schema (response_format, a tool's parameters) as compact JSON: it is compiled into a grammar
    // whose states grow with it, and tool schemas are rendered into every prompt.
    size_t max_schema_bytes = 64 * 1024;
};

// A request in the terms the generator and the chat renderer take.
struct ApiRequest {
    bool stream = false;
    int max_tokens = 0;
    SamplerParams sampling;
    bool seeded = false;  // the client gave a seed (otherwise the server's clock picks one)
    std::vector<std::string> stop;
    bool ignore_eos = false;
    int logprobs = -1;  // -1: none
    ChatInput chat;     // chat APIs
    // /v1/completions: the prompt as text, or as token ids (checked against the vocabulary by the caller).
    std::string prompt_text;
    std::vector<int64_t> prompt_ids;
    bool prompt_is_ids = false;
};

// An earlier assistant turn (content, tool calls) to the exact tokens this server generated for it, if it did.
using TurnRecall = std::function<std::optional<std::vector<int32_t>>(const std::string&, const std::vector<ToolCall>&)>;

// The body as a JSON object, or ApiError: not JSON, not an object, nested deeper than limits.max_json_depth.
ordered_json parse_request_body(const std::string& body, const RequestLimits& limits);
ApiRequest read_openai_chat(const ordered_json& body, const RequestLimits& limits, const TurnRecall& recall);
ApiRequest read_openai_completion(const ordered_json& body, const RequestLimits& limits);
// count_only: /v1/messages/count_tokens, where max_tokens is not required.
ApiRequest read_anthropic_messages(const ordered_json& body, const RequestLimits& limits, const TurnRecall& recall, bool count_only);

}  // namespace moe

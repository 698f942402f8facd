// The HTTP API over a Generator: OpenAI's /v1/chat/completions, /v1/completions and /v1/models, Anthropic's
// /v1/messages and /v1/messages/count_tokens, plus /health and /metrics. This file holds the routing, the
// authentication (Bearer or x-api-key), the metrics and the submit-and-stream machinery both APIs share;
// openai_api.cpp and anthropic_api.cpp map each API's JSON. Request validation errors name the field and
// come back in the shape of the API that was called.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/server/api_common.h"
#include "engine/server/api_requests.h"
#include "engine/runtime/disk_health.h"
#include "engine/server/chat_session.h"
#include "engine/server/engine_monitor.h"
#include "engine/server/generation.h"
#include "engine/server/http_server.h"

namespace moe {

struct ApiOptions {
    std::string alias;       // the model id clients use
    std::string model_file;  // also accepted as a model id (basename)
    std::string api_key;     // empty: no auth
    ChatFamily family = ChatFamily::ChatML;
    std::string bos_text;
    int max_tokens_default = 256;
    bool split_reasoning = true;  // false (--reasoning-format none): think blocks stay in the answer
};

// Server-sent events for one response. The worker thread produces events while the request thread may not
// have sent the response header yet: every write goes through one lock, and events that arrive before the
// header are held until it is out.
class SseStream {
public:
    explicit SseStream(HttpResponder& res) : res_(res) {}
    // Sends the header and `opening` (then anything held). False: the client is gone.
    bool start(const std::string& opening);
    bool send(const std::string& event);  // false: the client is gone
    bool ok() const;
    void end() { res_.end_stream(); }

private:
    HttpResponder& res_;
    mutable std::mutex mu_;
    bool started_ = false, ok_ = true;
    std::string held_;
};

class ApiService {
public:
    ApiService(ApiOptions opt, std::shared_ptr<const Tokenizer> tok, Generator* gen);
    void handle(const HttpRequest& req, HttpResponder& res);
    // /health answers 503 until ready.
    void set_ready(bool ready) { ready_ = ready; }
    void set_generator(Generator* g) { gen_ = g; }
    void set_monitor(EngineMonitor* m) { monitor_ = m; }
    // Streaming: /health says degraded (503, with the reason) while expert reads fail.
    void set_disk_health(std::shared_ptr<const DiskHealth> h) { disk_health_ = std::move(h); }
    // Extra gauges for /metrics supplied by the caller (expert cache, bytes read...).
    std::function<std::string()> extra_metrics;

private:
    // OpenAI (openai_api.cpp)
    void openai_chat(const HttpRequest& req, HttpResponder& res);
    void openai_completions(const HttpRequest& req, HttpResponder& res);
    // The engine view's data: one snapshot, or a sample a second as server-sent events.
    void engine_stats(HttpResponder& res, bool stream);
    // Anthropic (anthropic_api.cpp)
    void anthropic_messages(const HttpRequest& req, HttpResponder& res);
    void anthropic_count_tokens(const HttpRequest& req, HttpResponder& res);

    // Queues g and waits for it, cancelling when the client goes away. With a stream, the stream is started
    // (header plus `opening`) once the request is queued. Throws ApiError 503 when the queue is full.
    GenerationResult generate(GenerationRequest g, HttpResponder& res, SseStream* stream, const std::string& opening);
    // A generation that failed: the stream gets `error_event` and ends, a plain response becomes an ApiError
    // (thrown). False when r did not fail.
    bool ended_in_error(const GenerationResult& r, bool stream, SseStream& sse, const std::string& error_event);
    // Prepares a chat and checks it fits the context; g.prompt and g.checkpoint_at are filled.
    PreparedChat prepare(const ChatInput& in, GenerationRequest& g, const std::string& param);
    // Remembers a finished chat turn under its parsed answer and calls (prefix reuse across tool round trips).
    void remember(const ChatOutputParser& parser, const PreparedChat& chat, const GenerationResult& r);
    std::optional<std::vector<int32_t>> recall(const std::string& content, const std::vector<ToolCall>& calls) const;
    void check_model(const ordered_json& body);
    RequestLimits limits() const;
    // The generator's request for what a client asked (prompt and grammar are filled in later).
    static GenerationRequest generation_request(const ApiRequest& a);
    std::string metrics_text();
    void count(int status);
    ChatFormat format() const { return {opt_.family, opt_.bos_text, opt_.split_reasoning}; }

    ApiOptions opt_;
    std::shared_ptr<const Tokenizer> tok_;
    Generator* gen_;
    std::atomic<bool> ready_{false};
    std::atomic<uint64_t> next_id_{1};
    std::atomic<EngineMonitor*> monitor_{nullptr};
    std::shared_ptr<const DiskHealth> disk_health_;
    std::mutex status_mu_;
    std::map<int, uint64_t> by_status_;
};

// Constant-time comparison for API keys.
bool keys_equal(const std::string& a, const std::string& b);

}  // namespace moe

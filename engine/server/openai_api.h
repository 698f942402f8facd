// The OpenAI-compatible API over a Generator: /v1/chat/completions, /v1/completions (plain and SSE),
// /v1/models, /health, /metrics. Request validation and the mapping of error kinds to HTTP statuses live
// here, in one place; every error body has OpenAI's shape.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "engine/server/chat_template.h"
#include "engine/server/generation.h"
#include "engine/server/http_server.h"

namespace moe {

struct ApiOptions {
    std::string alias;              // the model id clients use
    std::string model_file;         // also accepted as a model id (basename)
    std::string api_key;            // empty: no auth
    ChatFamily family = ChatFamily::ChatML;
    std::string bos_text;
    int max_tokens_default = 256;
};

class OpenAiService {
public:
    OpenAiService(ApiOptions opt, std::shared_ptr<const Tokenizer> tok, Generator* gen);
    void handle(const HttpRequest& req, HttpResponder& res);
    // /health answers 503 until ready.
    void set_ready(bool ready) { ready_ = ready; }
    void set_generator(Generator* g) { gen_ = g; }
    // Extra gauges for /metrics supplied by the caller (expert cache, bytes read...).
    std::function<std::string()> extra_metrics;

private:
    void completions(const HttpRequest& req, HttpResponder& res, bool chat);
    std::string metrics_text();
    void count(int status);

    ApiOptions opt_;
    std::shared_ptr<const Tokenizer> tok_;
    Generator* gen_;
    std::atomic<bool> ready_{false};
    std::atomic<uint64_t> next_id_{1};
    std::mutex status_mu_;
    std::map<int, uint64_t> by_status_;
};

// Constant-time comparison for API keys.
bool keys_equal(const std::string& a, const std::string& b);

}  // namespace moe

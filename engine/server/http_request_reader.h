// HTTP/1.1 requests from a connection's bytes, however they arrive: Beast's parser under the server's limits,
// plus what it leaves to its caller (bytes of a pipelined next request kept, a fresh parser per request, the
// limit named in the error). No socket here, so the fuzzer drives it (tests/fuzz/http_request_fuzz.cpp).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "engine/server/http_server.h"

namespace moe {

struct HttpReadLimits {
    size_t max_body_bytes = 4u << 20;
    size_t max_header_bytes = 64u << 10;
    size_t max_header_fields = 100;  // Apache's LimitRequestFields: each field is a map entry the handlers look through
};

class HttpRequestReader {
public:
    enum class State { NeedMore, Done, Failed };
    explicit HttpRequestReader(HttpReadLimits limits);
    ~HttpRequestReader();

    // Appends received bytes and parses what is buffered. Done: take() the request (bytes past it stay
    // buffered); Failed: error_status() and error_message() say why, and the connection should close.
    State feed(std::string_view bytes);
    // Takes the finished request and starts the next one, parsing any bytes already buffered.
    HttpRequest take(State& next);

    bool started() const;  // a byte of the current request has arrived
    bool header_done() const;
    bool keep_alive() const;   // of the request just taken
    unsigned version() const;  // 10 or 11, of the request just taken
    int error_status() const { return error_status_; }
    const std::string& error_message() const { return error_message_; }

private:
    State parse();
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int error_status_ = 0;
    std::string error_message_;
};

}  // namespace moe

// A small HTTP/1.1 server on Boost.Beast: one thread per connection (bounded), keep-alive, a body size
// limit, read deadlines, and a responder that can stream chunks (server-sent events) and tell when the client has gone.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace moe {

struct HttpRequest {
    std::string method;                          // GET, POST, ...
    std::string target;                          // path without the query
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
};

// How a handler answers. Exactly one of send() or begin_stream()...end_stream() per request.
class HttpResponder {
public:
    virtual ~HttpResponder() = default;
    virtual void send(int status, const std::string& content_type, const std::string& body,
                      const std::map<std::string, std::string>& extra_headers = {}) = 0;
    virtual bool begin_stream(const std::string& content_type) = 0;  // false: client gone
    virtual bool write_chunk(const std::string& data) = 0;           // false: client gone
    virtual void end_stream() = 0;
    // The peer closed its side (checked without blocking; used while a non-streaming request computes).
    virtual bool client_gone() = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;

// Connections are bounded in number, per client address and in time, so idle or slow clients cannot lock
// others out: a new connection over a cap takes the place of the connection that made the least recent
// progress (one between requests or still sending its request) rather than being refused; only when every
// connection is busy answering does it get 503. A request's body must keep up a minimum data rate.
struct HttpServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;
    size_t max_body_bytes = 4u << 20;
    int max_connections = 128;
    int max_connections_per_client = 32;
    double header_timeout_s = 10;  // from a request's first byte (or the connection's start) to its full header
    double body_timeout_s = 60;    // from the header to the full body, at most
    double body_grace_s = 10;      // the body's first seconds, then a second per min_body_rate bytes
    double min_body_rate = 500;    // bytes per second a body must keep up (0: only body_timeout)
    double idle_timeout_s = 60;    // keep-alive: between one response and the next request's first byte
    double send_timeout_s = 60;    // a client that stops reading a response is dropped after this long
};

class HttpServer {
public:
    HttpServer(HttpServerOptions opt, HttpHandler handler);
    ~HttpServer();
    // Binds; throws std::runtime_error naming address and reason.
    void listen();
    int port() const { return bound_port_; }
    // Serves until stop() is called (from a signal handler thread or another thread).
    void run();
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int bound_port_ = 0;
};

}  // namespace moe

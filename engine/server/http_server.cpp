#include "engine/server/http_server.h"

#include "engine/server/http_request_reader.h"

#include <errno.h>
#include <poll.h>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <iostream>
#include <sstream>
#include <map>

namespace moe {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

// Writes all of `data` to a non-blocking socket, waiting for room with poll(); false when the client is gone
// or did not take the bytes within the send timeout (a client that stops reading cannot stall a writer).
bool write_all(int fd, const std::string& data, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) return false;
        struct pollfd p {
            fd, POLLOUT, 0
        };
        ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    }
    return true;
}

class SyncResponder : public HttpResponder {
public:
    SyncResponder(tcp::socket& s, unsigned version, bool keep_alive, double send_timeout_s)
        : sock_(s), version_(version), keep_alive_(keep_alive), send_timeout_s_(send_timeout_s) {}

    void send(int status, const std::string& type, const std::string& body, const std::map<std::string, std::string>& extra = {}) override {
        http::response<http::string_body> res{static_cast<http::status>(status), version_};
        res.set(http::field::server, "moestream");
        res.set(http::field::content_type, type);
        for (const auto& [k, v] : extra) res.set(k, v);
        res.keep_alive(keep_alive_);
        res.body() = body;
        res.prepare_payload();
        std::ostringstream out;
        out << res;
        if (!write_all(sock_.native_handle(), out.str(), send_timeout_s_)) failed_ = true;
        sent_ = true;
    }
    bool begin_stream(const std::string& type) override {
        http::response<http::empty_body> res{http::status::ok, version_};
        res.set(http::field::server, "moestream");
        res.set(http::field::content_type, type);
        res.set(http::field::cache_control, "no-cache");
        res.keep_alive(keep_alive_);
        res.chunked(true);
        std::ostringstream out;
        out << res.base();
        sent_ = true;
        streaming_ = true;
        if (!write_all(sock_.native_handle(), out.str(), send_timeout_s_)) failed_ = true;
        return !failed_;
    }
    bool write_chunk(const std::string& data) override {
        if (failed_) return false;
        if (data.empty()) return true;  // an empty chunk would end the stream
        std::ostringstream size;
        size << std::hex << data.size() << "\r\n";
        if (!write_all(sock_.native_handle(), size.str() + data + "\r\n", send_timeout_s_)) failed_ = true;
        return !failed_;
    }
    void end_stream() override {
        if (failed_) return;
        if (!write_all(sock_.native_handle(), "0\r\n\r\n", send_timeout_s_)) failed_ = true;
    }
    bool client_gone() override {
        if (failed_) return true;
        struct pollfd p {
            sock_.native_handle(), POLLIN | POLLRDHUP, 0
        };
        if (::poll(&p, 1, 0) <= 0) return false;
        if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
        char c;
        return ::recv(sock_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    bool sent() const { return sent_; }
    bool failed() const { return failed_; }

private:
    tcp::socket& sock_;
    unsigned version_;
    bool keep_alive_;
    double send_timeout_s_;
    bool sent_ = false, streaming_ = false, failed_ = false;
};

std::string json_error(const std::string& message, const std::string& type) {
    std::string escaped;
    for (char c : message) escaped += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    return "{\"error\":{\"message\":\"" + escaped + "\",\"type\":\"" + type + "\",\"param\":null,\"code\":null}}";
}

}  // namespace

struct HttpServer::Impl {
    using Clock = std::chrono::steady_clock;
    struct Conn {
        std::string client;       // remote address
        bool busy = false;        // a request is being answered
        Clock::time_point since;  // its last progress: a byte received, or becoming idle after a response
    };

    HttpServerOptions opt;
    HttpHandler handler;
    net::io_context io;
    tcp::acceptor acceptor{io};
    std::atomic<bool> stopping{false};
    std::atomic<int> active{0};
    std::mutex mu;
    std::map<int, Conn> conns;  // by socket fd

    void made_progress(int fd) {
        std::lock_guard<std::mutex> lk(mu);
        if (auto it = conns.find(fd); it != conns.end()) it->second.since = Clock::now();
    }

    void set_state(int fd, bool busy) {
        std::lock_guard<std::mutex> lk(mu);
        auto it = conns.find(fd);
        if (it == conns.end()) return;
        it->second.busy = busy;
        it->second.since = Clock::now();
    }

    enum class ReadOutcome { Request, Closed, TimedOut, Refused };

    // Reads one request under deadlines: `first_wait` until its first byte, header_timeout for the header
    // from then; the body then has body_grace_s plus a second per min_body_rate bytes received, at most
    // body_timeout (a minimum data rate, as Apache's mod_reqtimeout MinRate: a client that stalls mid-body is
    // cut off in seconds, a slow but moving upload is not). A pipelined request already buffered returns at once.
    ReadOutcome read_request(int fd, HttpRequestReader& reader, HttpRequestReader::State state, double first_wait) {
        auto after = [](Clock::time_point t, double s) { return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
        bool started = reader.started(), header_done = false;
        auto deadline = after(Clock::now(), started ? opt.header_timeout_s : first_wait);
        Clock::time_point header_at;
        double body_bytes = 0;
        auto body_deadline = [&] {
            const double allowed = opt.min_body_rate > 0 ? opt.body_grace_s + body_bytes / opt.min_body_rate : opt.body_timeout_s;
            return after(header_at, std::min(opt.body_timeout_s, allowed));
        };
        char chunk[16384];
        for (;;) {
            if (state == HttpRequestReader::State::Done) return ReadOutcome::Request;
            if (state == HttpRequestReader::State::Failed) return ReadOutcome::Refused;
            if (!started && reader.started()) {
                started = true;
                deadline = after(Clock::now(), opt.header_timeout_s);
            }
            if (!header_done && reader.header_done()) {
                header_done = true;
                header_at = Clock::now();
                deadline = body_deadline();
            }
            // The socket is non-blocking: recv takes what has arrived; poll() waits for more up to the deadline.
            const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
            if (n > 0) {
                made_progress(fd);
                if (header_done) {
                    body_bytes += static_cast<double>(n);
                    deadline = body_deadline();
                }
                state = reader.feed(std::string_view(chunk, static_cast<size_t>(n)));
                continue;
            }
            if (n == 0) return ReadOutcome::Closed;
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return ReadOutcome::Closed;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
            if (stopping || left <= 0) return ReadOutcome::TimedOut;
            struct pollfd p {
                fd, POLLIN, 0
            };
            ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 200)));
        }
    }

    void session(tcp::socket sock) {
        const int fd = sock.native_handle();
        beast::error_code nb;
        sock.non_blocking(true, nb);  // reads and writes wait in poll() with deadlines, never block unbounded
        HttpRequestReader reader({opt.max_body_bytes, 64u << 10});
        auto state = HttpRequestReader::State::NeedMore;
        for (bool first = true;; first = false) {
            set_state(fd, false);
            const ReadOutcome got = read_request(fd, reader, state, first ? opt.header_timeout_s : opt.idle_timeout_s);
            if (got == ReadOutcome::Closed) break;
            if (got == ReadOutcome::Refused) {
                SyncResponder r(sock, 11, false, opt.send_timeout_s);
                r.send(reader.error_status(), "application/json", json_error(reader.error_message(), "invalid_request_error"));
                break;
            }
            if (got == ReadOutcome::TimedOut) {
                // Say why only to a client that had started a request; an idle keep-alive connection just closes.
                if (reader.started() && !stopping) {
                    SyncResponder r(sock, 11, false, opt.send_timeout_s);
                    r.send(408, "application/json", json_error("request not received in time", "invalid_request_error"));
                }
                break;
            }
            set_state(fd, true);
            const HttpRequest hr = reader.take(state);
            const bool keep = reader.keep_alive() && !stopping;
            SyncResponder r(sock, reader.version(), keep, opt.send_timeout_s);
            try {
                handler(hr, r);
            } catch (const std::exception& e) {
                if (!r.sent()) r.send(500, "application/json", json_error(std::string("internal error: ") + e.what(), "server_error"));
            }
            if (!r.sent()) r.send(500, "application/json", json_error("no response", "server_error"));
            if (!keep || r.failed()) break;
        }
        beast::error_code ec;
        sock.shutdown(tcp::socket::shutdown_both, ec);
        {
            std::lock_guard<std::mutex> lk(mu);
            conns.erase(fd);
        }
        sock.close(ec);
    }

    // Room for a connection from `client`: under both caps, or by closing, among the connections not being
    // answered (idle, or still sending a request) of that client when its own cap is the one reached, the one
    // whose last progress is oldest: a stalled flood loses its own members first, and a client that has just
    // connected, or is sending, outlasts them. False only when every candidate is busy answering.
    bool make_room(const std::string& client) {
        std::lock_guard<std::mutex> lk(mu);
        int from_client = 0;
        for (const auto& [fd, c] : conns) from_client += c.client == client;
        const bool client_full = from_client >= opt.max_connections_per_client;
        if (!client_full && static_cast<int>(conns.size()) < opt.max_connections) return true;
        int victim = -1;
        Clock::time_point oldest = Clock::time_point::max();
        for (const auto& [fd, c] : conns)
            if (!c.busy && (!client_full || c.client == client) && c.since < oldest) {
                oldest = c.since;
                victim = fd;
            }
        if (victim < 0) return false;
        ::shutdown(victim, SHUT_RDWR);  // its session's next read fails and it ends
        conns[victim].busy = true;      // not chosen twice
        return true;
    }

    void accept_next() {
        acceptor.async_accept([this](beast::error_code ec, tcp::socket sock) {
            if (ec || stopping) return;
            beast::error_code aec;
            const auto remote = sock.remote_endpoint(aec);
            const std::string client = aec ? std::string("?") : remote.address().to_string();
            if (!make_room(client)) {
                SyncResponder r(sock, 11, false, opt.send_timeout_s);
                r.send(503, "application/json", json_error("too many connections", "server_error"), {{"Retry-After", "1"}});
                beast::error_code ignore;
                sock.close(ignore);
            } else {
                {
                    std::lock_guard<std::mutex> lk(mu);
                    conns[sock.native_handle()] = Conn{client, false, Clock::now()};
                }
                active++;
                std::thread([this, s = std::move(sock)]() mutable {
                    session(std::move(s));
                    active--;
                }).detach();
            }
            accept_next();
        });
    }
};

HttpServer::HttpServer(HttpServerOptions opt, HttpHandler handler) : impl_(std::make_unique<Impl>()) {
    impl_->opt = std::move(opt);
    impl_->handler = std::move(handler);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::listen() {
    beast::error_code ec;
    auto addr = net::ip::make_address(impl_->opt.host, ec);
    if (ec) throw std::runtime_error("--host " + impl_->opt.host + " is not an IP address");
    tcp::endpoint ep{addr, static_cast<unsigned short>(impl_->opt.port)};
    impl_->acceptor.open(ep.protocol(), ec);
    if (!ec) impl_->acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) impl_->acceptor.bind(ep, ec);
    if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec) throw std::runtime_error("cannot listen on " + impl_->opt.host + ":" + std::to_string(impl_->opt.port) + ": " + ec.message());
    bound_port_ = impl_->acceptor.local_endpoint().port();
}

void HttpServer::run() {
    impl_->accept_next();
    impl_->io.run();
    // Wait for sessions to finish their current response (stop() shut their sockets down).
    for (int i = 0; i < 500 && impl_->active.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void HttpServer::stop() {
    if (!impl_ || impl_->stopping.exchange(true)) return;
    net::post(impl_->io, [this] {
        beast::error_code ec;
        impl_->acceptor.close(ec);
    });
    {
        // Idle keep-alive connections block in read: shut their read side so they end.
        std::lock_guard<std::mutex> lk(impl_->mu);
        for (const auto& [fd, c] : impl_->conns) ::shutdown(fd, SHUT_RD);
    }
    impl_->io.stop();
}

}  // namespace moe

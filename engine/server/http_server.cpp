#include "engine/server/http_server.h"

#include <poll.h>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <iostream>

namespace moe {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

class SyncResponder : public HttpResponder {
public:
    SyncResponder(tcp::socket& s, unsigned version, bool keep_alive) : sock_(s), version_(version), keep_alive_(keep_alive) {}

    void send(int status, const std::string& type, const std::string& body,
              const std::map<std::string, std::string>& extra = {}) override {
        http::response<http::string_body> res{static_cast<http::status>(status), version_};
        res.set(http::field::server, "moestream");
        res.set(http::field::content_type, type);
        for (const auto& [k, v] : extra) res.set(k, v);
        res.keep_alive(keep_alive_);
        res.body() = body;
        res.prepare_payload();
        beast::error_code ec;
        http::write(sock_, res, ec);
        if (ec) failed_ = true;
        sent_ = true;
    }
    bool begin_stream(const std::string& type) override {
        http::response<http::empty_body> res{http::status::ok, version_};
        res.set(http::field::server, "moestream");
        res.set(http::field::content_type, type);
        res.set(http::field::cache_control, "no-cache");
        res.keep_alive(keep_alive_);
        res.chunked(true);
        http::response_serializer<http::empty_body> sr{res};
        beast::error_code ec;
        http::write_header(sock_, sr, ec);
        sent_ = true;
        streaming_ = true;
        if (ec) failed_ = true;
        return !failed_;
    }
    bool write_chunk(const std::string& data) override {
        if (failed_) return false;
        beast::error_code ec;
        net::write(sock_, http::make_chunk(net::buffer(data)), ec);
        if (ec) failed_ = true;
        return !failed_;
    }
    void end_stream() override {
        if (failed_) return;
        beast::error_code ec;
        net::write(sock_, http::make_chunk_last(), ec);
        if (ec) failed_ = true;
    }
    bool client_gone() override {
        if (failed_) return true;
        struct pollfd p {sock_.native_handle(), POLLIN | POLLRDHUP, 0};
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
    bool sent_ = false, streaming_ = false, failed_ = false;
};

std::string json_error(const std::string& message, const std::string& type) {
    std::string escaped;
    for (char c : message) escaped += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    return "{\"error\":{\"message\":\"" + escaped + "\",\"type\":\"" + type + "\",\"param\":null,\"code\":null}}";
}

}  // namespace

struct HttpServer::Impl {
    HttpServerOptions opt;
    HttpHandler handler;
    net::io_context io;
    tcp::acceptor acceptor{io};
    std::atomic<bool> stopping{false};
    std::atomic<int> active{0};
    std::mutex mu;
    std::set<int> open_fds;

    void session(tcp::socket sock) {
        {
            std::lock_guard<std::mutex> lk(mu);
            open_fds.insert(sock.native_handle());
        }
        struct timeval tv {opt.idle_timeout_s, 0};
        ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        beast::flat_buffer buffer;
        for (;;) {
            http::request_parser<http::string_body> parser;
            parser.body_limit(opt.max_body_bytes);
            parser.header_limit(64 * 1024);
            beast::error_code ec;
            http::read(sock, buffer, parser, ec);
            if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset) break;
            if (ec == http::error::body_limit) {
                SyncResponder r(sock, 11, false);
                r.send(413, "application/json",
                       json_error("request body exceeds " + std::to_string(opt.max_body_bytes) + " bytes", "invalid_request_error"));
                break;
            }
            if (ec) {
                if (ec != net::error::operation_aborted && ec != net::error::would_block && ec != net::error::timed_out &&
                    ec != net::error::bad_descriptor) {
                    SyncResponder r(sock, 11, false);
                    r.send(400, "application/json", json_error("malformed HTTP request: " + ec.message(), "invalid_request_error"));
                }
                break;
            }
            auto& req = parser.get();
            HttpRequest hr;
            hr.method = std::string(req.method_string());
            std::string target(req.target());
            hr.target = target.substr(0, target.find('?'));
            for (const auto& f : req) {
                std::string name(f.name_string());
                for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                hr.headers[name] = std::string(f.value());
            }
            hr.body = std::move(req.body());
            const bool keep = req.keep_alive() && !stopping;
            SyncResponder r(sock, req.version(), keep);
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
            open_fds.erase(sock.native_handle());
        }
        sock.close(ec);
    }

    void accept_next() {
        acceptor.async_accept([this](beast::error_code ec, tcp::socket sock) {
            if (ec || stopping) return;
            if (active.load() >= opt.max_connections) {
                SyncResponder r(sock, 11, false);
                r.send(503, "application/json", json_error("too many connections", "server_error"), {{"Retry-After", "1"}});
                beast::error_code ignore;
                sock.close(ignore);
            } else {
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
        for (int fd : impl_->open_fds) ::shutdown(fd, SHUT_RD);
    }
    impl_->io.stop();
}

}  // namespace moe

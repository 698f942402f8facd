#include "engine/server/http_request_reader.h"

// Boost 1.74's Beast asserts (abort) on a chunked body's malformed trailer cut across reads
// (parse_chunk_header: n >= 5), which any client can send: with its asserts off, that request is refused with
// a 400 (tested). The fuzz target hands Beast exact-size copies, so AddressSanitizer would see a read past them.
#define BOOST_DISABLE_ASSERTS
#include <utility>  // before Beast: Boost 1.74 uses std::exchange without including it
#include <vector>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstring>
#include <optional>

namespace moe {

namespace beast = boost::beast;
namespace http = beast::http;

struct HttpRequestReader::Impl {
    HttpReadLimits limits;
    beast::flat_buffer buffer;
    std::optional<http::request_parser<http::string_body>> parser;
    bool started = false;
    size_t header_bytes = 0;  // consumed by the current request's header so far
    bool keep_alive = false;
    unsigned version = 11;

    void fresh_parser() {
        parser.emplace();
        parser->body_limit(limits.max_body_bytes);
        // Beast's own header check is a few bytes loose in one buffer and exact across reads, so the limit is
        // counted here, on the bytes the header consumed; Beast's, set a little past it, bounds the search.
        parser->header_limit(static_cast<std::uint32_t>(limits.max_header_bytes + 64));
        parser->eager(false);  // put() stops at the header's end: what it used until then is the header
        started = false;
        header_bytes = 0;
    }
};

HttpRequestReader::HttpRequestReader(HttpReadLimits limits) : impl_(std::make_unique<Impl>()) {
    impl_->limits = limits;
    impl_->fresh_parser();
}

HttpRequestReader::~HttpRequestReader() = default;

HttpRequestReader::State HttpRequestReader::parse() {
    if (error_status_) return State::Failed;
    auto& p = *impl_->parser;
    while (impl_->buffer.size() > 0 && !p.is_done()) {
        beast::error_code ec;
        const bool in_header = !p.is_header_done();
#ifdef MOESTREAM_EXACT_PARSE_BUFFERS
        const std::vector<char> exact(static_cast<const char*>(impl_->buffer.data().data()),
                                      static_cast<const char*>(impl_->buffer.data().data()) + impl_->buffer.size());
        const size_t used = p.put(boost::asio::const_buffer(exact.data(), exact.size()), ec);
#else
        const size_t used = p.put(impl_->buffer.data(), ec);
#endif
        impl_->buffer.consume(used);
        if (used > 0) impl_->started = true;
        if (in_header) impl_->header_bytes += used;
        if (ec == http::error::header_limit || (in_header && impl_->header_bytes > impl_->limits.max_header_bytes)) {
            error_status_ = 431;
            error_message_ = "request header exceeds " + std::to_string(impl_->limits.max_header_bytes) + " bytes";
            return State::Failed;
        }
        if (in_header && !ec && p.is_header_done()) {
            const auto fields = static_cast<size_t>(std::distance(p.get().begin(), p.get().end()));
            if (fields > impl_->limits.max_header_fields) {
                error_status_ = 431;
                error_message_ = "request has " + std::to_string(fields) + " header fields, more than " +
                                 std::to_string(impl_->limits.max_header_fields);
                return State::Failed;
            }
        }
        if (ec == http::error::need_more) break;
        if (ec == http::error::body_limit) {
            error_status_ = 413;
            error_message_ = "request body exceeds " + std::to_string(impl_->limits.max_body_bytes) + " bytes";
            return State::Failed;
        }
        if (ec) {
            error_status_ = 400;
            error_message_ = "malformed HTTP request: " + ec.message();
            return State::Failed;
        }
        if (used == 0) break;
    }
    return p.is_done() ? State::Done : State::NeedMore;
}

HttpRequestReader::State HttpRequestReader::feed(std::string_view bytes) {
    if (error_status_) return State::Failed;
    if (!bytes.empty()) {
        impl_->started = true;
        auto room = impl_->buffer.prepare(bytes.size());
        std::memcpy(room.data(), bytes.data(), bytes.size());
        impl_->buffer.commit(bytes.size());
    }
    return parse();
}

HttpRequest HttpRequestReader::take(State& next) {
    auto& req = impl_->parser->get();
    HttpRequest hr;
    hr.method = std::string(req.method_string());
    const std::string target(req.target());
    hr.target = target.substr(0, target.find('?'));
    for (const auto& f : req) {
        std::string name(f.name_string());
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        hr.headers[name] = std::string(f.value());
    }
    hr.body = std::move(req.body());
    impl_->keep_alive = req.keep_alive();
    impl_->version = req.version();
    impl_->fresh_parser();
    impl_->started = impl_->buffer.size() > 0;
    next = parse();
    return hr;
}

bool HttpRequestReader::started() const { return impl_->started; }
bool HttpRequestReader::header_done() const { return impl_->parser->is_header_done(); }
bool HttpRequestReader::keep_alive() const { return impl_->keep_alive; }
unsigned HttpRequestReader::version() const { return impl_->version; }

}  // namespace moe

// libFuzzer target for the HTTP request reader (whatever any local process sends to the port): any bytes must
// give requests within the limits, or one error status (400, 413, 431), never a crash; and how the bytes are
// cut into reads must not matter (a request split over many TCP segments is the same request, pipelined
// requests come out in order). Only the request that fails may fail differently: one cut can see its error
// sooner (Beast checks a partial header's characters in one buffer, not across reads), or see another of its
// faults first (a header both too long and malformed: 431 or 400).
// Input: byte 0 sets the read size (1-64 bytes), the rest is what the connection receives.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/server/http_request_reader.h"

namespace {

const moe::HttpReadLimits kLimits{1024, 2048};

// The requests read, one line each, then the error status (0: none) or whether a request was left unfinished.
std::string read_all(const std::string& bytes, size_t piece) {
    moe::HttpRequestReader reader(kLimits);
    std::string out;
    auto state = moe::HttpRequestReader::State::NeedMore;
    for (size_t at = 0; at < bytes.size() && state != moe::HttpRequestReader::State::Failed; at += piece) {
        state = reader.feed(std::string_view(bytes).substr(at, piece));
        while (state == moe::HttpRequestReader::State::Done) {
            const moe::HttpRequest r = reader.take(state);
            if (r.body.size() > kLimits.max_body_bytes) std::abort();
            out += r.method + " " + r.target + " " + std::to_string(r.headers.size()) + " " + r.body + " " + std::to_string(reader.keep_alive()) +
                   "\n";
        }
    }
    if (state == moe::HttpRequestReader::State::Failed) {
        const int s = reader.error_status();
        if (s != 400 && s != 413 && s != 431) std::abort();
        out += "error " + std::to_string(s);
    } else {
        out += reader.started() ? "partial" : "idle";
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const size_t piece = 1 + data[0] % 64;
    const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
    const std::string whole = read_all(bytes, bytes.size() + 1), pieces = read_all(bytes, piece);
    if (whole == pieces) return 0;
    auto last_line = [](const std::string& s) { return s.substr(s.rfind('\n') + 1); };
    auto requests = [&](const std::string& s) { return s.substr(0, s.size() - last_line(s).size()); };
    const std::string a = last_line(whole), b = last_line(pieces);
    const bool a_failed = a.rfind("error", 0) == 0, b_failed = b.rfind("error", 0) == 0;
    if (requests(whole) != requests(pieces) || !(a_failed || b_failed) || a == "idle" || b == "idle") std::abort();
    return 0;
}

// What the API handlers share: the error a client caused (mapped to each API's error shape by the router),
// typed reads of request fields, and the JSON writer used on the wire.
#pragma once
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace moe {

using json = nlohmann::json;

// A request the client got wrong (or a server condition): HTTP status plus OpenAI's error fields.
struct ApiError {
    int status;
    std::string message, type, param, code;
};

inline ApiError bad(const std::string& msg, const std::string& param = "", const std::string& code = "") {
    return {400, msg, "invalid_request_error", param, code};
}

// Model output may hold bytes that are not UTF-8 (a byte-level vocabulary can emit any byte): replace them
// with U+FFFD rather than fail the response.
template <typename J>
std::string wire(const J& j) {
    return j.dump(-1, ' ', false, J::error_handler_t::replace);
}

// The usage extension both APIs carry (`usage.moestream`): what the request cost the expert cache.
template <typename Io>
json expert_usage_json(const Io& io) {
    const uint64_t lookups = io.hits + io.misses;
    return {{"expert_bytes_read", io.bytes_read},
            {"expert_cache_hits", io.hits},
            {"expert_cache_misses", io.misses},
            {"expert_hit_rate", lookups ? static_cast<double>(io.hits) / static_cast<double>(lookups) : 0.0},
            {"expert_io_wait_ms", io.io_wait_ms}};
}

inline int64_t now_s() { return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// body[key] as a number in [lo, hi] (integral T: an integer); nullopt when absent or null.
template <typename T, typename J>
std::optional<T> number(const J& body, const char* key, T lo, T hi) {
    if (!body.contains(key) || body[key].is_null()) return std::nullopt;
    if (!body[key].is_number()) throw bad(std::string(key) + " must be a number", key);
    const double v = body[key].template get<double>();
    if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)))
        throw bad(std::string(key) + " = " + body[key].dump() + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", key);
    if constexpr (std::is_integral_v<T>)
        if (v != static_cast<double>(static_cast<T>(v))) throw bad(std::string(key) + " must be an integer", key);
    return static_cast<T>(v);
}

template <typename J>
std::optional<bool> boolean(const J& body, const char* key) {
    if (!body.contains(key) || body[key].is_null()) return std::nullopt;
    if (!body[key].is_boolean()) throw bad(std::string(key) + " must be a boolean", key);
    return body[key].template get<bool>();
}

// body["tools"] (absent or null: none), each element read by `one(element, "tools[i]")`.
template <typename J, typename F>
auto read_tool_list(const J& body, F one) {
    std::vector<decltype(one(body, std::string()))> tools;
    if (!body.contains("tools") || body["tools"].is_null()) return tools;
    if (!body["tools"].is_array()) throw bad("tools must be an array", "tools");
    for (size_t i = 0; i < body["tools"].size(); ++i) tools.push_back(one(body["tools"][i], "tools[" + std::to_string(i) + "]"));
    return tools;
}

}  // namespace moe

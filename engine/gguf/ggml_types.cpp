#include "engine/gguf/ggml_types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <stdexcept>

namespace moe {
namespace {
struct Entry {
    uint32_t id;
    TypeInfo info;
};
constexpr std::array kTypes = {
    Entry{0, {"f32", 1, 4, true}},       Entry{1, {"f16", 1, 2, true}},
    Entry{2, {"q4_0", 32, 18, true}},    Entry{3, {"q4_1", 32, 20, false}},
    Entry{6, {"q5_0", 32, 22, false}},   Entry{7, {"q5_1", 32, 24, false}},
    Entry{8, {"q8_0", 32, 34, true}},    Entry{9, {"q8_1", 32, 36, false}},
    Entry{10, {"q2_K", 256, 84, false}}, Entry{11, {"q3_K", 256, 110, false}},
    Entry{12, {"q4_K", 256, 144, true}}, Entry{13, {"q5_K", 256, 176, true}},
    Entry{14, {"q6_K", 256, 210, true}}, Entry{15, {"q8_K", 256, 292, false}},
    Entry{30, {"bf16", 1, 2, true}},
};
}  // namespace

std::optional<TypeInfo> type_info(uint32_t raw_type) {
    for (const auto& e : kTypes)
        if (e.id == raw_type) return e.info;
    return std::nullopt;
}

TypeInfo type_info(GgmlType t) {
    auto info = type_info(static_cast<uint32_t>(t));
    if (!info) throw std::logic_error("type_info: GgmlType without a table entry");
    return *info;
}

std::string type_name(uint32_t raw_type) {
    auto info = type_info(raw_type);
    return info ? std::string(info->name) : "type#" + std::to_string(raw_type);
}

std::optional<GgmlType> parse_type_name(std::string_view name) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    for (const auto& e : kTypes) {
        std::string n(e.info.name);
        std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
        if (n == lower) return static_cast<GgmlType>(e.id);
    }
    return std::nullopt;
}

std::optional<uint64_t> row_bytes(GgmlType t, uint64_t n) {
    TypeInfo info = type_info(t);
    if (n % info.block_elems != 0) return std::nullopt;
    uint64_t blocks = n / info.block_elems;
    if (blocks > UINT64_MAX / info.block_bytes) return std::nullopt;
    return blocks * info.block_bytes;
}

}  // namespace moe

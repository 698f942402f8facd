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

constexpr TypeOrigin ik = TypeOrigin::IkLlama;

// ggml.h's enum ggml_type and type_traits (llama.cpp, August 2026), then ik_llama.cpp's additions (its ggml.h
// and type_traits: block sizes from its ggml-common.h, row_meta_size for the types with per-row scales).
// Ids both projects use agree; 41 is Q1_0 in llama.cpp and Q1_0_G128 in ik_llama.cpp, with the same geometry.
constexpr std::array kTypes = {
    Entry{0, {"f32", 1, 4, 0, true}},
    Entry{1, {"f16", 1, 2, 0, true}},
    Entry{2, {"q4_0", 32, 18, 0, true}},
    Entry{3, {"q4_1", 32, 20, 0, true}},
    Entry{6, {"q5_0", 32, 22, 0, true}},
    Entry{7, {"q5_1", 32, 24, 0, true}},
    Entry{8, {"q8_0", 32, 34, 0, true}},
    Entry{9, {"q8_1", 32, 36, 0, false}},
    Entry{10, {"q2_K", 256, 84, 0, true}},
    Entry{11, {"q3_K", 256, 110, 0, true}},
    Entry{12, {"q4_K", 256, 144, 0, true}},
    Entry{13, {"q5_K", 256, 176, 0, true}},
    Entry{14, {"q6_K", 256, 210, 0, true}},
    Entry{15, {"q8_K", 256, 292, 0, false}},
    Entry{16, {"iq2_xxs", 256, 66, 0, true}},
    Entry{17, {"iq2_xs", 256, 74, 0, true}},
    Entry{18, {"iq3_xxs", 256, 98, 0, true}},
    Entry{19, {"iq1_s", 256, 50, 0, true}},
    Entry{20, {"iq4_nl", 32, 18, 0, true}},
    Entry{21, {"iq3_s", 256, 110, 0, true}},
    Entry{22, {"iq2_s", 256, 82, 0, true}},
    Entry{23, {"iq4_xs", 256, 136, 0, true}},
    Entry{24, {"i8", 1, 1, 0, false}},
    Entry{25, {"i16", 1, 2, 0, false}},
    Entry{26, {"i32", 1, 4, 0, false}},
    Entry{27, {"i64", 1, 8, 0, false}},
    Entry{28, {"f64", 1, 8, 0, false}},
    Entry{29, {"iq1_m", 256, 56, 0, true}},
    Entry{30, {"bf16", 1, 2, 0, true}},
    Entry{31, {"q4_0_4x4", 32, 18, 0, false}},  // removed from llama.cpp's files; ik_llama.cpp still reads them
    Entry{32, {"q4_0_4x8", 32, 18, 0, false}},
    Entry{33, {"q4_0_8x8", 32, 18, 0, false}},
    Entry{34, {"tq1_0", 256, 54, 0, true}},
    Entry{35, {"tq2_0", 256, 66, 0, true}},
    Entry{36, {"i2_s", 4, 1, 0, false, ik}},  // BitNet's 2-bit weights (plus a 32-byte tensor trailer, see gguf_reader)
    Entry{39, {"mxfp4", 32, 17, 0, true}},
    Entry{40, {"nvfp4", 64, 36, 0, false}},
    Entry{41, {"q1_0", 128, 18, 0, false}},
    Entry{42, {"q2_0", 64, 18, 0, false}},
    // ik_llama.cpp
    Entry{97, {"q8_0_x4", 32, 34, 0, false, ik}},
    Entry{98, {"q8_1_x4", 32, 36, 0, false, ik}},
    Entry{99, {"q8_2_x4", 32, 36, 0, false, ik}},
    Entry{133, {"q6_0", 32, 26, 0, true, ik}},
    Entry{134, {"iq1_bn", 64, 13, 2, true, ik}},
    Entry{135, {"iq2_bn", 64, 16, 4, true, ik}},
    Entry{136, {"q8_K64", 64, 68, 0, false, ik}},
    Entry{137, {"iq2_k", 256, 76, 0, true, ik}},
    Entry{138, {"iq3_k", 256, 110, 0, true, ik}},
    Entry{139, {"iq4_k", 256, 144, 0, true, ik}},
    Entry{140, {"iq5_k", 256, 176, 0, true, ik}},
    Entry{141, {"iq6_k", 256, 212, 0, true, ik}},
    Entry{144, {"iq4_ks", 256, 136, 4, true, ik}},
    Entry{145, {"iq2_ks", 256, 70, 2, true, ik}},
    Entry{146, {"iq4_kss", 256, 128, 4, true, ik}},
    Entry{147, {"q8_K16", 64, 64, 20, false, ik}},
    Entry{148, {"q8_K32", 256, 292, 0, false, ik}},
    Entry{149, {"q8_KR8", 256, 292, 0, false, ik}},
    Entry{150, {"q8_K128", 128, 140, 0, false, ik}},
    Entry{151, {"q8_KV", 32, 32, 8, true, ik}},
    Entry{152, {"iq5_ks", 256, 168, 4, true, ik}},
    Entry{153, {"iq2_kt", 256, 68, 4, true, ik}},
    Entry{154, {"iq3_kt", 256, 100, 4, true, ik}},
    Entry{155, {"iq4_kt", 256, 128, 4, true, ik}},
    Entry{156, {"iq3_ks", 256, 102, 2, true, ik}},
    Entry{157, {"iq2_kl", 256, 86, 2, true, ik}},
    Entry{158, {"iq1_kt", 256, 56, 4, true, ik}},
    Entry{202, {"q4_0_r8", 32, 18, 0, true, ik}},
    Entry{206, {"q5_0_r4", 32, 22, 0, true, ik}},
    Entry{208, {"q8_0_r8", 32, 34, 0, true, ik}},
    Entry{210, {"q2_k_r4", 256, 84, 0, true, ik}},
    Entry{211, {"q3_k_r4", 256, 110, 0, true, ik}},
    Entry{212, {"q4_k_r4", 256, 144, 0, true, ik}},
    Entry{213, {"q5_k_r4", 256, 176, 0, true, ik}},
    Entry{214, {"q6_k_r4", 256, 210, 0, true, ik}},
    Entry{216, {"iq2_xxs_r4", 256, 66, 0, true, ik}},
    Entry{217, {"iq2_xs_r4", 256, 74, 0, true, ik}},
    Entry{218, {"iq3_xxs_r4", 256, 98, 0, true, ik}},
    Entry{219, {"iq1_s_r4", 32, 6, 2, true, ik}},
    Entry{220, {"iq4_nl_r4", 32, 18, 0, true, ik}},
    Entry{221, {"iq3_s_r4", 256, 110, 0, true, ik}},
    Entry{222, {"iq2_s_r4", 256, 82, 0, true, ik}},
    Entry{223, {"iq4_xs_r8", 256, 136, 0, true, ik}},
    Entry{229, {"iq1_m_r4", 32, 7, 2, true, ik}},
    Entry{230, {"bf16_r16", 1, 2, 0, true, ik}},
    Entry{233, {"q6_0_r4", 32, 26, 0, true, ik}},
    Entry{335, {"iq2_bn_r4", 64, 16, 4, true, ik}},
    Entry{337, {"iq2_k_r4", 256, 76, 0, true, ik}},
    Entry{338, {"iq3_k_r4", 256, 110, 0, true, ik}},
    Entry{339, {"iq4_k_r4", 256, 144, 0, true, ik}},
    Entry{340, {"iq5_k_r4", 256, 176, 0, true, ik}},
    Entry{344, {"iq4_ks_r4", 256, 136, 4, true, ik}},
    Entry{352, {"iq5_ks_r4", 256, 168, 4, true, ik}},
    Entry{353, {"mxfp4_r8", 32, 17, 0, true, ik}},
    Entry{397, {"q8_k_r16", 256, 258, 0, false, ik}},
    Entry{398, {"q8_KV_r8", 32, 32, 4, true, ik}},
    Entry{399, {"q8_k_r8", 256, 258, 0, true, ik}},
    // the engine's
    Entry{0x10010, {"ik_q8_0", 32, 34, 0, true, TypeOrigin::Internal}},
};

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

// The interleave of the _R4/_R8/_R16 forms, from ik_llama.cpp's names (lower case in the table).
constexpr uint32_t interleave_of(std::string_view name) {
    for (uint32_t k : {4u, 8u, 16u}) {
        const std::string_view suffix = k == 4 ? "_r4" : k == 8 ? "_r8" : "_r16";
        if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) return k;
    }
    return 1;
}

}  // namespace

std::optional<TypeInfo> type_info(uint32_t raw_type) {
    for (const auto& e : kTypes)
        if (e.id == raw_type) {
            TypeInfo info = e.info;
            info.interleave = interleave_of(info.name);
            return info;
        }
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
    const std::string want = lower(name);
    for (const auto& e : kTypes)
        if (e.info.computable && e.info.origin != TypeOrigin::Internal && lower(e.info.name) == want) return static_cast<GgmlType>(e.id);
    return std::nullopt;
}

std::string computable_type_list() {
    std::string out;
    for (const auto& e : kTypes)
        if (e.info.computable && e.info.origin != TypeOrigin::Internal) out += (out.empty() ? "" : " ") + std::string(e.info.name);
    return out;
}

std::optional<uint64_t> row_bytes_raw(uint32_t raw_type, uint64_t n) {
    auto info = type_info(raw_type);
    if (!info || n % info->block_elems != 0) return std::nullopt;
    const uint64_t blocks = n / info->block_elems;
    if (blocks > (UINT64_MAX - info->row_meta) / info->block_bytes) return std::nullopt;
    return info->row_meta + blocks * info->block_bytes;
}

std::optional<uint64_t> row_bytes(GgmlType t, uint64_t n) { return row_bytes_raw(static_cast<uint32_t>(t), n); }

GgmlType interleaved_base(GgmlType t) {
    switch (t) {
        case GgmlType::IQ2_K_R4: return GgmlType::IQ2_K;
        case GgmlType::IQ3_K_R4: return GgmlType::IQ3_K;
        case GgmlType::IQ4_K_R4: return GgmlType::IQ4_K;
        case GgmlType::IQ5_K_R4: return GgmlType::IQ5_K;
        case GgmlType::IQ4_KS_R4: return GgmlType::IQ4_KS;
        case GgmlType::IQ5_KS_R4: return GgmlType::IQ5_KS;
        case GgmlType::Q8_0_R8: return GgmlType::Q8_0;
        case GgmlType::Q2_K_R4: return GgmlType::Q2_K;
        case GgmlType::Q3_K_R4: return GgmlType::Q3_K;
        case GgmlType::Q4_K_R4: return GgmlType::Q4_K;
        case GgmlType::Q5_K_R4: return GgmlType::Q5_K;
        case GgmlType::Q6_K_R4: return GgmlType::Q6_K;
        case GgmlType::Q4_0_R8: return GgmlType::Q4_0;
        case GgmlType::Q5_0_R4: return GgmlType::Q5_0;
        case GgmlType::Q6_0_R4: return GgmlType::Q6_0;
        case GgmlType::IQ4_NL_R4: return GgmlType::IQ4_NL;
        case GgmlType::IQ4_XS_R8: return GgmlType::IQ4_XS;
        case GgmlType::IQ2_XXS_R4: return GgmlType::IQ2_XXS;
        case GgmlType::IQ2_XS_R4: return GgmlType::IQ2_XS;
        case GgmlType::IQ3_XXS_R4: return GgmlType::IQ3_XXS;
        case GgmlType::IQ2_S_R4: return GgmlType::IQ2_S;
        case GgmlType::IQ3_S_R4: return GgmlType::IQ3_S;
        case GgmlType::Q8_KV_R8: return GgmlType::Q8_KV;
        case GgmlType::IQ2_BN_R4: return GgmlType::IQ2_BN;
        case GgmlType::MXFP4_R8: return GgmlType::MXFP4;
        case GgmlType::BF16_R16: return GgmlType::BF16;
        default: throw std::invalid_argument("no base type known for " + std::string(type_info(t).name));
    }
}

}  // namespace moe

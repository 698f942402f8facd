// ggml tensor types as stored in GGUF files: ids, block geometry, names.
// Block layouts match llama.cpp's ggml-common.h byte for byte (see kernels/blocks.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moe {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    BF16 = 30,
};

struct TypeInfo {
    std::string_view name;  // llama.cpp's spelling, lower case ("q4_K")
    uint32_t block_elems;   // elements per block (1 for plain floats)
    uint32_t block_bytes;   // bytes per block
    bool computable;        // the engine has kernels for it
};

// Known geometry for a raw type id, or nullopt for ids this build does not know.
std::optional<TypeInfo> type_info(uint32_t raw_type);
TypeInfo type_info(GgmlType t);
std::string type_name(uint32_t raw_type);  // "q4_K", or "type#N" for unknown ids
// Parses "f32", "q4_k", "Q8_0", ... (case-insensitive); nullopt when unknown.
std::optional<GgmlType> parse_type_name(std::string_view name);

// Bytes of one row of n elements; nullopt if n is not a multiple of the block size or overflows.
std::optional<uint64_t> row_bytes(GgmlType t, uint64_t n);

}  // namespace moe

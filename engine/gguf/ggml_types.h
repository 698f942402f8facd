// ggml tensor types as stored in GGUF files: ids, block geometry, names, for every type llama.cpp's GGUF format
// defines and for ik_llama.cpp's own (ids 133 and up, its row-interleaved _R4/_R8 forms, trellis _KT types).
// Block layouts of the types the engine computes match llama.cpp's ggml-common.h byte for byte (kernels/blocks.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

// The types the engine has kernels for (and the activation-only ones), by their llama.cpp ids. Other ids are
// known to type_info() for their sizes only.
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
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I32 = 26,  // integer tensors (deepseek4's token-to-expert table)
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    // ik_llama.cpp's own types (its ids)
    Q6_0 = 133,
    IQ1_BN = 134,
    IQ2_BN = 135,
    IQ2_K = 137,
    IQ3_K = 138,
    IQ4_K = 139,
    IQ5_K = 140,
    IQ6_K = 141,
    IQ4_KS = 144,
    IQ2_KS = 145,
    IQ4_KSS = 146,
    Q8_KV = 151,
    IQ5_KS = 152,
    IQ2_KT = 153,
    IQ3_KT = 154,
    IQ4_KT = 155,
    IQ3_KS = 156,
    IQ2_KL = 157,
    IQ1_KT = 158,
    Q4_0_R8 = 202,
    Q5_0_R4 = 206,
    Q8_0_R8 = 208,
    Q2_K_R4 = 210,
    Q3_K_R4 = 211,
    Q4_K_R4 = 212,
    Q5_K_R4 = 213,
    Q6_K_R4 = 214,
    IQ2_XXS_R4 = 216,
    IQ2_XS_R4 = 217,
    IQ3_XXS_R4 = 218,
    IQ1_S_R4 = 219,
    IQ4_NL_R4 = 220,
    IQ3_S_R4 = 221,
    IQ2_S_R4 = 222,
    IQ4_XS_R8 = 223,
    IQ1_M_R4 = 229,
    BF16_R16 = 230,
    Q6_0_R4 = 233,
    IQ2_BN_R4 = 335,
    IQ2_K_R4 = 337,
    IQ3_K_R4 = 338,
    IQ4_K_R4 = 339,
    IQ5_K_R4 = 340,
    IQ4_KS_R4 = 344,
    IQ5_KS_R4 = 352,
    MXFP4_R8 = 353,
    Q8_KV_R8 = 398,
    Q8_K_R8 = 399,
    // Activation-only formats of ik_llama.cpp's kernels (never in files): its Q8_K (296 bytes, not llama.cpp's),
    // Q8_K32, Q8_K128 and Q8_2_X4. Ids outside every project's range.
    IK_Q8_K = 0x10000,
    IK_Q8_K32,
    IK_Q8_K128,
    IK_Q8_2_X4,
    IK_Q8_K64,  // ik's Q8_K64 (IQ1_BN, IQ2_BN): four f32 scales, their values' sums times them, the int8 values
    IK_Q8_K16,  // ik's Q8_K16 (IQ2_BN_R4): four f32 scales, the sum of all values times theirs, the int8 values
    IK_Q8_KV,   // ik's Q8_KV rows as activations: f32 scale, int32 sum of the values, then the int8 values
    // llama.cpp's Q8_0 blocks in a file made by ik_llama.cpp, computed as ik computes them (Q8_2_X4 activations):
    // the loader gives such tensors this type.
    IK_Q8_0 = 0x10010,
};

enum class TypeOrigin { Ggml, IkLlama, Internal };  // Internal: the engine's own kernel types, never in files

struct TypeInfo {
    std::string_view name;  // the spelling of the defining project ("q4_K", "iq4_ks")
    uint32_t block_elems;   // elements per block (1 for plain numbers)
    uint32_t block_bytes;   // bytes per block
    uint32_t row_meta;      // bytes in front of every row (ik_llama.cpp's per-row scales), usually 0
    bool computable;        // the engine has kernels for it
    TypeOrigin origin = TypeOrigin::Ggml;
    // Rows stored together (ik_llama.cpp's _R4/_R8/_R16 forms: the group's row scales, then blocks that
    // interleave its rows); a tensor's rows per matrix must be a multiple of it. 1 for every other type.
    uint32_t interleave = 1;
};

// Known geometry for a raw type id, or nullopt for ids no known project defines.
std::optional<TypeInfo> type_info(uint32_t raw_type);
TypeInfo type_info(GgmlType t);
std::string type_name(uint32_t raw_type);  // "q4_K", or "type#N" for unknown ids
// Parses "f32", "q4_k", "Q8_0", "iq4_xs", ... (case-insensitive); nullopt when unknown.
std::optional<GgmlType> parse_type_name(std::string_view name);
// The weight types the engine computes, in id order ("f32 f16 q4_0 ..."), for error messages.
std::string computable_type_list();
// The type whose rows a computed interleaved form groups (IQ4_K for IQ4_K_R4, Q8_0 for Q8_0_R8, ...); throws
// std::invalid_argument for any other type.
GgmlType interleaved_base(GgmlType interleaved);

// Bytes of one row of n elements; nullopt if n is not a multiple of the block size or overflows.
std::optional<uint64_t> row_bytes(GgmlType t, uint64_t n);
std::optional<uint64_t> row_bytes_raw(uint32_t raw_type, uint64_t n);

}  // namespace moe

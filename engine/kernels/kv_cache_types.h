// The types a K or V cache can be stored in (llama.cpp's -ctk / -ctv) and how llama.cpp's CPU backend writes a
// row of each: the type's from_float, as ggml_compute_forward_set_rows calls it. A cache row is one token's
// values for one layer; quantized rows are whole blocks of 32.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/gguf/ggml_types.h"

namespace moe::kernels {

// Mainline llama.cpp's --cache-type-k/-v choices, in its order.
inline constexpr GgmlType kKvCacheTypes[] = {GgmlType::F32,  GgmlType::F16,    GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                             GgmlType::Q4_1, GgmlType::IQ4_NL, GgmlType::Q5_0, GgmlType::Q5_1};

// A sequence cache's two types: K (also MLA's latent and DSA's indexer keys) and V.
struct KvCacheTypes {
    GgmlType k = GgmlType::F16, v = GgmlType::F16;
    bool f16() const { return k == GgmlType::F16 && v == GgmlType::F16; }
};

// "q8_0" -> Q8_0 (llama.cpp's spelling, case-insensitive); nullopt for a name that is not a cache type.
std::optional<GgmlType> parse_kv_cache_type(std::string_view name);
std::string kv_cache_type_name(GgmlType t);
std::string kv_cache_type_list();  // "f32, f16, bf16, q8_0, ..." for error messages
// Quantized in ggml's sense (blocks with scales): what turns on flash attention's one-row path and the rotation.
bool kv_type_quantized(GgmlType t);

// Writes n values (a multiple of the type's block) as llama.cpp stores a cache row: f16 and bf16 rounded to
// nearest even, q8_0 as its x86 quantize_row_q8_0, the others as their quantize_row_*_ref (iq4_nl without
// the scale search weight quantization does).
void store_kv_row(GgmlType t, const float* x, void* dst, int64_t n);

// llama.cpp's Walsh-Hadamard rotation of quantized caches (attn_rot_k / attn_rot_v): the size of the blocks q and
// k (resp. v and the attention output) are rotated in, or 0 for none. K: the largest power of two from 64 that
// divides the head size; V: 64. Only for heads that are a multiple of 64 and a quantized type.
int kv_rotation_k(GgmlType k, int head_dim);
int kv_rotation_v(GgmlType v, int head_dim);

}  // namespace moe::kernels

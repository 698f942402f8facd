// The narrow kernel interface: dot products of a weight row with prepared activations, activation
// preparation, dequantization, and weight quantization (for mkmodel). Callers never see the ISA: a table
// of function pointers is chosen once from CPUID (scalar reference, AVX2, AVX-512).
//
// Numerics follow llama.cpp's CPU backend: each weight type has an activation ("vec dot") type; activations
// are converted to it once per matmul (F16 -> fp16, BF16 -> bf16, Q8_0/Q4_0 -> Q8_0, K-quants -> Q8_K).
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/kernels/flavor.h"

namespace moe::kernels {

enum class Isa { Scalar, Avx2, Avx512 };
const char* isa_name(Isa isa);

using DotFn = float (*)(int64_t n, const void* weights, const void* activations);
// out[r] = dot(row r, activations) for `rows` consecutive rows `row_bytes` apart: the per-row call inlined.
using DotRowsFn = void (*)(int64_t n, const uint8_t* weights, size_t row_bytes, int64_t rows, const void* activations, float* out);
// out[t * out_stride + r] = dot(row r, activation row t) for `rows` weight rows and `n_tok` activation rows
// `act_bytes` apart; each output the same bits as the dot it tiles (tiling shares the weight unpacking between
// tokens and the reductions between rows, never the sums of one output).
using DotTileFn = void (*)(int64_t n, const uint8_t* weights, size_t row_bytes, int64_t rows, const uint8_t* activations, size_t act_bytes, int n_tok,
                           float* out, int64_t out_stride);
using PrepareFn = void (*)(const float* x, void* out, int64_t n);

// Indexed by type_slot(): llama.cpp's ids below 64 as they are, ik_llama.cpp's computed types after them.
constexpr int kTypeSlots = 128;
inline constexpr GgmlType kIkKernelTypes[] = {
    GgmlType::Q6_0,      GgmlType::IQ2_K,      GgmlType::IQ3_K,    GgmlType::IQ4_K,    GgmlType::IQ5_K,    GgmlType::IQ6_K,
    GgmlType::IQ4_KS,    GgmlType::IQ2_KS,     GgmlType::IQ4_KSS,  GgmlType::IQ5_KS,   GgmlType::IQ2_KT,   GgmlType::IQ3_KT,
    GgmlType::IQ4_KT,    GgmlType::IQ3_KS,     GgmlType::IQ2_KL,   GgmlType::IQ1_KT,   GgmlType::IQ1_S_R4, GgmlType::IQ4_KS_R4,
    GgmlType::IK_Q8_0,   GgmlType::IQ2_K_R4,   GgmlType::IQ3_K_R4, GgmlType::IQ4_K_R4, GgmlType::IQ5_K_R4, GgmlType::IQ5_KS_R4,
    GgmlType::Q8_0_R8,   GgmlType::Q4_K_R4,    GgmlType::Q6_K_R4,  GgmlType::Q4_0_R8,  GgmlType::Q5_0_R4,  GgmlType::Q6_0_R4,
    GgmlType::IQ4_NL_R4, GgmlType::IQ4_XS_R8,  GgmlType::Q5_K_R4,  GgmlType::Q2_K_R4,  GgmlType::Q3_K_R4,  GgmlType::IQ2_XXS_R4,
    GgmlType::IQ2_XS_R4, GgmlType::IQ3_XXS_R4, GgmlType::IQ2_S_R4, GgmlType::IQ3_S_R4, GgmlType::IQ1_M_R4, GgmlType::Q8_KV,
    GgmlType::Q8_KV_R8,  GgmlType::Q8_K_R8,    GgmlType::MXFP4_R8, GgmlType::BF16_R16, GgmlType::IQ1_BN,   GgmlType::IQ2_BN,
    GgmlType::IQ2_BN_R4};
// The table slot of a weight type, or -1 for a type without one.
constexpr int type_slot(GgmlType t) {
    const auto id = static_cast<uint32_t>(t);
    if (id < 64) return static_cast<int>(id);
    for (size_t i = 0; i < std::size(kIkKernelTypes); ++i)
        if (kIkKernelTypes[i] == t) return 64 + static_cast<int>(i);
    return -1;
}
// The rows a computable type stores together (type_info's interleave, known at compile time for the hot path).
constexpr int interleaved_rows(GgmlType t) {
    switch (t) {
        case GgmlType::IQ1_S_R4:
        case GgmlType::IQ2_XXS_R4:
        case GgmlType::IQ2_XS_R4:
        case GgmlType::IQ3_XXS_R4:
        case GgmlType::IQ2_S_R4:
        case GgmlType::IQ3_S_R4:
        case GgmlType::IQ1_M_R4:
        case GgmlType::IQ4_KS_R4:
        case GgmlType::IQ5_KS_R4:
        case GgmlType::IQ2_K_R4:
        case GgmlType::IQ3_K_R4:
        case GgmlType::IQ4_K_R4:
        case GgmlType::IQ5_K_R4:
        case GgmlType::Q4_K_R4:
        case GgmlType::Q5_K_R4:
        case GgmlType::Q2_K_R4:
        case GgmlType::Q3_K_R4:
        case GgmlType::Q6_K_R4:
        case GgmlType::Q5_0_R4:
        case GgmlType::Q6_0_R4:
        case GgmlType::IQ4_NL_R4:
        case GgmlType::IQ2_BN_R4: return 4;
        case GgmlType::Q8_0_R8:
        case GgmlType::Q4_0_R8:
        case GgmlType::IQ4_XS_R8:
        case GgmlType::Q8_KV_R8:
        case GgmlType::Q8_K_R8:
        case GgmlType::MXFP4_R8: return 8;
        case GgmlType::BF16_R16: return 16;
        default: return 1;
    }
}
// Slots [0, kUsedSlots) name a type; slot_type is type_slot's inverse there.
constexpr int kUsedSlots = 64 + static_cast<int>(std::size(kIkKernelTypes));
constexpr GgmlType slot_type(int slot) { return slot < 64 ? static_cast<GgmlType>(slot) : kIkKernelTypes[static_cast<size_t>(slot - 64)]; }
static_assert(kUsedSlots <= kTypeSlots);

struct KernelTable {
    Isa isa;
    Flavor flavor;  // the llama.cpp build whose float orders the float-weight kernels follow
    DotFn dot[kTypeSlots] = {};
    DotRowsFn dot_rows[kTypeSlots] = {};  // same results as calling dot per row; null where not provided
    // ik's interleaved forms whose kernels round a batch's columns otherwise than a lone one (Q4_K_R4, Q6_K_R4): the
    // batch's order (dot_rows and tile keep the lone column's)
    DotRowsFn dot_rows_batch[kTypeSlots] = {};
    DotFn dot_batch[kTypeSlots] = {};                   // llama.cpp's order for two or more tokens where it differs from dot
    DotFn dot_repacked[kTypeSlots] = {};                // llama.cpp's order for weights it repacks (row count a multiple of 8)
    DotFn dot_repacked_gemm[kTypeSlots] = {};           // the same weights, activation rows in groups of four (its GEMM)
    DotRowsFn dot_rows_repacked[kTypeSlots] = {};       // dot_repacked over consecutive rows
    DotRowsFn dot_rows_repacked_gemm[kTypeSlots] = {};  // dot_repacked_gemm over consecutive rows
    DotTileFn tile[kTypeSlots] = {};                    // dot over rows x tokens, where provided
    DotTileFn tile_repacked[kTypeSlots] = {};
    DotTileFn tile_repacked_gemm[kTypeSlots] = {};
    DotTileFn tile_batch[kTypeSlots] = {};  // dot_batch over rows x tokens
    // ik_llama.cpp's order for a batch of at least converted_min_tokens activation rows, for which it first
    // converts the weight rows to 8 bits (Q8_K_R8 / Q8_0_R8) and multiplies those.
    DotFn dot_converted[kTypeSlots] = {};
    DotTileFn tile_converted[kTypeSlots] = {};
    uint8_t converted_min_tokens[kTypeSlots] = {};
    // ik's interleaved forms whose batch order (dot_rows_batch, tile_batch) is that of a kernel for exactly this many
    // columns (IQ2_XS_R4, IQ2_S_R4: 16), given each whole chunk of them; the other columns take dot_rows' order
    uint8_t batch_chunk[kTypeSlots] = {};
};

// Builds a DotRowsFn from a dot kernel known at compile time, so the compiler inlines it into the loop.
template <float (*Dot)(int64_t, const void*, const void*)>
void dot_rows_of(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    for (int64_t r = 0; r < rows; ++r) out[r] = Dot(n, w + static_cast<size_t>(r) * row_bytes, a);
}

// Installs a type's dot kernel and the row loop built from it.
template <float (*Dot)(int64_t, const void*, const void*)>
void set_dot(KernelTable& t, GgmlType type) {
    t.dot[type_slot(type)] = Dot;
    t.dot_rows[type_slot(type)] = dot_rows_of<Dot>;
}

// The dot kernels llama.cpp's CPU backend uses for a matmul of n_tok activation rows with a rows x cols weight.
// Its summation order depends on the weight, the matmul and the row:
//  - weights it repacks at load (Q4_0 and Q4_K with rows a multiple of 8, on AVX2 CPUs) go through an
//    interleaved GEMM for the activation rows in whole groups of four of a dense matmul, and a GEMV for the
//    others (the same order for Q4_0);
//  - a dense matmul (MUL_MAT) of two or more rows takes llamafile's GEMM for float weights with cols a multiple
//    of its vector step (the build's lane count; 32 for BF16 on AVX512-BF16) and rows of 4; `dense` is false
//    for matmuls whose F32 activations llama.cpp reads through a strided view (it only reaches the GEMM for
//    them after converting the activations, which F32 weights never need);
//  - everything else (one row, and every expert matmul, MUL_MAT_ID) uses its vec_dot.
struct MatmulDots {
    DotFn grouped = nullptr;  // activation rows [0, n_grouped)
    DotFn single = nullptr;   // the rest
    int n_grouped = 0;
    DotRowsFn single_rows = nullptr;   // `single` over consecutive weight rows, where provided
    DotRowsFn grouped_rows = nullptr;  // `grouped` over consecutive weight rows, where provided
    DotTileFn single_tile = nullptr;   // `single` over rows x tokens, where provided
    DotTileFn grouped_tile = nullptr;  // `grouped` over rows x tokens, where provided
    // Rows stored together (ik's _R4 forms: 4, _R8: 8): row ranges start and end on multiples of it, and only the rows
    // and tile kernels exist (single and grouped are null).
    int row_group = 1;
    DotFn at(int row) const { return row < n_grouped ? grouped : single; }
    // The row kernel for activation row t, or null where there is none (then call at(t) per weight row).
    DotRowsFn rows_at(int t) const { return t < n_grouped ? grouped_rows : single_rows; }
};

//  - ik_llama.cpp's types (and ik's orders of llama.cpp's types in an ik file) switch to converted 8-bit rows for
//    batches of converted_min_tokens or more activation rows: an expert matmul whenever its rows come in eights,
//    a dense one also only where each of its n_threads threads gets at least 32 rows.
inline MatmulDots matmul_dots(const KernelTable& t, GgmlType type, int64_t rows, int64_t cols, int n_tok, bool dense, int n_threads = 1) {
    const int i = type_slot(type);
    if (const int group = interleaved_rows(type); group > 1) {
        if (!t.dot_rows_batch[i] || n_tok < 2) return {nullptr, nullptr, 0, t.dot_rows[i], nullptr, t.tile[i], nullptr, group};
        // (a matmul's columns go to the chunk kernel 16 at a time from its first; ik's 32-token tiles of small
        // matrices cut them at the same places)
        if (const int chunk = t.batch_chunk[i])
            return {nullptr, nullptr, n_tok - n_tok % chunk, t.dot_rows[i], t.dot_rows_batch[i], t.tile[i], t.tile_batch[i], group};
        // ik's matmul gives every column of a batch the batch's order except where a call covers one column: past
        // 32 tokens of a small dense matrix (fewer than 32 rows per thread) it goes in tiles of 32 tokens, and a
        // last tile of one token takes the lone column's.
        const bool lone_last = dense && rows / n_threads < 32 && n_tok > 32 && n_tok % 32 == 1;
        return {nullptr, nullptr, lone_last ? n_tok - 1 : n_tok, t.dot_rows[i], t.dot_rows_batch[i], t.tile[i], t.tile_batch[i], group};
    }
    if (t.dot_converted[i] && n_tok >= t.converted_min_tokens[i] && rows % 8 == 0 && (!dense || rows / n_threads >= 32))
        return {t.dot_converted[i], t.dot[i], n_tok, nullptr, nullptr, nullptr, t.tile_converted[i]};
    if (t.dot_repacked[i] && rows % 8 == 0)
        return {t.dot_repacked_gemm[i], t.dot_repacked[i],           dense && t.dot_repacked_gemm[i] ? n_tok - n_tok % 4 : 0,
                t.dot_rows_repacked[i], t.dot_rows_repacked_gemm[i], t.tile_repacked[i],
                t.tile_repacked_gemm[i]};
    // llamafile's vector step for the type in that build
    const int64_t gemm_k = t.flavor == Flavor::Avx2 ? 8 : type == GgmlType::BF16 ? 32 : 16;
    // (its quantized GEMM, of which only IQ4_NL's order differs from vec_dot's, takes any shape)
    const bool float_weights = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
    const bool gemm_shape = float_weights ? cols % gemm_k == 0 && rows % 4 == 0 : true;
    if (dense && n_tok >= 2 && t.dot_batch[i] && gemm_shape)
        return {t.dot_batch[i], t.dot[i], n_tok, t.dot_rows[i], nullptr, t.tile[i], t.tile_batch[i]};
    return {nullptr, t.dot[i], 0, t.dot_rows[i], nullptr, t.tile[i]};
}

// The scalar reference table (the oracle for every other path).
const KernelTable& reference_table(Flavor f = default_flavor());
// The best table this CPU supports (or the one named by MOESTREAM_ISA=scalar|avx2|avx512).
const KernelTable& active_table(Flavor f = default_flavor());
// A table for a given ISA; nullptr when this CPU lacks it.
const KernelTable* table_for(Isa isa, Flavor f = default_flavor());

// Activation type consumed by the dot product of weight type t.
GgmlType activation_type(GgmlType weight);
// Bytes of prepared activations for n elements of weight type t.
size_t activation_bytes(GgmlType weight, int64_t n);
// Converts n floats into weight type t's activation format.
void prepare_activations(GgmlType weight, const float* x, void* out, int64_t n);

// Dequantizes n elements (a multiple of the block size) to float.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// Quantizes n floats into type t (simple, valid encoders used to build synthetic models).
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// A random, well-formed row of n elements of type t (random codes, moderate scales), for tests and benchmarks.
std::vector<uint8_t> random_weight_row(GgmlType t, size_t n, uint64_t seed);
// `rows` such rows one after another; for row-interleaved types (rows a multiple of the interleave) whole groups.
std::vector<uint8_t> random_weight_rows(GgmlType t, size_t n, size_t rows, uint64_t seed);

// Activation quantizers, exposed for tests.
void quantize_q8_0(const float* x, void* out, int64_t n);
void quantize_q8_K(const float* x, void* out, int64_t n);

}  // namespace moe::kernels

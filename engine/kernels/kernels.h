// The narrow kernel interface: dot products of a weight row with prepared activations, activation
// preparation, dequantization, and weight quantization (for mkmodel). Callers never see the ISA: a table
// of function pointers is chosen once from CPUID (scalar reference, AVX2, AVX-512).
//
// Numerics follow llama.cpp's CPU backend: each weight type has an activation ("vec dot") type; activations
// are converted to it once per matmul (F16 -> fp16, BF16 -> bf16, Q8_0/Q4_0 -> Q8_0, K-quants -> Q8_K).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/gguf/ggml_types.h"

namespace moe::kernels {

enum class Isa { Scalar, Avx2, Avx512 };
const char* isa_name(Isa isa);

using DotFn = float (*)(int64_t n, const void* weights, const void* activations);
// out[r] = dot(row r, activations) for `rows` consecutive rows `row_bytes` apart: the per-row call inlined.
using DotRowsFn = void (*)(int64_t n, const uint8_t* weights, size_t row_bytes, int64_t rows, const void* activations, float* out);
using PrepareFn = void (*)(const float* x, void* out, int64_t n);

struct KernelTable {
    Isa isa;
    DotFn dot[32] = {};  // indexed by ggml type id
    DotRowsFn dot_rows[32] = {};  // same results as calling dot per row; null where not provided
};

// Builds a DotRowsFn from a dot kernel known at compile time, so the compiler inlines it into the loop.
template <float (*Dot)(int64_t, const void*, const void*)>
void dot_rows_of(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out) {
    for (int64_t r = 0; r < rows; ++r) out[r] = Dot(n, w + static_cast<size_t>(r) * row_bytes, a);
}

// The scalar reference table (the oracle for every other path).
const KernelTable& reference_table();
// The best table this CPU supports (or the one named by MOESTREAM_ISA=scalar|avx2|avx512).
const KernelTable& active_table();
// A table for a given ISA; nullptr when this CPU lacks it.
const KernelTable* table_for(Isa isa);

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

// Activation quantizers, exposed for tests.
void quantize_q8_0(const float* x, void* out, int64_t n);
void quantize_q8_K(const float* x, void* out, int64_t n);

}  // namespace moe::kernels

// Per-ISA kernel entry points, shared between the dispatch table and the kernel tests.
#pragma once
#include <cstdint>

#include "engine/kernels/kernels.h"

namespace moe::kernels {

template <Flavor F>
float dot_f32_ref(int64_t n, const void* w, const void* a);
template <Flavor F>
float dot_f32_batch_ref(int64_t n, const void* w, const void* a);
template <Flavor F>
float dot_f16_ref(int64_t n, const void* w, const void* a);
template <Flavor F>
float dot_f16_batch_ref(int64_t n, const void* w, const void* a);
float dot_bf16_ref_avx512(int64_t n, const void* w, const void* a);
float dot_bf16_batch_ref_avx512(int64_t n, const void* w, const void* a);
float dot_bf16_ref_avx2(int64_t n, const void* w, const void* a);
float dot_bf16_batch_ref_avx2(int64_t n, const void* w, const void* a);
float dot_q8_0_ref(int64_t n, const void* w, const void* a);
float dot_q4_0_ref(int64_t n, const void* w, const void* a);
float dot_q4_0_repacked_ref(int64_t n, const void* w, const void* a);
float dot_q4_K_ref(int64_t n, const void* w, const void* a);
float dot_q4_K_repacked_ref(int64_t n, const void* w, const void* a);
float dot_q4_K_repacked_gemm_ref(int64_t n, const void* w, const void* a);
float dot_q5_K_ref(int64_t n, const void* w, const void* a);
float dot_q6_K_ref(int64_t n, const void* w, const void* a);

// The low-bit formats' reference kernels (kernels_ref_quants.cpp), into a reference table of k.flavor.
void add_quant_reference_kernels(KernelTable& k);
void quantize_q8_1(const float* x, void* out, int64_t n);

// Filled by kernels_avx2.cpp / kernels_avx512.cpp (compiled with their own -m flags).
void fill_avx2_table(KernelTable& t);  // t.flavor chosen by the caller
void fill_avx512_table(KernelTable& t);
void add_ik_table_kernels_vbmi(KernelTable& t);      // ik/ik_table_vbmi.cpp: only where the CPU has AVX512_VBMI
void add_ik_trellis_kernels_avx512(KernelTable& t);  // ik/ik_trellis_avx512.cpp

}  // namespace moe::kernels

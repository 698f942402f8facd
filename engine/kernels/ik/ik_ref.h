// ik_llama.cpp's types: the scalar reference kernels (ik_ref.cpp) and their place in the kernel tables.
#pragma once
#include <cstdint>

#include "engine/gguf/ggml_types.h"
#include "engine/kernels/float_ops.h"
#include "engine/kernels/kernels.h"

namespace moe::ik {

// Activation formats of ik's kernels (ik_blocks.h).
void quantize_q8_K(const float* x, void* out, int64_t n);
void quantize_q8_K_avx2(const float* x, void* out, int64_t n);  // the same bits; AVX2 CPUs only (ik_activations_avx2.cpp)
void quantize_q8_K32(const float* x, void* out, int64_t n);
void quantize_q8_K128(const float* x, void* out, int64_t n);

// The table types' reference dot against ik's Q8_K: `w` is the row (with its row scale where the type has one).
float dot_table_ref(GgmlType t, int64_t n, const void* w, const void* a);
template <GgmlType T>
float dot_table_ref_of(int64_t n, const void* w, const void* a) {
    return dot_table_ref(T, n, w, a);
}

// A large batch, as ik computes it after converting each weight row to 8 bits: the table types to Q8_K_R8 (the
// products value * scale requantized per 256 weights, an fp16 scale), the others to Q8_0_R8 (per 32).
// converted_block: weights per scale (256 or 32); convert_row writes n int8 values and n / block scales.
int converted_block(GgmlType t);
void convert_row(GgmlType t, int64_t n, const void* w, int8_t* q, float* scales);
void convert_table_row(GgmlType t, int64_t n, const void* w, int8_t* q, float* scales);
void convert_q8_0_r8_row(GgmlType t, int64_t n, const void* w, int8_t* q, float* scales);
// Block b of a row of t's activations: its values and scale (Q8_K per 256, Q8_2_X4 per 32).
void activation_block(GgmlType t, const void* a, int64_t n, int64_t b, const int8_t*& qs, float& d);
float dot_converted_ref(GgmlType t, int64_t n, const void* w, const void* a);
template <GgmlType T>
float dot_converted_ref_of(int64_t n, const void* w, const void* a) {
    return dot_converted_ref(T, n, w, a);
}

// The formats ik multiplies with Q8_2_X4 activations (ik_ref_x4.cpp).
void quantize_q8_2_x4(const float* x, void* out, int64_t n);
void quantize_q8_2_x4_avx2(const float* x, void* out, int64_t n);  // the same bytes (ik_activations_avx2.cpp)
// One 32-value block of a Q8_2_X4 row: its scale, the sum of its values and the values, wherever the row keeps
// them (the first 4 * (n / 128) blocks in groups of four, the rest as 36-byte blocks).
struct Q8_2View {
    float d;
    int16_t s;
    const int8_t* qs;
};
Q8_2View q8_2_block(const void* row, int64_t n, int64_t b);
float dot_ik_q8_0_ref(int64_t n, const void* w, const void* a);
float dot_q6_0_ref(int64_t n, const void* w, const void* a);
float dot_trellis_ref(GgmlType t, int64_t n, const void* w, const void* a);
template <GgmlType T>
float dot_trellis_ref_of(int64_t n, const void* w, const void* a) {
    return dot_trellis_ref(T, n, w, a);
}
void dequantize_trellis(GgmlType t, const void* src, float* out, int64_t n);
void dequantize_q6_0(const void* src, float* out, int64_t n);

// The row-interleaved forms (ik_ref_r4.cpp): rows [0, rows), a multiple of the group, from a group start.
void dot_rows_iq1_s_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
template <GgmlType T>  // IQ4_KS_R4, IQ5_KS_R4 (Q8_K32 activations)
void dot_rows_ks_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
template <GgmlType T>  // IQ2_K_R4 ... IQ5_K_R4 (Q8_K)
void dot_rows_k_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
void dot_rows_q8_0_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
// Q4_K_R4 (Q8_K32) and Q6_K_R4 (Q8_K): ik rounds a lone activation column (Lone) otherwise than a batch's.
// Q5_K_R4 (Five) is Q4_K_R4's layout and arithmetic with a fifth bit per weight.
template <bool Lone, bool Five = false>
void dot_rows_q4_k_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
template <bool Lone>
void dot_rows_q6_k_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
// Q2_K_R4 and Q3_K_R4 against Q8_K (ik_ref_r4_low_k.cpp), a lone column's order and a batch's.
template <GgmlType T, bool Lone>
void dot_rows_low_k_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
void dequantize_low_k_r4_row(GgmlType t, const uint8_t* group, int k, int64_t n, float* y);
// The interleaved i-quants IQ2_XXS_R4 ... IQ3_S_R4 against Q8_K, IQ1_M_R4 against Q8_K128 (ik_ref_r4_iquants.cpp);
// Chunk16: the order ik's AVX2 build gives IQ2_XS_R4 / IQ2_S_R4 in whole chunks of 16 columns.
template <GgmlType T, bool Chunk16>
void dot_rows_iquant_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
void dequantize_iquant_r4_row(GgmlType t, const uint8_t* group, int k, int64_t n, float* y);
// The legacy forms (ik_ref_r4_legacy.cpp): Q4_0_R8 (a lone column's order and a batch's), Q5_0_R4, Q6_0_R4 and
// IQ4_NL_R4 against Q8_2_X4; IQ4_XS_R8 against Q8_K32.
template <bool Lone>
void dot_rows_q4_0_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
template <GgmlType T>
void dot_rows_legacy_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
void dot_rows_iq4_xs_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
// Row k's block of a 32-weight legacy form: its unsigned indices (0..15, 0..31, 0..63) and its d.
void legacy_r4_indices(GgmlType t, const uint8_t* block, int k, int q[32], float& d);
// IQ4_XS_R8 row k, sub-block ib of a block: its 6-bit scale (32 the zero) and its 32 table indices.
void iq4_xs_r8_sub_block(const uint8_t* block, int k, int ib, int& ls, int q[32]);
void dequantize_legacy_r4_row(GgmlType t, const uint8_t* group, int k, int64_t n, float* y);
// dequantize_row_*_r4: `rows` rows (a multiple of the group) of n weights each into out[row * n + j].
void dequantize_r4_rows(GgmlType t, const void* src, float* out, int64_t n, int64_t rows);
// Rows stored together by a type (its interleave: 4 for the _R4 forms, 8 for Q8_0_R8, else 1).
inline int row_group(GgmlType t) { return kernels::interleaved_rows(t); }
// Bytes of one interleaved block (the group's rows' blocks of 256 weights, or of 32 for Q8_0_R8).
size_t interleaved_block_bytes(GgmlType t);
// One sub-block (32 weights) of row k in an interleaved IQk_K_R4 / *_KS_R4 block: each weight's table value (the
// table half applied), the scale of each 16 and its table-half bit.
struct R4SubBlock {
    int8_t value[32];
    int scale[2];
    int extra[2];
};
void decode_r4_sub_block(GgmlType t, const uint8_t* block, int k, int ib, R4SubBlock& out);
// ik's repack_<type>: one group of the base type's rows (interleave rows of n weights, each with its row scale
// where the type has one) into the interleaved form, as ik's quantize_<type>_r4 writes it.
void repack_rows(GgmlType interleaved, const uint8_t* base_rows, int64_t n, uint8_t* out);

// The wide forms (ik_ref_wide.cpp): Q8_KV (one row) and Q8_KV_R8 against Q8_KV activations (quantize_q8_KV, also
// Q8_KV's weight quantizer), Q8_K_R8 against Q8_K, MXFP4_R8 against Q8_2_X4 (Lone: the order of a kernel call with
// one column; ik's AVX2 build sums a call of several otherwise), BF16_R16 against bf16 (ik's AVX512-BF16 order).
void quantize_q8_KV(const float* x, void* out, int64_t n);
float dot_q8_kv_ref(int64_t n, const void* w, const void* a);
void dot_rows_q8_kv_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
void dot_rows_q8_k_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
template <bool Lone>
void dot_rows_mxfp4_r8_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
void dot_rows_bf16_r16_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
void dequantize_q8_kv(const void* src, float* out, int64_t n);
void dequantize_wide_row(GgmlType t, const uint8_t* group, int k, int64_t n, float* y);
// The ternary forms (ik_ref_bitnet.cpp): IQ1_BN / IQ2_BN against Q8_K64, IQ2_BN_R4 against Q8_K16.
void quantize_q8_K64(const float* x, void* out, int64_t n);
void quantize_q8_K16(const float* x, void* out, int64_t n);
void bn_trits(GgmlType t, const uint8_t* block, uint8_t out[64]);  // a block's 64 values t (0..2; 3 only in bad files)
float dot_bn_ref(GgmlType t, int64_t n, const void* w, const void* a);
template <GgmlType T>
float dot_bn_ref_of(int64_t n, const void* w, const void* a);
void dot_rows_iq2_bn_r4_ref(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const void* a, float* out);
void dequantize_bn(GgmlType t, const void* src, float* out, int64_t n);
void dequantize_iq2_bn_r4_row(const uint8_t* group, int k, int64_t n, float* y);
void repack_iq2_bn_rows(const uint8_t* base_rows, int64_t n, uint8_t* out);
// A group of base rows (Q8_KV, MXFP4, BF16) in the wide interleaved form, as ik's repack_<type> writes it.
void repack_wide_rows(GgmlType interleaved, const uint8_t* base_rows, int64_t n, uint8_t* out);

// Weights to floats as ik's dequantize_row_<type> (the token embedding's get_rows).
void dequantize_table(GgmlType t, const void* src, float* out, int64_t n);

// The weights as ik's matmul kernels multiply them, as floats: IQ6_K from the table its kernels use (not
// dequantize_row's cubic), IQ2_KT / IQ3_KT with the matmul's row scale factor; otherwise dequantize_row's values.
void dequantize_for_matmul(GgmlType t, const void* src, float* out, int64_t n);

// The activation type ik pairs with weight type t, or t itself for a type that is not ik's.
GgmlType activation_type(GgmlType t);
// Adds the reference kernels of ik's types to a reference table.
void add_reference_kernels(kernels::KernelTable& k);

// ---- ik's graph (what Model::ik_numerics switches on) ----
// A kernel table with ik's orders where they differ for llama.cpp's types: F32 matmuls in the one order ik uses
// for any number of tokens (llamafile's, iqk_gemm_floats.cpp). The other entries are `base`'s.
const kernels::KernelTable& kernel_table(const kernels::KernelTable& base);
// Float ops with ik's flash attention, fused RMS norm, routing and expert sum (`base` for the rest).
const ops::FloatOps& float_ops(const ops::FloatOps& base);
// ik's flash attention takes keys in blocks of this many positions (each block's maximum is its softmax reference).
constexpr int kAttentionBlock = 128;
void attend_ik(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s);
ops::AttendFn attend_ik_simd();  // the same bits on AVX2+FMA+F16C (ik_attention_avx2.cpp); call only where the CPU has them
// Several rows against one view (ops::AttendGroupFn, kv.rows_per_position honoured), each row with attend_ik_simd's bits.
ops::AttendGroupFn attend_ik_group_simd();
// Both with the same bits in 512-bit registers (ik_attention_avx512.cpp); call only where
// kernels::table_for(kernels::Isa::Avx512) exists.
ops::AttendFn attend_ik_avx512();
ops::AttendGroupFn attend_ik_group_avx512();
// The group forms' buffers in a scratch, sized and initialised (accumulators 0, running maxima -inf, sums 0).
struct GroupBuffers {
    float* acc;      // [rows][dv]
    float* max_sum;  // [rows][2]
    float* keys;     // a block's keys as f32, kAttentionBlock * dk
    float* values;   // a block's values as f32, kAttentionBlock * dv
};
GroupBuffers group_buffers(ops::AttnScratch& s, int rows, int dk, int dv);
// The group forms' last step: each row's accumulator times its sink's scale and 1 / its sum, into out_rows.
void finish_group_rows(const ops::KvView& kv, const GroupBuffers& buf, int rows, float* out_rows, int64_t out_stride);
// ggml_fused_rms_norm: y = (scale * w) * x.
void rms_norm_fused(const float* x, const float* w, float* y, int n, float eps);
// iqk_topk_moe + iqk_sumrows_div: softmax routing of one token on its raw logits (top k by logit, descending; each
// weight exp(l - max) / (sum over all experts, the chosen first), renormalised by 1 / (their sum)).
void route_softmax(const float* logits, int n_expert, int n_used, bool renormalize, int* selected, float* weights);

}  // namespace moe::ik

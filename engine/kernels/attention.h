// Flash attention of one query row against an fp16 cache view (float_ops.h has the scalar reference and the
// numerics). The F16C/FMA variants compute the same float expressions in the same order with hardware
// conversions and 8-wide registers, so their results are bit-identical to the reference.
#pragma once
#include "engine/kernels/float_ops.h"

namespace moe::kernels {

// The fastest variants this CPU runs for a flavor (MOESTREAM_ISA=scalar forces the reference).
ops::AttendFn attention_kernel(Flavor f);
ops::AttendFn tiled_attention_kernel(Flavor f);
// A chunk of a split one-row view (ops::attend_split): the F16C variant, or the reference's.
ops::AttendChunkFn attention_chunk_kernel(Flavor f);
// The same for the query rows that share a view, or nullptr where the reference is in use (rows then one by one).
ops::AttendChunkGroupFn attention_chunk_group_kernel(Flavor f);

// The reference's float operations with SwiGLU and SiLU on registers where this CPU has AVX2/FMA (the same
// bits; float_ops_simd.cpp), else the reference's.
const ops::FloatOps& simd_float_ops(Flavor f);

// ops::attend_typed (caches of other types) as this CPU runs it best: the F16C/FMA variant, or the reference
// where the CPU lacks them or MOESTREAM_ISA=scalar.
ops::AttendFn typed_attention_kernel(Flavor f);
// The same for the query rows that share a typed view (each row with typed_attention_kernel's bits, the cache read
// once for all of them), or nullptr where the reference is in use (rows then one by one).
ops::AttendGroupFn typed_attention_group_kernel(Flavor f);
// The F16C variants, for the kernel tests (nullptr without AVX2/F16C).
ops::AttendFn attend_typed_f16c();
ops::AttendGroupFn attend_typed_group_f16c();
// The same for H kv heads at once (decode steps), whose rows sit side by side in each position's row (kv points
// at head 0): row r = h G + g is query head g of kv head h, with that head's bits alone; sinks[r] where set.
using AttendTypedHeadsFn = void (*)(const float* q, int64_t q_stride, int G, int H, const ops::KvView& kv, float scale, float* out,
                                    int64_t out_stride, ops::AttnScratch& s);
AttendTypedHeadsFn attend_typed_heads_f16c();
AttendTypedHeadsFn typed_attention_heads_kernel(Flavor f);  // null where the group kernel is
ops::AttendFn attend_f16c(Flavor f);
ops::AttendChunkFn attend_chunk_f16c(Flavor f);
// (wide: in 512-bit registers, the same bits; nullptr without AVX-512F)
ops::AttendChunkGroupFn attend_chunk_group_f16c(Flavor f, bool wide = false);
ops::AttendFn attend_tiled_f16c(Flavor f);
// The one-row kernels' expf, eight lanes at a time with libm's bits (libm_expf.h): whether this process's libm
// gives the same (else the kernels call it), and the lanes themselves, for the tests (AVX2/FMA CPUs only).
bool libm_expf_lanes_match();
void libm_expf_for_tests(const float* x, float* y, int n);
// The tiled path's online-softmax step on registers (ggml::tiled_softmax_step's bits), for the kernel tests.
ops::SoftmaxStepFn tiled_softmax_step_f16c(Flavor f);
// The tiled path for several query rows sharing a view (nullptr for `wide` without AVX-512F).
ops::AttendGroupFn attend_tiled_group(Flavor f, bool wide);
// The tiled group kernel this CPU runs best, or nullptr where the reference is in use (MOESTREAM_ISA=scalar).
ops::AttendGroupFn tiled_attention_group_kernel(Flavor f);
// The same with the f32-copy loops in 512-bit registers (nullptr without AVX-512F).
ops::AttendFn attend_tiled_avx512(Flavor f);

}  // namespace moe::kernels

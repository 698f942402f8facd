// One query head against the fp16 KV cache with ggml's flash-attention numerics (see model/ops.h for the
// scalar reference, ops::attend_head). The F16C/FMA variant computes the same float expressions in the same
// order with hardware conversions, so its results are bit-identical to the reference.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe::kernels {

using AttendFn = void (*)(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                          float scale, float* out, std::vector<uint16_t>& q16, std::vector<uint16_t>& acc16);

// The fastest variant this CPU runs (MOESTREAM_ISA=scalar forces the reference).
AttendFn attention_kernel();

// llama.cpp's tiled path (64 or more query rows; ops::attend_head_tiled is the reference).
using AttendTiledFn = void (*)(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                               float scale, float* out);
AttendTiledFn tiled_attention_kernel();
void attend_head_tiled_f16c(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim,
                            float scale, float* out);
void attend_head_f16c(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, int n_kv, int dim, float scale,
                      float* out, std::vector<uint16_t>& q16, std::vector<uint16_t>& acc16);

}  // namespace moe::kernels

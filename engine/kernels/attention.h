// Flash attention of one query row against an fp16 cache view (float_ops.h has the scalar reference and the
// numerics). The F16C/FMA variants compute the same float expressions in the same order with hardware
// conversions and 8-wide registers, so their results are bit-identical to the reference.
#pragma once
#include "engine/kernels/float_ops.h"

namespace moe::kernels {

// The fastest variants this CPU runs for a flavor (MOESTREAM_ISA=scalar forces the reference).
ops::AttendFn attention_kernel(Flavor f);
ops::AttendFn tiled_attention_kernel(Flavor f);

// The F16C variants, for the kernel tests (nullptr without AVX2/F16C).
ops::AttendFn attend_f16c(Flavor f);
ops::AttendFn attend_tiled_f16c(Flavor f);

}  // namespace moe::kernels

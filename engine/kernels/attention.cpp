#include "engine/kernels/attention.h"

#include "engine/kernels/kernels.h"

namespace moe::kernels {

// The F16C variants come with the AVX2 table (same CPUID requirements); MOESTREAM_ISA=scalar keeps the
// reference so a whole run can be checked against it.
ops::AttendFn attention_kernel(Flavor f) {
    if (active_table(f).isa != Isa::Scalar) return attend_f16c(f);
    return ops::float_ops(f).attend;
}

ops::AttendFn tiled_attention_kernel(Flavor f) {
    if (active_table(f).isa != Isa::Scalar) return attend_tiled_f16c(f);
    return ops::float_ops(f).attend_tiled;
}

}  // namespace moe::kernels

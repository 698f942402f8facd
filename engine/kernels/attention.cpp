#include "engine/kernels/attention.h"

#include "engine/kernels/kernels.h"
#include "engine/model/ops.h"

namespace moe::kernels {

AttendFn attention_kernel() {
    static const AttendFn fn = [] {
        // The F16C variant is chosen with the AVX2 table (same CPUID requirements); MOESTREAM_ISA=scalar keeps
        // the reference so a whole run can be checked against it.
        if (active_table().isa != Isa::Scalar) return &attend_head_f16c;
        return static_cast<AttendFn>(&ops::attend_head);
    }();
    return fn;
}

AttendTiledFn tiled_attention_kernel() {
    static const AttendTiledFn fn = [] {
        if (active_table().isa != Isa::Scalar) return &attend_head_tiled_f16c;
        return static_cast<AttendTiledFn>(&ops::attend_head_tiled);
    }();
    return fn;
}

}  // namespace moe::kernels

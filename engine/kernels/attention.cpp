#include "engine/kernels/attention.h"

#include "engine/kernels/kernels.h"

namespace moe::kernels {

// The F16C variants come with the AVX2 table (same CPUID requirements); MOESTREAM_ISA=scalar keeps the
// reference so a whole run can be checked against it.
ops::AttendFn attention_kernel(Flavor f) {
    if (active_table(f).isa != Isa::Scalar) return attend_f16c(f);
    return ops::float_ops(f).attend;
}

ops::AttendChunkFn attention_chunk_kernel(Flavor f) {
    if (active_table(f).isa != Isa::Scalar) return attend_chunk_f16c(f);
    return ops::attend_chunk(f);
}

ops::AttendChunkGroupFn attention_chunk_group_kernel(Flavor f) {
    if (active_table(f).isa == Isa::Avx512)
        if (const ops::AttendChunkGroupFn wide = attend_chunk_group_f16c(f, true)) return wide;
    if (active_table(f).isa != Isa::Scalar) return attend_chunk_group_f16c(f);
    return nullptr;
}

ops::AttendFn typed_attention_kernel(Flavor f) {
    if (active_table(f).isa != Isa::Scalar) return attend_typed_f16c();
    return ops::attend_typed;
}

ops::AttendGroupFn typed_attention_group_kernel(Flavor f) { return active_table(f).isa != Isa::Scalar ? attend_typed_group_f16c() : nullptr; }
AttendTypedHeadsFn typed_attention_heads_kernel(Flavor f) { return active_table(f).isa != Isa::Scalar ? attend_typed_heads_f16c() : nullptr; }

ops::AttendFn tiled_attention_kernel(Flavor f) {
    if (active_table(f).isa == Isa::Avx512)
        if (const ops::AttendFn wide = attend_tiled_avx512(f)) return wide;
    if (active_table(f).isa != Isa::Scalar) return attend_tiled_f16c(f);
    return ops::float_ops(f).attend_tiled;
}

ops::AttendGroupFn tiled_attention_group_kernel(Flavor f) {
    if (active_table(f).isa == Isa::Avx512)
        if (const ops::AttendGroupFn wide = attend_tiled_group(f, true)) return wide;
    if (active_table(f).isa != Isa::Scalar) return attend_tiled_group(f, false);
    return nullptr;
}

}  // namespace moe::kernels

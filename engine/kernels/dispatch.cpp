// Chooses the kernel table once from CPUID (overridable with MOESTREAM_ISA for tests and benchmarks).
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "engine/kernels/kernels_internal.h"

namespace moe::kernels {

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
    }
    return "?";
}

static bool cpu_has(Isa isa) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    switch (isa) {
        case Isa::Scalar: return true;
        case Isa::Avx2: return avx2;
        case Isa::Avx512:
            return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }
    return false;
#else
    return isa == Isa::Scalar;
#endif
}

const KernelTable* table_for(Isa isa) {
    if (!cpu_has(isa)) return nullptr;
    switch (isa) {
        case Isa::Scalar: return &reference_table();
#if defined(__x86_64__)
        case Isa::Avx2: {
            static const KernelTable t = [] { KernelTable k = reference_table(); fill_avx2_table(k); return k; }();
            return &t;
        }
        case Isa::Avx512: {
            static const KernelTable t = [] { KernelTable k = reference_table(); fill_avx512_table(k); return k; }();
            return &t;
        }
#endif
        default: return nullptr;
    }
}

const KernelTable& active_table() {
    static const KernelTable* chosen = [] {
        if (const char* env = std::getenv("MOESTREAM_ISA")) {
            for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
                if (std::strcmp(env, isa_name(isa)) == 0 && table_for(isa)) return table_for(isa);
        }
        for (Isa isa : {Isa::Avx512, Isa::Avx2})
            if (const KernelTable* t = table_for(isa)) return t;
        return &reference_table();
    }();
    return *chosen;
}

}  // namespace moe::kernels

// Chooses the kernel table once from CPUID (overridable with MOESTREAM_ISA for tests and benchmarks).
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>

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
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
                __builtin_cpu_supports("bmi2");
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

const char* flavor_name(Flavor f) { return f == Flavor::Avx512 ? "avx512" : "avx2"; }

std::optional<Flavor> parse_flavor(std::string_view name) {
    if (name == "avx512") return Flavor::Avx512;
    if (name == "avx2") return Flavor::Avx2;
    return std::nullopt;
}

Flavor default_flavor() {
    static const Flavor f = [] {
        if (const char* env = std::getenv("MOESTREAM_NUMERICS"))
            if (auto p = parse_flavor(env)) return *p;
#if defined(__x86_64__)
        __builtin_cpu_init();
        // ggml's AVX-512 paths (vector exp, 16-lane registers) need AVX512F and DQ.
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) return Flavor::Avx512;
#endif
        return Flavor::Avx2;
    }();
    return f;
}

template <Flavor F>
static const KernelTable* simd_table(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::Avx2) {
        static const KernelTable t = [] { KernelTable k = reference_table(F); fill_avx2_table(k); return k; }();
        return &t;
    }
    if (isa == Isa::Avx512) {
        static const KernelTable t = [] { KernelTable k = reference_table(F); fill_avx512_table(k); return k; }();
        return &t;
    }
#endif
    (void)isa;
    return nullptr;
}

const KernelTable* table_for(Isa isa, Flavor f) {
    if (!cpu_has(isa)) return nullptr;
    if (isa == Isa::Scalar) return &reference_table(f);
    return f == Flavor::Avx512 ? simd_table<Flavor::Avx512>(isa) : simd_table<Flavor::Avx2>(isa);
}

static Isa chosen_isa() {
    static const Isa isa = [] {
        if (const char* env = std::getenv("MOESTREAM_ISA")) {
            for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
                if (std::strcmp(env, isa_name(i)) == 0 && cpu_has(i)) return i;
        }
        for (Isa i : {Isa::Avx512, Isa::Avx2})
            if (cpu_has(i)) return i;
        return Isa::Scalar;
    }();
    return isa;
}

const KernelTable& active_table(Flavor f) { return *table_for(chosen_isa(), f); }

}  // namespace moe::kernels

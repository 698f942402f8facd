// Chooses the kernel table once from CPUID (overridable with MOESTREAM_ISA for tests and benchmarks).
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/kernels/cpu_choice.h"
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

CpuFeatures host_cpu_features() {
    CpuFeatures c;
#if defined(__x86_64__)
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.f16c = __builtin_cpu_supports("f16c");
    c.bmi2 = __builtin_cpu_supports("bmi2");
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512dq = __builtin_cpu_supports("avx512dq");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    c.avx512vl = __builtin_cpu_supports("avx512vl");
    c.avx512vnni = __builtin_cpu_supports("avx512vnni");
    c.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    c.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
#endif
    return c;
}

// The features each table's translation unit is compiled with (engine/CMakeLists.txt), by name, for `why`.
static std::string missing_for(const CpuFeatures& c, Isa isa) {
    std::string m;
    auto need = [&](bool have, const char* name) {
        if (!have) m += (m.empty() ? "" : " ") + std::string(name);
    };
    if (isa == Isa::Scalar) return m;
    need(c.avx2, "avx2"), need(c.fma, "fma"), need(c.f16c, "f16c"), need(c.bmi2, "bmi2");
    if (isa == Isa::Avx512) need(c.avx512f, "avx512f"), need(c.avx512bw, "avx512bw"), need(c.avx512vl, "avx512vl"), need(c.avx512vnni, "avx512_vnni");
    return m;
}

bool runs_isa(const CpuFeatures& c, Isa isa) {
#if defined(__x86_64__)
    return missing_for(c, isa).empty();
#else
    return isa == Isa::Scalar;
#endif
}

KernelChoice choose_kernels(const CpuFeatures& c, std::string_view isa_override, std::string_view numerics_override,
                            std::string_view numerics_source) {
    KernelChoice k{Isa::Scalar, Flavor::Avx2, ""};
    std::string isa_why;
    bool forced = false;
    if (!isa_override.empty()) {
        for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
            if (isa_override == isa_name(i)) {
                if (runs_isa(c, i)) k.isa = i, forced = true, isa_why = "MOESTREAM_ISA=" + std::string(isa_override);
                else isa_why = "MOESTREAM_ISA=" + std::string(isa_override) + " ignored: this CPU lacks " + missing_for(c, i) + "; ";
            }
        if (!forced && isa_why.empty()) isa_why = "MOESTREAM_ISA=" + std::string(isa_override) + " is not scalar, avx2 or avx512: ignored; ";
    }
    if (!forced) {
        if (runs_isa(c, Isa::Avx512))
            k.isa = Isa::Avx512, isa_why += c.avx512vbmi ? "AVX-512 F/BW/VL with VNNI, IQ2_KL and IQ6_K by VPERMB"
                                                         : "AVX-512 F/BW/VL with VNNI (no VBMI: IQ2_KL and IQ6_K by byte shuffles)";
        else if (runs_isa(c, Isa::Avx2))
            k.isa = Isa::Avx2,
            isa_why += "AVX2+FMA+F16C+BMI2" + (c.avx512f ? ", no avx512 table without " + missing_for(c, Isa::Avx512) : std::string());
        else isa_why += "no SIMD table, this CPU lacks " + missing_for(c, Isa::Avx2) + " (several times slower)";
    }
    std::string num_why;
    std::optional<Flavor> f;
    if (!numerics_override.empty()) {
        f = parse_flavor(numerics_override);
        num_why = std::string(numerics_source) + std::string(numerics_override) + (f ? "" : " is not avx512 or avx2: ignored; ");
    }
    if (!f) {
        // ggml's AVX-512 paths (vector exp, 16-lane registers) need AVX512F and DQ.
        f = c.avx512f && c.avx512dq ? Flavor::Avx512 : Flavor::Avx2;
        num_why += *f == Flavor::Avx512 ? "llama.cpp's AVX-512 build (AVX512F+DQ)" : "llama.cpp's AVX2 build (no AVX512F+DQ)";
        if (*f == Flavor::Avx512) num_why += c.avx512bf16 ? ", BF16 by VDPBF16PS" : ", BF16 by VDPBF16PS emulated (no avx512_bf16)";
    }
    k.flavor = *f;
    k.why = std::string(isa_name(k.isa)) + " kernels: " + isa_why + "; " + flavor_name(k.flavor) + " numerics: " + num_why;
    return k;
}

static bool cpu_has(Isa isa) {
    static const CpuFeatures c = host_cpu_features();
    return runs_isa(c, isa);
}

const char* flavor_name(Flavor f) { return f == Flavor::Avx512 ? "avx512" : "avx2"; }

std::optional<Flavor> parse_flavor(std::string_view name) {
    if (name == "avx512") return Flavor::Avx512;
    if (name == "avx2") return Flavor::Avx2;
    return std::nullopt;
}

Flavor default_flavor() { return active_kernel_choice().flavor; }

const KernelChoice& active_kernel_choice() {
    static const KernelChoice k = [] {
        const char* isa = std::getenv("MOESTREAM_ISA");
        const char* numerics = std::getenv("MOESTREAM_NUMERICS");
        return choose_kernels(host_cpu_features(), isa ? isa : "", numerics ? numerics : "");
    }();
    return k;
}

template <Flavor F>
static const KernelTable* simd_table(Isa isa) {
#if defined(__x86_64__)
    if (isa == Isa::Avx2) {
        static const KernelTable t = [] {
            KernelTable k = reference_table(F);
            fill_avx2_table(k);
            return k;
        }();
        return &t;
    }
    if (isa == Isa::Avx512) {
        static const KernelTable t = [] {
            KernelTable k = reference_table(F);
            fill_avx512_table(k);
            return k;
        }();
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

const KernelTable& active_table(Flavor f) { return *table_for(active_kernel_choice().isa, f); }

}  // namespace moe::kernels

// Which kernel table and which llama.cpp build's numerics the engine runs on a CPU, and why. One pure
// function over the CPU's features, so the engine (from CPUID) and `check` (from a host's probed facts, maybe
// another machine's) give the same answer.
#pragma once
#include <string>
#include <string_view>

#include "engine/kernels/flavor.h"

namespace moe::kernels {

enum class Isa;

struct CpuFeatures {
    bool avx2 = false, fma = false, f16c = false, bmi2 = false;
    bool avx512f = false, avx512dq = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false, avx512vbmi = false;
};

// This CPU's, from CPUID.
CpuFeatures host_cpu_features();
// The instructions a table's translation unit was compiled for (engine/CMakeLists.txt) are all present.
bool runs_isa(const CpuFeatures& cpu, Isa isa);

struct KernelChoice {
    Isa isa;
    Flavor flavor;
    std::string why;  // one line: the table, the numerics, and the features (or override) that decided them
};

// `isa_override` / `numerics_override` are MOESTREAM_ISA / MOESTREAM_NUMERICS (or --numerics, named by
// `numerics_source`); an override the CPU cannot run, or an unknown name, is ignored and said so in `why`.
KernelChoice choose_kernels(const CpuFeatures& cpu, std::string_view isa_override = {}, std::string_view numerics_override = {},
                            std::string_view numerics_source = "MOESTREAM_NUMERICS=");
// What this process runs (CPUID and the environment); the same table active_table() returns.
const KernelChoice& active_kernel_choice();

}  // namespace moe::kernels

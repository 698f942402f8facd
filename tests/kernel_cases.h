// The SIMD kernel tables a test should compare against the scalar reference: every ISA this CPU runs, each in
// both llama.cpp builds' numerics. An AVX-512 host defaults to the AVX-512 build's orders, so without the
// flavor loop it never runs the AVX2 build's kernels that an AVX2-only CPU dispatches to (an AVX2-only EPYC
// found a BF16 kernel that no AVX-512 host had run).
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/kernels/cpu_choice.h"
#include "engine/kernels/kernels.h"

namespace moe::test {

// QEMU 7.2's user-mode TCG (Debian 12's qemu-user, which the cpu-models tests run under) decodes a VSIB index
// of ymm4 as "no index", so VPGATHERDD with that index reads element 0 eight times; real CPUs and valgrind do not.
// The only gather in the engine is IQ3_S's grid lookup, and which register GCC gives its index differs per
// inlined copy, so under such an emulator that type's SIMD comparisons are left out, visibly. (With some base
// registers the emulated gather faults instead, so the probe runs in a child process.)
#if defined(__x86_64__)
__attribute__((target("avx2"))) inline bool gather_index_ymm4_wrong() {
    alignas(32) static const int table[8] = {10, 11, 12, 13, 14, 15, 16, 17};
    alignas(32) static const int idx[8] = {7, 6, 5, 4, 3, 2, 1, 0};
    alignas(32) int out[8];
    __asm__ volatile(
        "vmovdqa (%1), %%ymm4\n\t"
        "vpcmpeqd %%ymm3, %%ymm3, %%ymm3\n\t"
        "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
        "vpgatherdd %%ymm3, (%2, %%ymm4, 4), %%ymm1\n\t"
        "vmovdqa %%ymm1, (%0)\n\t"
        "vzeroupper"
        :
        : "r"(out), "r"(idx), "r"(table)
        : "xmm1", "xmm3", "xmm4", "memory");
    for (int k = 0; k < 8; ++k)
        if (out[k] != table[idx[k]]) return true;
    return false;
}
// In a child process: with some base registers the mis-decoded gather faults instead (seen in a -O2 build).
inline bool gather_index_ymm4_broken() {
    if (!__builtin_cpu_supports("avx2")) return false;
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(gather_index_ymm4_wrong() ? 1 : 0);
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return false;
    return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
#else
inline bool gather_index_ymm4_broken() { return false; }
#endif

// Whether `type`'s SIMD kernels can be compared on this (maybe emulated) CPU; prints why not, once per type.
inline bool simd_comparable(GgmlType type) {
    static const bool broken = gather_index_ymm4_broken();
    if (!broken || type != GgmlType::IQ3_S) return true;
    static bool said = false;
    if (!said)
        std::printf(
            "[ kernels  ] iq3_s SIMD not compared: this CPU emulator mis-executes VPGATHERDD with index ymm4 "
            "(QEMU 7.2 TCG); real CPUs run these comparisons\n");
    said = true;
    return false;
}

struct SimdCase {
    kernels::Isa isa;
    kernels::Flavor flavor;
    const kernels::KernelTable* table;
    const kernels::KernelTable* ref;  // the scalar reference in the same flavor
    std::string label;                // "avx2/avx512-numerics", for failure messages
};

inline std::vector<SimdCase> simd_cases() {
    std::vector<SimdCase> cases;
    for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
        for (kernels::Flavor f : {kernels::Flavor::Avx2, kernels::Flavor::Avx512}) {
            const kernels::KernelTable* t = kernels::table_for(isa, f);
            if (!t) {
                if (f == kernels::Flavor::Avx2) std::printf("[ kernels  ] %s not supported by this CPU: not compared\n", kernels::isa_name(isa));
                continue;
            }
            cases.push_back(
                {isa, f, t, &kernels::reference_table(f), std::string(kernels::isa_name(isa)) + "/" + kernels::flavor_name(f) + "-numerics"});
        }
    }
    return cases;
}

}  // namespace moe::test

// A CPU without AVX2 runs the scalar table only: the SIMD comparisons have nothing to compare there (visibly).
#define REQUIRE_SIMD_TABLE()                                                                                 \
    do {                                                                                                     \
        if (moe::test::simd_cases().empty())                                                                 \
            GTEST_SKIP() << "no SIMD kernel table on this CPU (" << moe::kernels::active_kernel_choice().why \
                         << "): nothing to compare with the scalar reference";                               \
    } while (0)

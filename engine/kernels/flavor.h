// Which llama.cpp CPU build the engine's float arithmetic reproduces.
//
// llama.cpp compiled for AVX-512 and for AVX2 sums floats in different orders (16- versus 8-lane
// accumulators, another vector exp, other horizontal reductions). On small-margin models one ulp decides a
// token many steps later, so the engine follows one build exactly rather than neither: by default the build
// llama.cpp would be on this host, or the one named by MOESTREAM_NUMERICS=avx512|avx2 (tests pin the build
// that recorded each reference file). Integer block sums and everything outside the dot products and the
// vector exp are the same in both.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace moe::kernels {

enum class Flavor : uint8_t { Avx512, Avx2 };

const char* flavor_name(Flavor f);
std::optional<Flavor> parse_flavor(std::string_view name);
// MOESTREAM_NUMERICS when set (and valid), else AVX-512 on CPUs with AVX512F+DQ, else AVX2.
Flavor default_flavor();

// GGML_F32_EPR of that build: floats per vector register.
constexpr int f32_lanes(Flavor f) { return f == Flavor::Avx512 ? 16 : 8; }

}  // namespace moe::kernels

// Tokens of a tile in passes of eight and one narrower pass for the rest, each pass's width a compile-time
// constant so that kernels templated on it keep their per-token accumulators in registers.
#pragma once
#include <type_traits>

namespace moe::kernels {

// f(std::integral_constant<int, NT>{}, first_token) for each pass.
template <class F>
inline void token_passes(int n_tok, F&& f) {
    int t = 0;
    for (; t + 8 <= n_tok; t += 8) f(std::integral_constant<int, 8>{}, t);
    switch (n_tok - t) {
        case 1: f(std::integral_constant<int, 1>{}, t); break;
        case 2: f(std::integral_constant<int, 2>{}, t); break;
        case 3: f(std::integral_constant<int, 3>{}, t); break;
        case 4: f(std::integral_constant<int, 4>{}, t); break;
        case 5: f(std::integral_constant<int, 5>{}, t); break;
        case 6: f(std::integral_constant<int, 6>{}, t); break;
        case 7: f(std::integral_constant<int, 7>{}, t); break;
        default: break;
    }
}

}  // namespace moe::kernels

// Rows x tokens tiles for the SIMD tables, from a kernel written as one block step of a per-(row, token) chain.
// A step kernel K provides Block, Act, kBlockElems, State, init(), step(State&, const Block&, const Act&) and
// finish(const State&). The one-row dot runs init, step per block, finish; the tile runs the same chain for up
// to four tokens side by side, the steps of one block inlined together so the compiler unpacks the weights
// once for all of them (the same loads and operations on the same block). Same bits per (row, token).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace moe::kernels {
namespace {

template <class K>
float step_dot(int64_t n, const void* w, const void* a) {
    const auto* x = static_cast<const typename K::Block*>(w);
    const auto* y = static_cast<const typename K::Act*>(a);
    typename K::State s = K::init();
    for (int64_t b = 0; b < n / K::kBlockElems; ++b) K::step(s, x[b], y[b]);
    return K::finish(s);
}

// The tokens in tiles of up to four: run.template operator()<T>(y, o) with y[t] the tile's activation rows and
// o[t] where weight row r's output for each of them goes.
template <class Act, class Run>
void for_token_tiles(int n_tok, const uint8_t* act, size_t act_bytes, float* out, int64_t out_stride, int64_t r, Run&& run) {
    for (int t0 = 0; t0 < n_tok; t0 += 4) {
        const Act* y[4];
        float* o[4];
        const int T = std::min(4, n_tok - t0);
        for (int t = 0; t < T; ++t) {
            y[t] = reinterpret_cast<const Act*>(act + static_cast<size_t>(t0 + t) * act_bytes);
            o[t] = out + (t0 + t) * out_stride + r;
        }
        switch (T) {
            case 4: run.template operator()<4>(y, o); break;
            case 3: run.template operator()<3>(y, o); break;
            case 2: run.template operator()<2>(y, o); break;
            default: run.template operator()<1>(y, o); break;
        }
    }
}

// Rows x tokens from a one-row-by-T-tokens kernel family (T = 1..4).
template <class Block, class Act, int64_t BlockElems, template <int> class Kernel>
void tile_rows_by_tokens(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
                         int64_t out_stride) {
    const int64_t nb = n / BlockElems;
    for (int64_t r = 0; r < rows; ++r) {
        const auto* x = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * row_bytes);
        for_token_tiles<Act>(n_tok, act, act_bytes, out, out_stride, r,
                             [&]<int T>(const Act* const* y, float* const* o) { Kernel<T>::run(nb, x, y, o); });
    }
}

// The tile's tokens from one base and stride (they are consecutive activation rows): fewer live pointers than
// an array of them, which kept the wider steps' accumulators from spilling.
template <class K, int T>
void step_1xT_strided(int64_t nb, const typename K::Block* x, const uint8_t* y0, size_t y_stride, float* o0, int64_t o_stride) {
    typename K::State s[T];
    for (int t = 0; t < T; ++t) s[t] = K::init();
    for (int64_t b = 0; b < nb; ++b)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) K::step(s[t], x[b], reinterpret_cast<const typename K::Act*>(y0 + t * y_stride)[b]);
    for (int t = 0; t < T; ++t) o0[t * o_stride] = K::finish(s[t]);
}

template <class K>
void step_tile(int64_t n, const uint8_t* w, size_t row_bytes, int64_t rows, const uint8_t* act, size_t act_bytes, int n_tok, float* out,
               int64_t out_stride) {
    const int64_t nb = n / K::kBlockElems;
    for (int64_t r = 0; r < rows; ++r) {
        const auto* x = reinterpret_cast<const typename K::Block*>(w + static_cast<size_t>(r) * row_bytes);
        for (int t0 = 0; t0 < n_tok; t0 += 4) {
            const uint8_t* y0 = act + static_cast<size_t>(t0) * act_bytes;
            float* o0 = out + t0 * out_stride + r;
            switch (std::min(4, n_tok - t0)) {
                case 4: step_1xT_strided<K, 4>(nb, x, y0, act_bytes, o0, out_stride); break;
                case 3: step_1xT_strided<K, 3>(nb, x, y0, act_bytes, o0, out_stride); break;
                case 2: step_1xT_strided<K, 2>(nb, x, y0, act_bytes, o0, out_stride); break;
                default: step_1xT_strided<K, 1>(nb, x, y0, act_bytes, o0, out_stride); break;
            }
        }
    }
}

// An eight-lane float accumulator summed by hsum_float_8: the State of most integer-lane kernels.
struct Acc8State {
    __m256 acc;
};

}  // namespace
}  // namespace moe::kernels

// Per weight type, one thread: ik_llama.cpp's own CPU matmul (iqk_mul_mat) against the engine's kernels on the same
// rows and activations, interleaved, best of many passes; checks that both give the same bits (the engine follows
// ik's AVX2 arithmetic; an AVX-512 build of ik uses other kernels, so there only speed is compared).
// Built by bench/ik-kernels.sh against an ik_llama.cpp build (not a dependency of the project).
//
//   ik_kernels TYPE_ID [activation rows=1] [row length=4096] [rows=128]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "engine/kernels/kernels.h"
#include "ggml.h"

extern "C" bool iqk_mul_mat(long Nx, long Ny, long ne00, int typeA, const void* A, long strideA, int typeB, const void* B, long strideB, float* C,
                            long stride_C, int ith, int nth);

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: ik_kernels TYPE_ID [activation rows] [row length] [rows]\n");
        return 2;
    }
    const int type = std::atoi(argv[1]);
    const int ny = argc > 2 ? std::atoi(argv[2]) : 1, n = argc > 3 ? std::atoi(argv[3]) : 4096, rows = argc > 4 ? std::atoi(argv[4]) : 128;
    ggml_init_params ip = {16 << 20, nullptr, false};
    ggml_init(ip);
    const auto tr = ggml_internal_get_type_traits(static_cast<ggml_type>(type));
    const auto trv = ggml_internal_get_type_traits(tr.vec_dot_type);
    // Weights quantized by ik's own quantizer from random floats; activations from random floats.
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::vector<float> wf(static_cast<size_t>(n) * rows), importance(static_cast<size_t>(n), 1.f);
    for (auto& v : wf) v = nd(rng) * 0.02f;
    const size_t rb = ggml_row_size(static_cast<ggml_type>(type), n);
    std::vector<uint8_t> w(rb * rows);
    ggml_quantize_chunk(static_cast<ggml_type>(type), wf.data(), w.data(), 0, rows, n, importance.data(), nullptr);
    std::vector<float> x(static_cast<size_t>(n) * ny);
    for (auto& v : x) v = nd(rng);
    const size_t ab = ggml_row_size(tr.vec_dot_type, n);
    std::vector<uint8_t> a(ab * ny);
    for (int t = 0; t < ny; ++t) trv.from_float(x.data() + static_cast<size_t>(t) * n, a.data() + t * ab, n);

    // The engine: llama.cpp's Q8_0 in an ik file is its IK_Q8_0 kernel type.
    const auto mt = type == 8 ? moe::GgmlType::IK_Q8_0 : static_cast<moe::GgmlType>(type);
    const size_t mab = moe::kernels::activation_bytes(mt, n);
    std::vector<uint8_t> ma(mab * ny);
    for (int t = 0; t < ny; ++t) moe::kernels::prepare_activations(mt, x.data() + static_cast<size_t>(t) * n, ma.data() + t * mab, n);
    const auto& kt = moe::kernels::active_table(moe::kernels::Flavor::Avx2);
    const auto dots = moe::kernels::matmul_dots(kt, mt, rows, n, ny, true, 1);

    std::vector<float> r_ik(static_cast<size_t>(rows) * ny), r_me(static_cast<size_t>(rows) * ny);
    double best_ik = 1e9, best_me = 1e9;
    for (int rep = 0; rep < 300; ++rep) {
        const auto t0 = Clock::now();
        iqk_mul_mat(rows, ny, n, type, w.data(), static_cast<long>(rb), tr.vec_dot_type, a.data(), static_cast<long>(ab), r_ik.data(), rows, 0, 1);
        const auto t1 = Clock::now();
        const int grouped = std::min(dots.n_grouped, ny);  // the columns the batch order takes, then the others
        if (ny > 1 && (grouped == 0 || dots.grouped_tile) && (grouped == ny || dots.single_tile)) {
            if (grouped > 0) dots.grouped_tile(n, w.data(), rb, rows, ma.data(), mab, grouped, r_me.data(), rows);
            if (grouped < ny)
                dots.single_tile(n, w.data(), rb, rows, ma.data() + grouped * mab, mab, ny - grouped, r_me.data() + grouped * rows, rows);
        } else if (dots.single_rows)
            for (int t = 0; t < ny; ++t) dots.single_rows(n, w.data(), rb, rows, ma.data() + t * mab, r_me.data() + static_cast<size_t>(t) * rows);
        else
            for (int t = 0; t < ny; ++t)
                for (int r = 0; r < rows; ++r) r_me[static_cast<size_t>(t) * rows + r] = dots.at(t)(n, w.data() + r * rb, ma.data() + t * mab);
        const auto t2 = Clock::now();
        best_ik = std::min(best_ik, std::chrono::duration<double>(t1 - t0).count());
        best_me = std::min(best_me, std::chrono::duration<double>(t2 - t1).count());
    }
    const bool same = std::memcmp(r_ik.data(), r_me.data(), r_ik.size() * 4) == 0;
    std::printf("%-10s rows=%-3d tokens=%-3d ik %6.2f GB/s  moestream %6.2f GB/s  ratio %.2f  %s\n", ggml_type_name(static_cast<ggml_type>(type)),
                rows, ny, static_cast<double>(w.size()) / best_ik / 1e9, static_cast<double>(w.size()) / best_me / 1e9, best_ik / best_me,
                same ? "same bits" : "other bits");
    return 0;
}

#include "engine/forward/residual_mix.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe {

namespace {
// ggml_rms_norm then ggml_mul by the score weights, then ggml_sum_rows (a double sum).
float score(const ops::FloatOps& ops, const float* x, const float* w, int E, float eps, float* scratch) {
    ops.norm(x, w, scratch, E, eps);
    double sum = 0.0;
    for (int i = 0; i < E; ++i) sum += static_cast<double>(scratch[i]);
    return static_cast<float>(sum);
}
}  // namespace

void residual_mix(const ops::FloatOps& ops, const float* banked, int n_banked, size_t stride, const float* cur, const float* score_w, int E,
                  float eps, float* out, float* scratch) {
    if (n_banked == 0) {
        if (out != cur) std::copy_n(cur, E, out);
        return;
    }
    std::vector<float> p(static_cast<size_t>(n_banked) + 1);
    for (int j = 0; j < n_banked; ++j) p[j] = score(ops, banked + j * stride, score_w, E, eps, scratch);
    p[n_banked] = score(ops, cur, score_w, E, eps, scratch);
    ops.softmax(p.data(), n_banked + 1);
    const float p_cur = p[n_banked];
    for (int i = 0; i < E; ++i) {
        // ggml_dsv4_hc_pre's loop, not contracted (with one FMA per term the F32 oracle's logits move by 7.7e-6).
        float sum = 0.0f;
        for (int j = 0; j < n_banked; ++j) sum = sum + banked[j * stride + i] * p[j];
        out[i] = sum + cur[i] * p_cur;
    }
}

}  // namespace moe

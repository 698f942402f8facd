// ik_llama.cpp's CPU flash attention (iqk_flash_attn, fa/iqk_fa_templates.h) for one query row, as its AVX2 build
// computes it: the query kept in f32; each score K.Q as two FMA chains (the dims d % 8 < 4 and the others, each
// ascending) added, then (score + mask) * scale; the keys in blocks of 128 with the block's maximum as the
// softmax reference (a later, larger maximum rescales the sum and the accumulator by libm's expf of the
// difference); the probabilities by the AVX2 vector exp, summed per block in eight lanes then hsum_float_8; V
// accumulated in f32 with one FMA per key in order; the output times 1 / sum.
//
// ik splits a one-token step's keys between threads and merges the partial sums; below 128 visible positions the
// second part is entirely masked and the merge leaves the first unchanged, which is what this computes (past
// that, this is ik's one-thread arithmetic).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <vector>

#include "engine/kernels/fp16.h"
#include "engine/kernels/ggml_numerics.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"

namespace moe::ik {

void attend_ik(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    constexpr int kBlock = kAttentionBlock;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    std::vector<float>& acc = s.acc;
    acc.assign(static_cast<size_t>(kv.dv), 0.f);
    float score[kBlock], p[kBlock];
    float M = neg_inf, S = 0.f;
    for (int b0 = 0; b0 < kv.n_kv; b0 += kBlock) {
        const int nb = std::min(kBlock, kv.n_kv - b0);
        float smax = neg_inf;
        for (int c = 0; c < kBlock; ++c) {
            const int j = b0 + c;
            if (c >= nb || (kv.visible && !kv.visible[j])) {
                score[c] = neg_inf;
                continue;
            }
            const uint16_t* k = kv.k + static_cast<size_t>(j) * kv.k_stride;
            float lo = 0.f, hi = 0.f;
            for (int d = 0; d < kv.dk; d += 8) {
                for (int r = 0; r < 4; ++r) lo = std::fma(fp16_to_fp32(k[d + r]), q[d + r], lo);
                for (int r = 4; r < 8; ++r) hi = std::fma(fp16_to_fp32(k[d + r]), q[d + r], hi);
            }
            score[c] = ((lo + hi) + 0.f) * scale;
            smax = std::max(smax, score[c]);
        }
        if (smax == neg_inf) continue;  // a masked block adds nothing
        if (smax > M) {
            if (M > neg_inf) {
                const float m = std::exp(M - smax);
                S *= m;
                for (float& a : acc) a = m * a;
            }
            M = smax;
        }
        float lanes[8] = {};
        for (int c = 0; c < kBlock; ++c) {
            p[c] = score[c] == neg_inf ? 0.f : ggml::expf_v<kernels::Flavor::Avx2>(score[c] - M);
            lanes[c % 8] += p[c];
        }
        S += ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
        for (int c = 0; c < nb; ++c) {
            if (p[c] == 0.f && score[c] == neg_inf) continue;
            const uint16_t* v = kv.v + static_cast<size_t>(b0 + c) * kv.v_stride;
            for (int d = 0; d < kv.dv; ++d) acc[d] = std::fma(fp16_to_fp32(v[d]), p[c], acc[d]);
        }
    }
    const float sink_scale = ops::apply_sink(kv, 0, M, S);  // as mainline's (no ik reference)
    const float norm = S > 0.f ? 1.0f / S : 0.f;
    for (int d = 0; d < kv.dv; ++d) out[d] = S > 0.f ? acc[d] * sink_scale * norm : 0.f;
}

GroupBuffers group_buffers(ops::AttnScratch& s, int rows, int dk, int dv) {
    s.acc.assign(static_cast<size_t>(rows) * dv, 0.f);
    s.max_sum.assign(2 * static_cast<size_t>(rows), 0.f);
    for (int r = 0; r < rows; ++r) s.max_sum[2 * static_cast<size_t>(r)] = -std::numeric_limits<float>::infinity();
    s.kv_block.resize(static_cast<size_t>(kAttentionBlock) * (dk + dv));
    return {s.acc.data(), s.max_sum.data(), s.kv_block.data(), s.kv_block.data() + static_cast<size_t>(kAttentionBlock) * dk};
}

void finish_group_rows(const ops::KvView& kv, const GroupBuffers& buf, int rows, float* out_rows, int64_t out_stride) {
    const int dv = kv.dv;
    for (int r = 0; r < rows; ++r) {
        float S = buf.max_sum[2 * static_cast<size_t>(r) + 1];
        const float sink_scale = ops::apply_sink(kv, r, buf.max_sum[2 * static_cast<size_t>(r)], S);  // as mainline's (no ik reference)
        const float norm = S > 0.f ? 1.0f / S : 0.f;
        const float* acc = buf.acc + static_cast<size_t>(r) * dv;
        float* out = out_rows + r * out_stride;
        for (int d = 0; d < dv; ++d) out[d] = S > 0.f ? acc[d] * sink_scale * norm : 0.f;
    }
}

void rms_norm_fused(const float* x, const float* w, float* y, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / n);
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < n; ++i) y[i] = w ? (scale * w[i]) * x[i] : x[i] * scale;
}

void route_softmax(const float* logits, int n_expert, int n_used, bool renormalize, int* selected, float* weights) {
    std::vector<int> ids(static_cast<size_t>(n_expert));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + n_used, ids.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    const float mx = logits[ids[0]];
    float sum = 0.f;
    for (int j = 0; j < n_expert; ++j) {
        const float p = std::exp(logits[ids[j]] - mx);
        if (j < n_used) weights[j] = p;
        sum += p;
    }
    const float norm = 1.0f / sum;
    for (int j = 0; j < n_used; ++j) {
        selected[j] = ids[j];
        weights[j] = weights[j] * norm;
    }
    if (!renormalize) return;
    float s2 = 0.f;
    for (int j = 0; j < n_used; ++j) s2 += weights[j];
    const float n2 = s2 > 0.f ? 1.0f / s2 : 0.f;
    for (int j = 0; j < n_used; ++j) weights[j] = weights[j] * n2;
}

const ops::FloatOps& float_ops(const ops::FloatOps& base) {
    // One derived table per base table (the scalar and the SIMD ones of each flavor); they live as long as the
    // bases, which are statics.
    static std::mutex mu;
    static std::map<const ops::FloatOps*, std::unique_ptr<ops::FloatOps>> derived;
    std::lock_guard<std::mutex> lock(mu);
    auto& d = derived[&base];
    if (!d) {
        d = std::make_unique<ops::FloatOps>(base);
        // The scalar table keeps the scalar form (the reference); a SIMD one, whose CPU has AVX2, the AVX2 form.
        const bool scalar = &base == &ops::float_ops(base.flavor);
        const bool wide = !scalar && kernels::active_table(base.flavor).isa == kernels::Isa::Avx512;
        d->attend = d->attend_tiled = scalar ? attend_ik : wide ? attend_ik_avx512() : attend_ik_simd();
        d->attend_group = scalar ? nullptr : wide ? attend_ik_group_avx512() : attend_ik_group_simd();
        d->rms_norm = rms_norm_fused;
        d->ik = true;
    }
    return *d;
}

const kernels::KernelTable& kernel_table(const kernels::KernelTable& base) {
    static std::mutex mu;
    static std::map<const kernels::KernelTable*, std::unique_ptr<kernels::KernelTable>> derived;
    std::lock_guard<std::mutex> lock(mu);
    auto& d = derived[&base];
    if (!d) {
        d = std::make_unique<kernels::KernelTable>(base);
        const int f32 = kernels::type_slot(GgmlType::F32);
        if (d->dot_batch[f32]) {
            d->dot[f32] = d->dot_batch[f32];
            d->dot_rows[f32] = nullptr;
            d->tile[f32] = d->tile_batch[f32];
        }
    }
    return *d;
}

}  // namespace moe::ik

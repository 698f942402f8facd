#include "engine/forward/msa.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace moe::msa {

void prepare(const Hparams& hp, const GqaWeights& w, const ops::FloatOps& fops, const std::vector<float>& cs, float* q, float* k) {
    const int D = static_cast<int>(hp.msa.head_dim);
    for (uint32_t h = 0; h < hp.gqa.n_head_kv; ++h) {
        float* qh = q + static_cast<size_t>(h) * D;
        fops.norm(qh, w.ix_q_norm.f32(), qh, D, hp.rms_eps);
        ops::rope(qh, hp.rope, cs);
    }
    fops.norm(k, w.ix_k_norm.f32(), k, D, hp.rms_eps);
    ops::rope(k, hp.rope, cs);
}

int select_blocks(const MsaConfig& c, const ops::FloatOps& fops, const float* q, const float* keys, int pos, std::vector<float>& scores,
                  int* blocks) {
    const int D = static_cast<int>(c.head_dim), B = static_cast<int>(c.block_size);
    const int n_blocks = pos / B + 1;  // every block up to the query's own has a causal position
    scores.assign(static_cast<size_t>(n_blocks), -std::numeric_limits<float>::infinity());
    for (int j = 0; j <= pos; ++j) scores[j / B] = std::max(scores[j / B], fops.dot_f32(q, keys + static_cast<size_t>(j) * D, D));
    // llama.cpp lifts the local blocks above every score (a 1e30 bias), so they are always kept.
    for (int l = 0; l < static_cast<int>(c.local_blocks) && n_blocks - 1 - l >= 0; ++l)
        scores[n_blocks - 1 - l] = std::numeric_limits<float>::infinity();
    const int k = std::min(static_cast<int>(c.top_k), n_blocks);
    std::vector<int> order(static_cast<size_t>(n_blocks));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
    std::copy_n(order.begin(), k, blocks);
    // ggml_top_k's CPU op swaps its first two results ("the order is not important"); blocks past the last causal
    // one score -inf there and are skipped by the attention, so they are left out here.
    if (k > 1) std::swap(blocks[0], blocks[1]);
    return k;
}

void mark_visible(const MsaConfig& c, const int* blocks, int count, int n_kv, uint8_t* visible) {
    const int B = static_cast<int>(c.block_size);
    std::fill_n(visible, n_kv, 0);
    for (int i = 0; i < count; ++i) std::fill(visible + std::min(n_kv, blocks[i] * B), visible + std::min(n_kv, (blocks[i] + 1) * B), 1);
}

}  // namespace moe::msa

#include "engine/forward/sequence_cache.h"

namespace moe {

SequenceCache SequenceCache::make(const Model& m, int n_ctx) {
    SequenceCache c;
    c.n_ctx = n_ctx;
    const Hparams& hp = m.hp;
    const size_t L = m.layers.size();
    c.k.resize(L);
    c.v.resize(L);
    c.ix.resize(L);
    c.k_width.assign(L, 0);
    c.v_width.assign(L, 0);
    for (size_t l = 0; l < L; ++l) {
        const Layer& layer = m.layers[l];
        if (layer.attn == AttentionKind::Gqa) {
            c.k_width[l] = c.v_width[l] = static_cast<int>(hp.gqa.n_head_kv * hp.gqa.head_dim);
        } else if (layer.attn == AttentionKind::Mla) {
            c.k_width[l] = static_cast<int>(hp.mla.kv_lora_rank + hp.mla.qk_rope);
            if (layer.indexer_full) c.ix[l].assign(static_cast<size_t>(n_ctx) * hp.indexer.head_dim, 0);
        }
        c.k[l].assign(static_cast<size_t>(n_ctx) * c.k_width[l], 0);
        c.v[l].assign(static_cast<size_t>(n_ctx) * c.v_width[l], 0);
    }
    return c;
}

uint64_t SequenceCache::bytes() const {
    uint64_t b = 0;
    for (size_t l = 0; l < k.size(); ++l) b += (k[l].size() + v[l].size() + ix[l].size()) * sizeof(uint16_t);
    return b;
}

}  // namespace moe

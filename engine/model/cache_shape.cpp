#include "engine/model/cache_shape.h"

namespace moe {

CompressedStateLayout compressed_state_layout(const Hparams& hp, uint32_t ratio) {
    const CompressedAttnConfig& c = hp.csa;
    CompressedStateLayout s;
    s.ring = c.window * c.head_dim;
    if (ratio == 0) return s;
    const bool overlap = ratio == CompressedAttnConfig::kOverlapRatio;
    s.slots = overlap ? 2 * ratio : ratio;
    s.width = (overlap ? 2 : 1) * c.head_dim;
    if (overlap) s.ix_slots = s.slots, s.ix_width = 2 * c.ix_dim;
    return s;
}

uint32_t sliding_ring_rows(uint32_t window, uint32_t batch) { return (window + batch + 255) / 256 * 256; }

std::vector<LayerCacheShape> cache_shape(const Model& m, uint32_t ring_batch) {
    const Hparams& hp = m.hp;
    std::vector<LayerCacheShape> out(m.layers.size());
    for (size_t l = 0; l < m.layers.size(); ++l) {
        const Layer& L = m.layers[l];
        LayerCacheShape& s = out[l];
        if (L.attn == AttentionKind::Gqa) {
            s.k_width = s.v_width = hp.gqa.n_head_kv * hp.gqa.head_dim;
            if (L.msa) s.ix_width = hp.msa.head_dim, s.ix_f32 = true;
            if (L.sliding && ring_batch) s.ring = sliding_ring_rows(hp.gqa.window, ring_batch);
        } else if (L.attn == AttentionKind::Mla) {
            s.k_width = hp.mla.kv_lora_rank + hp.mla.qk_rope;
            if (m.has_indexer() && L.indexer_full) s.ix_width = hp.indexer.head_dim;
        } else if (L.attn == AttentionKind::Compressed) {
            // compressed rows (and the indexer's keys) by block; the window and the compressors' rows as state
            const CompressedStateLayout st = compressed_state_layout(hp, L.compress_ratio);
            if (L.compress_ratio) s.k_width = hp.csa.head_dim, s.positions_per_row = L.compress_ratio;
            if (L.compress_ratio == CompressedAttnConfig::kOverlapRatio) s.ix_width = hp.csa.ix_dim;
            s.conv_floats = st.ring;
            s.state_floats = st.total() - st.ring;
        } else {
            const DeltaNetConfig& c = hp.ssm;
            s.conv_floats = (c.conv_kernel - 1) * c.conv_dim();
            s.state_floats = c.n_v_heads * c.state * c.state;
        }
    }
    return out;
}

std::string describe_cache_shape(const Model& m, const std::vector<LayerCacheShape>& shape) {
    const Hparams& hp = m.hp;
    uint32_t gqa = 0, mla = 0, dsa = 0, msa = 0, recurrent = 0, rings = 0, ring_rows = 0;
    uint64_t state = 0;
    for (size_t l = 0; l < shape.size(); ++l) {
        const LayerCacheShape& s = shape[l];
        if (s.ring) {
            ++rings, ring_rows = s.ring;
            continue;
        }
        if (s.recurrent()) ++recurrent, state += 4ull * (s.conv_floats + s.state_floats);
        else if (m.layers[l].attn == AttentionKind::Mla) ++mla;
        else ++gqa;
        if (s.ix_width) ++(s.ix_f32 ? msa : dsa);
    }
    auto n = [](uint64_t v) { return std::to_string(v); };
    std::string d;
    if (mla) d = "MLA latent (" + n(hp.mla.kv_lora_rank) + " + " + n(hp.mla.qk_rope) + ") fp16 x " + n(mla) + " layers";
    if (gqa)
        d += (d.empty() ? "" : " + ") + std::string("fp16 K and V, ") + n(hp.gqa.n_head_kv) + " kv heads x " + n(hp.gqa.head_dim) + " x " + n(gqa) +
             (recurrent ? " full-attention" : "") + " layers";
    if (rings) d += " + " + n(rings) + " sliding-window layers as rings of " + n(ring_rows) + " rows";
    if (dsa) d += " + DSA keys " + n(hp.indexer.head_dim) + " fp16 x " + n(dsa) + " layers";
    if (msa) d += " + MSA keys " + n(hp.msa.head_dim) + " f32 x " + n(msa) + " layers";
    if (recurrent)
        d += " + a " + n((state + 1023) / 1024) + " KiB f32 recurrent state (" + n(recurrent) +
             " linear-attention layers) per sequence and per checkpoint";
    return d;
}

}  // namespace moe

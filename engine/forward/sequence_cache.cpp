#include "engine/forward/sequence_cache.h"

#include <algorithm>
#include <stdexcept>

namespace moe {

uint64_t recurrent_state_bytes(const Hparams& hp, uint32_t n_recurrent_layers) {
    const DeltaNetConfig& s = hp.ssm;
    const uint64_t per_layer = uint64_t{s.conv_kernel > 0 ? s.conv_kernel - 1 : 0} * s.conv_dim() + uint64_t{s.n_v_heads} * s.state * s.state;
    return per_layer * n_recurrent_layers * sizeof(float);
}

SequenceCache SequenceCache::make(const Model& m, int n_ctx) {
    SequenceCache c;
    c.n_ctx = n_ctx;
    const Hparams& hp = m.hp;
    const size_t L = m.layers.size();
    c.k.resize(L);
    c.v.resize(L);
    c.ix.resize(L);
    c.conv.resize(L);
    c.ssm.resize(L);
    c.k_width.assign(L, 0);
    c.v_width.assign(L, 0);
    for (size_t l = 0; l < L; ++l) {
        const Layer& layer = m.layers[l];
        if (layer.attn == AttentionKind::Gqa) {
            c.k_width[l] = c.v_width[l] = static_cast<int>(hp.gqa.n_head_kv * hp.gqa.head_dim);
        } else if (layer.attn == AttentionKind::Mla) {
            c.k_width[l] = static_cast<int>(hp.mla.kv_lora_rank + hp.mla.qk_rope);
            if (layer.indexer_full) c.ix[l].assign(static_cast<size_t>(n_ctx) * hp.indexer.head_dim, 0);
        } else {
            const DeltaNetConfig& s = hp.ssm;
            c.conv[l].assign(size_t{s.conv_kernel - 1} * s.conv_dim(), 0.f);
            c.ssm[l].assign(size_t{s.n_v_heads} * s.state * s.state, 0.f);
        }
        c.k[l].assign(static_cast<size_t>(n_ctx) * c.k_width[l], 0);
        c.v[l].assign(static_cast<size_t>(n_ctx) * c.v_width[l], 0);
    }
    return c;
}

uint64_t SequenceCache::bytes() const {
    uint64_t b = 0;
    for (size_t l = 0; l < k.size(); ++l) b += (k[l].size() + v[l].size() + ix[l].size()) * sizeof(uint16_t);
    return b + recurrent_bytes();
}

bool SequenceCache::has_recurrent() const {
    return std::any_of(ssm.begin(), ssm.end(), [](const auto& s) { return !s.empty(); });
}

uint64_t SequenceCache::recurrent_bytes() const {
    uint64_t b = 0;
    for (size_t l = 0; l < ssm.size(); ++l) b += (conv[l].size() + ssm[l].size()) * sizeof(float);
    return b;
}

void SequenceCache::save_recurrent(std::vector<float>& out) const {
    out.clear();
    out.reserve(recurrent_bytes() / sizeof(float));
    for (size_t l = 0; l < ssm.size(); ++l) {
        out.insert(out.end(), conv[l].begin(), conv[l].end());
        out.insert(out.end(), ssm[l].begin(), ssm[l].end());
    }
}

void SequenceCache::restore_recurrent(const std::vector<float>& in) {
    if (in.size() * sizeof(float) != recurrent_bytes()) throw std::logic_error("recurrent snapshot of another shape");
    size_t off = 0;
    for (size_t l = 0; l < ssm.size(); ++l) {
        std::copy_n(in.begin() + static_cast<ptrdiff_t>(off), conv[l].size(), conv[l].begin());
        off += conv[l].size();
        std::copy_n(in.begin() + static_cast<ptrdiff_t>(off), ssm[l].size(), ssm[l].begin());
        off += ssm[l].size();
    }
}

void SequenceCache::reset_recurrent() {
    for (size_t l = 0; l < ssm.size(); ++l) {
        std::fill(conv[l].begin(), conv[l].end(), 0.f);
        std::fill(ssm[l].begin(), ssm[l].end(), 0.f);
    }
}

}  // namespace moe

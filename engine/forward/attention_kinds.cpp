// The registered attention kinds: a new kind is its file (attention_unit.h) and one line here.
#include <stdexcept>
#include <string>

#include "engine/forward/attention_unit.h"

namespace moe {

const AttentionKindInfo& gqa_attention();
const AttentionKindInfo& mla_attention();
const AttentionKindInfo& deltanet_attention();
const AttentionKindInfo& kda_attention();
const AttentionKindInfo& compressed_attention();

namespace {

const AttentionKindInfo* const* registered() {
    static const AttentionKindInfo* const kinds[] = {&gqa_attention(), &mla_attention(),        &deltanet_attention(),
                                                     &kda_attention(), &compressed_attention(), nullptr};
    return kinds;
}

}  // namespace

const AttentionKindInfo& attention_kind_info(AttentionKind kind) {
    for (const AttentionKindInfo* const* k = registered(); *k; ++k)
        if ((*k)->kind == kind) return **k;
    throw std::logic_error("attention kind " + std::to_string(static_cast<int>(kind)) + " has no registered unit");
}

std::vector<AttentionKind> attention_kinds_of(const Model& m) {
    std::vector<AttentionKind> kinds;
    for (const AttentionKindInfo* const* k = registered(); *k; ++k)
        for (const Layer& L : m.layers)
            if (L.attn == (*k)->kind) {
                kinds.push_back((*k)->kind);
                break;
            }
    return kinds;
}

}  // namespace moe

// The registered layer kinds: a new kind is its file (layer_unit.h) and one line here.
#include <stdexcept>
#include <string>

#include "engine/forward/layer_unit.h"

namespace moe {

const AttentionKindInfo& gqa_attention();
const AttentionKindInfo& mla_attention();
const AttentionKindInfo& deltanet_attention();
const AttentionKindInfo& kda_attention();
const AttentionKindInfo& compressed_attention();
const FeedForwardKindInfo& dense_feed_forward();
const FeedForwardKindInfo& moe_feed_forward();

namespace {

const AttentionKindInfo* const* registered_attention() {
    static const AttentionKindInfo* const kinds[] = {&gqa_attention(), &mla_attention(),        &deltanet_attention(),
                                                     &kda_attention(), &compressed_attention(), nullptr};
    return kinds;
}

const FeedForwardKindInfo* const* registered_feed_forward() {
    static const FeedForwardKindInfo* const kinds[] = {&dense_feed_forward(), &moe_feed_forward(), nullptr};
    return kinds;
}

template <class Info, class Kind>
const Info& find_kind(const Info* const* registered, Kind kind, const char* what) {
    for (const Info* const* k = registered; *k; ++k)
        if ((*k)->kind == kind) return **k;
    throw std::logic_error(std::string(what) + " kind " + std::to_string(static_cast<int>(kind)) + " has no registered unit");
}

// The registered kinds some layer of m uses, each once, in registration order.
template <class Info, class Kind>
std::vector<Kind> kinds_used(const Info* const* registered, const Model& m, Kind (*of)(const Layer&)) {
    std::vector<Kind> kinds;
    for (const Info* const* k = registered; *k; ++k)
        for (const Layer& L : m.layers)
            if (of(L) == (*k)->kind) {
                kinds.push_back((*k)->kind);
                break;
            }
    return kinds;
}

}  // namespace

const AttentionKindInfo& attention_kind_info(AttentionKind kind) { return find_kind(registered_attention(), kind, "attention"); }
const FeedForwardKindInfo& feed_forward_kind_info(FeedForwardKind kind) { return find_kind(registered_feed_forward(), kind, "feed-forward"); }

std::vector<AttentionKind> attention_kinds_of(const Model& m) {
    return kinds_used(
        registered_attention(), m, +[](const Layer& L) { return L.attn; });
}
std::vector<FeedForwardKind> feed_forward_kinds_of(const Model& m) {
    return kinds_used(
        registered_feed_forward(), m, +[](const Layer& L) { return L.ffn(); });
}

}  // namespace moe

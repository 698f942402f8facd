// Layer kinds as units of their own: each attention kind and each feed-forward kind. A kind's file holds its
// fast step (a class over LayerContext owning its scratch and any state it carries between layers) and its plain
// reference step (one token, scalar, reference_ops.h), and registers both in layer_kinds.cpp. The runner and
// the reference forward keep the layer loop and call the kinds each layer names; a kind's weights (Layer) and
// what a sequence keeps for it (cache_shape.h) are its layout, read from the file header alone for check and plan.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/forward/layer_context.h"
#include "engine/model/model.h"

namespace moe {

struct RunnerOptions;
namespace ref {
struct Context;
}

class AttentionUnit {
public:
    using Base = AttentionUnit;
    virtual ~AttentionUnit() = default;
    // Layer l over the chunk's n rows: reads cx.xn(), writes cx.out(). One sequence's rows at a time against the
    // selected sequence's cache, unless splits_segments().
    virtual void forward(LayerContext& cx, uint32_t l, int n) = 0;
    // The kind takes every sequence's rows at once and meets each sequence's cache itself (GQA: its projections
    // read the weights once for the whole decode batch).
    virtual bool splits_segments() const { return false; }
};

struct AttentionKindInfo {
    AttentionKind kind;
    const char* name;
    // The fast step's scratch for these options, from the layout alone (Runner::working_bytes adds it), and the
    // unit with that scratch allocated.
    uint64_t (*scratch_bytes)(const Model& layout, const RunnerOptions& opt);
    std::unique_ptr<AttentionUnit> (*make)(const Model& m, const RunnerOptions& opt);
    // The reference step for one token: xn (n_embd) in, out (n_embd) written, the token at c.n_past.
    void (*reference)(const ref::Context& c, uint32_t l, const std::vector<float>& xn, std::vector<float>& out);
};

// The registered kind (layer_kinds.cpp); throws std::logic_error for one without a registration.
const AttentionKindInfo& attention_kind_info(AttentionKind kind);
// The kinds the model's layers use, each once, in AttentionKind order.
std::vector<AttentionKind> attention_kinds_of(const Model& m);

class FeedForwardUnit {
public:
    using Base = FeedForwardUnit;
    virtual ~FeedForwardUnit() = default;
    // Layer l's feed-forward over the chunk's n rows of cx.xn(), its output added to cx.stream().
    virtual void forward(LayerContext& cx, uint32_t l, int n) = 0;
};

struct FeedForwardKindInfo {
    FeedForwardKind kind;
    const char* name;
    uint64_t (*scratch_bytes)(const Model& layout, const RunnerOptions& opt);
    std::unique_ptr<FeedForwardUnit> (*make)(const Model& m, const RunnerOptions& opt);
    // One token: xn (n_embd) in, out (n_embd) written (the reference adds it to the stream).
    void (*reference)(const ref::Context& c, uint32_t l, const std::vector<float>& xn, std::vector<float>& out);
};
const FeedForwardKindInfo& feed_forward_kind_info(FeedForwardKind kind);
std::vector<FeedForwardKind> feed_forward_kinds_of(const Model& m);

// A unit's scratch as one list of its vectors and their sizes, so allocation and the byte count cannot disagree:
// Unit::scratch(m, opt, size) calls size(&Unit::member, elements) for each.
template <class Unit>
uint64_t unit_scratch_bytes(const Model& m, const RunnerOptions& opt) {
    uint64_t total = 0;
    Unit::scratch(m, opt, [&total](auto member, size_t n) {
        using Vec = std::remove_reference_t<decltype(std::declval<Unit&>().*member)>;
        total += n * sizeof(typename Vec::value_type);
    });
    return total;
}
template <class Unit>
std::unique_ptr<typename Unit::Base> make_unit(const Model& m, const RunnerOptions& opt) {
    auto u = std::make_unique<Unit>(m);
    Unit::scratch(m, opt, [&u](auto member, size_t n) { ((*u).*member).resize(n); });
    return u;
}

}  // namespace moe

#include "engine/runtime/routing_window.h"

#include <algorithm>
#include <cstring>

namespace moe {

size_t RoutingWindow::default_bytes(const RoutingTraceHeader& h) {
    // One token's step per MoE layer: 'R' (2 + 4 bytes per expert), 'D' (3), 'P' (up to 3), 'X' (2) and their
    // record heads, 8 bytes each.
    size_t moe_layers = 0;
    for (uint32_t l = 0; l < h.n_layer; ++l)
        for (uint32_t e = 0; e < h.n_expert; ++e)
            if (h.load(l, e)) {
                ++moe_layers;
                break;
            }
    const size_t per_token = 16 + moe_layers * (size_t{h.n_expert_used} * 14 + 32) + 24;
    return std::clamp(2 * kDefaultSteps * per_token, kMinBytes, kMaxBytes);
}

RoutingWindow::RoutingWindow(RoutingTraceHeader header, size_t max_steps, RoutingRecorder* also, size_t max_bytes)
    : header_(std::move(header)), header_bytes_(encode_routing_trace_header(header_)), also_(also),
      ring_(max_bytes ? max_bytes : default_bytes(header_)),  // value-initialised: every page touched now
      spans_(std::max<size_t>(1, max_steps)) {}

void RoutingWindow::drop_oldest() {
    first_ = (first_ + 1) % spans_.size();
    --count_;
}

void RoutingWindow::append_step(std::span<const uint8_t> step) {
    if (also_) also_->append_step(step);
    std::lock_guard<std::mutex> lk(mu_);
    ++seen_;
    if (step.size() > ring_.size()) {
        // Larger than the whole window: the kept steps must be the latest ones without a gap, so none are kept.
        count_ = first_ = write_ = 0;
        return;
    }
    if (count_ == spans_.size()) drop_oldest();
    if (write_ + step.size() > ring_.size()) {
        // Wrap: the steps between here and the end are the oldest ones.
        while (count_ && spans_[first_].at >= write_) drop_oldest();
        write_ = 0;
    }
    // Then the oldest steps in the place the new one takes.
    while (count_ && spans_[first_].at < write_ + step.size() && write_ < spans_[first_].at + spans_[first_].size) drop_oldest();
    std::memcpy(ring_.data() + write_, step.data(), step.size());
    spans_[(first_ + count_) % spans_.size()] = {write_, step.size()};
    ++count_;
    write_ += step.size();
}

RoutingWindow::Recent RoutingWindow::recent() const {
    std::vector<uint8_t> bytes = header_bytes_;
    uint64_t first = 0;
    {
        std::lock_guard<std::mutex> lk(mu_);
        size_t total = bytes.size();
        for (size_t i = 0; i < count_; ++i) total += spans_[(first_ + i) % spans_.size()].size;
        bytes.reserve(total);
        for (size_t i = 0; i < count_; ++i) {
            const Span& s = spans_[(first_ + i) % spans_.size()];
            bytes.insert(bytes.end(), ring_.begin() + static_cast<std::ptrdiff_t>(s.at), ring_.begin() + static_cast<std::ptrdiff_t>(s.at + s.size));
        }
        first = seen_ - count_;
    }
    // The steps are this process's own encoding, so parsing them can only fail on a bug: strict.
    return {parse_routing_trace(bytes, "the routing window", true), first};
}

uint64_t RoutingWindow::steps_seen() const {
    std::lock_guard<std::mutex> lk(mu_);
    return seen_;
}

}  // namespace moe

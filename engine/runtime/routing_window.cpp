#include "engine/runtime/routing_window.h"

namespace moe {

RoutingWindow::RoutingWindow(RoutingTraceHeader header, size_t max_steps, RoutingRecorder* also)
    : header_(std::move(header)), header_bytes_(encode_routing_trace_header(header_)), max_steps_(std::max<size_t>(1, max_steps)), also_(also) {}

void RoutingWindow::append_step(std::span<const uint8_t> step) {
    if (also_) also_->append_step(step);
    std::lock_guard<std::mutex> lk(mu_);
    if (steps_.size() == max_steps_) {
        std::vector<uint8_t> reuse = std::move(steps_.front());  // keeps its capacity for the new step
        steps_.pop_front();
        reuse.assign(step.begin(), step.end());
        steps_.push_back(std::move(reuse));
    } else {
        steps_.emplace_back(step.begin(), step.end());
    }
    ++seen_;
}

RoutingWindow::Recent RoutingWindow::recent() const {
    std::vector<uint8_t> bytes = header_bytes_;
    uint64_t first = 0;
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (const auto& s : steps_) bytes.insert(bytes.end(), s.begin(), s.end());
        first = seen_ - steps_.size();
    }
    // The steps are this process's own encoding, so parsing them can only fail on a bug: strict.
    return {parse_routing_trace(bytes, "the routing window", true), first};
}

uint64_t RoutingWindow::steps_seen() const {
    std::lock_guard<std::mutex> lk(mu_);
    return seen_;
}

}  // namespace moe

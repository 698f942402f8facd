// The server's most recent forward steps' routing, kept in memory in the trace file's encoding (whether or not
// --routing-trace writes a file too), so the engine view can replay them against Belady's MIN while serving:
// the live hit rate beside the best any policy could have had at the same budget on the same requests.
//
// The steps live in one ring of bytes allocated (and touched) up front: a serving process's memory must not
// creep as steps of different sizes come and go, and a window of long prompt chunks on a 75-layer model must
// not grow past its bound (512 such steps would be a gigabyte).
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "engine/runtime/routing_trace.h"

namespace moe {

class RoutingWindow : public RoutingRecorder {
public:
    static constexpr size_t kDefaultSteps = 512;
    // The ring's bytes when not given: room for 2 * kDefaultSteps one-token steps of this model, within
    // [kMinBytes, kMaxBytes].
    static constexpr size_t kMinBytes = 256 << 10, kMaxBytes = 64 << 20;
    static size_t default_bytes(const RoutingTraceHeader& header);

    // `also`: a recorder (a trace file) that gets every step too; not owned, may be null. `max_bytes` 0: the
    // default for the header's model.
    RoutingWindow(RoutingTraceHeader header, size_t max_steps = kDefaultSteps, RoutingRecorder* also = nullptr, size_t max_bytes = 0);

    void append_step(std::span<const uint8_t> step) override;

    struct Recent {
        RoutingTrace trace;       // the kept steps, oldest first
        uint64_t first_step = 0;  // the index of trace.steps[0] among every step recorded since the start
    };
    Recent recent() const;
    uint64_t steps_seen() const;
    size_t capacity_bytes() const { return ring_.size(); }

private:
    struct Span {
        size_t at = 0, size = 0;
    };
    void drop_oldest();

    RoutingTraceHeader header_;
    std::vector<uint8_t> header_bytes_;
    RoutingRecorder* also_;
    mutable std::mutex mu_;
    std::vector<uint8_t> ring_;  // the steps' bytes, each step contiguous, in recording order around the ring
    std::vector<Span> spans_;    // a ring of the kept steps' places: spans_[(first_ + i) % size] is the i-th oldest
    size_t first_ = 0, count_ = 0;
    size_t write_ = 0;  // where the next step goes (after the newest)
    uint64_t seen_ = 0;
};

}  // namespace moe

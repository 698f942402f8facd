// The server's most recent forward steps' routing, kept in memory in the trace file's encoding (whether or not
// --routing-trace writes a file too), so the engine view can replay them against Belady's MIN while serving:
// the live hit rate beside the best any policy could have had at the same budget on the same requests.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>

#include "engine/runtime/routing_trace.h"

namespace moe {

class RoutingWindow : public RoutingRecorder {
public:
    static constexpr size_t kDefaultSteps = 512;
    // `also`: a recorder (a trace file) that gets every step too; not owned, may be null.
    RoutingWindow(RoutingTraceHeader header, size_t max_steps = kDefaultSteps, RoutingRecorder* also = nullptr);

    void append_step(std::span<const uint8_t> step) override;

    struct Recent {
        RoutingTrace trace;       // the kept steps, oldest first
        uint64_t first_step = 0;  // the index of trace.steps[0] among every step recorded since the start
    };
    Recent recent() const;
    uint64_t steps_seen() const;

private:
    RoutingTraceHeader header_;
    std::vector<uint8_t> header_bytes_;
    size_t max_steps_;
    RoutingRecorder* also_;
    mutable std::mutex mu_;
    std::deque<std::vector<uint8_t>> steps_;
    uint64_t seen_ = 0;
};

}  // namespace moe

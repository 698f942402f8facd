// Routing traces: what the router chose, per forward step and MoE layer, and what the expert cache did about
// it (hits, misses, prefetches), in a compact binary file tied to one model. `run`, `serve` and `bench` write
// them (--routing-trace); `cache-sim` replays them against every eviction policy and the optimal bound;
// `profile` counts them. The format is in docs/streaming.md ("Routing traces").
//
// File: a header (magic, version, model identity, how the recording engine streamed, each expert's load size)
// and then steps. A step is records: 'S' begin, per MoE layer 'R' (each token's experts and weights), 'D' (the
// experts the cache was asked for, each a hit or a miss), 'P' (experts predicted for prefetch, each issued
// or not) and 'X' (the requested experts in the order they were computed and unpinned), then 'E' (wall time,
// time blocked on reads). Appends go a whole step at a time; a file cut inside
// a step (a crash) is trimmed back to its last whole step when opened for appending. Past its size bound the
// oldest steps are dropped (the file rewritten beside itself and renamed over it).
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/weights/weights.h"

namespace moe {

struct RoutingTraceError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct RoutingTraceHeader {
    std::string arch;
    uint32_t n_layer = 0, n_expert = 0, n_expert_used = 0;
    uint64_t model_hash = 0;       // XXH3 of the GGUF files' sizes and header bytes (routing_model_hash)
    uint64_t slot_bytes = 0;       // one cache slot as the engine sizes it (the largest expert's windows)
    uint64_t cache_bytes = 0;      // the recording engine's expert cache; 0: experts were in RAM
    std::string policy;            // its eviction policy ("" in RAM)
    uint32_t prefetch_layers = 0;  // MoE layers ahead it prefetched
    uint64_t prefetch_cap = 0;     // bytes of loads in flight past which it stopped prefetching
    uint64_t steps_dropped = 0;    // oldest steps dropped to keep the file within its bound
    // Bytes one load of (layer, expert) reads, [layer * n_expert + expert]; 0 for layers without experts.
    std::vector<uint32_t> load_bytes;

    uint32_t load(uint32_t layer, uint32_t expert) const { return load_bytes[static_cast<size_t>(layer) * n_expert + expert]; }
    // Same model and expert layout (the recording settings may differ).
    bool same_model(const RoutingTraceHeader& o) const;
};

struct TraceLayerEvent {
    char kind = 0;  // 'R' route, 'D' demand, 'P' prefetch, 'X' release order
    uint32_t layer = 0;
    uint32_t k = 0;                 // 'R': experts per token
    std::vector<uint16_t> experts;  // 'R': n_tokens * k in token order; 'D'/'P': the set; 'X': in release order
    std::vector<float> weights;     // 'R' only
    std::vector<uint8_t> flags;     // 'D': bit 0 hit, bit 1 hit on a prefetched expert; 'P': 1 = issued
};

struct TraceStep {
    uint32_t n_tokens = 0;
    uint64_t wall_ns = 0, io_wait_ns = 0;
    std::vector<TraceLayerEvent> events;
};

struct RoutingTrace {
    RoutingTraceHeader header;
    std::vector<TraceStep> steps;
};

// XXH3 over each GGUF file's size and its bytes before the tensor data (metadata and tensor table).
uint64_t routing_model_hash(const std::vector<std::string>& files, const std::vector<uint64_t>& data_offsets);
// The same for a GGUF model (every split).
inline uint64_t routing_model_hash(const GgufModel& model) {
    std::vector<std::string> files;
    std::vector<uint64_t> offsets;
    for (const auto& f : model.files) files.push_back(f.path), offsets.push_back(f.data_offset);
    return routing_model_hash(files, offsets);
}

// Strict reader: throws RoutingTraceError naming the file, the byte offset and the field for anything out of
// bounds or inconsistent. A last step cut short is dropped (the writer trims it too) unless `strict_tail`.
RoutingTrace parse_routing_trace(std::span<const uint8_t> bytes, const std::string& name, bool strict_tail = false);
RoutingTrace read_routing_trace(const std::string& path);
// Several traces of one model, their steps in the order given; throws naming a file of another model.
RoutingTrace read_routing_traces(const std::vector<std::string>& paths);

// The header's bytes as a trace file begins with them (followed by steps, it parses as a trace).
std::vector<uint8_t> encode_routing_trace_header(const RoutingTraceHeader& h);

// Builds each forward step's records, in the file format's bytes, from the runner's calls (begin_step, route,
// end_step) and the expert cache's (ExpertEventSink); what becomes of a whole step is the subclass's: a file
// (RoutingTraceWriter) or the server's recent steps (RoutingWindow).
class RoutingRecorder : public ExpertEventSink {
public:
    void begin_step(uint32_t n_tokens);
    void route(uint32_t layer, int n_tokens, int k, const int* experts, const float* weights);
    void demand(uint32_t layer, std::span<const uint32_t> experts, std::span<const uint8_t> hit) override;
    void prefetch(uint32_t layer, std::span<const uint32_t> predicted, std::span<const uint8_t> issued) override;
    void release(uint32_t layer, uint32_t expert) override;
    // Closes the step and hands its bytes to append_step.
    void end_step(uint64_t wall_ns, uint64_t io_wait_ns);
    // One whole step's bytes ('S' .. 'E').
    virtual void append_step(std::span<const uint8_t> step) = 0;

private:
    void put_record(char kind, uint8_t k, uint32_t layer, uint32_t count);

    std::vector<uint8_t> step_;  // the step being built
    bool in_step_ = false;
    size_t release_record_ = SIZE_MAX;  // where the open 'X' record starts in step_ (releases of one layer)
};

// Appends steps to a trace file. Opening an existing trace of another model throws (naming what differs); of
// the same model, continues it (recording settings in the header become this run's).
class RoutingTraceWriter : public RoutingRecorder {
public:
    static constexpr uint64_t kDefaultMaxBytes = 1ull << 30;
    RoutingTraceWriter(const std::string& path, RoutingTraceHeader header, uint64_t max_bytes = kDefaultMaxBytes);
    ~RoutingTraceWriter() override;
    RoutingTraceWriter(const RoutingTraceWriter&) = delete;
    RoutingTraceWriter& operator=(const RoutingTraceWriter&) = delete;

    // Writes the step (one write); drops the oldest steps when the file passes its bound.
    void append_step(std::span<const uint8_t> step) override;

    const std::string& path() const { return path_; }
    uint64_t steps_written() const { return steps_written_; }
    uint64_t file_bytes() const { return file_bytes_; }
    uint64_t steps_dropped() const { return header_.steps_dropped; }

private:
    void write_header_file(int fd) const;
    void drop_oldest();
    // Replaces the file with header_ + body (written beside it, renamed over it) and reopens it.
    void rewrite(const std::vector<uint8_t>& body);

    std::string path_;
    RoutingTraceHeader header_;
    uint64_t max_bytes_;
    int fd_ = -1;
    uint64_t header_bytes_ = 0, file_bytes_ = 0, steps_written_ = 0;
    std::vector<uint64_t> step_offsets_;  // where each step in the file begins
};

}  // namespace moe

// Weight views: resident tensors in an arena read once from the file, and routed experts behind an
// ExpertSource: every expert in RAM (InRamExpertSource) or streamed from disk (runtime/expert_cache.h).
#pragma once
#include <cstdint>
#include <deque>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/util/read_record.h"

#include "engine/gguf/gguf.h"
#include "engine/util/weight_memory.h"

namespace moe {

// A model whose metadata or shapes are wrong, or an unsupported architecture / type.
struct ModelError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A resident weight tensor: 2-D view [ne0 = row length, ne1 = rows] (1-D tensors have ne1 = 1).
struct Tensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    int64_t ne0 = 0, ne1 = 1;
    size_t row_bytes = 0;
    const uint8_t* data = nullptr;  // nullptr when the tensor is absent (optional tensors)

    bool present() const { return data != nullptr; }
    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
    const float* f32() const { return reinterpret_cast<const float*>(data); }
};

// A routed-expert tensor [n_in, n_out, n_expert]: expert e is the contiguous byte range
// [file_offset + e*expert_stride, +expert_bytes) in file `file_index`. The stride exceeds the size where one
// file tensor holds two matrices per expert (a fused ffn_gate_up_exps: gate rows, then up rows).
struct ExpertTensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    int64_t n_in = 0, n_out = 0, n_expert = 0;
    size_t row_bytes = 0;
    size_t expert_bytes = 0;
    size_t expert_stride = 0;
    uint32_t file_index = 0;
    uint64_t file_offset = 0;
};

// The three routed-expert tensors of one layer (all null for a dense layer).
struct ExpertLayer {
    const ExpertTensor* gate = nullptr;
    const ExpertTensor* up = nullptr;
    const ExpertTensor* down = nullptr;
    bool present() const { return gate != nullptr; }
};

// Holds resident tensors, read with plain pread into one 64-byte-aligned buffer.
class ResidentArena {
public:
    ResidentArena(const GgufModel& model, const std::vector<const GgufTensorInfo*>& tensors);
    ~ResidentArena();
    ResidentArena(const ResidentArena&) = delete;
    ResidentArena& operator=(const ResidentArena&) = delete;
    const uint8_t* data_of(const std::string& name) const;
    uint64_t bytes() const { return size_; }
    // mlock as far as RLIMIT_MEMLOCK allows; returns bytes that could NOT be locked.
    uint64_t try_lock();

private:
    WeightMemory memory_;
    uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    std::vector<std::pair<std::string, uint64_t>> offsets_;
};

// One expert's three matrices, ready for the dot-product kernels.
struct ExpertView {
    const uint8_t* gate = nullptr;  // [n_ff_exp rows of n_embd]
    const uint8_t* up = nullptr;    // [n_ff_exp rows of n_embd]
    const uint8_t* down = nullptr;  // [n_embd rows of n_ff_exp]
};

// Counters every expert source keeps (all zero for the in-RAM source but hits).
struct ExpertSourceStats {
    uint64_t hits = 0, misses = 0;  // demand lookups
    uint64_t bytes_read = 0;        // from disk, demand and prefetch
    uint64_t reads_submitted = 0;   // I/O requests (chunks)
    uint64_t wait_ns = 0;           // time the forward pass blocked waiting for expert bytes
    uint64_t prefetch_issued = 0, prefetch_used = 0;
    uint64_t evictions = 0;
    uint64_t store_loads = 0;           // experts read as one store record
    uint64_t store_bad_records = 0;     // store records that failed their checksum (then read from the GGUF)
    uint64_t store_read_fallbacks = 0;  // store records that could not be read (then read from the GGUF)
};

// Told what a streaming source did with each request and each prediction (routing traces, routing_trace.h).
struct ExpertEventSink {
    virtual ~ExpertEventSink() = default;
    // The experts a layer asked for, each a hit (bit 0: in RAM or already loading; bit 1 too: brought in by a
    // prefetch) or a miss (0).
    virtual void demand(uint32_t layer, std::span<const uint32_t> experts, std::span<const uint8_t> hit) = 0;
    // The experts predicted for a coming layer, each issued as a read or not (cached, or prefetch stopped).
    virtual void prefetch(uint32_t layer, std::span<const uint32_t> predicted, std::span<const uint8_t> issued) = 0;
    // A requested expert computed and unpinned (the order decides the LRU order).
    virtual void release(uint32_t layer, uint32_t expert) = 0;
};

// Where routed experts come from. The forward pass asks for every expert a layer needs at once, computes
// them in the order they become ready, and releases each when done:
//   request(l, {e...});  for each: [e, view] = next_ready(l); ...compute...; release(l, e);
class ExpertSource {
public:
    virtual ~ExpertSource() = default;
    // Starts fetching these experts of a layer (demand): all their reads go in flight at once.
    virtual void request(uint32_t layer, std::span<const uint32_t> experts) = 0;
    // One requested expert whose bytes are in RAM, in completion order; it stays pinned until release().
    // Throws ModelError when its read failed (the cause and file offset named).
    virtual std::pair<uint32_t, ExpertView> next_ready(uint32_t layer) = 0;
    virtual void release(uint32_t layer, uint32_t expert) = 0;
    // Speculative fetch for a coming layer; never ahead of demand reads, may be dropped.
    virtual void prefetch(uint32_t /*layer*/, std::span<const uint32_t> /*experts*/) {}
    virtual bool streams() const { return false; }
    // Drops every outstanding request and pin (after an error mid-layer).
    virtual void abandon() {}
    // A forward step of n_tokens tokens starts (the cache's insertion rule tells decode from prompt steps).
    virtual void begin_step(uint32_t /*n_tokens*/) {}
    virtual uint64_t bytes_in_ram() const = 0;
    virtual ExpertSourceStats stats() const = 0;
    // Records every disk read from now on into `sink` (nullptr stops); sources that do not read ignore it.
    virtual void trace_reads(std::vector<ReadRecord>* /*sink*/) {}
    // Reports each request's hits and misses and each prefetch to `sink` (nullptr stops); in-RAM sources,
    // which have no cache, ignore it.
    virtual void set_event_sink(ExpertEventSink* /*sink*/) {}

    // One expert, synchronously (the reference forward). Release it when done.
    ExpertView get(uint32_t layer, uint32_t expert) {
        request(layer, std::span<const uint32_t>(&expert, 1));
        return next_ready(layer).second;
    }
};

// Reads every expert tensor into RAM at load (when the budget allows it, or no budget is given).
class InRamExpertSource : public ExpertSource {
public:
    InRamExpertSource(const GgufModel& model, const std::vector<ExpertLayer>& layers);
    void request(uint32_t layer, std::span<const uint32_t> experts) override;
    std::pair<uint32_t, ExpertView> next_ready(uint32_t layer) override;
    void release(uint32_t, uint32_t) override {}
    void abandon() override { pending_.clear(); }
    uint64_t bytes_in_ram() const override { return bytes_; }
    ExpertSourceStats stats() const override { return stats_; }

private:
    ExpertView view(uint32_t layer, uint32_t expert) const;
    struct Slot {
        WeightMemory gate, up, down;
        size_t gate_bytes, up_bytes, down_bytes;
    };
    std::vector<Slot> layers_;
    std::deque<uint32_t> pending_;
    uint64_t bytes_ = 0;
    ExpertSourceStats stats_;
};

// Reads [offset, offset+n) of a model file fully (pread loop); throws ModelError on EIO/short file.
void read_file_range(const std::string& path, uint64_t offset, uint64_t n, uint8_t* dst);

}  // namespace moe

// Streams routed experts from disk into a fixed RAM cache (../shared/design.md section 3).
//
// A slot holds one expert's gate, up and down matrices, each read as its 4 KiB-aligned window with
// O_DIRECT through io_uring; slots are allocated once (the budget never grows). Demand reads of a layer go
// in flight together and ahead of prefetch; prefetched slots are protected until their layer runs; pinned
// slots (being computed, or from a routing profile) are never evicted. Lookups are O(1): a hash map from
// (layer, expert) to slot and an intrusive LRU list, with a frequency-aware choice among the oldest few.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/weights/weights.h"
#include "engine/runtime/block_reader.h"
#include "engine/runtime/cache_policy.h"
#include "engine/runtime/disk_health.h"
#include "engine/runtime/expert_store.h"
#include "engine/util/weight_memory.h"

namespace moe {

struct StreamingOptions {
    uint64_t cache_bytes = 0;      // RAM for expert slots
    uint64_t read_size = 1 << 20;  // largest single read (multiple of 4096)
    EvictionPolicy policy = kDefaultEvictionPolicy;
    BlockReaderOptions io;                              // queue depth, io_uring, O_DIRECT, fault injection
    std::vector<std::pair<uint32_t, uint32_t>> pinned;  // (layer, expert) kept resident, hottest first
    // Expert-contiguous store (moestream repack), already checked against the GGUF: one read per expert.
    std::shared_ptr<const ExpertStore> store;
    // One line per event worth a log entry (a store record failing its checksum).
    std::function<void(const std::string&)> warn;
    // Told of failed and completed loads (the server's /health); may be null.
    std::shared_ptr<DiskHealth> health;
};

class StreamingExpertSource : public ExpertSource {
public:
    using LayerTensors = ExpertLayer;  // null: dense layer

    // Throws ModelError when the budget cannot hold one layer's selected experts (the minimum is stated).
    StreamingExpertSource(const std::vector<std::string>& files, const std::vector<LayerTensors>& layers, uint32_t n_expert, uint32_t n_expert_used,
                          StreamingOptions opt);
    ~StreamingExpertSource() override;

    void request(uint32_t layer, std::span<const uint32_t> experts) override;
    std::pair<uint32_t, ExpertView> next_ready(uint32_t layer) override;
    void release(uint32_t layer, uint32_t expert) override;
    void prefetch(uint32_t layer, std::span<const uint32_t> experts) override;
    bool streams() const override { return true; }
    void abandon() override;
    void begin_step(uint32_t n_tokens) override { insertion_.begin_step(n_tokens); }
    uint64_t bytes_in_ram() const override { return arena_bytes_; }
    ExpertSourceStats stats() const override { return stats_; }
    void trace_reads(std::vector<ReadRecord>* sink) override { reader_->trace(sink); }
    void set_event_sink(ExpertEventSink* sink) override { sink_ = sink; }

    size_t slot_count() const { return slots_.size(); }
    uint64_t slot_bytes() const { return slot_bytes_; }
    const std::string& io_note() const { return reader_->mode_note(); }
    bool direct_io() const { return reader_->direct(); }
    bool uring() const { return reader_->uring(); }
    bool sqpoll() const { return reader_->sqpoll(); }
    bool registered_buffers() const { return registered_; }
    const ExpertStore* store() const { return opt_.store.get(); }
    // The files reads go to, in the order of ReadRecord::file (the GGUF's splits, then the store).
    const std::vector<std::string>& read_files() const { return read_files_; }
    // Bytes one slot needs for this model, so callers can size budgets.
    static uint64_t slot_bytes_for(const std::vector<LayerTensors>& layers);
    // Bytes one load of an expert reads from the GGUF: its three 4 KiB-aligned windows.
    static uint64_t gguf_load_bytes(const LayerTensors& layer, uint32_t expert);
    // What a load of (layer, expert) reads here (the store's record, else the GGUF's windows); 0 for layers
    // without experts.
    uint64_t load_bytes(uint32_t layer, uint32_t expert) const;
    // Bytes of loads in flight past which prefetch stops (half of queue depth x read size).
    uint64_t prefetch_cap() const;

private:
    struct Window {
        uint32_t file;
        uint64_t start;
        uint64_t length;
        uint64_t skew;
        uint64_t used_end;
    };
    struct Slot {
        uint8_t* mem = nullptr;
        int64_t key = -1;
        uint32_t layer = 0, expert = 0;
        uint32_t pending = 0;  // chunks in flight
        int pins = 0;          // demanded and not yet released
        bool valid = false, loading = false, demanded = false, prefetched = false, protect = false, permanent = false;
        bool from_store = false;  // bytes laid out as a store record, not as three GGUF windows
        bool to_tail = false;     // a miss the insertion rule puts at the LRU end on release
        uint64_t load_bytes = 0;  // bytes this load reads
        int attempts = 0;         // retries of this expert's load after a read error (one before failing)
        std::string error;
        int prev = -1, next = -1;  // LRU list (only unpinned, loaded slots)
        bool in_list = false;
    };
    // need: bytes of this chunk the expert really uses (the aligned window may run past the end of file).
    struct Chunk {
        uint32_t slot;
        uint32_t file;
        uint64_t offset;
        uint32_t len;
        uint32_t need;
        uint8_t* dst;
    };

    int64_t key_of(uint32_t layer, uint32_t expert) const { return static_cast<int64_t>(layer) * n_expert_ + expert; }
    Window window(uint32_t layer, uint32_t expert, int kind) const;
    ExpertView view(const Slot& s) const;
    int victim() const;   // the slot allocate_slot would evict, -1 when none can go
    int allocate_slot();  // -1 when every slot is pinned, loading or protected
    // from_gguf: skip the store (its copy could not be read).
    void start_load(int slot, uint32_t layer, uint32_t expert, bool urgent, bool from_gguf = false);
    void queue_reads(int slot, uint32_t file, uint64_t start, uint64_t length, uint64_t used_end, uint8_t* dst, bool urgent);
    // True when a store record's bytes match its checksum (checked once per record); a record that does not
    // is marked bad, logged, and read again from the GGUF.
    bool store_record_ok(int slot);
    // Takes a free slot for an expert: demanded (pinned, urgent reads) or prefetched (protected, queued).
    void claim(int slot, uint32_t layer, uint32_t expert, bool demand);
    void submit_chunk(uint32_t chunk_index, bool urgent);
    void complete(const ReadCompletion& c);
    void lru_remove(int s);
    void lru_push_front(int s);
    void lru_push_back(int s);
    void start_deferred();

    std::vector<LayerTensors> layers_;
    uint32_t n_expert_ = 0;
    StreamingOptions opt_;
    std::unique_ptr<BlockReader> reader_;
    uint64_t region_off_[3] = {0, 0, 0};
    uint64_t slot_bytes_ = 0, arena_bytes_ = 0;
    WeightMemory arena_memory_;
    uint8_t* arena_ = nullptr;
    std::vector<Slot> slots_;
    std::vector<int> free_;
    std::unordered_map<int64_t, int> map_;
    int lru_head_ = -1, lru_tail_ = -1;
    std::vector<uint32_t> freq_;  // uses per (layer, expert), halved every `decay_every_` requests
    InsertionRule insertion_;
    size_t usable_slots_ = 0;  // slots not held by pinned (profile) experts
    uint64_t requests_ = 0;
    std::vector<Chunk> chunks_;  // chunk table, indexed by the read's tag
    std::vector<uint32_t> free_chunks_;
    std::deque<int> ready_;                               // demanded slots whose bytes are in RAM, completion order
    std::deque<std::pair<uint32_t, uint32_t>> deferred_;  // demanded but waiting for a free slot
    std::vector<bool> permanent_key_;
    enum class RecordState : uint8_t { Unchecked, Good, Bad };
    std::vector<RecordState> record_state_;  // per (layer, expert), store records only
    std::vector<std::string> read_files_;
    uint64_t loading_bytes_ = 0;  // bytes of loads in flight or queued (prefetch stops at a limit)
    bool registered_ = false;
    ExpertSourceStats stats_;
    ExpertEventSink* sink_ = nullptr;
    std::vector<uint8_t> flags_;  // per expert of the call being reported to sink_
};

}  // namespace moe

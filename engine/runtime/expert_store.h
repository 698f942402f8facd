// The expert-contiguous store (`moestream repack`): a file beside the GGUF holding one record per
// (layer, expert) with that expert's gate, up and down bytes together, each record 4 KiB-aligned for O_DIRECT
// and carrying its own XXH3 checksum. In the GGUF an expert's three matrices sit in three tensors hundreds of
// megabytes apart, so a miss costs three separate reads, each padded to 4 KiB at both ends; in the store it
// is one read of one contiguous range.
//
// The header ties the store to the GGUF it was made from (sizes, a hash of every split's header, a sample of
// each expert tensor's bytes) and to the record layout, which is a pure function of the expert tensors, so a
// store made for another model, another quantization or another version of the file is refused with the
// reason, never used. The engine verifies each record's checksum the first time it reads it and reads any
// record that fails from the GGUF instead (docs/streaming.md).
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/weights/weights.h"

namespace moe {

// A store that cannot be used for this GGUF: the message names the file and the reason.
struct ExpertStoreError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Where one MoE layer's records sit in the store (all zero for a dense layer).
struct ExpertRecordLayout {
    uint64_t first = 0;            // offset of expert 0's record
    uint64_t stride = 0;           // bytes per record, a multiple of 4096
    uint64_t part_offset[3] = {};  // gate, up, down within a record (64-byte aligned)
    uint64_t part_bytes[3] = {};
    uint64_t used() const { return part_offset[2] + part_bytes[2]; }
    bool present() const { return stride != 0; }
    bool operator==(const ExpertRecordLayout&) const = default;
};

// What identifies the GGUF a store was made from.
struct GgufIdentity {
    uint64_t total_size = 0;   // bytes of every split together
    uint64_t header_hash = 0;  // XXH3 of every split's bytes before its tensor data (metadata + tensor table)
    uint64_t sample_hash = 0;  // XXH3 of the first and last 4 KiB of every expert tensor
    bool operator==(const GgufIdentity&) const = default;
};
GgufIdentity gguf_identity(const GgufModel& file, const std::vector<ExpertLayer>& layers);

// The records' placement for these expert tensors, after a header of `header_bytes`.
std::vector<ExpertRecordLayout> expert_record_layout(const std::vector<ExpertLayer>& layers, uint32_t n_expert);

class ExpertStore {
public:
    // Opens `path` and checks it against the GGUF and its expert tensors; throws ExpertStoreError
    // (naming the file and what disagrees) when it is absent, truncated, damaged or made for another file.
    ExpertStore(const std::string& path, const GgufModel& file, const std::vector<ExpertLayer>& layers);

    // The store's conventional name: beside the GGUF (its first split), ".experts" appended.
    static std::string path_for(const std::string& gguf_path);

    const std::string& path() const { return path_; }
    uint32_t n_layer() const { return static_cast<uint32_t>(layout_.size()); }
    uint32_t n_expert() const { return n_expert_; }
    const ExpertRecordLayout& layer(uint32_t l) const { return layout_.at(l); }
    uint64_t record_offset(uint32_t l, uint32_t e) const { return layout_[l].first + static_cast<uint64_t>(e) * layout_[l].stride; }
    uint64_t checksum(uint32_t l, uint32_t e) const { return checksums_[static_cast<size_t>(l) * n_expert_ + e]; }
    uint64_t file_bytes() const { return file_bytes_; }
    uint64_t records() const;

    // XXH3-64 of a record's used bytes (gate..end of down, padding between parts included).
    static uint64_t record_hash(const uint8_t* record, const ExpertRecordLayout& l);

private:
    std::string path_;
    uint32_t n_expert_ = 0;
    uint64_t file_bytes_ = 0;
    std::vector<ExpertRecordLayout> layout_;
    std::vector<uint64_t> checksums_;
};

struct RepackReport {
    std::string path;
    bool up_to_date = false;  // a valid store for this GGUF was already there; nothing written
    uint64_t records = 0;
    uint64_t bytes = 0;  // the store's size
    double seconds = 0;
    bool direct = false;  // written with O_DIRECT (else through the page cache, dropped behind)
};

// Writes the store for `file` to `out` (a temporary beside it, renamed into place when complete, so an
// interrupted repack never leaves a half-written store under the real name). Skips the work when `out`
// already holds a valid store for this GGUF, unless `force`. Throws ExpertStoreError naming the file and the
// cause (no space: both figures; no experts; write error). `progress(done, total)` is called per batch.
RepackReport write_expert_store(const GgufModel& file, const std::vector<ExpertLayer>& layers, uint32_t n_expert, const std::string& out, bool force,
                                const std::function<void(uint64_t, uint64_t)>& progress = {});

struct VerifyReport {
    uint64_t records = 0;
    uint64_t bytes = 0;
    double seconds = 0;
    std::vector<std::pair<uint32_t, uint32_t>> bad;  // (layer, expert) whose checksum fails
};
// Reads every record of an opened store and checks its checksum.
VerifyReport verify_expert_store(const ExpertStore& store);

}  // namespace moe

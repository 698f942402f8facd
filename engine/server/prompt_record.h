// One prompt-cache record on disk (serve --prompt-cache; prompt_cache.h keeps the directory of them). Bytes
// from a directory other processes can write, so the reader is strict: every size comes from the layout the
// engine expects, never from the file alone, and nothing is used before its checksum says so.
//
//   header, 96 bytes, little-endian: magic "MSPROMPT", u32 version (1), u32 header size (96), u64 identity (the
//     GGUF header's hash mixed with the cache types and whether the quantized-cache rotation is on), u64 layout
//     hash (row bytes per layer, recurrent state bytes), u32 tokens n, u32 snapshots k, u64 payload bytes,
//     u64 XXH3 of the index (tokens then snapshot positions), u64 XXH3 of the whole payload, u64 creation time
//     (ms since the epoch), 16 zero bytes, u64 XXH3 of the header's first 88 bytes;
//   payload: i32 tokens[n], i32 snapshot positions[k] (ascending, each in 1..n), then per layer the K rows,
//     the V rows and the indexer-key rows of positions [0, n) as the cache stores them, then each snapshot's
//     recurrent state (f32, all recurrent layers).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace moe {

// What the engine's caches look like: a record of anything else is foreign.
struct RecordLayout {
    uint64_t identity = 0, layout_hash = 0;
    std::vector<uint64_t> k_row, v_row, ix_row;  // bytes per position and layer (0: the layer keeps none)
    uint64_t recurrent_bytes = 0;                // one snapshot of the recurrent state
    // Sets layout_hash from the row sizes.
    void seal();
    uint64_t row_bytes() const;  // all layers' rows of one position
    uint64_t record_bytes(uint64_t n, uint64_t snapshots) const;
};

constexpr size_t kRecordHeaderBytes = 96;

struct RecordHeader {
    uint64_t identity = 0, layout = 0;
    uint32_t n_tokens = 0, n_snapshots = 0;
    uint64_t payload_bytes = 0, index_hash = 0, payload_hash = 0, created_ms = 0;
    void encode(uint8_t* out) const;  // kRecordHeaderBytes
    // "" when `in` is a header of this version (its own checksum included), else why not.
    std::string decode(const uint8_t* in);
};

uint64_t record_index_hash(std::span<const int32_t> tokens, std::span<const int32_t> snapshot_pos);

// A record's index: what a directory scan keeps in memory.
struct RecordIndex {
    std::vector<int32_t> tokens, snapshot_pos;
    uint64_t bytes = 0, payload_hash = 0;
};

struct RecordSnapshot {
    int32_t pos = 0;
    std::vector<float> state;
};

// Reads the header and the index from fd's current position (the start of the file, `file_size` bytes long)
// and leaves fd just past the index. Returns "" or why the record cannot be used; `foreign` is set when it is
// a sound record of another identity or layout.
std::string read_record_index(int fd, uint64_t file_size, const RecordLayout& layout, RecordIndex& out, bool& foreign);

// The rows part, read after read_record_index: the rows of positions [0, keep) go where `dst(part, layer)`
// points (part 0: K, 1: V, 2: indexer keys; room for keep rows), the snapshots at or below `keep` into
// `snapshots`. Checks the payload checksum over everything; "" or why not (dst is then partly written).
// first_row (optional): a layer's rows below it are skipped, dst taking rows [first_row(layer), keep) only
// (a sliding-window ring restores its window).
std::string read_record_rows(int fd, const RecordLayout& layout, const RecordIndex& index, uint64_t keep,
                             const std::function<uint8_t*(int part, size_t layer)>& dst, std::vector<RecordSnapshot>& snapshots,
                             const std::function<uint64_t(size_t layer)>& first_row = {});

}  // namespace moe

#include "engine/server/prompt_record.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace moe {

namespace {

constexpr char kMagic[8] = {'M', 'S', 'P', 'R', 'O', 'M', 'P', 'T'};
constexpr uint32_t kVersion = 1;

bool read_exact(int fd, void* p, size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    while (n) {
        const ssize_t r = ::read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        b += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

}  // namespace

void RecordLayout::seal() {
    std::vector<uint64_t> shape{k_row.size(), recurrent_bytes};
    for (size_t l = 0; l < k_row.size(); ++l) shape.insert(shape.end(), {k_row[l], v_row[l], ix_row[l]});
    layout_hash = XXH3_64bits(shape.data(), shape.size() * sizeof(uint64_t));
}

uint64_t RecordLayout::row_bytes() const {
    uint64_t row = 0;
    for (size_t l = 0; l < k_row.size(); ++l) row += k_row[l] + v_row[l] + ix_row[l];
    return row;
}

uint64_t RecordLayout::record_bytes(uint64_t n, uint64_t snapshots) const {
    return kRecordHeaderBytes + n * (4 + row_bytes()) + snapshots * (4 + recurrent_bytes);
}

void RecordHeader::encode(uint8_t* h) const {
    std::memset(h, 0, kRecordHeaderBytes);
    std::memcpy(h, kMagic, 8);
    const uint32_t version = kVersion, size = kRecordHeaderBytes;
    std::memcpy(h + 8, &version, 4);
    std::memcpy(h + 12, &size, 4);
    std::memcpy(h + 16, &identity, 8);
    std::memcpy(h + 24, &layout, 8);
    std::memcpy(h + 32, &n_tokens, 4);
    std::memcpy(h + 36, &n_snapshots, 4);
    std::memcpy(h + 40, &payload_bytes, 8);
    std::memcpy(h + 48, &index_hash, 8);
    std::memcpy(h + 56, &payload_hash, 8);
    std::memcpy(h + 64, &created_ms, 8);
    const uint64_t self = XXH3_64bits(h, 88);
    std::memcpy(h + 88, &self, 8);
}

std::string RecordHeader::decode(const uint8_t* h) {
    if (std::memcmp(h, kMagic, 8) != 0) return "not a prompt-cache record (magic)";
    uint32_t version = 0, size = 0;
    std::memcpy(&version, h + 8, 4);
    std::memcpy(&size, h + 12, 4);
    if (version != kVersion || size != kRecordHeaderBytes)
        return "record version " + std::to_string(version) + " (this build reads " + std::to_string(kVersion) + ")";
    uint64_t self = 0;
    std::memcpy(&self, h + 88, 8);
    if (self != XXH3_64bits(h, 88)) return "header checksum mismatch";
    std::memcpy(&identity, h + 16, 8);
    std::memcpy(&layout, h + 24, 8);
    std::memcpy(&n_tokens, h + 32, 4);
    std::memcpy(&n_snapshots, h + 36, 4);
    std::memcpy(&payload_bytes, h + 40, 8);
    std::memcpy(&index_hash, h + 48, 8);
    std::memcpy(&payload_hash, h + 56, 8);
    std::memcpy(&created_ms, h + 64, 8);
    return "";
}

uint64_t record_index_hash(std::span<const int32_t> tokens, std::span<const int32_t> snapshot_pos) {
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), XXH3_freeState);
    XXH3_64bits_reset(st.get());
    XXH3_64bits_update(st.get(), tokens.data(), tokens.size_bytes());
    XXH3_64bits_update(st.get(), snapshot_pos.data(), snapshot_pos.size_bytes());
    return XXH3_64bits_digest(st.get());
}

std::string read_record_index(int fd, uint64_t file_size, const RecordLayout& layout, RecordIndex& out, bool& foreign) {
    foreign = false;
    uint8_t raw[kRecordHeaderBytes];
    RecordHeader h;
    if (file_size < kRecordHeaderBytes || !read_exact(fd, raw, sizeof raw)) return "shorter than its header";
    if (std::string why = h.decode(raw); !why.empty()) {
        foreign = why.rfind("record version", 0) == 0;  // another build's: not ours to judge or delete
        return why;
    }
    if (h.identity != layout.identity || h.layout != layout.layout_hash) {
        foreign = true;
        return "another model or cache layout";
    }
    // Sizes from our layout: the file's counts must give exactly its length.
    if (h.payload_bytes + kRecordHeaderBytes != file_size || layout.record_bytes(h.n_tokens, h.n_snapshots) != file_size)
        return "size " + std::to_string(file_size) + " does not match its header";
    const bool recurrent = layout.recurrent_bytes > 0;
    if (h.n_tokens == 0 || (recurrent ? h.n_snapshots == 0 : h.n_snapshots != 0)) return "token or snapshot count does not fit the model";
    out.tokens.resize(h.n_tokens);
    out.snapshot_pos.resize(h.n_snapshots);
    if (!read_exact(fd, out.tokens.data(), out.tokens.size() * 4) || !read_exact(fd, out.snapshot_pos.data(), out.snapshot_pos.size() * 4))
        return "shorter than its header says";
    if (record_index_hash(out.tokens, out.snapshot_pos) != h.index_hash) return "token list checksum mismatch";
    for (size_t i = 0; i < out.snapshot_pos.size(); ++i)
        if (out.snapshot_pos[i] < 1 || out.snapshot_pos[i] > static_cast<int32_t>(h.n_tokens) ||
            (i && out.snapshot_pos[i] <= out.snapshot_pos[i - 1]))
            return "snapshot positions out of order";
    if (recurrent && out.snapshot_pos.back() != static_cast<int32_t>(h.n_tokens)) return "no snapshot at the prefix's end";
    out.bytes = file_size;
    out.payload_hash = h.payload_hash;
    return "";
}

std::string read_record_rows(int fd, const RecordLayout& layout, const RecordIndex& index, uint64_t keep,
                             const std::function<uint8_t*(int part, size_t layer)>& dst, std::vector<RecordSnapshot>& snapshots,
                             const std::function<uint64_t(size_t layer)>& first_row) {
    const uint64_t n = index.tokens.size();
    if (keep > n) return "asked for more positions than it holds";
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), XXH3_freeState);
    XXH3_64bits_reset(hash.get());
    XXH3_64bits_update(hash.get(), index.tokens.data(), index.tokens.size() * 4);  // as on disk (little-endian)
    XXH3_64bits_update(hash.get(), index.snapshot_pos.data(), index.snapshot_pos.size() * 4);
    std::vector<uint8_t> buf(4u << 20);
    // The kernel reads ahead a window at a time (several reads in flight, not one 4 MiB read after another),
    // and what has been consumed leaves the page cache.
    constexpr off_t kWindow = 64 << 20;
    off_t at = ::lseek(fd, 0, SEEK_CUR), advised = at;
    // Reads `len` bytes, hashing them, bytes [skip, want) into `out`.
    auto take = [&](uint64_t len, uint8_t* out, uint64_t want, uint64_t skip = 0) {
        for (uint64_t done = 0; done < len;) {
            const size_t piece = static_cast<size_t>(std::min<uint64_t>(buf.size(), len - done));
            if (at >= 0 && advised < at + kWindow) {
                ::posix_fadvise(fd, advised, kWindow, POSIX_FADV_WILLNEED);
                ::posix_fadvise(fd, 0, at, POSIX_FADV_DONTNEED);
                advised += kWindow;
            }
            if (!read_exact(fd, buf.data(), piece)) return false;
            at += static_cast<off_t>(piece);
            XXH3_64bits_update(hash.get(), buf.data(), piece);
            const uint64_t lo = std::max(done, skip), hi = std::min<uint64_t>(done + piece, want);
            if (lo < hi) std::memcpy(out + (lo - skip), buf.data() + (lo - done), static_cast<size_t>(hi - lo));
            done += piece;
        }
        return true;
    };
    bool ok = true;
    const std::vector<uint64_t>* rows[3] = {&layout.k_row, &layout.v_row, &layout.ix_row};
    for (size_t l = 0; ok && l < layout.k_row.size(); ++l)
        for (int part = 0; ok && part < 3; ++part) {
            const uint64_t row = (*rows[part])[l];
            const uint64_t first = first_row ? std::min(first_row(l), keep) : 0;
            if (row) ok = take(n * row, dst(part, l), keep * row, first * row);
        }
    snapshots.clear();
    std::vector<float> state(layout.recurrent_bytes / sizeof(float));
    for (size_t i = 0; ok && i < index.snapshot_pos.size(); ++i) {
        ok = take(layout.recurrent_bytes, reinterpret_cast<uint8_t*>(state.data()), layout.recurrent_bytes);
        if (ok && static_cast<uint64_t>(index.snapshot_pos[i]) <= keep) snapshots.push_back({index.snapshot_pos[i], state});
    }
    if (!ok) return "shorter than its header says";
    if (XXH3_64bits_digest(hash.get()) != index.payload_hash) return "payload checksum mismatch";
    return "";
}

}  // namespace moe

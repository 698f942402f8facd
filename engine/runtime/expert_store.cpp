#include "engine/runtime/expert_store.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

namespace moe {

static_assert(std::endian::native == std::endian::little, "the store is written in the host's (little-endian) order");

namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'X', 'S', 'T', 'O', 'R'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kPartAlign = 64;
constexpr uint64_t kFixedHeader = 64;  // magic .. file_bytes, padded
constexpr uint64_t kLayerEntry = 8 * sizeof(uint64_t);
constexpr uint64_t kBatchBytes = 32ull << 20;  // per part buffer while repacking or verifying
constexpr uint64_t kSample = 4096;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string gib(uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
    return buf;
}

const ExpertTensor* part(const ExpertLayer& l, int kind) { return kind == 0 ? l.gate : kind == 1 ? l.up : l.down; }

uint32_t experts_of(const std::vector<ExpertLayer>& layers) {
    for (const auto& l : layers)
        if (l.present()) return static_cast<uint32_t>(l.gate->n_expert);
    return 0;
}

uint64_t header_bytes_for(uint64_t n_layer, uint64_t n_expert) {
    return align_up(kFixedHeader + n_layer * kLayerEntry + n_layer * n_expert * 8 + 8, kAlign);
}

struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
};

struct AlignedBuffer {
    uint8_t* p = nullptr;
    uint64_t size = 0;
    explicit AlignedBuffer(uint64_t n) : size(align_up(std::max<uint64_t>(n, 1), kAlign)) {
        p = static_cast<uint8_t*>(std::aligned_alloc(kAlign, size));
        if (!p) throw ExpertStoreError("cannot allocate " + std::to_string(size) + " bytes for the expert store");
    }
    ~AlignedBuffer() { std::free(p); }
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
};

void pread_all(int fd, uint8_t* dst, uint64_t n, uint64_t off, const std::string& path) {
    uint64_t got = 0;
    while (got < n) {
        const ssize_t r = ::pread(fd, dst + got, n - got, static_cast<off_t>(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) throw ExpertStoreError(path + ": read at offset " + std::to_string(off + got) + " failed: " + std::strerror(errno));
        if (r == 0) throw ExpertStoreError(path + ": ends at offset " + std::to_string(off + got) + " (truncated?)");
        got += static_cast<uint64_t>(r);
    }
}

void pwrite_all(int fd, const uint8_t* src, uint64_t n, uint64_t off, const std::string& path) {
    uint64_t put = 0;
    while (put < n) {
        const ssize_t r = ::pwrite(fd, src + put, n - put, static_cast<off_t>(off + put));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            throw ExpertStoreError(path + ": write at offset " + std::to_string(off + put) + " failed: " + std::strerror(r < 0 ? errno : EIO));
        put += static_cast<uint64_t>(r);
    }
}

// O_DIRECT where the file system takes it (the store is bigger than RAM for the models it is for; going
// through the page cache would evict everything else), plain otherwise.
int open_direct(const std::string& path, int flags, bool* direct, mode_t mode = 0) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_DIRECT, mode);
    *direct = fd >= 0;
    if (fd < 0 && errno == EINVAL) fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    return fd;
}

// Little-endian field access within the header buffer, bounds-checked by construction of the offsets.
template <class T>
T get(const uint8_t* p, uint64_t off) {
    T v;
    std::memcpy(&v, p + off, sizeof v);
    return v;
}
template <class T>
void put(uint8_t* p, uint64_t off, T v) {
    std::memcpy(p + off, &v, sizeof v);
}

std::vector<uint8_t> encode_header(const GgufIdentity& id, const std::vector<ExpertRecordLayout>& layout, uint32_t n_expert, uint64_t file_bytes,
                                   const std::vector<uint64_t>& checksums) {
    const uint64_t n_layer = layout.size();
    std::vector<uint8_t> h(header_bytes_for(n_layer, n_expert), 0);
    std::memcpy(h.data(), kMagic, 8);
    put<uint32_t>(h.data(), 8, kVersion);
    put<uint32_t>(h.data(), 12, static_cast<uint32_t>(h.size()));
    put<uint64_t>(h.data(), 16, id.total_size);
    put<uint64_t>(h.data(), 24, id.header_hash);
    put<uint64_t>(h.data(), 32, id.sample_hash);
    put<uint32_t>(h.data(), 40, static_cast<uint32_t>(n_layer));
    put<uint32_t>(h.data(), 44, n_expert);
    put<uint64_t>(h.data(), 48, file_bytes);
    uint64_t off = kFixedHeader;
    for (const auto& l : layout) {
        const uint64_t f[8] = {l.first,          l.stride,        l.part_offset[0], l.part_offset[1],
                               l.part_offset[2], l.part_bytes[0], l.part_bytes[1],  l.part_bytes[2]};
        for (uint64_t v : f) put<uint64_t>(h.data(), (off += 8) - 8, v);
    }
    for (uint64_t c : checksums) put<uint64_t>(h.data(), (off += 8) - 8, c);
    put<uint64_t>(h.data(), off, XXH3_64bits(h.data(), off));
    return h;
}

}  // namespace

std::string ExpertStore::path_for(const std::string& gguf_path) { return gguf_path + ".experts"; }

uint64_t ExpertStore::record_hash(const uint8_t* record, const ExpertRecordLayout& l) { return XXH3_64bits(record, l.used()); }

uint64_t ExpertStore::records() const {
    uint64_t n = 0;
    for (const auto& l : layout_) n += l.present() ? n_expert_ : 0;
    return n;
}

GgufIdentity gguf_identity(const GgufModel& file, const std::vector<ExpertLayer>& layers) {
    GgufIdentity id;
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> header(XXH3_createState(), XXH3_freeState);
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> sample(XXH3_createState(), XXH3_freeState);
    XXH3_64bits_reset(header.get());
    XXH3_64bits_reset(sample.get());
    std::vector<uint8_t> buf;
    for (const auto& f : file.files) {
        std::error_code ec;
        const uint64_t size = std::filesystem::file_size(f.path, ec);
        if (ec) throw ExpertStoreError(f.path + ": " + ec.message());
        id.total_size += size;
        XXH3_64bits_update(header.get(), &size, sizeof size);
        buf.resize(std::min<uint64_t>(f.data_offset, size));
        read_file_range(f.path, 0, buf.size(), buf.data());
        XXH3_64bits_update(header.get(), buf.data(), buf.size());
    }
    for (const auto& l : layers) {
        if (!l.present()) continue;
        for (int kind = 0; kind < 3; ++kind) {
            const ExpertTensor* t = part(l, kind);
            const uint64_t span = static_cast<uint64_t>(t->n_expert - 1) * t->expert_stride + t->expert_bytes;
            const std::string& path = file.files.at(t->file_index).path;
            const uint64_t n = std::min(kSample, span);
            buf.resize(n);
            read_file_range(path, t->file_offset, n, buf.data());
            XXH3_64bits_update(sample.get(), buf.data(), n);
            read_file_range(path, t->file_offset + span - n, n, buf.data());
            XXH3_64bits_update(sample.get(), buf.data(), n);
        }
    }
    id.header_hash = XXH3_64bits_digest(header.get());
    id.sample_hash = XXH3_64bits_digest(sample.get());
    return id;
}

std::vector<ExpertRecordLayout> expert_record_layout(const std::vector<ExpertLayer>& layers, uint32_t n_expert) {
    std::vector<ExpertRecordLayout> out(layers.size());
    uint64_t next = header_bytes_for(layers.size(), n_expert);
    for (size_t i = 0; i < layers.size(); ++i) {
        if (!layers[i].present()) continue;
        ExpertRecordLayout& r = out[i];
        uint64_t off = 0;
        for (int kind = 0; kind < 3; ++kind) {
            r.part_offset[kind] = off;
            r.part_bytes[kind] = part(layers[i], kind)->expert_bytes;
            off = align_up(off + r.part_bytes[kind], kPartAlign);
        }
        r.stride = align_up(r.used(), kAlign);
        r.first = next;
        next += r.stride * n_expert;
    }
    return out;
}

ExpertStore::ExpertStore(const std::string& path, const GgufModel& file, const std::vector<ExpertLayer>& layers) : path_(path) {
    const std::string where = path + ": ";
    n_expert_ = experts_of(layers);
    if (n_expert_ == 0) throw ExpertStoreError(where + "the model has no routed experts");
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) throw ExpertStoreError(where + std::strerror(errno));
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) throw ExpertStoreError(where + ec.message());
    if (size < kAlign) throw ExpertStoreError(where + "truncated (" + std::to_string(size) + " bytes, shorter than a store header)");
    std::vector<uint8_t> h(kAlign);
    pread_all(fd.fd, h.data(), h.size(), 0, path);
    if (std::memcmp(h.data(), kMagic, 8) != 0) throw ExpertStoreError(where + "not a moestream expert store (bad magic)");
    if (get<uint32_t>(h.data(), 8) != kVersion)
        throw ExpertStoreError(where + "store version " + std::to_string(get<uint32_t>(h.data(), 8)) + "; this moestream reads version " +
                               std::to_string(kVersion) + " (run moestream repack --force)");
    const uint32_t n_layer = get<uint32_t>(h.data(), 40), n_expert = get<uint32_t>(h.data(), 44);
    if (n_layer != layers.size() || n_expert != n_expert_)
        throw ExpertStoreError(where + "made for a model of " + std::to_string(n_layer) + " layers x " + std::to_string(n_expert) +
                               " experts; this GGUF has " + std::to_string(layers.size()) + " x " + std::to_string(n_expert_));
    const uint64_t header_bytes = get<uint32_t>(h.data(), 12);
    if (header_bytes != header_bytes_for(n_layer, n_expert) || header_bytes > size)
        throw ExpertStoreError(where + "header size " + std::to_string(header_bytes) + " is inconsistent (damaged or truncated store)");
    h.resize(header_bytes);
    pread_all(fd.fd, h.data(), header_bytes, 0, path);
    const uint64_t hash_at = kFixedHeader + n_layer * kLayerEntry + static_cast<uint64_t>(n_layer) * n_expert * 8;
    if (get<uint64_t>(h.data(), hash_at) != XXH3_64bits(h.data(), hash_at))
        throw ExpertStoreError(where + "header checksum mismatch (damaged store; run moestream repack --force)");
    file_bytes_ = get<uint64_t>(h.data(), 48);
    if (file_bytes_ != size)
        throw ExpertStoreError(where + "is " + std::to_string(size) + " bytes, its header says " + std::to_string(file_bytes_) +
                               " (truncated or partly copied; run moestream repack --force)");
    const GgufIdentity want = gguf_identity(file, layers);
    const GgufIdentity have{get<uint64_t>(h.data(), 16), get<uint64_t>(h.data(), 24), get<uint64_t>(h.data(), 32)};
    if (!(have == want))
        throw ExpertStoreError(where + std::string("made from a different GGUF (") +
                               (have.total_size != want.total_size
                                    ? "size " + std::to_string(have.total_size) + " vs " + std::to_string(want.total_size)
                                : have.header_hash != want.header_hash ? "metadata or tensor table differ"
                                                                       : "expert tensor bytes differ") +
                               "; run moestream repack --force)");
    layout_ = expert_record_layout(layers, n_expert_);
    uint64_t off = kFixedHeader;
    for (uint32_t l = 0; l < n_layer; ++l) {
        ExpertRecordLayout r;
        uint64_t f[8];
        for (auto& v : f) v = get<uint64_t>(h.data(), (off += 8) - 8);
        r.first = f[0];
        r.stride = f[1];
        std::copy(f + 2, f + 5, r.part_offset);
        std::copy(f + 5, f + 8, r.part_bytes);
        if (!(r == layout_[l]))
            throw ExpertStoreError(where + "record layout of layer " + std::to_string(l) + " differs from this GGUF's expert tensors");
    }
    checksums_.resize(static_cast<size_t>(n_layer) * n_expert);
    for (auto& c : checksums_) c = get<uint64_t>(h.data(), (off += 8) - 8);
}

RepackReport write_expert_store(const GgufModel& file, const std::vector<ExpertLayer>& layers, uint32_t n_expert, const std::string& out, bool force,
                                const std::function<void(uint64_t, uint64_t)>& progress) {
    const auto t0 = std::chrono::steady_clock::now();
    RepackReport rep;
    rep.path = out;
    if (experts_of(layers) == 0) throw ExpertStoreError(file.meta().path + ": the model has no routed experts to repack");
    if (!force && std::filesystem::exists(out)) {
        try {
            ExpertStore existing(out, file, layers);
            rep.up_to_date = true;
            rep.records = existing.records();
            rep.bytes = existing.file_bytes();
            return rep;
        } catch (const ExpertStoreError&) {
            // stale or damaged: written anew below
        }
    }
    const GgufIdentity id = gguf_identity(file, layers);
    const std::vector<ExpertRecordLayout> layout = expert_record_layout(layers, n_expert);
    uint64_t total = header_bytes_for(layers.size(), n_expert);
    for (const auto& l : layout) total += l.stride * (l.present() ? n_expert : 0);

    const std::filesystem::path dir = std::filesystem::absolute(out).parent_path();
    struct statvfs vfs {};
    if (::statvfs(dir.c_str(), &vfs) == 0) {
        const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
        if (free_bytes < total)
            throw ExpertStoreError(dir.string() + ": the store needs " + gib(total) + ", the file system has " + gib(free_bytes) + " free");
    }

    const std::string tmp = out + ".partial";
    bool direct = false;
    Fd fd(open_direct(tmp, O_WRONLY | O_CREAT | O_TRUNC, &direct, 0644));
    if (fd.fd < 0) throw ExpertStoreError(tmp + ": cannot create: " + std::strerror(errno));
    std::vector<std::unique_ptr<Fd>> src;
    for (const auto& f : file.files) {
        src.push_back(std::make_unique<Fd>(::open(f.path.c_str(), O_RDONLY | O_CLOEXEC)));
        if (src.back()->fd < 0) throw ExpertStoreError(f.path + ": " + std::strerror(errno));
    }
    try {
        std::vector<uint64_t> checksums(layers.size() * static_cast<size_t>(n_expert), 0);
        uint64_t done = header_bytes_for(layers.size(), n_expert);
        for (size_t li = 0; li < layers.size(); ++li) {
            const ExpertRecordLayout& r = layout[li];
            if (!r.present()) continue;
            uint64_t widest = r.stride;
            for (int kind = 0; kind < 3; ++kind) widest = std::max<uint64_t>(widest, part(layers[li], kind)->expert_stride);
            const uint32_t batch = static_cast<uint32_t>(std::clamp<uint64_t>(kBatchBytes / widest, 1, n_expert));
            AlignedBuffer records(static_cast<uint64_t>(batch) * r.stride);
            std::vector<uint8_t> parts(static_cast<size_t>(batch) * widest);
            for (uint32_t e0 = 0; e0 < n_expert; e0 += batch) {
                const uint32_t n = std::min(batch, n_expert - e0);
                std::memset(records.p, 0, static_cast<size_t>(n) * r.stride);
                for (int kind = 0; kind < 3; ++kind) {
                    // Experts e0..e0+n-1 of this tensor are one contiguous range: one sequential read.
                    const ExpertTensor* t = part(layers[li], kind);
                    const uint64_t from = t->file_offset + static_cast<uint64_t>(e0) * t->expert_stride;
                    const uint64_t len = static_cast<uint64_t>(n - 1) * t->expert_stride + t->expert_bytes;
                    const int sfd = src.at(t->file_index)->fd;
                    pread_all(sfd, parts.data(), len, from, file.files[t->file_index].path);
                    ::posix_fadvise(sfd, static_cast<off_t>(from), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
                    for (uint32_t i = 0; i < n; ++i)
                        std::memcpy(records.p + static_cast<uint64_t>(i) * r.stride + r.part_offset[kind],
                                    parts.data() + static_cast<uint64_t>(i) * t->expert_stride, t->expert_bytes);
                }
                for (uint32_t i = 0; i < n; ++i)
                    checksums[li * n_expert + e0 + i] = ExpertStore::record_hash(records.p + static_cast<uint64_t>(i) * r.stride, r);
                const uint64_t at = r.first + static_cast<uint64_t>(e0) * r.stride, len = static_cast<uint64_t>(n) * r.stride;
                pwrite_all(fd.fd, records.p, len, at, tmp);
                if (!direct) {  // keep a store larger than RAM from pushing everything else out of the page cache
                    ::sync_file_range(fd.fd, static_cast<off_t>(at), static_cast<off_t>(len),
                                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
                    ::posix_fadvise(fd.fd, static_cast<off_t>(at), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
                }
                done += len;
                rep.records += n;
                if (progress) progress(done, total);
            }
        }
        const std::vector<uint8_t> header = encode_header(id, layout, n_expert, total, checksums);
        AlignedBuffer hb(header.size());
        std::memcpy(hb.p, header.data(), header.size());
        pwrite_all(fd.fd, hb.p, header.size(), 0, tmp);
        if (::fdatasync(fd.fd) != 0) throw ExpertStoreError(tmp + ": fdatasync failed: " + std::strerror(errno));
        if (::rename(tmp.c_str(), out.c_str()) != 0) throw ExpertStoreError(out + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
    } catch (...) {
        ::unlink(tmp.c_str());
        throw;
    }
    Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dfd.fd >= 0) ::fsync(dfd.fd);  // the rename itself survives a crash
    rep.bytes = total;
    rep.direct = direct;
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
}

VerifyReport verify_expert_store(const ExpertStore& store) {
    const auto t0 = std::chrono::steady_clock::now();
    VerifyReport rep;
    bool direct = false;
    Fd fd(open_direct(store.path(), O_RDONLY, &direct));
    if (fd.fd < 0) throw ExpertStoreError(store.path() + ": " + std::strerror(errno));
    for (uint32_t l = 0; l < store.n_layer(); ++l) {
        const ExpertRecordLayout& r = store.layer(l);
        if (!r.present()) continue;
        const uint32_t batch = static_cast<uint32_t>(std::clamp<uint64_t>(kBatchBytes / r.stride, 1, store.n_expert()));
        AlignedBuffer buf(static_cast<uint64_t>(batch) * r.stride);
        for (uint32_t e0 = 0; e0 < store.n_expert(); e0 += batch) {
            const uint32_t n = std::min(batch, store.n_expert() - e0);
            pread_all(fd.fd, buf.p, static_cast<uint64_t>(n) * r.stride, store.record_offset(l, e0), store.path());
            if (!direct)
                ::posix_fadvise(fd.fd, static_cast<off_t>(store.record_offset(l, e0)), static_cast<off_t>(n * r.stride), POSIX_FADV_DONTNEED);
            for (uint32_t i = 0; i < n; ++i) {
                if (ExpertStore::record_hash(buf.p + static_cast<uint64_t>(i) * r.stride, r) != store.checksum(l, e0 + i))
                    rep.bad.emplace_back(l, e0 + i);
                rep.records++;
                rep.bytes += r.stride;
            }
        }
    }
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
}

}  // namespace moe

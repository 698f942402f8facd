#include "engine/weights/weights.h"

#include "engine/util/progress.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>

namespace moe {

namespace {

[[noreturn]] void throw_read_error(const std::string& path, uint64_t offset, uint64_t n, const std::string& why) {
    throw ModelError(path + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) + " failed: " + why);
}

// Reads [offset, offset + n) with O_DIRECT through a page-aligned bounce buffer. Returns false when the file
// system refuses direct reads (EINVAL on the first one), for the caller to read through the page cache instead.
bool read_direct(int fd, const std::string& path, uint64_t offset, uint64_t n, uint8_t* dst) {
    constexpr uint64_t kPage = 4096, kChunk = 8ull << 20;  // 4 KiB covers every logical block size in use
    const uint64_t end = offset + n;
    const uint64_t span = (end + kPage - 1) / kPage * kPage - offset / kPage * kPage;
    const uint64_t buf_bytes = std::min(kChunk, span);
    WeightMemory buf(buf_bytes, kPage);
    for (uint64_t at = offset; at < end;) {
        const uint64_t from = at / kPage * kPage;
        const uint64_t want = std::min(buf_bytes, (end + kPage - 1) / kPage * kPage - from);
        uint64_t got = 0;
        while (got < want) {
            const ssize_t r = ::pread(fd, buf.data() + got, want - got, static_cast<off_t>(from + got));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && errno == EINVAL && at == offset && got == 0) return false;
            if (r < 0) throw_read_error(path, offset, n, std::strerror(errno));
            got += static_cast<uint64_t>(r);
            if (r == 0 || got % kPage) break;  // end of file: what is left cannot be read aligned anyway
        }
        const uint64_t usable = std::min(from + got, end);
        if (usable <= at) throw_read_error(path, offset, n, "short read (file truncated?)");
        std::memcpy(dst + (at - offset), buf.data() + (at - from), usable - at);
        at = usable;
    }
    return true;
}

}  // namespace

// Weights read once into RAM go around the page cache: a cached copy would double their memory, and buffered
// readahead runs past the range into expert bytes, where pages still in flight survive any later
// POSIX_FADV_DONTNEED. Buffered reads remain for file systems without O_DIRECT (tmpfs, some FUSE).
void read_file_range(const std::string& path, uint64_t offset, uint64_t n, uint8_t* dst) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    const bool direct = fd >= 0;
    if (!direct && errno == EINVAL) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ModelError(path + ": cannot open: " + std::strerror(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    if (direct) {
        if (read_direct(fd, path, offset, n, dst)) return;
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0) throw_read_error(path, offset, n, std::strerror(errno));
    }
    ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_SEQUENTIAL);
    for (uint64_t done = 0; done < n;) {
        const ssize_t got = ::pread(fd, dst + done, std::min<uint64_t>(n - done, 1u << 30), static_cast<off_t>(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) throw_read_error(path, offset, n, got < 0 ? std::strerror(errno) : "short read (file truncated?)");
        done += static_cast<uint64_t>(got);
    }
}

ResidentArena::ResidentArena(const GgufModel& model, const std::vector<const GgufTensorInfo*>& tensors) {
    for (const auto* t : tensors) {
        offsets_.emplace_back(t->name, size_);
        size_ += (t->nbytes + 63) / 64 * 64;
    }
    try {
        memory_ = WeightMemory(std::max<uint64_t>(size_, 64));
    } catch (const std::bad_alloc&) { throw ModelError("cannot allocate " + std::to_string(size_) + " bytes for resident weights"); }
    base_ = memory_.data();
    ByteProgress progress("loading resident weights", size_);
    constexpr uint64_t kPiece = 64ull << 20;  // progress granularity
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto* t = tensors[i];
        for (uint64_t done = 0; done < t->nbytes; done += kPiece) {
            const uint64_t n = std::min(kPiece, t->nbytes - done);
            read_file_range(model.files[t->file_index].path, t->file_offset + done, n, base_ + offsets_[i].second + done);
            progress.add(n);
        }
    }
    progress.finish();
    // The weights came around the page cache; what parsing the header read through it (with readahead into
    // the first tensors) is not needed again.
    for (const auto& f : model.files) {
        int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            ::close(fd);
        }
    }
}

ResidentArena::~ResidentArena() {
    if (base_) { ::munlock(base_, size_); }
}

const uint8_t* ResidentArena::data_of(const std::string& name) const {
    for (const auto& [n, off] : offsets_)
        if (n == name) return base_ + off;
    return nullptr;
}

uint64_t ResidentArena::try_lock() {
    if (size_ == 0) return 0;
    if (::mlock(base_, size_) == 0) return 0;
    // Lock what the soft limit allows, page aligned, and report the rest.
    struct rlimit rl {};
    ::getrlimit(RLIMIT_MEMLOCK, &rl);
    uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    uint64_t start = (reinterpret_cast<uintptr_t>(base_) + page - 1) / page * page;
    uint64_t allowed = rl.rlim_cur == RLIM_INFINITY ? size_ : rl.rlim_cur / page * page;
    uint64_t end = reinterpret_cast<uintptr_t>(base_) + size_;
    uint64_t lock_len = std::min<uint64_t>(allowed > page ? allowed - page : 0, end > start ? end - start : 0);
    lock_len = lock_len / page * page;
    if (lock_len && ::mlock(reinterpret_cast<void*>(start), lock_len) == 0) return size_ - lock_len;
    return size_;
}

InRamExpertSource::InRamExpertSource(const GgufModel& model, const std::vector<ExpertLayer>& layers) {
    layers_.resize(layers.size());
    uint64_t total = 0;
    for (const auto& l : layers)
        if (l.gate) total += (l.gate->expert_bytes + l.up->expert_bytes + l.down->expert_bytes) * l.gate->n_expert;
    ByteProgress progress("loading experts into RAM", total);
    for (size_t l = 0; l < layers.size(); ++l) {
        if (!layers[l].gate) continue;
        auto load = [&](const ExpertTensor* t, WeightMemory& dst, size_t& per_expert) {
            dst = WeightMemory(t->expert_bytes * t->n_expert);
            if (t->expert_stride == t->expert_bytes) {
                read_file_range(model.files[t->file_index].path, t->file_offset, dst.size(), dst.data());
            } else {  // half of a fused tensor: each expert's part on its own
                for (int64_t e = 0; e < t->n_expert; ++e)
                    read_file_range(model.files[t->file_index].path, t->file_offset + e * t->expert_stride, t->expert_bytes,
                                    dst.data() + e * t->expert_bytes);
            }
            progress.add(dst.size());
            per_expert = t->expert_bytes;
            bytes_ += dst.size();
        };
        Slot& s = layers_[l];
        load(layers[l].gate, s.gate, s.gate_bytes);
        load(layers[l].up, s.up, s.up_bytes);
        load(layers[l].down, s.down, s.down_bytes);
    }
}

ExpertView InRamExpertSource::view(uint32_t layer, uint32_t expert) const {
    const Slot& s = layers_.at(layer);
    return {s.gate.data() + expert * s.gate_bytes, s.up.data() + expert * s.up_bytes, s.down.data() + expert * s.down_bytes};
}

void InRamExpertSource::request(uint32_t, std::span<const uint32_t> experts) { pending_.insert(pending_.end(), experts.begin(), experts.end()); }

std::pair<uint32_t, ExpertView> InRamExpertSource::next_ready(uint32_t layer) {
    if (pending_.empty()) throw ModelError("next_ready without a pending request (layer " + std::to_string(layer) + ")");
    const uint32_t e = pending_.front();
    pending_.pop_front();
    stats_.hits++;
    return {e, view(layer, e)};
}

}  // namespace moe

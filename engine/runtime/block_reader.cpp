#include "engine/runtime/block_reader.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <tuple>

namespace moe {

struct BlockReader::Ring {
    struct io_uring ring {};
    bool live = false;  // set up: a zeroed ring's exit would close file descriptor 0 (and munmap nothing)
    ~Ring() {
        if (live) io_uring_queue_exit(&ring);
    }
};

BlockReader::BlockReader(const std::vector<std::string>& files, BlockReaderOptions opt) : opt_(std::move(opt)) {
    auto open_all = [&](bool direct) {
        for (int fd : fds_) ::close(fd);
        fds_.clear();
        for (const auto& f : files) {
            int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
            if (fd < 0) return std::make_pair(errno, f);
            fds_.push_back(fd);
        }
        return std::make_pair(0, std::string());
    };
    direct_ = opt_.direct;
    auto [err, which] = open_all(direct_);
    if (err == EINVAL && direct_) {
        // tmpfs and some network file systems refuse O_DIRECT: read through the page cache instead.
        direct_ = false;
        note_ = which + ": O_DIRECT refused by the file system; buffered reads (experts also land in the page cache)";
        std::tie(err, which) = open_all(false);
    }
    if (err) {
        for (int fd : fds_) ::close(fd);
        fds_.clear();
        throw std::runtime_error(which + ": cannot open for expert reads: " + std::strerror(err));
    }
    if (opt_.use_uring) {
        auto r = std::make_unique<Ring>();
        const unsigned entries = static_cast<unsigned>(std::max(8, opt_.queue_depth * 2));
        int rc = -EINVAL;
        if (opt_.sqpoll) {
            struct io_uring_params p {};
            p.flags = IORING_SETUP_SQPOLL;
            p.sq_thread_idle = 20;  // ms the poller spins after the last submission before it sleeps
            rc = io_uring_queue_init_params(entries, &r->ring, &p);
            sqpoll_ = rc == 0;
            if (rc != 0) note_ += std::string(note_.empty() ? "" : "; ") + "SQPOLL refused (" + std::strerror(-rc) + "), plain submission";
        }
        if (!sqpoll_) rc = io_uring_queue_init(entries, &r->ring, 0);
        if (rc == 0) {
            r->live = true;
            ring_ = std::move(r);
            // Registered files spare the kernel a file-table lookup per read (and SQPOLL needs them before 5.11).
            files_registered_ = io_uring_register_files(&ring_->ring, fds_.data(), static_cast<unsigned>(fds_.size())) == 0;
        } else {
            note_ += std::string(note_.empty() ? "" : "; ") + "io_uring unavailable (" + std::strerror(-rc) +
                     "): synchronous pread, the disk sees one request at a time";
        }
    } else {
        note_ += std::string(note_.empty() ? "" : "; ") + "io_uring disabled: synchronous pread";
    }
}

BlockReader::~BlockReader() {
    // Reads in flight write into memory the caller is about to free: let them land first.
    while (in_flight_ > 0) reap(true);
    ring_.reset();
    for (int fd : fds_) ::close(fd);
}

bool BlockReader::register_buffers(const std::vector<std::pair<void*, size_t>>& regions) {
    if (!ring_ || regions.empty()) return false;
    std::vector<struct iovec> iov;
    for (const auto& [p, n] : regions) iov.push_back({p, n});
    registered_ = io_uring_register_buffers(&ring_->ring, iov.data(), static_cast<unsigned>(iov.size())) == 0;
    return registered_;
}

void BlockReader::read(uint32_t file, uint64_t offset, uint32_t len, void* dst, uint64_t tag, bool urgent, int buffer_index) {
    if (file >= fds_.size()) throw std::out_of_range("read from file index " + std::to_string(file));
    (urgent ? urgent_ : queued_).push_back({file, offset, len, dst, tag, buffer_index});
    pump();
}

void BlockReader::submit_one(const Pending& p) {
    if (trace_) trace_->push_back({p.file, p.offset, p.len});
    if (opt_.fault) {
        if (int err = opt_.fault(p.offset, p.len); err < 0) {
            done_.push_back({p.tag, err});
            return;
        }
    }
    if (!ring_) {
        ssize_t got;
        do { got = ::pread(fds_[p.file], p.dst, p.len, static_cast<off_t>(p.offset)); } while (got < 0 && errno == EINTR);
        done_.push_back({p.tag, got < 0 ? -errno : static_cast<int>(got)});
        return;
    }
    struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    const int fd = files_registered_ ? static_cast<int>(p.file) : fds_[p.file];
    if (registered_ && p.buffer_index >= 0) io_uring_prep_read_fixed(sqe, fd, p.dst, p.len, p.offset, p.buffer_index);
    else io_uring_prep_read(sqe, fd, p.dst, p.len, p.offset);
    if (files_registered_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, p.tag);
    ++in_flight_;
}

void BlockReader::pump() {
    bool any = false;
    const size_t depth = static_cast<size_t>(std::max(1, opt_.queue_depth));
    auto drain = [&](std::vector<Pending>& q) {
        size_t i = 0;
        for (; i < q.size() && (in_flight_ < depth || !ring_); ++i) {
            submit_one(q[i]);
            any = true;
        }
        q.erase(q.begin(), q.begin() + static_cast<long>(i));
    };
    drain(urgent_);
    if (urgent_.empty()) drain(queued_);  // speculative reads only behind every urgent one
    if (any && ring_) io_uring_submit(&ring_->ring);
}

std::vector<ReadCompletion> BlockReader::reap(bool wait) {
    std::vector<ReadCompletion> out;
    out.swap(done_);
    if (ring_ && in_flight_ > 0) {
        struct io_uring_cqe* cqe;
        if (out.empty() && wait) {
            int rc;
            do { rc = io_uring_wait_cqe(&ring_->ring, &cqe); } while (rc == -EINTR);
            if (rc < 0) throw std::runtime_error(std::string("io_uring_wait_cqe: ") + std::strerror(-rc));
        }
        while (io_uring_peek_cqe(&ring_->ring, &cqe) == 0) {
            out.push_back({io_uring_cqe_get_data64(cqe), cqe->res});
            io_uring_cqe_seen(&ring_->ring, cqe);
            --in_flight_;
        }
    }
    pump();
    if (out.empty() && wait && (in_flight_ > 0 || !done_.empty())) return reap(true);
    return out;
}

}  // namespace moe

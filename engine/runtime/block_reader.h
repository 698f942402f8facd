// Asynchronous reads of file ranges into caller memory: io_uring (liburing) with O_DIRECT where the file
// system allows it, plain pread as the stated fallback. Single-threaded: the forward pass submits and reaps.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/util/read_record.h"

namespace moe {

struct ReadCompletion {
    uint64_t tag;  // the caller's
    int result;    // bytes read, or -errno
};

struct BlockReaderOptions {
    int queue_depth = 32;
    bool use_uring = true;  // false: pread (also chosen when io_uring cannot be set up)
    bool direct = true;     // O_DIRECT; refused (tmpfs) -> buffered, and said so
    bool sqpoll = false;    // a kernel thread polls the submission queue (no syscall per submit; costs a core while busy)
    // Tests: returns -errno to fail a read at submission, 0 to let it run.
    std::function<int(uint64_t offset, uint32_t len)> fault;
};

class BlockReader {
public:
    // Opens `files` (one per split). Throws std::runtime_error naming the file when it cannot be opened.
    BlockReader(const std::vector<std::string>& files, BlockReaderOptions opt);
    ~BlockReader();
    BlockReader(const BlockReader&) = delete;
    BlockReader& operator=(const BlockReader&) = delete;

    // Registers memory for fixed-buffer reads (io_uring only); false when the kernel or RLIMIT_MEMLOCK refuses.
    bool register_buffers(const std::vector<std::pair<void*, size_t>>& regions);
    // Queues a read; submitted at once while fewer than queue_depth are in flight, else when slots free up.
    // `urgent` reads go ahead of queued non-urgent ones. Offsets, lengths and dst must be 4096-aligned when
    // direct() is true.
    void read(uint32_t file, uint64_t offset, uint32_t len, void* dst, uint64_t tag, bool urgent, int buffer_index = -1);
    // Completed reads; waits for at least one when `wait` and something is in flight or queued.
    std::vector<ReadCompletion> reap(bool wait);
    size_t in_flight() const { return in_flight_; }
    // Reads submitted or queued whose completion has not been handed out by reap().
    bool has_pending() const { return in_flight_ > 0 || !done_.empty() || !queued_.empty() || !urgent_.empty(); }
    size_t queued() const { return queued_.size() + urgent_.size(); }
    bool direct() const { return direct_; }
    bool uring() const { return ring_ != nullptr; }
    bool sqpoll() const { return sqpoll_; }
    bool registered_files() const { return files_registered_; }
    const std::string& mode_note() const { return note_; }
    // Appends every read submitted from now on to `sink` (nullptr stops).
    void trace(std::vector<ReadRecord>* sink) { trace_ = sink; }

private:
    struct Pending {
        uint32_t file;
        uint64_t offset;
        uint32_t len;
        void* dst;
        uint64_t tag;
        int buffer_index;
    };
    void pump();
    void submit_one(const Pending& p);

    BlockReaderOptions opt_;
    std::vector<int> fds_;
    struct Ring;
    std::unique_ptr<Ring> ring_;
    bool direct_ = false, registered_ = false, sqpoll_ = false, files_registered_ = false;
    size_t in_flight_ = 0;
    std::vector<Pending> urgent_, queued_;
    std::vector<ReadCompletion> done_;  // pread completions and injected faults
    std::string note_;
    std::vector<ReadRecord>* trace_ = nullptr;
};

}  // namespace moe

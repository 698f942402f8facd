// Built-in random-read probe: io_uring, O_DIRECT, a fixed queue depth kept full for the whole run.
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "probes/storage_probe.h"

namespace moe {

BandwidthResult uring_random_read(const std::string& file, uint64_t file_bytes, uint64_t block, int qd, double seconds) {
    int fd = ::open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) throw StorageProbeError(file + ": open with O_DIRECT failed: " + std::strerror(errno));
    const uint64_t blocks = file_bytes / block;
    if (blocks == 0) {
        ::close(fd);
        throw StorageProbeError(file + ": smaller than one " + std::to_string(block) + "-byte read");
    }
    struct io_uring ring;
    if (int rc = io_uring_queue_init(static_cast<unsigned>(qd), &ring, 0); rc < 0) {
        ::close(fd);
        throw StorageProbeError(std::string("io_uring_queue_init failed: ") + std::strerror(-rc));
    }
    std::vector<void*> bufs(qd);
    for (auto& b : bufs) {
        if (::posix_memalign(&b, 4096, block) != 0) throw StorageProbeError("cannot allocate aligned buffers");
    }
    std::mt19937_64 rng(12345);
    auto submit = [&](int slot) {
        struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        io_uring_prep_read(sqe, fd, bufs[slot], static_cast<unsigned>(block), static_cast<__u64>((rng() % blocks) * block));
        io_uring_sqe_set_data64(sqe, static_cast<__u64>(slot));
    };
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    for (int i = 0; i < qd; ++i) submit(i);
    io_uring_submit(&ring);
    uint64_t done = 0, in_flight = static_cast<uint64_t>(qd);
    std::string error;
    while (in_flight > 0) {
        struct io_uring_cqe* cqe;
        int rc = io_uring_wait_cqe(&ring, &cqe);
        if (rc < 0) {
            error = std::string("io_uring_wait_cqe: ") + std::strerror(-rc);
            break;
        }
        int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
        int res = cqe->res;
        io_uring_cqe_seen(&ring, cqe);
        --in_flight;
        if (res < 0) {
            error = std::string("read failed: ") + std::strerror(-res);
            continue;
        }
        ++done;
        if (error.empty() && Clock::now() < deadline) {
            submit(slot);
            io_uring_submit(&ring);
            ++in_flight;
        }
    }
    const double dt = std::chrono::duration<double>(Clock::now() - start).count();
    io_uring_queue_exit(&ring);
    for (auto* b : bufs) std::free(b);
    ::close(fd);
    if (!error.empty()) throw StorageProbeError(file + ": " + error);
    BandwidthResult r;
    r.tool = "io_uring-probe";
    r.block_size = block;
    r.queue_depth = qd;
    r.bytes_per_s = static_cast<double>(done * block) / dt;
    r.iops = static_cast<double>(done) / dt;
    r.seconds = dt;
    return r;
}

}  // namespace moe

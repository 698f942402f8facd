// A one-line progress report on a terminal (stderr): bytes done of total, GB/s and ETA, redrawn at most
// five times a second. Silent when stderr is not a TTY or the job is small.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace moe {

class ByteProgress {
public:
    ByteProgress(std::string label, uint64_t total, uint64_t min_total = 256ull << 20)
        : label_(std::move(label)), total_(total), enabled_(::isatty(2) && total >= min_total), start_(std::chrono::steady_clock::now()),
          last_(start_) {}
    ~ByteProgress() { finish(); }

    void add(uint64_t bytes) {
        done_ += bytes;
        if (!enabled_) return;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_ < std::chrono::milliseconds(200) && done_ < total_) return;
        last_ = now;
        const double s = std::chrono::duration<double>(now - start_).count();
        const double rate = s > 0 ? static_cast<double>(done_) / s : 0;
        const double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0;
        std::fprintf(stderr, "\r%s: %.1f / %.1f GB  %.2f GB/s  ETA %.0f s   ", label_.c_str(), done_ / 1e9, total_ / 1e9, rate / 1e9, eta);
        std::fflush(stderr);
    }
    void finish() {
        if (enabled_ && !finished_) std::fprintf(stderr, "\n");
        finished_ = true;
    }

private:
    std::string label_;
    uint64_t total_, done_ = 0;
    bool enabled_, finished_ = false;
    std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace moe

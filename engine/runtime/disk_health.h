// Whether the disk the experts stream from is answering: expert reads report each failed and each completed
// load; /health, /metrics and systemd's status line read it from other threads. Degraded from a load that
// failed until a later one completes (the disk came back), with the failure's own words as the reason.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace moe {

class DiskHealth {
public:
    struct State {
        bool degraded = false;
        std::string reason;         // the last failure (file, offset, errno text)
        uint64_t failed_loads = 0;  // expert loads that failed, since start
        uint64_t fallbacks = 0;     // store records that could not be read and came from the GGUF instead
    };

    void load_failed(const std::string& reason) {
        std::lock_guard<std::mutex> lk(mu_);
        state_.degraded = true;
        state_.reason = reason;
        state_.failed_loads++;
        degraded_.store(true, std::memory_order_relaxed);
    }
    void fell_back(const std::string& reason) {
        std::lock_guard<std::mutex> lk(mu_);
        state_.fallbacks++;
        state_.reason = reason;
    }
    // Called per completed load: a lock only while degraded.
    void load_ok() {
        if (!degraded_.load(std::memory_order_relaxed)) return;
        std::lock_guard<std::mutex> lk(mu_);
        state_.degraded = false;
        degraded_.store(false, std::memory_order_relaxed);
    }
    State state() const {
        std::lock_guard<std::mutex> lk(mu_);
        return state_;
    }

private:
    mutable std::mutex mu_;
    State state_;
    std::atomic<bool> degraded_{false};
};

}  // namespace moe

// A fixed pool of worker threads for data-parallel loops (matmul rows, attention heads). The caller takes
// part in every loop, so a pool of N threads has N-1 workers. Workers spin briefly before sleeping: decode
// issues dozens of small loops per token, and a futex wake per loop costs more than the loop itself.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moe {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // Runs fn(begin, end) over [0, n) split into one contiguous range per thread; returns when all are done.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker(int index);
    void run_range(int index);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace moe

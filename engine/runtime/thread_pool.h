// A fixed pool of worker threads for data-parallel loops (matmul rows, attention heads). The caller takes
// part in every loop, so a pool of N threads has N-1 workers.
//
// A loop is cut into chunks (about four per thread) that threads take from a shared counter, so a thread the
// OS has descheduled (a host busy with other work) delays the loop by at most the chunk it holds; the others
// take the rest. Workers spin for a bounded time before sleeping, because decode issues dozens of small loops
// per token and a futex wake per loop costs more than the loop itself; the caller, once its chunks are done,
// spins briefly and then yields its core, so that a descheduled worker sharing it can finish.
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
    // Runs fn(begin, end) over disjoint ranges covering [0, n), in parallel; returns when all are done. Ranges
    // are contiguous, and multiples of 8 long (but the last) once they are longer than 8.
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
    // The same in ranges of `chunk` items (the last may be shorter): for loops of few, costly, uneven items
    // (whole experts, attention blocks), which callers order longest first so that the threads finish together.
    void parallel_for(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn);

    // The chunk length parallel_for uses for n items on `threads` threads.
    static int64_t chunk_length(int64_t n, int threads);

private:
    void worker();
    void run_chunks();

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    int64_t chunk_ = 1;
    std::atomic<int64_t> next_{0};
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> sleepers_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace moe

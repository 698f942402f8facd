#include "engine/runtime/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#define MOE_PAUSE() _mm_pause()
#else
#define MOE_PAUSE() std::this_thread::yield()
#endif

namespace moe {

namespace {

using Clock = std::chrono::steady_clock;
// How long an idle worker spins for the next loop before sleeping, and how long the caller spins for the
// workers' last chunks before yielding. Time, not iterations: PAUSE takes 10 to 140 cycles depending on the CPU.
constexpr auto kWorkerSpin = std::chrono::microseconds(200);
constexpr auto kCallerSpin = std::chrono::microseconds(20);

// Spins while `waiting()` holds, up to `budget`; returns whether it still holds.
template <class Pred>
bool spin_while(Pred waiting, Clock::duration budget) {
    const auto end = Clock::now() + budget;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (!waiting()) return false;
            MOE_PAUSE();
        }
        if (Clock::now() >= end) return waiting();
    }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
}

int64_t ThreadPool::chunk_length(int64_t n, int threads) {
    const int64_t parts = 4 * static_cast<int64_t>(std::max(1, threads));
    int64_t chunk = std::max<int64_t>(1, (n + parts - 1) / parts);
    if (chunk > 8) chunk = (chunk + 7) / 8 * 8;  // whole groups for the kernels that take eight rows at once
    return chunk;
}

void ThreadPool::run_chunks() {
    for (;;) {
        const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
        if (begin >= job_n_) return;
        (*job_)(begin, std::min(job_n_, begin + chunk_));
    }
}

void ThreadPool::worker() {
    uint64_t seen = 0;
    for (;;) {
        if (spin_while([&] { return generation_.load() == seen; }, kWorkerSpin)) {
            std::unique_lock<std::mutex> lk(mu_);
            sleepers_.fetch_add(1);  // seq_cst: pairs with the publisher's generation bump then sleepers read
            cv_.wait(lk, [&] { return generation_.load() != seen; });
            sleepers_.fetch_sub(1);
        }
        if (stop_.load()) return;
        seen = generation_.load();
        run_chunks();
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) { parallel_for(n, chunk_length(n, n_threads_), fn); }

void ThreadPool::parallel_for(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    if (n_threads_ == 1 || n < 2) {
        if (n > 0) fn(0, n);
        return;
    }
    // The job's fields are read by workers only after they see the generation bump, and stay valid until every
    // worker has counted itself out of `pending_`.
    job_ = &fn;
    job_n_ = n;
    chunk_ = std::max<int64_t>(1, chunk);
    next_.store(0, std::memory_order_relaxed);
    pending_.store(n_threads_ - 1);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_.notify_all();
    }
    run_chunks();
    auto busy = [&] { return pending_.load(std::memory_order_acquire) != 0; };
    if (spin_while(busy, kCallerSpin))
        while (busy()) std::this_thread::yield();
}

}  // namespace moe

#include "engine/runtime/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MOE_PAUSE() _mm_pause()
#else
#define MOE_PAUSE() std::this_thread::yield()
#endif

namespace moe {

namespace {
constexpr int kSpinIterations = 200000;  // roughly 50-100 us of pause instructions
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
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

void ThreadPool::run_range(int index) {
    const int64_t per = (job_n_ + n_threads_ - 1) / n_threads_;
    const int64_t begin = std::min<int64_t>(job_n_, per * index), end = std::min<int64_t>(job_n_, begin + per);
    if (begin < end) (*job_)(begin, end);
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        while (generation_.load() == seen && spins++ < kSpinIterations) MOE_PAUSE();
        if (generation_.load() == seen) {
            std::unique_lock<std::mutex> lk(mu_);
            sleepers_.fetch_add(1);  // seq_cst: pairs with the publisher's generation bump then sleepers read
            cv_.wait(lk, [&] { return generation_.load() != seen; });
            sleepers_.fetch_sub(1);
        }
        if (stop_.load()) return;
        seen = generation_.load();
        run_range(index);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n_threads_ == 1 || n < 2) {
        if (n > 0) fn(0, n);
        return;
    }
    job_ = &fn;
    job_n_ = n;
    pending_.store(n_threads_ - 1);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_.notify_all();
    }
    run_range(0);
    while (pending_.load(std::memory_order_acquire) != 0) MOE_PAUSE();
}

}  // namespace moe

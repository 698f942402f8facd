#include "engine/runtime/thread_pool.h"

namespace moe {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
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
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        run_range(index);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n_threads_ == 1 || n < 2) {
        if (n > 0) fn(0, n);
        return;
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        job_ = &fn;
        job_n_ = n;
        pending_.store(n_threads_ - 1, std::memory_order_release);
        ++generation_;
    }
    cv_.notify_all();
    run_range(0);
    while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

}  // namespace moe

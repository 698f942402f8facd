#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/runtime/thread_pool.h"

namespace moe {
namespace {

TEST(ThreadPool, EveryIndexExactlyOnceInWholeGroups) {
    for (int threads : {1, 2, 3, 4}) {
        ThreadPool pool(threads);
        for (int64_t n : {0, 1, 2, 3, 7, 8, 9, 64, 100, 1000, 12345}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::atomic<bool> bad_range{false};
            const int64_t chunk = ThreadPool::chunk_length(n, threads);
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                if (!(b < e) || e > n) bad_range = true;
                if (threads > 1 && n >= 2 && chunk > 8 && e != n && (e - b) % 8 != 0) bad_range = true;
                for (int64_t i = b; i < e; ++i) hits[i]++;
            });
            EXPECT_FALSE(bad_range) << threads << " threads, n " << n;
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " threads, n " << n << ", index " << i;
        }
    }
}

// An explicit chunk: every index once, in ranges of exactly that many items (the last may be shorter; a chunk
// of 0 counts as 1), each starting at a multiple of it.
TEST(ThreadPool, ExplicitChunksCoverEveryIndexOnce) {
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        for (int64_t n : {0, 1, 5, 64, 999})
            for (int64_t chunk : {0, 1, 3, 8, 2000}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                std::atomic<bool> bad_range{false};
                const int64_t want = std::max<int64_t>(1, chunk);
                pool.parallel_for(n, chunk, [&](int64_t b, int64_t e) {
                    if (!(b < e) || e > n) bad_range = true;
                    if (threads > 1 && n >= 2 && (b % want != 0 || (e != n && e - b != want))) bad_range = true;
                    for (int64_t i = b; i < e; ++i) hits[i]++;
                });
                EXPECT_FALSE(bad_range) << threads << " threads, n " << n << ", chunk " << chunk;
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(hits[i].load(), 1) << threads << " threads, n " << n << ", chunk " << chunk << ", index " << i;
            }
    }
}

TEST(ThreadPool, ManyConsecutiveLoopsStayCorrect) {
    ThreadPool pool(4);
    std::atomic<int64_t> sum{0};
    for (int loop = 0; loop < 3000; ++loop)
        pool.parallel_for(37, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) sum += i;
        });
    EXPECT_EQ(sum.load(), 3000 * (36 * 37 / 2));
}

// A thread that stalls (descheduled on a busy host) holds up only the chunk it has: the others take the rest.
TEST(ThreadPool, AStalledThreadDelaysOnlyItsOwnChunk) {
    ThreadPool pool(2);
    std::mutex mu;
    std::map<std::thread::id, int> chunks_by_thread;
    std::atomic<bool> stalled{false};
    const int64_t n = 64;
    pool.parallel_for(n, [&](int64_t, int64_t) {
        bool first = !stalled.exchange(true);
        {
            std::lock_guard<std::mutex> lk(mu);
            chunks_by_thread[std::this_thread::get_id()]++;
        }
        if (first) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    });
    const int64_t chunks = (n + ThreadPool::chunk_length(n, 2) - 1) / ThreadPool::chunk_length(n, 2);
    ASSERT_GT(chunks, 2);
    int most = 0, least = 1 << 30;
    for (auto& [id, c] : chunks_by_thread) {
        most = std::max(most, c);
        least = std::min(least, c);
    }
    // The stalled thread did its one chunk; the other did all the others (with a static split it would do half).
    ASSERT_EQ(chunks_by_thread.size(), 2u);
    EXPECT_EQ(least, 1);
    EXPECT_EQ(most, chunks - 1);
}

}  // namespace
}  // namespace moe

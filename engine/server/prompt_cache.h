// A prompt cache on disk (serve --prompt-cache DIR): the KV rows (and recurrent-state snapshots) of long prompt
// prefixes, written in the background so that after a restart a request whose prompt starts with a saved
// prefix restores it instead of evaluating it.
//
// One file per record (prompt_record.h: the format), named by the model identity and the prefix's hash.
// Written to a temporary name, fsync'd and renamed: a crash leaves either the whole record or none. A record
// whose checksum fails, or that belongs to another model or cache layout, is ignored with one log line and
// counted. The directory is bounded in bytes: the least recently used records go first (use = the file's
// mtime, touched on restore, so the order survives restarts). A record whose prefix a newer one extends is
// dropped when the newer one lands: every shorter prefix can be restored from the longer record.
//
// The writer is one thread at idle I/O priority and a bounded byte rate (an eighth of it while requests stream
// experts), so that expert reads on the same disk keep their throughput; it reads a slot's cache rows in place (no copy of a long prefix in RAM), so the
// generator cancels a save before it overwrites those rows (PromptCache::cancel).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/forward/runner.h"
#include "engine/server/prompt_record.h"

namespace moe {

struct PromptCacheError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct PromptCacheOptions {
    std::string dir;
    uint64_t max_bytes = 8ull << 30;            // --prompt-cache-size
    uint64_t write_bytes_per_s = 128ull << 20;  // --prompt-cache-rate
    int min_tokens = 256;                       // --prompt-cache-min: new tokens a prefix must add to be saved
    // True while requests read experts from the disk (the server: experts streamed and a slot busy): the writer
    // then goes at an eighth of its rate, so that decode keeps the disk. Null: never.
    std::function<bool()> disk_busy;
};

struct PromptCacheStats {
    std::atomic<uint64_t> records{0}, bytes{0};                   // on disk now (this model's)
    std::atomic<uint64_t> saved{0}, saved_bytes{0}, write_ns{0};  // records written
    std::atomic<uint64_t> cancelled{0};                           // saves given up (the slot needed its rows)
    std::atomic<uint64_t> hurried{0};                             // saves finished at full speed for their slot
    std::atomic<uint64_t> restored{0}, restored_tokens{0}, restored_bytes{0}, restore_ns{0};
    std::atomic<uint64_t> rejected{0};  // damaged or foreign records ignored
    std::atomic<uint64_t> evicted{0};   // dropped for room or superseded
};

class PromptCache {
public:
    // A save in flight. The generator cancels it before overwriting the rows it reads.
    class Pending {
    public:
        bool done() const { return done_.load(); }
        bool started() const { return started_.load(); }  // the writer has taken it
        // The writer no longer reads the slot's rows (the record is being closed, or it ended).
        bool released() const { return released_.load() || done_.load(); }
        int tokens() const { return n_; }

    private:
        friend class PromptCache;
        int n_ = 0;
        std::atomic<bool> cancel_{false}, done_{false}, started_{false}, hurry_{false}, released_{false};
        std::mutex mu_;
        std::condition_variable cv_;
        void finish();
    };

    // identity: the model files' hash (routing_model_hash); layout: a cache of the engine's shape and types
    // (only its row sizes are read). Creates DIR when missing; throws PromptCacheError with one line naming
    // DIR when it cannot be used (a file, not writable). Scans the records and logs one line.
    PromptCache(PromptCacheOptions opt, uint64_t model_hash, const SequenceCache& layout, std::function<void(const std::string&)> log);
    ~PromptCache();  // finishes the write in progress (at full speed, bounded) and stops the writer
    PromptCache(const PromptCache&) = delete;
    PromptCache& operator=(const PromptCache&) = delete;

    struct Match {
        std::string file;
        int tokens = 0;  // positions a restore gives: the shared prefix (recurrent: the newest snapshot within it)
    };
    // The record that gives the most positions of `prompt` (at most `max_tokens`), if any.
    std::optional<Match> best_match(std::span<const int32_t> prompt, int max_tokens, bool recurrent) const;
    // Longest prefix of `tokens` some record or the save being written holds.
    int covered(std::span<const int32_t> tokens) const;
    // Whether save() would take these tokens (long enough, enough of them new): asked before gathering the
    // snapshots a save carries.
    bool worth_saving(std::span<const int32_t> tokens) const {
        const int n = static_cast<int>(tokens.size());
        return n >= opt_.min_tokens && n - covered(tokens) >= opt_.min_tokens;
    }
    // Reads positions [0, m.tokens) of the record into `dst` and returns the snapshots at or below it; nullopt
    // when it is gone, unreadable now (logged, skipped) or damaged (logged, counted, removed). `rows_written`
    // says whether dst's rows within the prefix were touched (undefined after a failure); past it they never are.
    std::optional<std::vector<Runner::Checkpoint>> restore(const Match& m, SequenceCache& dst, bool& rows_written);
    // Queues a save of `tokens` (positions [0, n)) whose rows `src` holds, with these snapshots (recurrent: one
    // at n). `src` must keep those rows until the returned save is done or cancelled. Null when not worth it
    // (too short, already held) or too large for the budget.
    std::shared_ptr<Pending> save(std::vector<int32_t> tokens, const SequenceCache& src, std::vector<Runner::Checkpoint> snapshots);
    // Stops a save (a started one removes its temporary file) and returns once it no longer reads its rows
    // (one that has read them all finishes its record).
    void cancel(const std::shared_ptr<Pending>& p);
    // Drops the save if the writer has not taken it yet; otherwise leaves it alone.
    void cancel_if_queued(const std::shared_ptr<Pending>& p);
    // The slot needs its rows back: a save being written finishes at full speed if it can within `seconds`
    // (the request waits that long at most), else it is cancelled; a waiting one is cancelled.
    void finish_or_cancel(const std::shared_ptr<Pending>& p, double seconds);
    // Waits up to `seconds` for the queued saves to land, at full speed (shutdown).
    void flush(double seconds);

    const PromptCacheStats& stats() const { return stats_; }
    const PromptCacheOptions& options() const { return opt_; }
    int min_tokens() const { return opt_.min_tokens; }
    // Bytes a record of n positions with k snapshots takes.
    uint64_t record_bytes(int n, int snapshots) const { return layout_.record_bytes(uint64_t(n), uint64_t(snapshots)); }

private:
    struct Entry {
        std::string file;  // name within dir
        RecordIndex index;
        int64_t used_ns = 0;  // mtime
    };
    struct Job {
        std::shared_ptr<Pending> pending;
        std::vector<int32_t> tokens;
        const SequenceCache* src = nullptr;
        std::vector<Runner::Checkpoint> snapshots;
        std::vector<uint8_t> window;  // a ring's window rows, copied when saved (decoding overwrites the ring)
    };
    void scan();
    void writer();
    bool write_record(Job& job);     // false: cancelled or failed (logged)
    void make_room(uint64_t bytes);  // under mu_
    // Under mu_: forgets entries_[index], and unlinks its file unless told not to.
    void drop(size_t index, bool evicted = true, bool unlink = true);
    std::string path(const std::string& file) const { return opt_.dir + "/" + file; }
    RecordLayout layout_;
    // Sliding-window layers: their rows are kept for the window before a record's end only (zeros below it),
    // so such records restore whole; ring_ says which layers the engine keeps as a ring.
    int window_ = 0;
    std::vector<int> ring_;
    PromptCacheOptions opt_;
    std::function<void(const std::string&)> log_;
    PromptCacheStats stats_;
    mutable std::mutex mu_;  // entries_, jobs_
    std::condition_variable cv_;
    std::vector<Entry> entries_;
    std::deque<Job> jobs_;
    std::shared_ptr<Pending> current_;     // the job being written
    std::vector<int32_t> current_tokens_;  // ... and its tokens
    bool stop_ = false;
    std::atomic<bool> full_speed_{false};
    uint64_t counter_ = 0;
    std::thread thread_;
};

// The cache's figures for /metrics (Prometheus text) and the web page's samples (JSON). Time saved is
// estimated: restored tokens at this server's measured prompt seconds per token, less the restores' time.
std::string prompt_cache_metrics(const PromptCache& cache, double prompt_s_per_token);
nlohmann::json prompt_cache_json(const PromptCache& cache, double prompt_s_per_token);

}  // namespace moe

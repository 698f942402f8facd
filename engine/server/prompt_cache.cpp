#include "engine/server/prompt_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "engine/kernels/kv_cache_types.h"
#include "engine/server/histogram.h"

namespace moe {

namespace fs = std::filesystem;

namespace {

constexpr size_t kPiece = 1u << 20;      // bytes written between rate checks
constexpr size_t kSyncEvery = 8u << 20;  // dirty bytes pushed out (and dropped from the page cache) at once
constexpr double kBusyRateDivisor = 8;   // while requests stream experts, the writer takes this much less

std::string hex(uint64_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
}

std::string gib(uint64_t b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
    return s;
}

// Opens a record for reading without following a link or blocking on a FIFO; -1 (errno set, or 0 for "not a
// regular file") otherwise.
int open_record(const std::string& path, struct stat& st) {
    errno = 0;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return -1;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const int saved = S_ISREG(st.st_mode) ? errno : 0;
        ::close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int64_t mtime_ns(const struct stat& st) { return int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec; }

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

bool write_exact(int fd, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n) {
        const ssize_t r = ::write(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        b += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

// The writer's I/O goes behind every other (the expert reads): ioprio_set has no glibc wrapper.
void lower_io_priority() {
    constexpr int kWhoProcess = 1, kClassIdle = 3, kClassShift = 13;
    ::syscall(SYS_ioprio_set, kWhoProcess, 0, kClassIdle << kClassShift);
}

}  // namespace

void PromptCache::Pending::finish() {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    cv_.notify_all();
}

PromptCache::PromptCache(PromptCacheOptions opt, uint64_t model_hash, const SequenceCache& layout, std::function<void(const std::string&)> log)
    : opt_(std::move(opt)), log_(std::move(log)) {
    std::error_code ec;
    if (fs::exists(opt_.dir, ec) && !fs::is_directory(opt_.dir, ec)) throw PromptCacheError("--prompt-cache " + opt_.dir + " is not a directory");
    fs::create_directories(opt_.dir, ec);
    if (ec) throw PromptCacheError("--prompt-cache " + opt_.dir + ": cannot create it: " + ec.message());
    {  // writable for real (access() says yes to root on a read-only mount)
        const std::string probe = path(".tmp-" + std::to_string(::getpid()) + "-probe");
        const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) throw PromptCacheError("--prompt-cache " + opt_.dir + " is not writable: " + std::strerror(errno));
        ::close(fd);
        ::unlink(probe.c_str());
    }
    if (opt_.min_tokens < 1) throw PromptCacheError("--prompt-cache-min " + std::to_string(opt_.min_tokens) + " must be at least 1");
    for (size_t l = 0; l < layout.k.size(); ++l) {
        layout_.k_row.push_back(layout.k[l].empty() ? 0 : layout.k_row[l]);
        layout_.v_row.push_back(layout.v[l].empty() ? 0 : layout.v_row[l]);
        layout_.ix_row.push_back(layout.ix[l].empty() ? 0 : layout.ix_row);
    }
    layout_.recurrent_bytes = layout.recurrent_bytes();
    window_ = layout.window;
    ring_ = layout.ring;
    // kKvRows: bump when the engine's K/V/state values change for the same model (a numerics fix), so that old
    // rows are not restored beside new ones.
    constexpr uint64_t kKvRows = 1;
    const uint64_t id_parts[] = {kKvRows,
                                 model_hash,
                                 static_cast<uint64_t>(layout.types.k),
                                 static_cast<uint64_t>(layout.types.v),
                                 static_cast<uint64_t>(kernels::kv_rotation_k(layout.types.k, 64)),
                                 static_cast<uint64_t>(kernels::kv_rotation_v(layout.types.v, 64))};
    layout_.identity = XXH3_64bits(id_parts, sizeof id_parts);
    layout_.seal();
    scan();
    thread_ = std::thread([this] { writer(); });
}

PromptCache::~PromptCache() {
    flush(10);
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void PromptCache::scan() {
    int foreign_count = 0, damaged = 0, leftovers = 0;
    std::error_code ec;
    fs::directory_iterator it(opt_.dir, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
        const fs::path& p = it->path();
        const std::string name = p.filename().string();
        if (name.rfind(".tmp-", 0) == 0) {  // a write a crash interrupted, unless its writer still runs
            const long pid = std::atol(name.c_str() + 5);
            struct stat st {};
            const bool stale = ::lstat(p.c_str(), &st) == 0 && ::time(nullptr) - st.st_mtime > 24 * 3600;  // the pid may be another's now
            if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) || pid == ::getpid() || stale) {
                ::unlink(p.c_str());
                ++leftovers;
            }
            continue;
        }
        if (p.extension() != ".mspc") continue;
        Entry en;
        struct stat st {};
        const int fd = open_record(p.string(), st);
        if (fd < 0) {  // a passing error (EMFILE, EIO) or not a regular file: skipped, never deleted
            stats_.rejected++;
            log_("prompt cache: " + p.string() + ": " + (errno ? std::strerror(errno) : "not a regular file") + " (skipped)");
            continue;
        }
        bool foreign = false;
        const std::string why = read_record_index(fd, static_cast<uint64_t>(st.st_size), layout_, en.index, foreign);
        ::close(fd);
        if (!why.empty()) {
            stats_.rejected++;
            if (foreign) {  // another model's (or another version's) server may share the directory: left alone
                ++foreign_count;
            } else {  // ours but damaged: it would never restore
                ++damaged;
                log_("prompt cache: " + p.string() + ": " + why + " (removed)");
                ::unlink(p.c_str());
            }
            continue;
        }
        en.file = name;
        en.used_ns = mtime_ns(st);
        entries_.push_back(std::move(en));
    }
    if (ec) throw PromptCacheError("--prompt-cache " + opt_.dir + ": cannot list it: " + ec.message());
    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.used_ns < b.used_ns; });
    uint64_t total = 0;
    for (const auto& en : entries_) total += en.index.bytes;
    stats_.records = entries_.size();
    stats_.bytes = total;
    {
        std::lock_guard<std::mutex> lk(mu_);
        make_room(0);
    }
    std::string line = "prompt cache " + opt_.dir + ": " + std::to_string(entries_.size()) + " records (" + gib(stats_.bytes) + " of " +
                       gib(opt_.max_bytes) + ")";
    if (damaged) line += ", " + std::to_string(damaged) + " damaged (removed)";
    if (foreign_count) line += ", " + std::to_string(foreign_count) + " of another model, cache layout or version (ignored)";
    if (leftovers) line += ", " + std::to_string(leftovers) + " unfinished writes removed";
    log_(line);
}

void PromptCache::drop(size_t i, bool evicted, bool unlink) {
    if (unlink) ::unlink(path(entries_[i].file).c_str());
    stats_.bytes -= entries_[i].index.bytes;
    stats_.records--;
    if (evicted) stats_.evicted++;
    entries_.erase(entries_.begin() + static_cast<ptrdiff_t>(i));
}

void PromptCache::make_room(uint64_t bytes) {
    while (!entries_.empty() && stats_.bytes + bytes > opt_.max_bytes) {
        size_t oldest = 0;
        for (size_t i = 1; i < entries_.size(); ++i)
            if (entries_[i].used_ns < entries_[oldest].used_ns) oldest = i;
        drop(oldest);
    }
}

std::optional<PromptCache::Match> PromptCache::best_match(std::span<const int32_t> prompt, int max_tokens, bool recurrent) const {
    std::lock_guard<std::mutex> lk(mu_);
    std::optional<Match> best;
    size_t best_bytes = 0;
    for (const auto& en : entries_) {
        int usable = static_cast<int>(std::min<size_t>(common_prefix(en.index.tokens, prompt), static_cast<size_t>(std::max(0, max_tokens))));
        if (recurrent) {  // only where a snapshot of the state is
            int at = 0;
            for (int32_t p : en.index.snapshot_pos)
                if (p <= usable) at = std::max(at, int(p));
            usable = at;
        }
        if (window_ && usable != static_cast<int>(en.index.tokens.size())) usable = 0;  // whole records only
        if (usable > 0 && (!best || usable > best->tokens || (usable == best->tokens && en.index.bytes < best_bytes))) {
            best = Match{en.file, usable};
            best_bytes = en.index.bytes;
        }
    }
    return best;
}

int PromptCache::covered(std::span<const int32_t> tokens) const {
    std::lock_guard<std::mutex> lk(mu_);
    size_t best = 0;
    for (const auto& en : entries_) best = std::max(best, common_prefix(en.index.tokens, tokens));
    // The save being written counts too (an agent's next turn often comes before the last prefix is written);
    // queued ones do not: they may still be cancelled when their slot needs its rows.
    if (current_) best = std::max(best, common_prefix(current_tokens_, tokens));
    return static_cast<int>(best);
}

std::optional<std::vector<Runner::Checkpoint>> PromptCache::restore(const Match& m, SequenceCache& dst, bool& rows_written) {
    const auto t0 = std::chrono::steady_clock::now();
    rows_written = false;
    int fd = -1;
    Entry en;
    struct stat st {};
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (const auto& e : entries_)
            if (e.file == m.file) en = e;
        if (en.file.empty()) return std::nullopt;  // evicted meanwhile
        fd = open_record(path(en.file), st);       // open: an eviction from now on unlinks a name only
    }
    // Forgets the entry; a damaged file (ours, failing its checks) goes too, one that cannot be read now stays.
    auto forget = [&](const std::string& why, bool remove) -> std::optional<std::vector<Runner::Checkpoint>> {
        if (fd >= 0) ::close(fd);
        log_("prompt cache: " + path(en.file) + ": " + why + (remove ? " (ignored and removed)" : " (skipped)"));
        stats_.rejected++;
        std::lock_guard<std::mutex> lk(mu_);
        for (size_t i = 0; i < entries_.size(); ++i)
            if (entries_[i].file == en.file) {
                drop(i, false, remove);  // counted as rejected, not as evicted
                break;
            }
        return std::nullopt;
    };
    if (fd < 0) return forget(errno ? std::strerror(errno) : "not a regular file", false);
    if (m.tokens <= 0 || m.tokens > static_cast<int>(en.index.tokens.size()) || m.tokens > dst.n_ctx || dst.k.size() != layout_.k_row.size()) {
        ::close(fd);
        return std::nullopt;
    }
    // The file again from its start: the header and index as the scan read them, then the rows.
    RecordIndex again;
    bool foreign = false;
    std::string why = read_record_index(fd, static_cast<uint64_t>(st.st_size), layout_, again, foreign);
    if (!why.empty()) return forget(why, !foreign);
    if (again.tokens != en.index.tokens || again.snapshot_pos != en.index.snapshot_pos) return forget("replaced since the scan", false);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    std::vector<RecordSnapshot> states;
    const uint64_t keep = static_cast<uint64_t>(m.tokens);
    rows_written = true;
    // A ring layer takes its window's rows (the rows before it are not in the record) into its ring rows.
    const uint64_t window_lo = keep - std::min<uint64_t>(keep, static_cast<uint64_t>(std::max(window_ - 1, 0)));
    std::vector<std::vector<uint8_t>> window_rows(2 * ring_.size());
    why = read_record_rows(
        fd, layout_, again, keep,
        [&](int part, size_t l) {
            if (l < ring_.size() && ring_[l] && part < 2) {
                auto& b = window_rows[2 * l + static_cast<size_t>(part)];
                b.resize((keep - window_lo) * (part == 0 ? layout_.k_row[l] : layout_.v_row[l]));
                return b.data();
            }
            return (part == 0 ? dst.k : part == 1 ? dst.v : dst.ix)[l].data();
        },
        states, [&](size_t l) { return l < ring_.size() && ring_[l] ? window_lo : uint64_t{0}; });
    if (!why.empty()) return forget(why, true);
    if (dst.has_ring()) {  // the record's K and V blocks as a window snapshot (SequenceCache::save_window's layout)
        std::vector<uint8_t> window;
        for (size_t l = 0; l < ring_.size(); ++l)
            for (uint64_t i = 0; ring_[l] && i < keep - window_lo; ++i) {
                const uint8_t* kr = window_rows[2 * l].data() + i * layout_.k_row[l];
                const uint8_t* vr = window_rows[2 * l + 1].data() + i * layout_.v_row[l];
                window.insert(window.end(), kr, kr + layout_.k_row[l]);
                window.insert(window.end(), vr, vr + layout_.v_row[l]);
            }
        dst.restore_window(static_cast<int>(keep), window);
    }
    std::vector<Runner::Checkpoint> snapshots;
    for (auto& s : states) snapshots.push_back({s.pos, std::move(s.state), {}});
    ::futimens(fd, nullptr);  // recently used: survives the next eviction, in this run and after a restart
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& e : entries_)
            if (e.file == en.file)
                e.used_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    }
    stats_.restored++;
    stats_.restored_tokens += keep;
    stats_.restored_bytes += en.index.bytes;
    stats_.restore_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    return snapshots;
}

std::shared_ptr<PromptCache::Pending> PromptCache::save(std::vector<int32_t> tokens, const SequenceCache& src,
                                                        std::vector<Runner::Checkpoint> snapshots) {
    const int n = static_cast<int>(tokens.size());
    if (!worth_saving(tokens)) return nullptr;
    if (layout_.recurrent_bytes && (snapshots.empty() || snapshots.back().pos != n)) return nullptr;
    std::erase_if(snapshots, [&](const Runner::Checkpoint& c) { return c.pos > n || c.pos <= 0; });
    if (record_bytes(n, static_cast<int>(snapshots.size())) > opt_.max_bytes) return nullptr;
    auto p = std::make_shared<Pending>();
    p->n_ = n;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return nullptr;
        Job job{p, std::move(tokens), &src, std::move(snapshots), {}};
        if (src.has_ring()) src.save_window(n, job.window);
        jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
    return p;
}

void PromptCache::cancel_if_queued(const std::shared_ptr<Pending>& p) {
    if (!p) return;
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it)
        if (it->pending == p) {
            jobs_.erase(it);
            stats_.cancelled++;
            p->finish();
            return;
        }
}

void PromptCache::cancel(const std::shared_ptr<Pending>& p) {
    if (!p) return;
    cancel_if_queued(p);
    std::unique_lock<std::mutex> lk(p->mu_);
    p->cancel_ = true;
    p->cv_.notify_all();
    p->cv_.wait(lk, [&] { return p->released(); });
}

void PromptCache::finish_or_cancel(const std::shared_ptr<Pending>& p, double seconds) {
    if (!p || p->released()) return;
    if (p->started()) {
        std::unique_lock<std::mutex> lk(p->mu_);
        p->hurry_ = true;
        p->cv_.notify_all();
        if (p->cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return p->released(); })) {
            stats_.hurried++;
            return;
        }
    }
    cancel(p);
}

void PromptCache::flush(double seconds) {
    full_speed_ = true;
    std::shared_ptr<Pending> current;
    {
        std::lock_guard<std::mutex> lk(mu_);
        current = current_;
    }
    if (current) {
        std::lock_guard<std::mutex> lk(current->mu_);
        current->cv_.notify_all();
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (jobs_.empty() && !current_) break;
        }
        if (std::chrono::steady_clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::vector<std::shared_ptr<Pending>> left;
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& j : jobs_) left.push_back(j.pending);
        if (current_) left.push_back(current_);
    }
    for (auto& p : left) cancel(p);
    full_speed_ = false;
}

void PromptCache::writer() {
    lower_io_priority();
    for (;;) {
        Job job;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
            if (jobs_.empty()) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
            current_ = job.pending;
            current_tokens_ = job.tokens;
            job.pending->started_ = true;
        }
        if (!job.pending->cancel_) write_record(job);
        {
            std::lock_guard<std::mutex> lk(mu_);
            current_.reset();
            current_tokens_.clear();
        }
        job.pending->finish();
    }
}

bool PromptCache::write_record(Job& job) {
    const auto t0 = std::chrono::steady_clock::now();
    const int n = static_cast<int>(job.tokens.size());
    std::vector<int32_t> positions;
    for (const auto& c : job.snapshots) positions.push_back(c.pos);
    const uint64_t ihash = record_index_hash(job.tokens, positions);
    const uint64_t bytes = record_bytes(n, static_cast<int>(positions.size()));
    const std::string final_name = hex(layout_.identity) + "-" + hex(ihash) + ".mspc";
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (const auto& e : entries_)
            if (e.file == final_name) return false;  // the same prefix landed meanwhile
        make_room(bytes);
    }
    const std::string tmp = path(".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_) + ".mspc");
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        log_("prompt cache: cannot create " + tmp + ": " + std::strerror(errno) + " (prefix not saved)");
        return false;
    }
    std::string error;
    auto give_up = [&](const std::string& why) {
        ::close(fd);
        ::unlink(tmp.c_str());
        if (!why.empty()) log_("prompt cache: writing " + tmp + ": " + why + " (prefix not saved)");
        else stats_.cancelled++;
        return false;
    };
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), XXH3_freeState);
    XXH3_64bits_reset(hash.get());
    uint8_t raw[kRecordHeaderBytes] = {};
    if (!write_exact(fd, raw, sizeof raw)) return give_up(std::strerror(errno));
    uint64_t written = 0, synced = kRecordHeaderBytes;
    auto due = std::chrono::steady_clock::now();  // when the next piece may go
    Pending& p = *job.pending;
    // Writes len bytes in pieces, each after the rate allows it; false when cancelled or on an error.
    auto put = [&](const void* data, uint64_t len) {
        const auto* b = static_cast<const uint8_t*>(data);
        for (uint64_t off = 0; off < len;) {
            const size_t piece = static_cast<size_t>(std::min<uint64_t>(kPiece, len - off));
            if (!full_speed_ && !p.hurry_ && opt_.write_bytes_per_s > 0) {
                std::unique_lock<std::mutex> lk(p.mu_);
                p.cv_.wait_until(lk, std::chrono::time_point_cast<std::chrono::steady_clock::duration>(due),
                                 [&] { return p.cancel_.load() || p.hurry_.load() || full_speed_.load(); });
                // Each piece books its time at the rate of the moment: slower while requests read experts.
                const bool busy = opt_.disk_busy && opt_.disk_busy();
                const double rate = static_cast<double>(opt_.write_bytes_per_s) / (busy ? kBusyRateDivisor : 1);
                due = std::max(due, std::chrono::steady_clock::now()) + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                                            std::chrono::duration<double>(static_cast<double>(piece) / rate));
            }
            if (p.cancel_) return false;
            XXH3_64bits_update(hash.get(), b + off, piece);
            if (!write_exact(fd, b + off, piece)) {
                error = std::strerror(errno);
                return false;
            }
            off += piece;
            written += piece;
            const uint64_t end = kRecordHeaderBytes + written;
            if (end - synced >= kSyncEvery) {  // no burst of dirty pages later, and no page cache kept
                ::sync_file_range(fd, static_cast<off_t>(synced), static_cast<off_t>(end - synced),
                                  SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
                ::posix_fadvise(fd, static_cast<off_t>(synced), static_cast<off_t>(end - synced), POSIX_FADV_DONTNEED);
                synced = end;
            }
        }
        return true;
    };
    const SequenceCache& src = *job.src;
    bool ok = put(job.tokens.data(), job.tokens.size() * 4) && put(positions.data(), positions.size() * 4);
    // A ring layer: zeros below its window (no later token sees those rows), then the window copied at save.
    const int window_lo = n - std::min(n, std::max(window_ - 1, 0));
    const std::vector<uint8_t> zeros(std::min<size_t>(kPiece, src.has_ring() ? kPiece : 0));
    auto put_zeros = [&](uint64_t len) {
        bool fine = true;
        for (uint64_t piece = 0; fine && len > 0; len -= piece) fine = put(zeros.data(), piece = std::min<uint64_t>(len, zeros.size()));
        return fine;
    };
    size_t window_off = 0;
    for (size_t l = 0; ok && l < layout_.k_row.size(); ++l) {
        if (!src.ring[l]) {
            ok = put(src.k[l].data(), uint64_t(n) * layout_.k_row[l]) && put(src.v[l].data(), uint64_t(n) * layout_.v_row[l]) &&
                 put(src.ix[l].data(), uint64_t(n) * layout_.ix_row[l]);
            continue;
        }
        const uint64_t kr = layout_.k_row[l], vr = layout_.v_row[l], stride = kr + vr;
        ok = put_zeros(uint64_t(window_lo) * kr);
        for (int p = window_lo; ok && p < n; ++p) ok = put(job.window.data() + window_off + (p - window_lo) * stride, kr);
        ok = ok && put_zeros(uint64_t(window_lo) * vr);
        for (int p = window_lo; ok && p < n; ++p) ok = put(job.window.data() + window_off + (p - window_lo) * stride + kr, vr);
        window_off += static_cast<size_t>(n - window_lo) * stride;
    }
    for (size_t i = 0; ok && i < job.snapshots.size(); ++i) ok = put(job.snapshots[i].state.data(), layout_.recurrent_bytes);
    if (!ok) return give_up(error);
    {  // every row read: the slot may change them now, while the record is closed and renamed
        std::lock_guard<std::mutex> lk(p.mu_);
        p.released_ = true;
        p.cv_.notify_all();
    }
    RecordHeader h;
    h.identity = layout_.identity;
    h.layout = layout_.layout_hash;
    h.n_tokens = static_cast<uint32_t>(n);
    h.n_snapshots = static_cast<uint32_t>(positions.size());
    h.payload_bytes = written;
    h.index_hash = ihash;
    h.payload_hash = XXH3_64bits_digest(hash.get());
    h.created_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    h.encode(raw);
    if (::pwrite(fd, raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw) || ::fdatasync(fd) != 0) return give_up(std::strerror(errno));
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (::rename(tmp.c_str(), path(final_name).c_str()) != 0) {
        log_("prompt cache: cannot rename " + tmp + ": " + std::strerror(errno) + " (prefix not saved)");
        ::unlink(tmp.c_str());
        return false;
    }
    if (const int dfd = ::open(opt_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {  // the rename itself
        ::fsync(dfd);
        ::close(dfd);
    }
    std::lock_guard<std::mutex> lk(mu_);
    // Records this one extends are redundant: any prefix of theirs restores from it, snapshots included.
    for (size_t i = entries_.size(); i-- > 0;) {
        const RecordIndex& e = entries_[i].index;
        const bool extends = e.tokens.size() < job.tokens.size() && common_prefix(e.tokens, job.tokens) == e.tokens.size() &&
                             std::all_of(e.snapshot_pos.begin(), e.snapshot_pos.end(),
                                         [&](int32_t q) { return std::count(positions.begin(), positions.end(), q) > 0; });
        if (extends) drop(i);
    }
    Entry en{final_name, RecordIndex{std::move(job.tokens), std::move(positions), bytes, h.payload_hash},
             std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count()};
    entries_.push_back(std::move(en));
    stats_.records++;
    stats_.bytes += bytes;
    stats_.saved++;
    stats_.saved_bytes += bytes;
    stats_.write_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    return true;
}

namespace {
double seconds_saved(const PromptCacheStats& s, double prompt_s_per_token) {
    return std::max(0.0, static_cast<double>(s.restored_tokens.load()) * prompt_s_per_token - static_cast<double>(s.restore_ns.load()) / 1e9);
}
}  // namespace

std::string prompt_cache_metrics(const PromptCache& cache, double prompt_s_per_token) {
    const PromptCacheStats& s = cache.stats();
    std::string m;
    auto metric = [&](const char* name, const char* type, const char* help, double v) { m += prometheus_metric(name, type, help, v); };
    metric("moestream_prompt_cache_records", "gauge", "Prompt prefixes saved on disk (this model's).", static_cast<double>(s.records.load()));
    metric("moestream_prompt_cache_bytes", "gauge", "Bytes of this model's prompt-cache records on disk.", static_cast<double>(s.bytes.load()));
    metric("moestream_prompt_cache_limit_bytes", "gauge", "--prompt-cache-size.", static_cast<double>(cache.options().max_bytes));
    metric("moestream_prompt_cache_saved_total", "counter", "Prefixes written to the prompt cache.", static_cast<double>(s.saved.load()));
    metric("moestream_prompt_cache_saved_bytes_total", "counter", "Bytes written to the prompt cache.", static_cast<double>(s.saved_bytes.load()));
    metric("moestream_prompt_cache_save_cancelled_total", "counter", "Saves given up because their slot needed its rows.",
           static_cast<double>(s.cancelled.load()));
    metric("moestream_prompt_cache_save_hurried_total", "counter", "Saves finished at full speed because their slot needed its rows.",
           static_cast<double>(s.hurried.load()));
    metric("moestream_prompt_cache_restored_total", "counter", "Prefixes restored from disk instead of evaluated.",
           static_cast<double>(s.restored.load()));
    metric("moestream_prompt_cache_restored_tokens_total", "counter", "Prompt tokens restored from disk.",
           static_cast<double>(s.restored_tokens.load()));
    metric("moestream_prompt_cache_restore_seconds_total", "counter", "Time spent reading prefixes back.",
           static_cast<double>(s.restore_ns.load()) / 1e9);
    metric("moestream_prompt_cache_rejected_total", "counter", "Damaged or foreign records ignored.", static_cast<double>(s.rejected.load()));
    metric("moestream_prompt_cache_evicted_total", "counter", "Records dropped for room or because a longer one holds them.",
           static_cast<double>(s.evicted.load()));
    metric("moestream_prompt_cache_seconds_saved", "gauge", "Estimated prompt evaluation time the restores saved.",
           seconds_saved(s, prompt_s_per_token));
    return m;
}

nlohmann::json prompt_cache_json(const PromptCache& cache, double prompt_s_per_token) {
    const PromptCacheStats& s = cache.stats();
    return {{"records", s.records.load()},
            {"bytes", s.bytes.load()},
            {"limit_bytes", cache.options().max_bytes},
            {"saved", s.saved.load()},
            {"restored", s.restored.load()},
            {"restored_tokens", s.restored_tokens.load()},
            {"rejected", s.rejected.load()},
            {"seconds_saved", seconds_saved(s, prompt_s_per_token)}};
}

}  // namespace moe

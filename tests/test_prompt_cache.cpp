// The prompt cache on disk (serve --prompt-cache): a prefix restored from a record gives the logits evaluating
// it gives, on attention, MLA and recurrent models and in quantized cache types; records survive a new
// instance (a restart), are bounded in bytes (least recently used first), superseded by longer ones, and a
// damaged, foreign or unfinished one is ignored with a line and counted; a save gives way to its slot.
#include <sys/stat.h>
#include <xxhash.h>

#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/commands.h"
#include "engine/forward/runner.h"
#include "engine/kernels/kv_cache_types.h"
#include "engine/model/loader.h"
#include "engine/server/prompt_cache.h"
#include "tune/check.h"
#include "tests/test_support.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string make(const test::TempDir& dir, const std::string& arch) {
    const std::string out = dir / (arch + ".gguf");
    std::vector<std::string> args = {"mkmodel", "--arch",     arch, "--layers",        "3",      "--embd",    "128",   "--heads",
                                     "4",       "--kv-heads", "2",  "--head-dim",      "64",     "--experts", "8",     "--experts-used",
                                     "2",       "--ffn",      "64", "--vocab-builtin", "--seed", "7",         "--out", out};
    if (arch == "deepseek2") args.insert(args.end(), {"--qk-rope", "32"});
    EXPECT_EQ(cli::dispatch(args), 0);
    return out;
}

std::vector<int32_t> tokens(int n, int seed, int vocab) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 7919 + seed * 104729 + 13) % vocab);
    return t;
}

struct Log {
    std::vector<std::string> lines;
    std::function<void(const std::string&)> fn() {
        return [this](const std::string& l) { lines.push_back(l); };
    }
    bool has(const std::string& s) const {
        for (const auto& l : lines)
            if (l.find(s) != std::string::npos) return true;
        return false;
    }
};

PromptCacheOptions options(const std::string& dir, int min_tokens = 16) {
    return {.dir = dir, .max_bytes = 64ull << 20, .write_bytes_per_s = 0, .min_tokens = min_tokens, .disk_busy = {}};
}

size_t files_in(const std::string& dir, const std::string& ext) {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ext;
    return n;
}

// Evaluates `prefix` (a snapshot at its end on recurrent models) and saves it, flushed to disk.
void save_prefix(PromptCache& pc, Runner& r, const std::vector<int32_t>& prefix) {
    r.truncate(0);
    r.eval(prefix);
    r.checkpoint();
    auto p = pc.save(prefix, r.sequence_cache(), r.checkpoints());
    ASSERT_TRUE(p);
    pc.flush(30);
    ASSERT_TRUE(p->done());
}

class PromptCacheModels : public ::testing::TestWithParam<std::string> {};

// A restart: a new PromptCache over the same directory restores the prefix into another runner, whose next
// logits are bit for bit those of the runner that evaluated it (same rows, same snapshots).
TEST_P(PromptCacheModels, RestoredPrefixGivesTheLogitsOfEvaluatingIt) {
    test::TempDir dir;
    const std::string param = GetParam(), arch = param.substr(0, param.find(':'));
    const GgmlType ct = param.find(':') == std::string::npos ? GgmlType::F16 : *kernels::parse_kv_cache_type(param.substr(param.find(':') + 1));
    const GgufModel file = open_gguf_model(make(dir, arch));
    auto model = load_model(file);
    const int V = static_cast<int>(model->hp.n_vocab);
    const RunnerOptions ro{.n_ctx = 256, .n_threads = 2, .cache_type_k = ct, .cache_type_v = ct};
    const std::vector<int32_t> prompt = tokens(150, 1, V);
    const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + 100), rest(prompt.begin() + 100, prompt.end());
    const std::string cache_dir = dir / "pc";
    Runner a(*model, ro);
    {
        Log log;
        PromptCache pc(options(cache_dir), 42, a.sequence_cache(), log.fn());
        save_prefix(pc, a, prefix);
        EXPECT_EQ(pc.stats().saved.load(), 1u);
        EXPECT_EQ(files_in(cache_dir, ".mspc"), 1u);
        EXPECT_EQ(fs::file_size(fs::directory_iterator(cache_dir)->path()), pc.record_bytes(100, a.has_recurrent_state() ? 1 : 0));
    }
    a.eval(rest);
    const std::vector<float> want(a.logits(), a.logits() + V);

    Log log;
    Runner b(*model, ro);
    PromptCache pc(options(cache_dir), 42, b.sequence_cache(), log.fn());
    EXPECT_TRUE(log.has(": 1 records")) << (log.lines.empty() ? "" : log.lines[0]);
    const auto m = pc.best_match(prompt, static_cast<int>(prompt.size()) - 1, b.has_recurrent_state());
    ASSERT_TRUE(m);
    EXPECT_EQ(m->tokens, 100);
    bool written = false;
    auto snapshots = pc.restore(*m, b.sequence_cache(), written);
    EXPECT_TRUE(written);
    ASSERT_TRUE(snapshots);
    b.adopt_prefix(m->tokens, std::move(*snapshots));
    EXPECT_EQ(b.n_past(), 100);
    b.eval(rest);
    const std::vector<float> got(b.logits(), b.logits() + V);
    EXPECT_EQ(got, want);
    EXPECT_EQ(pc.stats().restored.load(), 1u);
    EXPECT_EQ(pc.stats().restored_tokens.load(), 100u);

    // A shorter shared prefix: attention rows restore any length; a recurrent state only where a snapshot is.
    std::vector<int32_t> other = prompt;
    other[60] = (other[60] + 1) % V;
    const auto part = pc.best_match(other, static_cast<int>(other.size()) - 1, b.has_recurrent_state());
    if (b.has_recurrent_state()) EXPECT_FALSE(part);
    else {
        ASSERT_TRUE(part);
        EXPECT_EQ(part->tokens, 60);
    }
}

INSTANTIATE_TEST_SUITE_P(Archs, PromptCacheModels, ::testing::Values("qwen3moe", "deepseek2", "qwen35moe", "qwen3moe:q8_0", "deepseek2:q4_0"),
                         [](const auto& info) {
                             std::string n = info.param;
                             for (char& ch : n)
                                 if (ch == ':') ch = '_';
                             return n;
                         });

class PromptCacheFiles : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new test::TempDir;
        file_ = new GgufModel(open_gguf_model(make(*dir_, "qwen3moe")));
        model_ = load_model(*file_).release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete file_;
        delete dir_;
    }
    static inline test::TempDir* dir_ = nullptr;
    static inline GgufModel* file_ = nullptr;
    static inline Model* model_ = nullptr;
    int V() const { return static_cast<int>(model_->hp.n_vocab); }
};

TEST_F(PromptCacheFiles, DamagedForeignAndUnfinishedRecordsAreIgnoredAndCounted) {
    test::TempDir dir;
    const std::string cache_dir = dir / "pc";
    Runner r(*model_, {.n_ctx = 128, .n_threads = 2});
    const std::vector<int32_t> prefix = tokens(64, 2, V());
    {
        Log log;
        PromptCache pc(options(cache_dir), 42, r.sequence_cache(), log.fn());
        save_prefix(pc, r, prefix);
    }
    const fs::path record = fs::directory_iterator(cache_dir)->path();
    {  // another model's server over the same directory: ignored, counted, left alone
        Log log;
        PromptCache pc(options(cache_dir), 43, r.sequence_cache(), log.fn());
        EXPECT_EQ(pc.stats().records.load(), 0u);
        EXPECT_EQ(pc.stats().rejected.load(), 1u);
        EXPECT_TRUE(log.has("1 of another model, cache layout or version (ignored)")) << log.lines[0];
        EXPECT_FALSE(pc.best_match(prefix, 63, false));
        EXPECT_TRUE(fs::exists(record));
    }
    {  // another cache type: another layout
        Log log;
        const SequenceCache q8 = SequenceCache::make(*model_, 1, {GgmlType::Q8_0, GgmlType::Q8_0});
        PromptCache pc(options(cache_dir), 42, q8, log.fn());
        EXPECT_EQ(pc.stats().rejected.load(), 1u);
    }
    // Another build's record (a later format version, its header sound) is left alone; a FIFO named like a
    // record (anyone may write the directory) is skipped, not waited on.
    {
        std::ifstream in(record, std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
        uint32_t version = 2;
        std::memcpy(bytes.data() + 8, &version, 4);
        const uint64_t self = XXH3_64bits(bytes.data(), 88);
        std::memcpy(bytes.data() + 88, &self, 8);
        std::ofstream(fs::path(cache_dir) / "newer.mspc", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    ASSERT_EQ(::mkfifo((fs::path(cache_dir) / "fifo.mspc").c_str(), 0644), 0);
    {
        Log log;
        PromptCache pc(options(cache_dir), 42, r.sequence_cache(), log.fn());
        EXPECT_EQ(pc.stats().records.load(), 1u);
        EXPECT_TRUE(log.has("fifo.mspc: not a regular file (skipped)"));
        EXPECT_TRUE(log.has("1 of another model, cache layout or version (ignored)")) << log.lines.back();
        EXPECT_TRUE(fs::exists(fs::path(cache_dir) / "newer.mspc"));
        // The record goes away between the match and the read: nothing written, the slot keeps its prefix.
        const auto m = pc.best_match(prefix, 63, false);
        ASSERT_TRUE(m);
        fs::rename(record, fs::path(cache_dir) / "aside");
        Runner fresh(*model_, {.n_ctx = 128, .n_threads = 2});
        bool written = true;
        EXPECT_FALSE(pc.restore(*m, fresh.sequence_cache(), written));
        EXPECT_FALSE(written);
        EXPECT_TRUE(log.has("(skipped)"));
        fs::rename(fs::path(cache_dir) / "aside", record);
    }
    fs::remove(fs::path(cache_dir) / "newer.mspc");
    fs::remove(fs::path(cache_dir) / "fifo.mspc");
    // A crash mid-write left a temporary file (its writer is gone); a byte of the payload flipped on disk.
    std::ofstream(fs::path(cache_dir) / ".tmp-999999999-1.mspc") << "partial";
    {
        std::fstream f(record, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(fs::file_size(record) - 5));
        f.put('\x5a');
    }
    Log log;
    PromptCache pc(options(cache_dir), 42, r.sequence_cache(), log.fn());
    EXPECT_TRUE(log.has("1 unfinished writes removed")) << log.lines.back();
    EXPECT_FALSE(fs::exists(fs::path(cache_dir) / ".tmp-999999999-1.mspc"));
    EXPECT_EQ(pc.stats().records.load(), 1u);  // the index (tokens) is intact: the payload fails on restore
    const auto m = pc.best_match(prefix, 63, false);
    ASSERT_TRUE(m);
    Runner fresh(*model_, {.n_ctx = 128, .n_threads = 2});
    bool written = false;
    EXPECT_FALSE(pc.restore(*m, fresh.sequence_cache(), written));
    EXPECT_TRUE(written);  // the rows were read before the checksum said no
    EXPECT_TRUE(log.has("payload checksum mismatch (ignored and removed)"));
    EXPECT_EQ(pc.stats().rejected.load(), 1u);
    EXPECT_EQ(pc.stats().records.load(), 0u);
    EXPECT_FALSE(fs::exists(record));

    // A truncated record is caught by its size at the scan.
    save_prefix(pc, r, prefix);
    const fs::path again = fs::directory_iterator(cache_dir)->path();
    fs::resize_file(again, fs::file_size(again) - 100);
    Log log2;
    PromptCache pc2(options(cache_dir), 42, r.sequence_cache(), log2.fn());
    EXPECT_TRUE(log2.has("does not match its header (removed)"));
    EXPECT_EQ(pc2.stats().records.load(), 0u);
}

TEST_F(PromptCacheFiles, BoundedLeastRecentlyUsedAndSupersededByLongerPrefixes) {
    test::TempDir dir;
    const std::string cache_dir = dir / "pc";
    Runner r(*model_, {.n_ctx = 256, .n_threads = 2});
    Log log;
    PromptCacheOptions o = options(cache_dir);
    {
        PromptCache probe(o, 42, r.sequence_cache(), log.fn());
        o.max_bytes = probe.record_bytes(64, 0) * 2 + probe.record_bytes(64, 0) / 2;  // room for two
    }
    PromptCache pc(o, 42, r.sequence_cache(), log.fn());
    const auto a = tokens(64, 10, V()), b = tokens(64, 11, V()), c = tokens(64, 12, V());
    save_prefix(pc, r, a);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct mtimes
    save_prefix(pc, r, b);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // a is used again: b becomes the least recently used.
    Runner other(*model_, {.n_ctx = 256, .n_threads = 2});
    bool written = false;
    ASSERT_TRUE(pc.restore(*pc.best_match(a, 63, false), other.sequence_cache(), written));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    save_prefix(pc, r, c);
    EXPECT_EQ(pc.stats().records.load(), 2u);
    EXPECT_EQ(pc.stats().evicted.load(), 1u);
    EXPECT_TRUE(pc.best_match(a, 63, false));
    EXPECT_FALSE(pc.best_match(b, 63, false));
    EXPECT_TRUE(pc.best_match(c, 63, false));
    EXPECT_LE(pc.stats().bytes.load(), o.max_bytes);

    // Already held: no second record. Extended by 16+ tokens: the longer record replaces the shorter.
    PromptCache big(options(dir / "big"), 42, r.sequence_cache(), log.fn());
    save_prefix(big, r, c);
    EXPECT_FALSE(big.save(c, r.sequence_cache(), {}));
    std::vector<int32_t> longer = c;
    for (int i = 0; i < 40; ++i) longer.push_back((i * 31 + 5) % V());
    r.eval(std::span<const int32_t>(longer.data() + 64, 40));
    auto p = big.save(longer, r.sequence_cache(), {});
    ASSERT_TRUE(p);
    big.flush(30);
    EXPECT_EQ(big.stats().records.load(), 1u);
    EXPECT_EQ(big.stats().evicted.load(), 1u);
    EXPECT_EQ(files_in(dir / "big", ".mspc"), 1u);
    const auto m = big.best_match(c, 63, false);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->tokens, 63);
}

TEST_F(PromptCacheFiles, ASaveGivesWayToItsSlotAndLeavesNoFile) {
    test::TempDir dir;
    const std::string cache_dir = dir / "pc";
    Runner r(*model_, {.n_ctx = 256, .n_threads = 2});
    Log log;
    PromptCacheOptions o = options(cache_dir);
    o.write_bytes_per_s = 4096;  // minutes for this record: still running when cancelled
    PromptCache pc(o, 42, r.sequence_cache(), log.fn());
    const auto t = tokens(200, 3, V());
    r.eval(t);
    auto p = pc.save(t, r.sequence_cache(), {});
    ASSERT_TRUE(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(p->done());
    const auto t0 = std::chrono::steady_clock::now();
    pc.cancel(p);
    EXPECT_TRUE(p->done());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    EXPECT_EQ(pc.stats().cancelled.load(), 1u);
    EXPECT_EQ(pc.stats().records.load(), 0u);
    EXPECT_TRUE(fs::is_empty(cache_dir));

    // The slot's next request: a save under way finishes at full speed when it can, instead of being lost.
    auto q = pc.save(t, r.sequence_cache(), {});
    ASSERT_TRUE(q);
    for (int i = 0; i < 100 && !q->started(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(q->started());
    EXPECT_FALSE(q->done());
    pc.finish_or_cancel(q, 10.0);
    EXPECT_TRUE(q->released());  // the rows are free; the record is being closed
    pc.flush(10);
    EXPECT_TRUE(q->done());
    EXPECT_EQ(pc.stats().hurried.load(), 1u);
    EXPECT_EQ(pc.stats().records.load(), 1u);
    EXPECT_EQ(files_in(cache_dir, ".mspc"), 1u);
}

TEST_F(PromptCacheFiles, UnusableDirectoryIsOneLine) {
    test::TempDir dir;
    Runner r(*model_, {.n_ctx = 16, .n_threads = 1});
    const std::string file = dir / "a-file";
    std::ofstream(file) << "x";
    Log log;
    try {
        PromptCache pc(options(file), 42, r.sequence_cache(), log.fn());
        ADD_FAILURE() << "a file was taken as the cache directory";
    } catch (const PromptCacheError& e) { EXPECT_EQ(std::string(e.what()), "--prompt-cache " + file + " is not a directory"); }
    EXPECT_THROW(PromptCache(options("/proc/self/prompt-cache"), 42, r.sequence_cache(), log.fn()), PromptCacheError);
}

// check's row: what the server would find.
TEST(PromptCacheCheck, RowSaysWhetherTheDirectoryCanHoldTheBound) {
    test::TempDir dir;
    std::ofstream(dir / "file") << "x";
    const CheckRow file = prompt_cache_row(dir / "file", 1 << 20);
    EXPECT_EQ(file.status, CheckStatus::Fail);
    EXPECT_NE(file.measured.find("is not a directory"), std::string::npos) << file.measured;
    const CheckRow absent = prompt_cache_row(dir / "absent", 1 << 20);
    EXPECT_EQ(absent.status, CheckStatus::Warn);
    EXPECT_EQ(absent.fix.rfind("mkdir -p " + (dir / "absent"), 0), 0u) << absent.fix;
    EXPECT_EQ(prompt_cache_row("/var/cache/moestream-never-made/prompts", 1 << 20).status, CheckStatus::Pass);  // systemd makes it
    fs::create_directories(dir / "pc");
    std::ofstream(dir / "pc/a.mspc") << std::string(1000, 'x');
    const CheckRow ok = prompt_cache_row(dir / "pc", 1 << 20);
    EXPECT_EQ(ok.status, CheckStatus::Pass) << ok.measured;
    EXPECT_EQ(ok.measured.rfind("1 records, ", 0), 0u) << ok.measured;
    const CheckRow too_big = prompt_cache_row(dir / "pc", uint64_t{1} << 60);  // an exabyte: no filesystem here has it
    EXPECT_EQ(too_big.status, CheckStatus::Warn);
    EXPECT_EQ(too_big.fix.rfind("--prompt-cache-size ", 0), 0u) << too_big.fix;
}

}  // namespace
}  // namespace moe

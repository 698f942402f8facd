// Streaming experts from disk: results identical to the all-in-RAM path at budgets far below the expert
// bytes, on io_uring and on the pread fallback; budget refusal; injected read errors and a truncated file
// fail the request with a clear error and leave the engine usable; O_DIRECT leaves no page cache behind.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>

#include "cli/commands.h"
#include "engine/model/model_facts.h"
#include "engine/forward/runner.h"
#include "engine/model/loader.h"
#include "cli/engine_setup.h"
#include "tests/budget.h"
#include "engine/runtime/cache_sim.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace moe {
namespace {

std::string make_model(const test::TempDir& dir, const std::string& type) {
    std::string out = dir / ("s-" + type + ".gguf");
    EXPECT_EQ(cli::dispatch({"mkmodel", "--layers",
                             "3",       "--embd",
                             "256",     "--heads",
                             "4",       "--kv-heads",
                             "2",       "--head-dim",
                             "64",      "--experts",
                             "16",      "--experts-used",
                             "4",       "--ffn",
                             "256",     "--vocab-builtin",
                             "--type",  type,
                             "--seed",  "11",
                             "--out",   out}),
              0);
    return out;
}

StreamingOptions small_cache(const GgufModel& file, double fraction) {
    ModelFacts f = model_facts(file);
    StreamingOptions o;
    o.cache_bytes = static_cast<uint64_t>(static_cast<double>(f.expert_bytes) * fraction);
    o.read_size = 64 << 10;
    o.io.queue_depth = 16;
    return o;
}

TEST(Streaming, SameLogitsAsInRamAtSmallBudgets) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "q4_k_m"));
    auto ram = load_model(file);
    const std::vector<int32_t> prompt = {5, 77, 200, 31, 31, 9, 120, 64, 3, 250, 17, 99};
    const auto want = test::greedy_logits(*ram, prompt, 12);
    for (bool uring : {true, false}) {
        for (EvictionPolicy policy : {EvictionPolicy::Lru, EvictionPolicy::LruFrequency}) {
            StreamingOptions o = small_cache(file, 0.15);  // about 7 of 48 experts' slots
            o.io.use_uring = uring;
            o.policy = policy;
            auto m = load_model(file, {.experts = cli::streaming_experts(o)});
            auto& src = dynamic_cast<StreamingExpertSource&>(*m->experts);
            EXPECT_LT(src.bytes_in_ram(), model_facts(file).expert_bytes / 4);
            EXPECT_EQ(test::greedy_logits(*m, prompt, 12), want) << "uring=" << uring << " policy=" << policy_name(policy);
            const auto st = src.stats();
            EXPECT_GT(st.misses, 0u);
            EXPECT_GT(st.bytes_read, 0u);
            EXPECT_GT(st.evictions, 0u);
            EXPECT_EQ(src.uring(), uring);
        }
    }
}

TEST(Streaming, SqpollAndRegisteredFilesGiveTheSameLogits) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "q8_0"));
    const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
    StreamingOptions o = small_cache(file, 0.2);
    o.io.sqpoll = true;
    auto m = load_model(file, {.experts = cli::streaming_experts(o)});
    auto& src = dynamic_cast<StreamingExpertSource&>(*m->experts);
    ASSERT_TRUE(src.uring());
    // SQPOLL may be refused (older kernels without privilege); then the note says so and reads still work.
    if (!src.sqpoll()) { EXPECT_NE(src.io_note().find("SQPOLL refused"), std::string::npos) << src.io_note(); }
    EXPECT_EQ(test::greedy_logits(*m, prompt, 6), test::greedy_logits(*load_model(file), prompt, 6));
    EXPECT_GT(src.stats().bytes_read, 0u);
}

// Weight memory: huge-page aligned when large, never less aligned than asked (O_DIRECT needs 4 KiB), movable.
TEST(WeightMemory, AlignmentFollowsSizeAndRequest) {
    WeightMemory small(100, 4096), plain(100), big(3u << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(plain.data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % WeightMemory::kHuge, 0u);
    big.data()[(3u << 20) - 1] = 7;  // the whole size is usable
    WeightMemory moved = std::move(big);
    EXPECT_EQ(big.data(), nullptr);
    EXPECT_EQ(moved.size(), 3u << 20);
    EXPECT_EQ(moved.data()[(3u << 20) - 1], 7);
}

// The KV cache's rows take the same memory: a long context's rows on huge-page boundaries, short ones on a line.
TEST(WeightMemory, VectorsOfRowsTakeTheSameAlignment) {
    std::vector<uint8_t, StreamedAllocator<uint8_t>> rows(5u << 20, 1), few(1000, 2);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(rows.data()) % WeightMemory::kHuge, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(few.data()) % 64, 0u);
    rows.resize(9u << 20, 3);  // reallocation keeps the contents and the alignment
    EXPECT_EQ(reinterpret_cast<uintptr_t>(rows.data()) % WeightMemory::kHuge, 0u);
    EXPECT_EQ(rows[(5u << 20) - 1], 1);
    EXPECT_EQ(rows[(9u << 20) - 1], 3);
    auto copy = rows;
    EXPECT_EQ(copy, rows);
}

TEST(Streaming, MinimumBudgetIsStated) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "q8_0"));
    StreamingOptions o;
    o.cache_bytes = 64 << 10;
    try {
        load_model(file, {.experts = cli::streaming_experts(o)});
        FAIL() << "accepted";
    } catch (const ModelError& e) { EXPECT_NE(std::string(e.what()).find("the minimum is"), std::string::npos) << e.what(); }
    // Exactly the minimum works: one layer's selected experts, a prompt batch needing more waits for slots.
    auto probe = load_model(file, {.experts = cli::streaming_experts(small_cache(file, 1.0))});
    const uint64_t slot = dynamic_cast<StreamingExpertSource&>(*probe->experts).slot_bytes();
    o.cache_bytes = slot * 4;
    auto m = load_model(file, {.experts = cli::streaming_experts(o)});
    auto ram = load_model(file);
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    EXPECT_EQ(test::greedy_logits(*m, prompt, 4), test::greedy_logits(*ram, prompt, 4));
}

TEST(Streaming, ReadErrorsFailTheRequestAndTheEngineRecovers) {
    test::TempDir dir;
    GgufModel file = open_gguf_model(make_model(dir, "q8_0"));
    auto fail = std::make_shared<std::atomic<bool>>(false);
    StreamingOptions o = small_cache(file, 0.2);
    o.io.fault = [fail](uint64_t, uint32_t) { return fail->load() ? -EIO : 0; };
    auto m = load_model(file, {.experts = cli::streaming_experts(o)});
    auto ram = load_model(file);
    const std::vector<int32_t> prompt = {10, 20, 30, 40};
    Runner r(*m, {.n_ctx = 64, .n_threads = 1, .n_batch = 8});
    fail->store(true);
    try {
        r.eval(prompt);
        FAIL() << "a failing read was not reported";
    } catch (const ModelError& e) {
        EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("at offset"), std::string::npos) << e.what();
    }
    fail->store(false);
    EXPECT_EQ(test::greedy_logits(*m, prompt, 3), test::greedy_logits(*ram, prompt, 3));
}

TEST(Streaming, TruncatedModelFileIsAClearError) {
    test::TempDir dir;
    const std::string path = make_model(dir, "q8_0");
    GgufModel file = open_gguf_model(path);
    auto m = load_model(file, {.experts = cli::streaming_experts(small_cache(file, 0.2))});
    // The file is cut while "serving": the last layer's experts are gone.
    const auto* last = file.find_tensor("blk.2.ffn_down_exps.weight");
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(last->file_offset + 4096)), 0);
    Runner r(*m, {.n_ctx = 64, .n_threads = 1, .n_batch = 8});
    std::vector<int32_t> prompt = {10, 20, 30, 40};
    try {
        r.eval(prompt);
        FAIL() << "a truncated file was not reported";
    } catch (const ModelError& e) { EXPECT_NE(std::string(e.what()).find("layer 2"), std::string::npos) << e.what(); }
}

// Pages of the routed-expert tensors' byte ranges that are in the page cache, and how many there are; names
// the first cached page to tell readahead spill (a tensor's first pages) from a read that went around O_DIRECT.
struct CachedPages {
    size_t cached = 0, total = 0;
    std::string first;
};
CachedPages cached_expert_pages(const std::string& path, const GgufModel& file) {
    CachedPages out;
    int fd = ::open(path.c_str(), O_RDONLY);
    struct stat st {};
    ::fstat(fd, &st);
    void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> vec((static_cast<size_t>(st.st_size) + page - 1) / page);
    EXPECT_EQ(::mincore(map, static_cast<size_t>(st.st_size), vec.data()), 0);
    for (const auto& t : file.tensors) {
        if (!is_routed_expert_tensor(t.name)) continue;
        for (uint64_t p = (t.file_offset + page - 1) / page; (p + 1) * page <= t.file_offset + t.nbytes; ++p) {
            out.total++;
            out.cached += vec[p] & 1;
            if ((vec[p] & 1) && out.first.empty())
                out.first = t.name + " page " + std::to_string(p - t.file_offset / page) + " of " + std::to_string(t.nbytes / page);
        }
    }
    ::munmap(map, static_cast<size_t>(st.st_size));
    ::close(fd);
    return out;
}

void drop_page_cache(const std::string& path) {  // what writing the file left behind
    int fd = ::open(path.c_str(), O_RDONLY);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

// Streamed experts are read with O_DIRECT, and loading the resident weights must not pull expert bytes in by
// readahead either (pages still in flight when the loader drops the cache would stay).
TEST(Streaming, DirectReadsLeaveNoPageCache) {
    test::TempDir on_disk;
    const std::string path = make_model(on_disk, "q8_0");
    drop_page_cache(path);
    GgufModel file = open_gguf_model(path);
    auto m = load_model(file, {.experts = cli::streaming_experts(small_cache(file, 0.3))});
    auto& src = dynamic_cast<StreamingExpertSource&>(*m->experts);
    if (!src.direct_io()) GTEST_SKIP() << "O_DIRECT refused here: " << src.io_note();
    test::greedy_logits(*m, {1, 2, 3, 4, 5, 6}, 6);
    ASSERT_GT(src.stats().bytes_read, 0u);
    const CachedPages c = cached_expert_pages(path, file);
    EXPECT_GT(c.total, 0u);
    EXPECT_EQ(c.cached, 0u) << c.cached << " of " << c.total << " expert pages in the page cache, first: " << c.first;
}

// Every expert in RAM: the file's bytes are copied once, not kept a second time in the page cache.
TEST(Streaming, LoadingEveryExpertIntoRamLeavesNoPageCache) {
    test::TempDir on_disk;
    const std::string path = make_model(on_disk, "q8_0");
    drop_page_cache(path);
    GgufModel file = open_gguf_model(path);
    {
        int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT);
        if (probe < 0) GTEST_SKIP() << on_disk.path << ": O_DIRECT refused here (" << std::strerror(errno) << ")";
        ::close(probe);
    }
    auto m = load_model(file, {});
    ASSERT_EQ(dynamic_cast<StreamingExpertSource*>(m->experts.get()), nullptr);
    const CachedPages c = cached_expert_pages(path, file);
    EXPECT_GT(c.total, 0u);
    EXPECT_EQ(c.cached, 0u) << c.cached << " of " << c.total << " expert pages in the page cache, first: " << c.first;
}

// The resident loader's reads: any range, aligned or not, up to the file's last byte, gives the file's bytes,
// with O_DIRECT (a disk file system) and through the page cache (tmpfs refuses O_DIRECT); past the end is an
// error naming the file and the range.
TEST(WeightReads, AnyRangeGivesTheFileBytesDirectOrBuffered) {
    test::TempDir disk;
    std::vector<std::string> dirs = {disk.path.string()};
    if (fs::is_directory("/dev/shm")) dirs.push_back("/dev/shm");
    std::mt19937_64 rng(7);
    std::vector<uint8_t> bytes(3 * 4096 * 1024 + 4096 * 5 + 123);  // past one 8 MiB bounce buffer, ragged end
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (const auto& d : dirs) {
        const std::string path = (fs::path(d) / ("moestream-read-" + std::to_string(::getpid()))).string();
        { std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())); }
        std::vector<std::pair<uint64_t, uint64_t>> ranges = {
            {0, bytes.size()}, {0, 1}, {4095, 2}, {4096, 4096}, {bytes.size() - 1, 1}, {bytes.size() - 5000, 5000}, {123, (8u << 20) + 1}};
        for (int i = 0; i < 40; ++i) {
            const uint64_t off = rng() % bytes.size();
            ranges.emplace_back(off, 1 + rng() % (bytes.size() - off));
        }
        for (const auto& [off, n] : ranges) {
            std::vector<uint8_t> got(n, 0xEE);
            read_file_range(path, off, n, got.data());
            ASSERT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + static_cast<std::ptrdiff_t>(off))) << d << ": " << off << " + " << n;
        }
        std::vector<uint8_t> sink(200);
        try {
            read_file_range(path, bytes.size() - 100, 200, sink.data());
            ADD_FAILURE() << d << ": a read past the end was not reported";
        } catch (const ModelError& e) {
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("short read"), std::string::npos) << e.what();
        }
        fs::remove(path);
    }
}

}  // namespace
}  // namespace moe

#include <array>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

namespace moe {
namespace {

// stdout only: these commands print JSON there and their log on stderr.
std::pair<int, std::string> run_quiet(const std::string& args) { return test::run_moestream(args, false); }

TEST(StreamingCli, RunGivesTheSameTokensStreamedAndProfilePinsTheHottest) {
    test::TempDir dir;
    const std::string model = make_model(dir, "q4_k");
    auto [c1, in_ram] = run_quiet("run -m " + model + " -p 'The quick brown fox' -n 24 --json --ctx 256");
    ASSERT_EQ(c1, 0);
    // Resident weights + the KV cache for 256 positions (under 1 MiB) + 3 MiB of expert cache (of 9 MiB), and
    // the engine's working memory.
    const std::string budget = test::budget_plus_working(model, model_facts(open_gguf_model(model)).resident_bytes + (4u << 20), 256);
    auto [c2, streamed] = run_quiet("run -m " + model + " -p 'The quick brown fox' -n 24 --json --ctx 256 --ram-budget " + budget);
    ASSERT_EQ(c2, 0) << streamed;
    EXPECT_EQ(nlohmann::json::parse(streamed)["tokens"], nlohmann::json::parse(in_ram)["tokens"]);

    std::ofstream(dir / "prompts.txt") << "The quick brown fox\nHello there\n\nA third prompt, longer than the others\n";
    auto [c3, _] = run_quiet("profile -m " + model + " --ctx 256 --prompts " + (dir / "prompts.txt") + " --tokens 8 --out " + (dir / "profile.yaml"));
    ASSERT_EQ(c3, 0);
    auto prof = cli::read_profile(dir / "profile.yaml");
    ASSERT_FALSE(prof.empty());
    std::ifstream pf(dir / "profile.yaml");
    std::string text((std::istreambuf_iterator<char>(pf)), {});
    EXPECT_NE(text.find("prompts: 3"), std::string::npos) << text.substr(0, 200);
    auto [c4, pinned] = run_quiet("run -m " + model + " -p 'The quick brown fox' -n 24 --json --ctx 256 --ram-budget " + budget + " --profile " +
                                  (dir / "profile.yaml"));
    ASSERT_EQ(c4, 0) << pinned;
    EXPECT_EQ(nlohmann::json::parse(pinned)["tokens"], nlohmann::json::parse(in_ram)["tokens"]);
}

TEST(StreamingCli, BenchReportsReadsAgainstFio) {
    test::TempDir dir;
    const std::string model = make_model(dir, "q8_0");
    const std::string svg_path = dir / "run.svg";
    // A third of the experts cached, beside everything else bench holds (its fio, its slot runner).
    const std::string trace_path = dir / "run.trace";
    auto [code, out] = run_quiet("bench -m " + model +
                                 " --cache-fraction 0.33 --tokens 16 --prompt-tokens 8 --fio-seconds 1 --json --parallel 1,2 --plot " + svg_path +
                                 " --routing-trace " + trace_path);
    ASSERT_EQ(code, 0) << out;
    auto j = nlohmann::json::parse(out);
    // The workload's routing beside the result: exactly what the run's own trace file says of it.
    const RoutingWorkload w = measure_workload(read_routing_trace(trace_path));
    EXPECT_EQ(j["routing"]["steps"].get<uint64_t>(), w.steps);
    EXPECT_EQ(j["routing"]["steps"].get<uint64_t>(), 17u) << "the prompt's step and 16 decode steps";
    EXPECT_EQ(j["routing"]["hot10_share"].get<double>(), w.hot10_share);
    EXPECT_EQ(j["routing"]["consecutive_overlap"].get<double>(), w.consecutive_overlap);
    EXPECT_GT(w.hot10_share, 0.0);
    EXPECT_GT(j["expert_bytes_read_per_token"].get<double>(), 0);
    EXPECT_GE(j["cache_hit_rate"].get<double>(), 0.0);
    EXPECT_LE(j["cache_hit_rate"].get<double>(), 1.0);
    EXPECT_GT(j["fio_bytes_per_s"].get<double>(), 0) << out;
    EXPECT_GT(j["engine_read_ratio_of_fio"].get<double>(), 0);
    EXPECT_TRUE(j.contains("bound_formula"));
    // The prompt's time split: attention and feed-forward both ran, and their shares fit inside the eval time.
    const auto& split = j["prompt_split"];
    EXPECT_GT(split["attention"].get<double>(), 0) << split.dump();
    EXPECT_GT(split["feed_forward"].get<double>(), 0) << split.dump();
    EXPECT_LE(split["attention"].get<double>() + split["feed_forward"].get<double>(), 1.0) << split.dump();
    // fio replays exactly the generation's reads: as many as the engine submitted, at a real bandwidth.
    EXPECT_GT(j["fio_replay_bytes_per_s"].get<double>(), 0) << out;
    EXPECT_GT(j["fio_replay_reads"].get<uint64_t>(), 0u);
    EXPECT_GT(j["engine_read_ratio_of_replay"].get<double>(), 0);
    // One row per matmul weight type, largest share first, each measured against the scalar reference.
    const auto& kernels = j["weight_kernels"];
    ASSERT_FALSE(kernels.empty()) << out;
    EXPECT_EQ(kernels[0]["type"], "q8_0");
    double share = 0;
    for (const auto& row : kernels) {
        share += row["share"].get<double>();
        EXPECT_GT(row["scalar_bytes_per_s"].get<double>(), 0) << row.dump();
        EXPECT_GT(row["active_bytes_per_s"].get<double>(), 0) << row.dump();
    }
    EXPECT_NEAR(share, 1.0, 1e-9);
    // Batched decode over slots: a row per slot count, the first the baseline of the byte ratio.
    ASSERT_EQ(j["parallel_slots"].size(), 2u);
    EXPECT_EQ(j["parallel_slots"][0]["expert_bytes_ratio_of_first"].get<double>(), 1.0);
    EXPECT_GT(j["parallel_slots"][1]["gen_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(j["grammar_mask"]["mask_ms_mean"].get<double>(), 0) << j["grammar_mask"].dump();
    // --plot: an SVG with the three curves and fio's reference line on the read panel.
    std::ifstream f(svg_path);
    const std::string svg{std::istreambuf_iterator<char>(f), {}};
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
    size_t curves = 0;
    for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) ++curves;
    EXPECT_EQ(curves, 3u) << svg;
    EXPECT_NE(svg.find("class=\"reference\""), std::string::npos);
    auto [bad, msg] = run_quiet("bench -m " + model + " --ram-budget 1K");
    EXPECT_EQ(bad, 2);
    auto [bad_slots, msg2] = test::run_moestream("bench -m " + model + " --parallel 1,x", true);
    EXPECT_EQ(bad_slots, 2);
    EXPECT_NE(msg2.find("--parallel"), std::string::npos) << msg2;
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// A model in two split files (`-00001-of-00002.gguf`): streamed experts come from both.
TEST(Streaming, SplitFilesStreamLikeOneFile) {
    test::TempDir dir;
    const std::string whole = make_model(dir, "q8_0");
    GgufFile f = read_gguf_header(whole);
    std::vector<GgufTensorData> parts[2];
    for (size_t i = 0; i < f.tensors.size(); ++i) {
        const auto& t = f.tensors[i];
        GgufTensorData d{t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)};
        read_file_range(whole, t.file_offset, t.nbytes, d.bytes.data());
        parts[i < f.tensors.size() / 2 ? 0 : 1].push_back(std::move(d));
    }
    for (uint16_t no = 0; no < 2; ++no) {
        auto kv = no == 0 ? f.kv : std::vector<std::pair<std::string, GgufValue>>{{"general.architecture", GgufValue::string("qwen3moe")}};
        kv.emplace_back("split.count", test::gguf_u16(2));
        kv.emplace_back("split.no", test::gguf_u16(no));
        write_gguf(dir / ("split-0000" + std::to_string(no + 1) + "-of-00002.gguf"), kv, parts[no]);
    }
    GgufModel split = open_gguf_model(dir / "split-00001-of-00002.gguf");
    ASSERT_EQ(split.files.size(), 2u);
    auto ram = load_model(open_gguf_model(whole));
    auto streamed = load_model(split, {.experts = cli::streaming_experts(small_cache(split, 0.2))});
    const std::vector<int32_t> prompt = {4, 8, 15, 16, 23, 42};
    const auto want = test::greedy_logits(*ram, prompt, 6);
    EXPECT_EQ(test::greedy_logits(*streamed, prompt, 6), want);
    EXPECT_GT(streamed->experts->stats().bytes_read, 0u);
    // The expert store gathers experts from both splits into one file beside the first.
    ASSERT_EQ(cli::dispatch({"repack", dir / "split-00001-of-00002.gguf"}), 0);
    auto stored = load_model(split, {.experts = cli::streaming_experts(small_cache(split, 0.2), "auto")});
    EXPECT_EQ(test::greedy_logits(*stored, prompt, 6), want);
    EXPECT_GT(stored->experts->stats().store_loads, 0u);
}

}  // namespace
}  // namespace moe

#include "engine/runtime/block_reader.h"

namespace moe {
namespace {

// A ring that cannot be set up (here: more entries than io_uring takes; in a container whose seccomp refuses
// io_uring, or under qemu-user) leaves the reader on pread without touching the process's other files. Its
// teardown once ran io_uring_queue_exit on the zeroed ring, closing file descriptor 0: stdin, or in a process
// without one the next model file opened, whose expert reads then all failed with EBADF.
TEST(BlockReaderFallback, UnusableRingLeavesOtherDescriptorsOpen) {
    test::TempDir dir;
    const std::string path = dir / "blocks.bin";
    std::vector<uint8_t> bytes(1 << 16);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    // descriptor 0 as some file this test owns, the process's own put back afterwards
    const int saved = ::dup(0);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(null_fd, 0);
    ASSERT_EQ(::dup2(null_fd, 0), 0);
    ::close(null_fd);
    {
        BlockReaderOptions opt;
        opt.queue_depth = 1 << 20;  // 2M entries: io_uring_setup refuses (EINVAL)
        BlockReader reader({path}, opt);
        EXPECT_FALSE(reader.uring()) << reader.mode_note();
        EXPECT_NE(reader.mode_note().find("pread"), std::string::npos) << reader.mode_note();
        EXPECT_NE(::fcntl(0, F_GETFD), -1) << "descriptor 0 closed by the reader's setup";
        void* buf = nullptr;
        ASSERT_EQ(::posix_memalign(&buf, 4096, 8192), 0);
        reader.read(0, 4096, 8192, buf, 42, true);
        const auto done = reader.reap(true);
        ASSERT_EQ(done.size(), 1u);
        EXPECT_EQ(done[0].tag, 42u);
        EXPECT_EQ(done[0].result, 8192);
        EXPECT_EQ(std::memcmp(buf, bytes.data() + 4096, 8192), 0);
        std::free(buf);
    }
    EXPECT_NE(::fcntl(0, F_GETFD), -1) << "descriptor 0 closed by the reader's teardown";
    if (saved >= 0) ::dup2(saved, 0), ::close(saved);
    else ::close(0);
}

}  // namespace
}  // namespace moe

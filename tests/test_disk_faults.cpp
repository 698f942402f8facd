// Disk faults through a real filesystem: the model and its expert store sit on faultfs (tests/faultfs, FUSE),
// which fails or delays reads on command while a live `serve` streams experts from it with its own I/O
// (io_uring, O_DIRECT). A slow disk is waited for; a store record that cannot be read comes from the GGUF;
// a vanished disk fails the requests that need it with a clear error, turns /health and systemd's status to
// degraded, and both recover with the disk, the cache holding no partly read expert; a bad range inside one
// expert fails only the request that needs it while the slot beside it keeps generating; a repack onto a disk
// failing mid-write leaves the old store as it was.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "engine/model/loader.h"
#include "engine/model/model_facts.h"
#include "engine/runtime/expert_store.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/serve_fixture.h"
#include "tests/budget.h"
#include "tests/expert_faults.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace moe {
namespace {

// faultfs mounted at `mnt` over `src` for the object's life.
class FaultFs {
public:
    FaultFs(const std::string& src, const std::string& mnt) : mnt_(mnt) {
#ifdef MOESTREAM_FAULTFS
        pid_ = ::fork();
        if (pid_ == 0) {
            ::freopen("/dev/null", "w", stderr);
            ::execl(MOESTREAM_FAULTFS, MOESTREAM_FAULTFS, src.c_str(), mnt.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
        for (int i = 0; i < 200 && !mounted(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
#else
        (void)src;
#endif
    }
    ~FaultFs() {
        if (pid_ <= 0) return;
        std::system(("fusermount3 -u " + mnt_ + " 2>/dev/null").c_str());
        ::kill(pid_, SIGTERM);
        ::waitpid(pid_, nullptr, 0);
    }
    bool mounted() const { return fs::exists(mnt_ + "/.faultfs"); }
    void command(const std::string& line) const { std::ofstream(mnt_ + "/.faultfs") << line << "\n"; }

private:
    std::string mnt_;
    pid_t pid_ = -1;
};

// Why this host cannot run these tests, or "" when it can.
std::string faultfs_missing() {
#ifndef MOESTREAM_FAULTFS
    return "faultfs not built: libfuse3-dev missing (scripts/setup.sh installs fuse3 and libfuse3-dev)";
#else
    if (::access("/dev/fuse", R_OK | W_OK) != 0) return "/dev/fuse not usable here";
    if (std::system("command -v fusermount3 > /dev/null 2>&1") != 0) return "fusermount3 not installed (scripts/setup.sh installs fuse3)";
    return "";
#endif
}

std::string make_repacked_model(const std::string& dir) {
    const std::string model = dir + "/m.gguf";
    EXPECT_EQ(cli::dispatch({"mkmodel", "--layers",       "3",      "--embd",     "256",   "--heads",
                             "4",       "--kv-heads",     "2",      "--head-dim", "64",    "--experts",
                             "16",      "--experts-used", "4",      "--ffn",      "256",   "--vocab-builtin",
                             "--type",  "q4_k_m",         "--seed", "5",          "--out", model}),
              0);
    EXPECT_EQ(cli::dispatch({"repack", model}), 0);
    return model;
}

// A repacked model in src/ and an empty mount point mnt/ beside it, in a temporary directory.
struct ModelOnDisk {
    test::TempDir dir;
    std::string src = dir / "src", mnt = dir / "mnt", model;
    ModelOnDisk() {
        fs::create_directories(src);
        fs::create_directories(mnt);
        model = make_repacked_model(src);
    }
};

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

double metric(const std::string& metrics, const std::string& name) {
    const size_t p = metrics.find("\n" + name + " ");
    return p == std::string::npos ? -1.0 : std::stod(metrics.substr(p + name.size() + 2));
}

// A datagram socket standing in for systemd's notify socket.
struct NotifySocket {
    test::TempDir dir;
    std::string path = dir / "notify";
    int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    std::string messages;
    NotifySocket() {
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
        EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
        struct timeval tv {
            0, 200000
        };
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    ~NotifySocket() { ::close(fd); }
    // Reads messages until one contains `what` (true) or `seconds` pass.
    bool wait_for(const std::string& what, double seconds) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
        char buf[4096];
        while (std::chrono::steady_clock::now() < end) {
            const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n > 0) {
                const std::string m(buf, static_cast<size_t>(n));
                messages += m + "\n";
                if (m.find(what) != std::string::npos) return true;
            }
        }
        return false;
    }
};

TEST(DiskFaults, LiveServerThroughFailingAndVanishingDisk) {
    if (const std::string why = faultfs_missing(); !why.empty()) GTEST_SKIP() << why;
    const ModelOnDisk disk;
    const std::string &src = disk.src, &mnt = disk.mnt;
    const std::vector<std::string> prompts = {"hello there", "a slow disk", "the store is bad", "the disk is gone away now"};
    auto body = [](const std::string& prompt) { return R"({"model":"m","prompt":")" + prompt + R"(","max_tokens":8,"temperature":0})"; };
    const std::vector<std::string> flags = {"--ram-budget", test::budget_plus_working(src + "/m.gguf", 3u << 20, 256, 1, test::kServeThreads),
                                            "--ctx", "256"};

    // What each prompt gives on a healthy disk.
    std::vector<std::string> want;
    {
        test::Server healthy(src + "/m.gguf", flags);
        ASSERT_NE(healthy.port(), 0) << healthy.log();
        for (const auto& p : prompts) {
            const auto r = test::request(healthy.port(), "POST", "/v1/completions", body(p));
            ASSERT_EQ(r.status, 200) << r.body;
            want.push_back(nlohmann::json::parse(r.body)["choices"][0]["text"].get<std::string>());
        }
    }

    FaultFs ffs(src, mnt);
    ASSERT_TRUE(ffs.mounted()) << "faultfs did not mount at " << mnt;
    NotifySocket notify;
    ::setenv("NOTIFY_SOCKET", notify.path.c_str(), 1);
    test::Server s(mnt + "/m.gguf", flags);
    ::unsetenv("NOTIFY_SOCKET");
    ASSERT_NE(s.port(), 0) << s.log();
    ASSERT_TRUE(notify.wait_for("READY=1", 10)) << notify.messages;
    auto complete = [&](size_t i) { return test::request(s.port(), "POST", "/v1/completions", body(prompts[i])); };
    auto text_of = [](const test::HttpReply& r) { return nlohmann::json::parse(r.body)["choices"][0]["text"].get<std::string>(); };

    auto r = complete(0);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(text_of(r), want[0]);

    // A disk that takes 500 ms per read: slower, never a timeout.
    ffs.command("read-delay 500");
    auto start = std::chrono::steady_clock::now();
    r = complete(1);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(text_of(r), want[1]);
    EXPECT_GT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
    ffs.command("recover");

    // The store's records cannot be read: the same experts come from the GGUF.
    ffs.command("read-eio m.gguf.experts 0 1000000000000");
    r = complete(2);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(text_of(r), want[2]);
    std::string metrics = test::request(s.port(), "GET", "/metrics").body;
    EXPECT_GT(metric(metrics, "moestream_store_read_fallbacks_total"), 0.0) << metrics;
    EXPECT_EQ(metric(metrics, "moestream_disk_degraded"), 0.0) << metrics;
    EXPECT_EQ(test::request(s.port(), "GET", "/health").status, 200);
    ffs.command("recover");

    // The disk vanishes: a request needing experts not in the cache fails, saying why, in the API's shape.
    ffs.command("vanish");
    r = complete(3);
    EXPECT_GE(r.status, 500) << r.body;
    const auto err = nlohmann::json::parse(r.body, nullptr, false);
    ASSERT_FALSE(err.is_discarded()) << r.body;
    EXPECT_NE(err["error"]["message"].get<std::string>().find("Input/output error"), std::string::npos) << r.body;
    auto health = test::request(s.port(), "GET", "/health");
    EXPECT_EQ(health.status, 503) << health.body;
    EXPECT_NE(health.body.find("\"degraded\""), std::string::npos) << health.body;
    EXPECT_TRUE(notify.wait_for("STATUS=degraded", 5)) << notify.messages;
    metrics = test::request(s.port(), "GET", "/metrics").body;
    EXPECT_EQ(metric(metrics, "moestream_disk_degraded"), 1.0) << metrics;
    EXPECT_GT(metric(metrics, "moestream_expert_load_failures_total"), 0.0) << metrics;

    // It comes back: the same request now gives the healthy disk's answer (no partly read expert was kept).
    ffs.command("recover");
    r = complete(3);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(text_of(r), want[3]);
    EXPECT_EQ(test::request(s.port(), "GET", "/health").status, 200);
    EXPECT_TRUE(notify.wait_for("STATUS=serving", 5)) << notify.messages;
    EXPECT_EQ(s.terminate(), 0) << s.log();
    EXPECT_NE(s.log().find("degraded: expert reads fail"), std::string::npos) << s.log();
}

// Two slots decoding together on a live server, the model on faultfs: the bytes inside one expert that request
// A needs while decoding (and B never) fail with EIO. A gets the read error in the API's error shape; B's answer
// is the one it gives on a healthy disk; afterwards B again answers the same.
TEST(DiskFaults, ABadExpertFailsOnlyTheRequestThatNeedsIt) {
    if (const std::string why = faultfs_missing(); !why.empty()) GTEST_SKIP() << why;
    test::TempDir dir;
    const std::string src = dir / "src", mnt = dir / "mnt", model = src + "/m.gguf";
    fs::create_directories(src);
    fs::create_directories(mnt);
    ASSERT_EQ(cli::dispatch({"mkmodel", "--layers",       "2",      "--embd",     "128",   "--heads",
                             "2",       "--kv-heads",     "1",      "--head-dim", "32",    "--experts",
                             "32",      "--experts-used", "2",      "--ffn",      "128",   "--vocab-builtin",
                             "--type",  "q8_0",           "--seed", "4",          "--out", model}),
              0);
    GgufModel file = open_gguf_model(model);
    const auto ram = load_model(file);
    const std::vector<int32_t> prompt_a = {11, 57, 203, 98}, prompt_b = {200, 7, 150, 42, 9};
    const int steps_a = 6, steps_b = 10;
    const test::Alone a = test::run_alone(*ram, prompt_a, steps_a), b = test::run_alone(*ram, prompt_b, steps_b);
    const auto fault = test::fault_only_a_needs(file, a, b, ram->hp.moe.n_expert);
    ASSERT_TRUE(fault) << "no expert separates the two requests: change the prompts";

    FaultFs ffs(src, mnt);
    ASSERT_TRUE(ffs.mounted()) << "faultfs did not mount at " << mnt;
    const ModelFacts f = model_facts(file);
    const uint32_t n_ctx = 160;
    const std::string budget = test::budget_plus_working(model, f.resident_bytes + 3 * f.kv_bytes(n_ctx) + f.expert_bytes / 2, n_ctx, 3,
                                                         test::kServeThreads);
    test::Server s(mnt + "/m.gguf", {"--ram-budget", budget, "--ctx", std::to_string(n_ctx), "--parallel", "3", "--read-size", "64K"});
    ASSERT_NE(s.port(), 0) << s.log();
    ASSERT_NE(s.log().find("experts streamed"), std::string::npos) << s.log();
    ffs.command("read-eio m.gguf " + std::to_string(fault->lo) + " " + std::to_string(fault->hi));
    auto body = [](const std::vector<int32_t>& prompt, int max_tokens) {
        return nlohmann::json{{"model", "m"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}}.dump();
    };
    // A long prompt first keeps the worker busy, so that A and B are admitted together and decode in one batch
    // (A's result does not depend on it: it needs the bad expert alone or batched; B never does).
    std::vector<int32_t> first;
    for (int i = 0; i < 120; ++i) first.push_back((i * 37 + 5) % 250);
    test::HttpReply ra, rb;
    std::thread t0([&] { test::request(s.port(), "POST", "/v1/completions", body(first, 1)); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::thread ta([&] { ra = test::request(s.port(), "POST", "/v1/completions", body(prompt_a, steps_a)); });
    std::thread tb([&] { rb = test::request(s.port(), "POST", "/v1/completions", body(prompt_b, steps_b)); });
    t0.join();
    ta.join();
    tb.join();
    EXPECT_GE(ra.status, 500) << ra.body;
    const auto err = nlohmann::json::parse(ra.body, nullptr, false);
    ASSERT_FALSE(err.is_discarded()) << ra.body;
    EXPECT_NE(err["error"]["message"].get<std::string>().find("Input/output error"), std::string::npos) << ra.body;
    ASSERT_EQ(rb.status, 200) << rb.body;
    const std::string want_b = Tokenizer::from_gguf(file.meta())->decode(b.tokens);
    EXPECT_EQ(nlohmann::json::parse(rb.body)["choices"][0]["text"], want_b);
    // B again, the fault still there but off its path: the same answer.
    rb = test::request(s.port(), "POST", "/v1/completions", body(prompt_b, steps_b));
    ASSERT_EQ(rb.status, 200) << rb.body;
    EXPECT_EQ(nlohmann::json::parse(rb.body)["choices"][0]["text"], want_b);
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(DiskFaults, RepackOntoADiskFailingMidWriteKeepsTheOldStore) {
    if (const std::string why = faultfs_missing(); !why.empty()) GTEST_SKIP() << why;
    const ModelOnDisk disk;
    const std::string &src = disk.src, &mnt = disk.mnt, &model = disk.model;
    const std::string before = slurp(ExpertStore::path_for(model));
    ASSERT_FALSE(before.empty());

    FaultFs ffs(src, mnt);
    ASSERT_TRUE(ffs.mounted());
    ffs.command("write-eio m.gguf.experts 65536");  // the new store's writes fail after 64 KiB
    const auto [rc, out] = test::run_moestream("repack --force " + mnt + "/m.gguf");
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("Input/output error"), std::string::npos) << out;
    EXPECT_EQ(slurp(ExpertStore::path_for(model)), before) << "the old store changed";
    EXPECT_FALSE(fs::exists(ExpertStore::path_for(model) + ".partial")) << "a partial store was left behind";
    ffs.command("recover");
    const auto [rc2, out2] = test::run_moestream("repack " + mnt + "/m.gguf");
    EXPECT_EQ(rc2, 0) << out2;
    EXPECT_NE(out2.find("up to date"), std::string::npos) << out2;
}

}  // namespace
}  // namespace moe

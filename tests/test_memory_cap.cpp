// --ram-budget is the whole process: inside a memory cgroup (v1) capped at the budget + 5%, `serve` (two
// slots), `run` and `bench` (with its fio baseline and its parallel-slot runner) stream a model larger than
// the cap and finish, never OOM-killed: the engine's own working memory and what bench holds beside it come out of the budget.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "tests/serve_fixture.h"
#include "tests/test_support.h"

namespace fs = std::filesystem;

namespace moe {
namespace {

// A memory cgroup for the object's life, or why none can be made here.
struct MemoryCgroup {
    std::string dir, why;
    explicit MemoryCgroup(uint64_t limit) {
        const std::string root = "/sys/fs/cgroup/memory";
        if (::geteuid() != 0) {
            why = "not root: cannot create a memory cgroup";
            return;
        }
        if (!fs::exists(root + "/memory.limit_in_bytes")) {
            why = "no writable cgroup v1 memory controller at " + root;
            return;
        }
        dir = root + "/moestream-test-" + std::to_string(::getpid());
        std::error_code ec;
        fs::create_directory(dir, ec);
        std::ofstream(dir + "/memory.limit_in_bytes") << limit;
        if (ec || !fs::exists(dir + "/cgroup.procs")) {
            why = "cannot create " + dir;
            dir.clear();
        }
    }
    ~MemoryCgroup() {
        if (!dir.empty()) ::rmdir(dir.c_str());
    }
    // Runs a shell command inside the cgroup; exit status and output.
    std::pair<int, std::string> run(const std::string& cmd) const {
        return test::run_moestream_cmd("sh -c 'echo $$ > " + dir + "/cgroup.procs && exec " + cmd + "' 2>&1");
    }
    uint64_t oom_kills() const {
        std::ifstream f(dir + "/memory.oom_control");
        std::string key;
        uint64_t v = 0;
        while (f >> key >> v)
            if (key == "oom_kill") return v;
        return 0;
    }
    uint64_t peak() const {
        uint64_t v = 0;
        std::ifstream(dir + "/memory.max_usage_in_bytes") >> v;
        return v;
    }
};

TEST(MemoryCap, ServeRunAndBenchFinishInsideACgroupOfTheirBudget) {
    test::TempDir dir;
    const std::string model = dir / "m.gguf";
    ASSERT_EQ(cli::dispatch({"mkmodel", "--layers",       "4",      "--embd",     "512",   "--heads",
                             "4",       "--kv-heads",     "2",      "--head-dim", "128",   "--experts",
                             "64",      "--experts-used", "8",      "--ffn",      "512",   "--vocab-builtin",
                             "--type",  "q4_k_m",         "--seed", "3",          "--out", model}),
              0);
    ASSERT_GT(fs::file_size(model), 120u << 20) << "the model must be larger than the caps below";
    const struct {
        std::string budget;
        uint64_t mib;
        std::string command;
    } cases[] = {
        {"120M", 120, "run -m " + model + " --ctx 512 -p hello -n 8 --ram-budget 120M"},
        {"200M", 200, "bench -m " + model + " --tokens 8 --prompt-tokens 8 --parallel 1,2 --fio-seconds 1 --ram-budget 200M"},
    };
    {  // serve, answering requests on two slots, inside a cgroup of its budget + 5%
        MemoryCgroup cg((150ull << 20) * 105 / 100);
        if (!cg.why.empty()) GTEST_SKIP() << cg.why;
        test::Server s(model, {"--ram-budget", "150M", "--ctx", "512", "--parallel", "2"},
                       {"/bin/sh", "-c", "echo $$ > " + cg.dir + "/cgroup.procs && exec \"$@\"", "sh"});
        ASSERT_NE(s.port(), 0) << s.log();
        EXPECT_NE(s.log().find("experts streamed"), std::string::npos) << s.log();
        for (int i = 0; i < 6; ++i) {
            const auto r = test::request(s.port(), "POST", "/v1/completions", R"({"prompt":"memory )" + std::to_string(i) + R"(","max_tokens":8})");
            EXPECT_EQ(r.status, 200) << r.body;
        }
        EXPECT_EQ(s.terminate(), 0) << s.log();
        EXPECT_EQ(cg.oom_kills(), 0u);
        std::printf("[ memcap   ] 150M  serve: peak %.1f MiB of a %.1f MiB cap\n", static_cast<double>(cg.peak()) / (1 << 20),
                    static_cast<double>((150ull << 20) * 105 / 100) / (1 << 20));
    }
    for (const auto& c : cases) {
        MemoryCgroup cg((c.mib << 20) * 105 / 100);
        if (!cg.why.empty()) GTEST_SKIP() << cg.why;
        const auto [rc, out] = cg.run(std::string(MOESTREAM_BINARY) + " " + c.command);
        EXPECT_EQ(rc, 0) << c.command << "\n" << out;
        EXPECT_EQ(cg.oom_kills(), 0u) << c.command;
        EXPECT_NE(out.find("experts streamed"), std::string::npos) << "the budget must make it stream: " << out;
        std::printf("[ memcap   ] %-5s %s: peak %.1f MiB of a %.1f MiB cap\n", c.budget.c_str(), c.command.substr(0, 5).c_str(),
                    static_cast<double>(cg.peak()) / (1 << 20), static_cast<double>((c.mib << 20) * 105 / 100) / (1 << 20));
    }
}

}  // namespace
}  // namespace moe

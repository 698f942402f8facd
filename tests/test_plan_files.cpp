// What plans become on disk and through the CLI: generated units under systemd-analyze, apply and rollback
// under a temporary root, plan / regen / launch from the command line.
#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include "cli/commands.h"
#include <yaml-cpp/yaml.h>
#include "engine/model/loader.h"
#include "engine/forward/runner.h"
#include "launch/apply.h"
#include "launch/launch_script.h"
#include "engine/model/model_facts.h"
#include "probes/host_facts.h"
#include "probes/probes.h"
#include "systemd/unit.h"
#include "tests/test_support.h"
#include "tune/plan_io.h"
#include "tune/gpu_plan.h"
#include "tune/check.h"
#include "tune/planner.h"
#include "tests/plan_fixtures.h"

namespace fs = std::filesystem;

namespace moe {
namespace {

using namespace plan_fixtures;

int run_quiet(const std::string& cmd) {
    int st = std::system((cmd + " >/dev/null 2>&1").c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(Unit, GeneratedUnitsPassSystemdAnalyzeVerify) {
    if (run_quiet("command -v systemd-analyze") != 0) GTEST_SKIP() << "systemd-analyze not installed (scripts/setup.sh installs systemd)";
    test::TempDir dir;
    // The engine also with a prompt cache: systemd's cache directory, or a directory of the user's.
    for (const std::string& variant : std::vector<std::string>{"engine", "engine /var/cache/moestream/prompts", "engine " + (dir / "prompts"),
                                                               "llama-server", "ik-llama-server"}) {
        const std::string target = variant.substr(0, variant.find(' '));
        PlanOptions o = opts();
        o.target = target;
        if (target != "engine") o.gpu_mem = parse_gpu_mem("0=24G");
        HostFacts h = fixture_host("server-2socket-nvme-node1", 1);
        Plan p = make_plan(h, moe_model(48, 0, 512, 4ull << 30), o);
        p.out_dir = dir.path.string();
        if (variant != target) {
            p.prompt_cache_dir = variant.substr(variant.find(' ') + 1);
            fs::create_directories(dir / "prompts");
            EXPECT_NE(render_launch_sh(p).find("--prompt-cache " + p.prompt_cache_dir + " --prompt-cache-size 8589934592"), std::string::npos);
            EXPECT_NE(render_unit(p).find(p.prompt_cache_dir[1] == 'v' ? "CacheDirectory=moestream/prompts\n"
                                                                       : "ReadWritePaths=" + p.prompt_cache_dir + "\n"),
                      std::string::npos)
                << render_unit(p);
        }
        std::ofstream(dir / "launch.sh") << render_launch_sh(p);
        fs::permissions(dir / "launch.sh", fs::perms::owner_all);
        const std::string unit = dir / "moestream.service";
        std::ofstream(unit) << render_unit(p);
        std::string out;
        {
            FILE* f = ::popen(("systemd-analyze verify " + unit + " 2>&1").c_str(), "r");
            std::array<char, 512> buf;
            while (std::fgets(buf.data(), buf.size(), f)) out += buf.data();
            EXPECT_EQ(::pclose(f), 0) << target << ": " << out;
        }
        EXPECT_EQ(out.find(unit), std::string::npos) << target << ": " << out;  // no warning about our unit
        // Unprivileged and sandboxed: systemd's own exposure score stays at or below 2.3 (what the unit scored
        // running as root with this sandbox).
        EXPECT_NE(render_unit(p).find("DynamicUser=yes"), std::string::npos);
        FILE* f = ::popen(("systemd-analyze security --offline=true " + unit + " 2>&1").c_str(), "r");
        std::string sec;
        std::array<char, 512> buf;
        while (std::fgets(buf.data(), buf.size(), f)) sec += buf.data();
        ::pclose(f);
        const size_t at = sec.find("Overall exposure level");
        ASSERT_NE(at, std::string::npos) << sec;
        const double exposure = std::stod(sec.substr(sec.find(':', at) + 1));
        EXPECT_LE(exposure, 2.3) << target << ": " << sec.substr(at);
    }
}

std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

TEST(Apply, IdempotentAndRollsBackByteForByte) {
    test::TempDir root;
    Plan p = make_plan(fixture_host("laptop-1node-smt"), moe_model(48, 0, 512, 4ull << 30), opts());
    p.out_dir = "/plans/x";
    const std::string existing = root / "etc/sysctl.d/60-moestream.conf";
    fs::create_directories(fs::path(existing).parent_path());
    const std::string before = "# an older hand-written file\nvm.swappiness = 10\n";
    std::ofstream(existing) << before;

    ApplyResult dry = apply_files_under(apply_files(p), root.path.string(), true, "apply");
    EXPECT_EQ(dry.changed.size(), 2u);
    EXPECT_EQ(slurp(existing), before) << "dry run wrote";
    EXPECT_NE(dry.diff.find("-vm.swappiness = 10"), std::string::npos);
    EXPECT_NE(dry.diff.find("+vm.swappiness = 1"), std::string::npos);

    ApplyResult first = apply_files_under(apply_files(p), root.path.string(), false, "apply");
    EXPECT_EQ(first.changed.size(), 2u);
    EXPECT_EQ(slurp(existing), apply_files(p)[0].content);
    ApplyResult second = apply_files_under(apply_files(p), root.path.string(), false, "apply");
    EXPECT_TRUE(second.changed.empty());
    EXPECT_EQ(second.unchanged.size(), 2u);
    EXPECT_TRUE(second.diff.empty());

    auto restored = rollback_latest(root.path.string());
    EXPECT_EQ(restored.size(), 2u);
    EXPECT_EQ(slurp(existing), before);
    EXPECT_FALSE(fs::exists(root / "etc/security/limits.d/99-moestream.conf")) << "a file that did not exist must go again";
    EXPECT_THROW(rollback_latest(root.path.string()), std::runtime_error);
}

// A small model and the laptop fixture's facts as `probe --yaml` writes them (written to HOST_FILE): what the
// plan CLI tests start from.
std::string small_model_and_laptop(const test::TempDir& dir, const std::string& host_file, std::string& facts) {
    const std::string model = dir / "m.gguf";
    EXPECT_EQ(cli::dispatch({"mkmodel", "--layers",  "2", "--embd",         "64", "--heads", "2",  "--kv-heads",      "1",     "--head-dim",
                             "32",      "--experts", "4", "--experts-used", "2",  "--ffn",   "64", "--vocab-builtin", "--out", model}),
              0);
    auto [pc, out] = test::run_moestream("probe --yaml --root " + fixture("laptop-1node-smt"));
    EXPECT_EQ(pc, 0) << out;
    facts = out;
    std::ofstream(dir / host_file) << facts;
    return model;
}

// The engine's working memory in a plan is counted for the threads the plan gives it: in-RAM experts keep rows
// per thread, so the laptop's 4 physical cores count more than --threads 2, by what the runner says.
TEST(PlanCli, WorkingMemoryIsCountedForThePlannedThreads) {
    test::TempDir dir;
    std::string facts;
    const std::string model = small_model_and_laptop(dir, "laptop.yaml", facts);
    auto working = [&](const std::string& extra, const std::string& out) {
        auto [rc, text] = test::run_moestream("plan --model " + model + " --host " + (dir / "laptop.yaml") + " --ram-budget 1G --out " + (dir / out) +
                                              extra);
        EXPECT_EQ(rc, 0) << text;
        return YAML::LoadFile(dir / (out + "/plan.yaml"))["reasons"]["working_memory"]["value"].as<uint64_t>();
    };
    const uint64_t four = working("", "p4"), two = working(" --threads 2", "p2");
    const auto layout = load_model_layout(open_gguf_model(model));
    RunnerOptions ro;
    ro.n_threads = 4;
    const uint64_t at4 = Runner::working_bytes(*layout, ro);
    ro.n_threads = 2;
    EXPECT_GT(four, two);
    EXPECT_EQ(four - two, at4 - Runner::working_bytes(*layout, ro));
    // An f32 cache: the f16 copy its attention reads, as the runner counts it.
    const uint64_t f32 = working(" -ctk f32 -ctv f32", "p32");
    ro.n_threads = 4;
    ro.n_ctx = 4096;  // plan's default context
    const uint64_t f16_at4k = Runner::working_bytes(*layout, ro);
    ro.cache_type_k = ro.cache_type_v = GgmlType::F32;
    EXPECT_GT(f32, four);
    EXPECT_EQ(f32 - four, Runner::working_bytes(*layout, ro) - f16_at4k);
}

TEST(PlanCli, PlanApplyTwiceLaunchAndRegen) {
    test::TempDir dir;
    std::string facts;
    const std::string model = small_model_and_laptop(dir, "laptop.yaml", facts);
    auto [rc, out] = test::run_moestream("plan --model " + model + " --host " + (dir / "laptop.yaml") + " --out " + (dir / "plan") +
                                         " --prompt-cache " + (dir / "prompts") + " --prompt-cache-size 2G");
    ASSERT_EQ(rc, 0) << out;
    const std::string keep_prompts = "--prompt-cache " + (dir / "prompts") + " --prompt-cache-size 2147483648";
    EXPECT_NE(slurp(dir / "plan/launch.sh").find(keep_prompts), std::string::npos) << slurp(dir / "plan/launch.sh");
    for (const char* f : {"plan.yaml", "launch.sh", "60-moestream.conf", "99-moestream.conf", "moestream.service"})
        EXPECT_TRUE(fs::exists(dir / ("plan/" + std::string(f)))) << f;
    const std::string root = dir / "root";
    fs::create_directories(root);
    EXPECT_EQ(test::run_moestream("apply --plan " + (dir / "plan/plan.yaml") + " --root " + root + " --dry-run").first, 2);
    EXPECT_EQ(test::run_moestream("apply --plan " + (dir / "plan/plan.yaml") + " --root " + root).first, 0);
    auto [again_rc, again] = test::run_moestream("apply --plan " + (dir / "plan/plan.yaml") + " --root " + root + " --dry-run");
    EXPECT_EQ(again_rc, 0) << again;
    EXPECT_NE(again.find("nothing to change"), std::string::npos);
    auto [irc, inst] = test::run_moestream("install --plan " + (dir / "plan/plan.yaml") + " --root " + root);
    EXPECT_EQ(irc, 0) << inst;
    EXPECT_TRUE(fs::exists(root + "/etc/systemd/system/moestream.service"));
    EXPECT_NE(inst.find("not enabled"), std::string::npos);
    // launch runs exactly launch.sh's exec line.
    auto [lrc, line] = test::run_moestream("launch --print --plan " + (dir / "plan/plan.yaml"));
    EXPECT_EQ(lrc, 0);
    EXPECT_NE(slurp(dir / "plan/launch.sh").find("exec " + line), std::string::npos) << line;
    // regen: same host -> nothing; the 2-socket host -> changes found and files rewritten.
    auto [same_rc, same] = test::run_moestream("regen --plan " + (dir / "plan/plan.yaml") + " --host " + (dir / "laptop.yaml"));
    EXPECT_EQ(same_rc, 0);
    EXPECT_NE(same.find("nothing changed"), std::string::npos) << same;
    auto [sc, server] = test::run_moestream("probe --yaml --root " + fixture("server-2socket-nvme-node1"));
    std::ofstream(dir / "server.yaml") << server;
    auto [rrc, regen] = test::run_moestream("regen --plan " + (dir / "plan/plan.yaml") + " --host " + (dir / "server.yaml"));
    EXPECT_EQ(rrc, 0) << regen;
    EXPECT_NE(regen.find("changed: physical cores: 4 -> 8"), std::string::npos) << regen;
    EXPECT_NE(regen.find("+NUMAMask=0"), std::string::npos) << regen;  // disk node unknown: the node with most memory
    EXPECT_NE(slurp(dir / "plan/plan.yaml").find("AMD EPYC"), std::string::npos);
    EXPECT_NE(slurp(dir / "plan/launch.sh").find(keep_prompts), std::string::npos) << "regen dropped the prompt cache";
    EXPECT_NE(slurp(dir / "plan/moestream.service").find("ReadWritePaths=" + (dir / "prompts")), std::string::npos);
    // Only the engine keeps prompts across restarts.
    auto [lsrc, ls] = test::run_moestream("plan --model " + model + " --host " + (dir / "laptop.yaml") + " --out " + (dir / "plan2") +
                                          " --target llama-server --gpu-mem 0=8G --prompt-cache " + (dir / "prompts"));
    EXPECT_EQ(lsrc, 2) << ls;
    EXPECT_NE(ls.find("--prompt-cache is the engine's"), std::string::npos) << ls;
}

// The predicted decode speed from a host file: the RAM bandwidth its probe measured; a file without one (a
// fixture tree, an older probe) gives "unknown" with the reason, never 0 tok/s.
TEST(PlanCli, PredictedDecodeUsesTheHostFilesRamBandwidth) {
    test::TempDir dir;
    std::string facts;
    const std::string model = small_model_and_laptop(dir, "bare.yaml", facts);
    auto [rc, out] = test::run_moestream("plan --model " + model + " --host " + (dir / "bare.yaml") + " --out " + (dir / "p1"));
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("predicted decode: unknown = unknown: t_compute="), std::string::npos) << out;
    EXPECT_NE(out.find("RAM bandwidth not measured"), std::string::npos) << out;
    // The same facts with a measured 10 GB/s: the model's active bytes over it.
    HostFacts h = host_facts_from_text(facts, "bare.yaml");
    h.memory.read_bytes_per_s = {10e9, "measured"};
    std::ofstream(dir / "measured.yaml") << to_yaml(h);
    auto [rc2, out2] = test::run_moestream("plan --model " + model + " --host " + (dir / "measured.yaml") + " --out " + (dir / "p2"));
    ASSERT_EQ(rc2, 0) << out2;
    const double want = 10e9 / static_cast<double>(read_model_facts(model).active_bytes_per_token());
    char figure[64];
    std::snprintf(figure, sizeof figure, "predicted decode: %.2f tok/s", want);
    EXPECT_NE(out2.find(figure), std::string::npos) << out2;
    EXPECT_NE(out2.find("/ 10.0 GB/s"), std::string::npos) << out2;
    // The context cache of one sequence at 4k, 128k and 1M positions, beside the plan's own figure.
    const ModelFacts m = read_model_facts(model);
    EXPECT_NE(out2.find("one sequence at 4k / 128k / 1M positions: " + human_bytes(static_cast<double>(m.kv_bytes(4096))) + " / " +
                        human_bytes(static_cast<double>(m.kv_bytes(131072))) + " / " + human_bytes(static_cast<double>(m.kv_bytes(1048576)))),
              std::string::npos)
        << out2;
}

// The 2026 architectures through plan: each one's cache per sequence at 4k / 128k / 1M (compressed rows,
// latent rows plus recurrent state, sliding rings, sparse-attention keys), what stays resident and what
// streams, and the decode predicted from its active bytes, as ModelFacts counts them from the loaded layout.
TEST(PlanCli, NewArchitecturesGetTheirCacheFiguresAndPrediction) {
    test::TempDir dir;
    std::string facts;
    small_model_and_laptop(dir, "bare.yaml", facts);
    HostFacts h = host_facts_from_text(facts, "bare.yaml");
    h.memory.read_bytes_per_s = {10e9, "measured"};
    std::ofstream(dir / "measured.yaml") << to_yaml(h);
    const std::vector<std::vector<std::string>> archs = {
        {"--arch", "deepseek4", "--layers", "3", "--compress-ratios", "0,4,128", "--head-dim", "64", "--rope-dims", "16", "--q-lora", "64",
         "--window", "8"},
        {"--arch", "kimi-k3", "--layers", "4", "--full-attention-interval", "3", "--dense-layers", "1", "--shared-experts", "1", "--latent", "32"},
        {"--arch", "gpt-oss", "--layers", "2", "--kv-heads", "2", "--head-dim", "32"},
        {"--arch", "minimax-m3", "--layers", "3", "--kv-heads", "2", "--head-dim", "32", "--dense-layers", "1", "--shared-experts", "1", "--msa-dim",
         "16"}};
    for (const auto& options : archs) {
        const std::string model = dir / (options[1] + ".gguf");
        std::vector<std::string> args = {"mkmodel", "--vocab-builtin", "--embd", "256",    "--heads", "8",     "--experts", "8", "--experts-used",
                                         "3",       "--ffn",           "256",    "--type", "q8_0",    "--out", model};
        args.insert(args.end(), options.begin(), options.end());
        ASSERT_EQ(cli::dispatch(args), 0) << options[1];
        auto [rc, out] = test::run_moestream("plan --model " + model + " --host " + (dir / "measured.yaml") + " --out " + (dir / options[1]));
        ASSERT_EQ(rc, 0) << options[1] << out;
        const ModelFacts m = read_model_facts(model);
        EXPECT_GT(m.kv_bytes(1048576), m.kv_bytes(4096)) << options[1];
        EXPECT_NE(out.find("one sequence at 4k / 128k / 1M positions: " + human_bytes(static_cast<double>(m.kv_bytes(4096))) + " / " +
                           human_bytes(static_cast<double>(m.kv_bytes(131072))) + " / " + human_bytes(static_cast<double>(m.kv_bytes(1048576)))),
                  std::string::npos)
            << options[1] << out;
        char figure[64];
        std::snprintf(figure, sizeof figure, "predicted decode: %.2f tok/s", 10e9 / static_cast<double>(m.active_bytes_per_token()));
        EXPECT_NE(out.find(figure), std::string::npos) << options[1] << out;
        EXPECT_GT(m.expert_bytes, 0u) << options[1];
        EXPECT_GT(m.resident_bytes, 0u) << options[1];
    }
}

TEST(PlanCli, BadPlanFilesGiveOneLine) {
    test::TempDir dir;
    std::ofstream(dir / "corrupt.yaml") << "moestream_plan: [\n";
    const std::vector<std::string> cases = {"apply --plan " + (dir / "corrupt.yaml"), "apply --plan /nonexistent/plan.yaml",
                                            "launch --plan " + (dir / "corrupt.yaml")};
    for (const std::string& args : cases) {
        auto [code, out] = test::run_moestream(args);
        EXPECT_EQ(code, 2) << args << out;
        EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    }
}

// plan --draft mtp: the NextN block's RAM comes out of the expert cache (the engine counts it in its budget),
// launch.sh serves with --draft mtp, plan.yaml keeps the choice for regen; a file without a block, or a
// llama-server target, is refused in one line.
}  // namespace
}  // namespace moe

// `check` rows and exit codes on fixture hosts, and the CLI's one-line errors for bad input.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include "engine/model/model_facts.h"
#include "probes/probes.h"
#include "tests/test_support.h"
#include "tune/check.h"

namespace moe {
namespace {

std::string fixture(const std::string& name) { return std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/hosts/" + name; }

const CheckRow* row(const std::vector<CheckRow>& rows, const std::string& id) {
    for (const auto& r : rows)
        if (r.id == id) return &r;
    return nullptr;
}

std::vector<CheckRow> check_fixture(const std::string& name, std::optional<ModelFacts> model = {}, std::optional<uint64_t> budget = {},
                                    kernels::KvCacheTypes types = {}) {
    FsRoot fs(fixture(name));
    CheckInput in;
    in.host = probe_host({.root = fs.root(), .try_ring = false});
    // Limits are this process's, not the fixture's: pin them so rows do not depend on the test host.
    in.host.limits.memlock_soft = in.host.limits.memlock_hard = {8ull << 20, "fixture"};
    in.host.limits.memlock_hard_raisable = false;
    in.model = model;
    in.ram_budget = budget;
    in.mem_bytes_per_s = 50e9;
    in.cache_type_k = types.k;
    in.cache_type_v = types.v;
    return run_checks(in, fs);
}

ModelFacts big_model() {
    ModelFacts m;
    m.n_layer = 94;
    m.n_expert = 128;
    m.n_expert_used = 8;
    m.n_head_kv = 4;
    m.head_dim = 128;
    m.resident_bytes = 8ull << 30;
    m.layer_expert_bytes.assign(94, 128ull * (12ull << 20));
    m.expert_bytes = 94ull * 128 * (12ull << 20);
    m.moe_layers = 94;
    m.cache_bytes_per_token = 94ull * 4 * (128 + 128) * 2;
    return m;
}

TEST(Check, LaptopFlagsSwapAndTheLaterSysctlFile) {
    auto rows = check_fixture("laptop-1node-smt");
    ASSERT_TRUE(row(rows, "swappiness"));
    EXPECT_EQ(row(rows, "swappiness")->status, CheckStatus::Warn);
    EXPECT_NE(row(rows, "swappiness")->fix.find("vm.swappiness = 1"), std::string::npos);
    ASSERT_TRUE(row(rows, "sysctl_override"));
    EXPECT_EQ(row(rows, "sysctl_override")->status, CheckStatus::Warn);
    EXPECT_NE(row(rows, "sysctl_override")->measured.find("/etc/sysctl.d/99-sysctl.conf"), std::string::npos);
    EXPECT_NE(row(rows, "cpu_cores")->fix.find("--physcpubind=0-3"), std::string::npos);
    EXPECT_EQ(row(rows, "io_uring")->status, CheckStatus::Unknown);  // not tried on a fixture
    EXPECT_EQ(check_exit_code(rows), 1);
}

TEST(Check, ServerFlagsThpAlwaysAndNumaBalancing) {
    auto rows = check_fixture("server-2socket-nvme-node1");
    EXPECT_EQ(row(rows, "thp")->status, CheckStatus::Warn);
    EXPECT_EQ(row(rows, "numa_balancing")->status, CheckStatus::Warn);
    EXPECT_NE(row(rows, "numa_balancing")->fix.find("kernel.numa_balancing = 0"), std::string::npos);
}

// The kernels row applies the engine's own choice to the probed flags (of this host or another's facts).
TEST(Check, KernelsRowNamesTheTableTheEngineChoosesAndWhy) {
    auto laptop = check_fixture("laptop-1node-smt");  // Tiger Lake: AVX-512 with VNNI, no BF16
    ASSERT_TRUE(row(laptop, "kernels"));
    EXPECT_EQ(row(laptop, "kernels")->status, CheckStatus::Pass);
    EXPECT_EQ(row(laptop, "kernels")->measured.rfind("avx512 kernels", 0), 0u) << row(laptop, "kernels")->measured;
    EXPECT_NE(row(laptop, "kernels")->measured.find("VDPBF16PS emulated"), std::string::npos) << row(laptop, "kernels")->measured;
    auto server = check_fixture("server-2socket-nvme-node1");
    EXPECT_NE(row(server, "kernels")->measured.find("BF16 by VDPBF16PS"), std::string::npos);
    EXPECT_EQ(row(server, "kernels")->measured.find("emulated"), std::string::npos);
    auto unknown = check_fixture("missing-files");  // no /proc/cpuinfo: a WARN naming what to fix
    ASSERT_TRUE(row(unknown, "kernels"));
    EXPECT_EQ(row(unknown, "kernels")->status, CheckStatus::Warn);
    EXPECT_NE(row(unknown, "kernels")->fix.find("/proc/cpuinfo"), std::string::npos);
}

// A file of an ik_llama.cpp type the engine does not compute (its Q8_2_X4 activation format: the engine computes
// every type ik's quantizer writes): the row FAILs naming the tensor,
// and its fix is the ik_llama.cpp plan.
TEST(Check, IkTypesPointToTheIkLlamaServerPlan) {
    test::TempDir dir;
    const std::string path = dir / "ik.gguf";
    write_gguf(path,
               {{"general.architecture", GgufValue::string("qwen3moe")},
                {"qwen3moe.block_count", GgufValue::u32(1)},
                {"qwen3moe.embedding_length", GgufValue::u32(256)},
                {"qwen3moe.expert_count", GgufValue::u32(4)},
                {"qwen3moe.expert_used_count", GgufValue::u32(2)}},
               {{"token_embd.weight", {256, 64}, GgmlType::Q8_0, {}},
                {"blk.0.ffn_gate_exps.weight", {256, 64, 4}, static_cast<GgmlType>(99), {}}},  // Q8_2_X4
               32, true);
    auto rows = check_fixture("laptop-1node-smt", read_model_facts(path));
    const CheckRow* r = row(rows, "engine_support");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, CheckStatus::Fail);
    EXPECT_NE(r->measured.find("blk.0.ffn_gate_exps.weight"), std::string::npos) << r->measured;
    EXPECT_NE(r->fix.find("--target ik-llama-server"), std::string::npos) << r->fix;
}

TEST(Check, ThpNeverPasses) {
    auto rows = check_fixture("thp-never");
    EXPECT_EQ(row(rows, "thp")->status, CheckStatus::Pass);
    EXPECT_EQ(row(rows, "swappiness")->status, CheckStatus::Pass);  // no swap
    EXPECT_FALSE(row(rows, "numa_balancing"));                      // one node: not a requirement
}

TEST(Check, UnreadableSysfsIsAWarnRowNamingTheFile) {
    auto rows = check_fixture("missing-files");
    ASSERT_TRUE(row(rows, "swappiness"));
    EXPECT_EQ(row(rows, "swappiness")->status, CheckStatus::Warn);
    EXPECT_NE(row(rows, "swappiness")->measured.find("/proc/sys/vm/swappiness"), std::string::npos);
    EXPECT_EQ(row(rows, "cpu_cores")->status, CheckStatus::Warn);
}

TEST(Check, ModelRowsAndBudgetLimits) {
    // 32 GB laptop, 8 GiB resident, 141 GiB of experts.
    auto rows = check_fixture("laptop-1node-smt", big_model());
    EXPECT_EQ(row(rows, "ram_resident")->status, CheckStatus::Pass);
    EXPECT_EQ(row(rows, "memlock")->status, CheckStatus::Warn);  // this process's memlock is far below 8 GiB
    auto tiny = check_fixture("laptop-1node-smt", big_model(), 1ull << 20);
    EXPECT_EQ(row(tiny, "ram_budget")->status, CheckStatus::Fail);
    EXPECT_NE(row(tiny, "ram_budget")->required.find("96.0 MiB"), std::string::npos) << row(tiny, "ram_budget")->required;
    EXPECT_EQ(check_exit_code(tiny), 2);
    auto huge = check_fixture("laptop-1node-smt", big_model(), 1ull << 40);
    EXPECT_EQ(row(huge, "ram_budget")->status, CheckStatus::Fail);
    ModelFacts giant = big_model();
    giant.resident_bytes = 64ull << 30;  // more than the laptop's RAM
    EXPECT_EQ(row(check_fixture("laptop-1node-smt", giant), "ram_resident")->status, CheckStatus::Fail);
}

// Quantized KV types: the row says what they save, or why the model cannot keep its cache in them.
TEST(Check, KvCacheTypesRowSaysWhatTheySaveOrWhyNot) {
    ModelFacts m = big_model();
    m.cache_k_elems_per_token = m.cache_v_elems_per_token = 94ull * 4 * 128;
    EXPECT_EQ(row(check_fixture("laptop-1node-smt", m), "kv_cache_types"), nullptr);  // f16: nothing to say
    auto q8 = check_fixture("laptop-1node-smt", m, {}, {GgmlType::Q8_0, GgmlType::Q8_0});
    ASSERT_NE(row(q8, "kv_cache_types"), nullptr);
    EXPECT_EQ(row(q8, "kv_cache_types")->status, CheckStatus::Pass);
    EXPECT_NE(row(q8, "kv_cache_types")->measured.find("q8_0/q8_0: 102272 bytes per token (f16: 192512)"), std::string::npos)
        << row(q8, "kv_cache_types")->measured;
    m.head_dim = 80;
    auto odd = check_fixture("laptop-1node-smt", m, {}, {GgmlType::Q4_0, GgmlType::Q4_0});
    EXPECT_EQ(row(odd, "kv_cache_types")->status, CheckStatus::Fail);
    m.head_dim = 128;
    m.cache_v_elems_per_token = 0;  // MLA
    auto mla = check_fixture("laptop-1node-smt", m, {}, {GgmlType::Q8_0, GgmlType::F16});
    EXPECT_EQ(row(mla, "kv_cache_types")->status, CheckStatus::Fail);
    EXPECT_EQ(row(mla, "kv_cache_types")->fix, "--cache-type-v q8_0");
}

TEST(Check, ExitCodes) {
    std::vector<CheckRow> rows(2);
    EXPECT_EQ(check_exit_code(rows), 0);
    rows[1].status = CheckStatus::Unknown;
    EXPECT_EQ(check_exit_code(rows), 3);
    rows[0].status = CheckStatus::Warn;
    EXPECT_EQ(check_exit_code(rows), 1);
    rows[0].status = CheckStatus::Fail;
    EXPECT_EQ(check_exit_code(rows), 2);
}

TEST(CheckCli, BadInputGivesOneLineAndExit2) {
    test::TempDir dir;
    {
        FILE* f = std::fopen((dir / "trunc.gguf").c_str(), "wb");
        std::fwrite("GGUF\3\0\0\0\5\0\0\0\0\0\0\0", 1, 16, f);
        std::fclose(f);
        f = std::fopen((dir / "text.gguf").c_str(), "wb");
        std::fputs("not a model\n", f);
        std::fclose(f);
    }
    const std::vector<std::string> cases = {"check --no-storage --model /nonexistent/m.gguf",
                                            "check --no-storage --model " + (dir / "trunc.gguf"),
                                            "check --no-storage --model " + (dir / "text.gguf"),
                                            "check --no-storage --ram-budget lots",
                                            "check --no-storage --ram-budget 0",
                                            "check --no-storage --ram-budget 5P",
                                            "probe --root /nonexistent/root",
                                            "run -m /nonexistent.gguf -p hi"};
    for (const std::string& args : cases) {
        auto [code, out] = test::run_moestream(args);
        EXPECT_EQ(code, 2) << args << "\n" << out;
        EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << args << "\n" << out;
        EXPECT_EQ(out.rfind("moestream ", 0), 0u) << out;
    }
}

TEST(CheckCli, JsonOnFixtureHost) {
    auto [code, out] = test::run_moestream("check --json --root " + fixture("server-2socket-nvme-node1"));
    auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["exit_code"].get<int>(), code);
    bool saw_thp = false;
    for (const auto& r : j["rows"]) saw_thp |= r["id"] == "thp" && r["status"] == "WARN";
    EXPECT_TRUE(saw_thp) << out;
}

TEST(ProbeCli, JsonOnThisHost) {
    auto [code, out] = test::run_moestream("probe --json --seconds 1 --storage /var/tmp");
    ASSERT_EQ(code, 0) << out;
    auto j = nlohmann::json::parse(out);
    EXPECT_EQ(j["cpu"]["logical_cpus"]["value"].get<int>(), static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
    EXPECT_GE(j["numa"]["nodes"].size(), 1u);
    ASSERT_TRUE(j["storage"]["results"].is_array());
    bool fio = false;
    for (const auto& r : j["storage"]["results"]) fio |= r["tool"] == "fio" && r["bytes_per_s"].get<double>() > 0;
    EXPECT_TRUE(fio) << out.substr(0, 2000);
}

}  // namespace
}  // namespace moe

// The llama.cpp RPC cluster plan on three fixture hosts of different sizes: placement covers the model in
// contiguous ranges in proportion to the budgets, no host over its budget, the predicted speed adds up; the
// generated units pass systemd-analyze verify and stay at or below exposure 2.3, the firewall rules parse with
// nft -c, the head's command names every worker; a worker on a public address is warned about.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "launch/cluster_files.h"
#include "probes/probes.h"
#include "tests/test_support.h"
#include "tune/check.h"
#include "tune/cluster.h"
#include "tune/planner.h"

namespace moe {
namespace {

std::string read_file(const std::filesystem::path& p) {
    std::ifstream f(p);
    return {std::istreambuf_iterator<char>(f), {}};
}

HostFacts fixture_host(const std::string& name) {
    return probe_host({.root = std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/hosts/" + name, .try_ring = false});
}

// A GLM-5.1-like shape scaled to the fixtures: 60 layers, 3 dense, 6 GiB of experts per MoE layer.
ModelFacts big_model() {
    ModelFacts m;
    m.arch = "glm-dsa";
    m.n_layer = 60;
    m.n_embd = 6144;
    m.n_expert = 256;
    m.n_expert_used = 8;
    m.n_head_kv = 1;
    m.head_dim = 576;
    m.cache_bytes_per_token = 60 * 576 * 2;
    m.resident_bytes = 30ull << 30;
    m.token_embd_bytes = 1ull << 30;
    m.n_vocab_rows = 154880;
    m.layer_expert_bytes.assign(60, 6ull << 30);
    for (int l = 0; l < 3; ++l) m.layer_expert_bytes[l] = 0;
    m.expert_bytes = 57 * (6ull << 30);
    return m;
}

// Facts as a live probe writes them when it found llama.cpp's `role` program at `path`, running, of one build.
HostFacts with_programs(HostFacts h, const std::string& role, const std::string& path, const std::string& build = "7001 (abcdef1)") {
    h.llama_cpp.probed = true;
    h.llama_cpp.source = "test";
    h.llama_cpp.binaries.push_back({role, path, "PATH", true, build, "--version", "version: " + build});
    return h;
}

// A directory of stand-ins that answer --version as llama.cpp's programs do (rpc-server: usage, exit 0).
void write_fake_llama_cpp(const std::string& dir, const std::string& rpc_name, const std::string& build_number) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/" + rpc_name) << "#!/bin/sh\necho \"error: unknown argument: $1\" >&2\necho \"Usage: $0 [options]\" >&2\nexit 0\n";
    std::ofstream(dir + "/llama-server") << "#!/bin/sh\necho \"version: " << build_number << " (abcdef1)\" >&2\necho \"built with cc\" >&2\n";
    std::ofstream(dir + "/broken-server") << "#!/bin/sh\necho \"error while loading shared libraries: libggml.so\" >&2\nexit 127\n";
    for (const auto& n : {rpc_name, std::string("llama-server"), std::string("broken-server")})
        std::filesystem::permissions(dir + "/" + n, std::filesystem::perms::owner_all);
}

ClusterOptions three_hosts(const std::string& worker2_address = "10.0.0.3") {
    ClusterOptions o;
    o.model_path = "/models/glm.gguf";
    o.head = {"head", "10.0.0.1", fixture_host("laptop-1node-smt"), 20e9};
    o.workers = {{"worker1", "10.0.0.2", fixture_host("server-2socket-nvme-node1"), 40e9},
                 {"worker2", worker2_address, fixture_host("thp-never"), 15e9}};
    o.rpc_server_binary = "/bin/true";  // verify wants an executable; the real one is rpc-server
    o.llama_server_binary = "/bin/true";
    return o;
}

TEST(ClusterPlan, PlacementCoversTheModelWithinEveryBudget) {
    const ModelFacts m = big_model();
    const ClusterPlan cp = make_cluster_plan(m, three_hosts());
    ASSERT_EQ(cp.hosts.size(), 3u);
    uint32_t next = 0;
    double stages = 0;
    uint64_t budgets = 0;
    uint64_t layers_total = 0;
    for (const auto& h : cp.hosts) budgets += h.budget_bytes, layers_total += h.weight_bytes;
    for (const auto& h : cp.hosts) {
        EXPECT_EQ(h.first_layer, next) << h.name;  // contiguous, in order
        next += h.n_layers;
        EXPECT_LE(h.weight_bytes, h.budget_bytes) << h.name;
        stages += h.stage_s;
        // Proportional: the host's bytes within one MoE layer of its share of the budgets.
        const double share = static_cast<double>(h.budget_bytes) / static_cast<double>(budgets) * static_cast<double>(layers_total);
        EXPECT_NEAR(static_cast<double>(h.weight_bytes), share, static_cast<double>(6.6 * (1ull << 30))) << h.name;
    }
    EXPECT_EQ(next, 60u);
    EXPECT_NEAR(cp.predicted_tok_s, 1.0 / (stages + 3 * cp.hop_s), 1e-9);
    EXPECT_GT(cp.hosts[1].n_layers, cp.hosts[0].n_layers);  // the 512 GiB server takes most
    EXPECT_TRUE(cp.warnings.empty());

    ModelFacts huge = big_model();
    huge.layer_expert_bytes.assign(60, 12ull << 30);
    try {
        make_cluster_plan(huge, three_hosts());
        ADD_FAILURE() << "a model beyond every budget was planned";
    } catch (const PlanError& e) { EXPECT_NE(std::string(e.what()).find("budgets add up to"), std::string::npos) << e.what(); }
    ClusterOptions no_address = three_hosts();
    no_address.workers[0].address.clear();
    EXPECT_THROW(make_cluster_plan(m, no_address), PlanError);
}

TEST(ClusterPlan, PublicWorkerAddressesAreWarnedAbout) {
    const ClusterPlan cp = make_cluster_plan(big_model(), three_hosts("203.0.113.7"));
    ASSERT_EQ(cp.warnings.size(), 1u);
    EXPECT_NE(cp.warnings[0].find("203.0.113.7"), std::string::npos);
    for (const char* a : {"10.1.2.3", "172.16.0.1", "172.31.255.1", "192.168.1.2", "127.0.0.1", "fd00::1", "fe80::1", "::1"})
        EXPECT_TRUE(is_private_address(a)) << a;
    for (const char* a : {"8.8.8.8", "172.32.0.1", "0.0.0.0", "::", "2001:db8::1", "example.com"}) EXPECT_FALSE(is_private_address(a)) << a;
}

std::string run(const std::string& cmd, int& rc) {
    FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
    std::string out;
    std::array<char, 512> buf;
    while (std::fgets(buf.data(), buf.size(), f)) out += buf.data();
    const int st = ::pclose(f);
    rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

TEST(ClusterPlan, GeneratedFilesVerifyAndStayUnprivileged) {
    const ClusterPlan cp = make_cluster_plan(big_model(), three_hosts());
    test::TempDir dir;
    for (const auto& f : render_cluster_files(cp, dir.path.string())) {
        std::filesystem::create_directories(std::filesystem::path(dir / f.path).parent_path());
        std::ofstream(dir / f.path) << f.content;
        std::filesystem::permissions(dir / f.path, static_cast<std::filesystem::perms>(f.mode));
    }
    // The head's command: every worker in --rpc, each worker's range on its RPC device.
    const auto argv = head_argv(cp);
    const auto rpc = std::find(argv.begin(), argv.end(), "--rpc");
    ASSERT_NE(rpc, argv.end());
    EXPECT_EQ(*(rpc + 1), "10.0.0.2:50052,10.0.0.3:50052");
    // One -ot with a rule per host: current llama.cpp deprecates repeated -ot options.
    ASSERT_EQ(std::count(argv.begin(), argv.end(), "-ot"), 1);
    const std::string rules = *(std::find(argv.begin(), argv.end(), "-ot") + 1);
    EXPECT_NE(rules.find("=RPC0[10.0.0.2:50052],"), std::string::npos) << rules;
    EXPECT_NE(rules.find("=RPC0[10.0.0.3:50052],"), std::string::npos) << rules;
    EXPECT_EQ(rules.substr(rules.size() - 4), "=CPU") << rules;
    const std::string w1 = read_file(dir / "worker1/rpc-server.service");
    EXPECT_NE(w1.find("ExecStart=/bin/true -H 10.0.0.2 -p 50052"), std::string::npos) << w1;
    EXPECT_NE(w1.find("IPAddressAllow=10.0.0.1 localhost\nIPAddressDeny=any"), std::string::npos);
    EXPECT_NE(w1.find("DynamicUser=yes"), std::string::npos);
    EXPECT_EQ(w1.find("0.0.0.0"), std::string::npos);
    int rc = 0;
    if (run("command -v systemd-analyze", rc), rc == 0) {
        for (const std::string unit : {"head/llama-server.service", "worker1/rpc-server.service", "worker2/rpc-server.service"}) {
            const std::string out = run("systemd-analyze verify " + (dir / unit), rc);
            EXPECT_EQ(rc, 0) << unit << ": " << out;
            EXPECT_EQ(out.find((dir / unit)), std::string::npos) << unit << ": " << out;
            const std::string sec = run("systemd-analyze security --offline=true " + (dir / unit), rc);
            const size_t at = sec.find("Overall exposure level");
            ASSERT_NE(at, std::string::npos) << sec;
            EXPECT_LE(std::stod(sec.substr(sec.find(':', at) + 1)), 2.3) << unit;
        }
    } else {
        GTEST_SKIP() << "systemd-analyze not installed (scripts/setup.sh installs systemd)";
    }
    if (run("command -v nft", rc), rc == 0) {
        for (const std::string rules : {"worker1/nftables.conf", "worker2/nftables.conf"}) {
            const std::string out = run("nft -c -f " + (dir / rules), rc);
            EXPECT_EQ(rc, 0) << rules << ": " << out;
        }
    } else {
        std::cerr << "[  NOTE    ] nft not installed: the firewall rules were not parsed (scripts/setup.sh installs nftables)\n";
    }
    EXPECT_NE(read_file(dir / "worker1/60-moestream.conf").find("vm.min_free_kbytes"), std::string::npos);
    EXPECT_NE(read_file(dir / "cluster.yaml").find("predicted_tok_s"), std::string::npos);
}

// install --host-dir: a host's directory into its places under a temporary root, idempotent, dry run first.
TEST(ClusterPlan, InstallHostDirUnderARoot) {
    const ClusterPlan cp = make_cluster_plan(big_model(), three_hosts());
    test::TempDir dir, root;
    for (const auto& f : render_cluster_files(cp, dir.path.string())) {
        std::filesystem::create_directories(std::filesystem::path(dir / f.path).parent_path());
        std::ofstream(dir / f.path) << f.content;
    }
    const std::string cmd = "install --host-dir " + (dir / "worker1") + " --root " + root.path.string();
    auto [dry, dry_out] = test::run_moestream(cmd + " --dry-run", true);
    EXPECT_EQ(dry, 2) << dry_out;  // changes pending
    EXPECT_FALSE(std::filesystem::exists(root / "etc/systemd/system/llama-rpc-server.service"));
    auto [first, out1] = test::run_moestream(cmd, true);
    EXPECT_EQ(first, 0) << out1;
    EXPECT_EQ(read_file(root / "etc/systemd/system/llama-rpc-server.service"), read_file(dir / "worker1/rpc-server.service"));
    EXPECT_EQ(read_file(root / "etc/nftables.d/moestream-rpc.nft"), read_file(dir / "worker1/nftables.conf"));
    auto [second, out2] = test::run_moestream(cmd, true);
    EXPECT_EQ(second, 0);
    EXPECT_EQ(out2.find("installed"), std::string::npos) << out2;  // nothing to change the second time
    auto [bad, bad_out] = test::run_moestream("install --host-dir " + root.path.string() + " --root " + root.path.string(), true);
    EXPECT_EQ(bad, 2);
    EXPECT_NE(bad_out.find("--host-dir"), std::string::npos) << bad_out;
}

// regen --cluster: the recorded request planned again from the hosts' facts files; per-host diffs.
TEST(ClusterPlan, RegenShowsWhatChangedPerHost) {
    test::TempDir dir;
    const std::string model = dir / "m.gguf";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 4 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --experts 4 --experts-used 2 --ffn 64 "
                                  "--vocab-builtin --out " +
                                      model,
                                  true)
                  .first,
              0);
    auto write_facts = [&](const std::string& name, HostFacts h) {
        std::ofstream(dir / name) << to_json(h).dump();
        return dir / name;
    };
    HostFacts head_facts = with_programs(fixture_host("laptop-1node-smt"), "llama-server", "/bin/true");
    head_facts.memory.read_bytes_per_s = {7.5e9, "measured"};  // as probe records it on a live host
    const std::string head = write_facts("head.json", head_facts);
    const std::string w1 = write_facts("w1.json", with_programs(fixture_host("server-2socket-nvme-node1"), "rpc-server", "/bin/true"));
    HostFacts small = with_programs(fixture_host("thp-never"), "rpc-server", "/bin/true");
    const std::string w2 = write_facts("w2.json", small);
    const std::string out = dir / "cluster";
    auto [rc, text] = test::run_moestream("plan --target llama-rpc --model " + model + " --head " + head + "@10.0.0.1 --worker " + w1 +
                                              "@10.0.0.2 --worker " + w2 +
                                              "@10.0.0.3 --rpc-server-binary /bin/true --llama-server-binary /bin/true --out " + out,
                                          true);
    ASSERT_EQ(rc, 0) << text;
    // The head's stage uses its measured bandwidth; the workers' facts carry none, so --mem-gbps.
    const std::string plan_yaml = read_file(out + "/cluster.yaml");
    EXPECT_NE(plan_yaml.find("/ 7.5 GB/s (measured by its probe)"), std::string::npos) << plan_yaml;
    EXPECT_NE(plan_yaml.find("/ 20.0 GB/s (--mem-gbps)"), std::string::npos) << plan_yaml;
    auto [same, same_out] = test::run_moestream("regen --cluster " + out + "/cluster.yaml", true);
    EXPECT_EQ(same, 0) << same_out;
    EXPECT_NE(same_out.find("nothing changed"), std::string::npos) << same_out;
    small.cpu.physical_cores.value = 2;  // worker2 lost cores
    write_facts("w2.json", small);
    auto [changed, diff] = test::run_moestream("regen --cluster " + out + "/cluster.yaml", true);
    EXPECT_EQ(changed, 0) << diff;
    EXPECT_NE(diff.find("+++ worker2/rpc-server.service"), std::string::npos) << diff;
    EXPECT_NE(diff.find("-t 2 -c"), std::string::npos) << diff;
    EXPECT_EQ(diff.find("+++ worker1/rpc-server.service"), std::string::npos) << diff;

    // check --cluster: private listen addresses pass; a public one fails loudly with the fix.
    auto [ok, ok_out] = test::run_moestream("check --cluster " + out + "/cluster.yaml", true);
    EXPECT_EQ(ok, 0) << ok_out;
    std::string yaml = read_file(out + "/cluster.yaml");
    yaml.replace(yaml.find("address: 10.0.0.3"), 17, "address: 198.51.100.4");
    std::ofstream(out + "/public.yaml") << yaml;
    auto [fail, fail_out] = test::run_moestream("check --cluster " + out + "/public.yaml", true);
    EXPECT_EQ(fail, 2) << fail_out;
    EXPECT_NE(fail_out.find("PUBLIC"), std::string::npos) << fail_out;
}

// The probe finds llama.cpp's programs under either rpc-server name, runs each once, and keeps what it saw.
TEST(ClusterPlan, ProbeFindsLlamaCppProgramsAndTheirBuild) {
    test::TempDir dir;
    write_fake_llama_cpp(dir / "bin", "ggml-rpc-server", "7001");
    std::filesystem::rename(dir / "bin/broken-server", dir / "bin/rpc-server");  // the old name, not running
    const LlamaCppFacts f = probe_llama_cpp(dir / "bin");
    ASSERT_TRUE(f.probed);
    auto find = [&](const std::string& name) -> const LlamaCppBinary* {
        for (const auto& b : f.binaries)
            if (b.path == dir / ("bin/" + name)) return &b;
        return nullptr;
    };
    ASSERT_TRUE(find("llama-server") && find("ggml-rpc-server") && find("rpc-server"));
    EXPECT_TRUE(find("llama-server")->runs);
    EXPECT_EQ(find("llama-server")->build, "7001 (abcdef1)");
    EXPECT_TRUE(find("ggml-rpc-server")->runs);
    EXPECT_EQ(find("ggml-rpc-server")->build_source, "llama-server beside it");
    EXPECT_FALSE(find("rpc-server")->runs);
    EXPECT_NE(find("rpc-server")->detail.find("libggml.so"), std::string::npos) << find("rpc-server")->detail;
    HostFacts h;
    h.llama_cpp = f;
    const HostFacts back = host_facts_from_text(to_json(h).dump(), "round trip");
    ASSERT_EQ(back.llama_cpp.binaries.size(), f.binaries.size());
    EXPECT_EQ(back.llama_cpp.binaries[0].build, f.binaries[0].build);
    auto old = to_json(HostFacts{});
    old.erase("llama_cpp");  // facts from before the programs were probed
    const HostFacts before = host_facts_from_text(old.dump(), "old facts");
    EXPECT_FALSE(before.llama_cpp.probed);
    EXPECT_NE(before.llama_cpp.source.find("probed before"), std::string::npos);
}

// Without --rpc-server-binary / --llama-server-binary the paths come from the hosts' probes, else the planning
// host's PATH under either name, else the install location; cluster.yaml says which and why, regen keeps
// them, and check --cluster fails a host whose facts lack the program and warns on mixed builds.
TEST(ClusterPlan, DefaultBinariesAreFoundNotAssumed) {
    test::TempDir dir;
    const std::string model = dir / "m.gguf";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 4 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --experts 4 --experts-used 2 --ffn 64 "
                                  "--vocab-builtin --out " +
                                      model,
                                  true)
                  .first,
              0);
    auto write_facts = [&](const std::string& name, const HostFacts& h) {
        std::ofstream(dir / name) << to_json(h).dump();
        return dir / name;
    };
    const std::string head = write_facts("head.json", with_programs(fixture_host("laptop-1node-smt"), "llama-server", "/opt/llama/bin/llama-server"));
    const std::string w1 = write_facts("w1.json",
                                       with_programs(fixture_host("server-2socket-nvme-node1"), "rpc-server", "/opt/llama/bin/ggml-rpc-server"));
    const std::string w2 = write_facts("w2.json", with_programs(fixture_host("thp-never"), "rpc-server", "/opt/llama/bin/ggml-rpc-server"));
    const std::string hosts = " --head " + head + "@10.0.0.1 --worker " + w1 + "@10.0.0.2 --worker " + w2 + "@10.0.0.3";
    auto plan = [&](const std::string& path_env, const std::string& hosts_args, const std::string& out) {
        return test::run_moestream_env("PATH=" + path_env, "plan --target llama-rpc --model " + model + hosts_args + " --out " + out);
    };

    // 1. From the probes.
    auto [rc, text] = plan("/nonexistent", hosts, dir / "c1");
    ASSERT_EQ(rc, 0) << text;
    EXPECT_NE(read_file(dir / "c1/worker1/rpc-server.service").find("ExecStart=/opt/llama/bin/ggml-rpc-server -H 10.0.0.2"), std::string::npos);
    EXPECT_NE(read_file(dir / "c1/head/launch.sh").find("/opt/llama/bin/llama-server"), std::string::npos);
    const std::string yaml1 = read_file(dir / "c1/cluster.yaml");
    EXPECT_NE(yaml1.find("rpc_server_binary: \"/opt/llama/bin/ggml-rpc-server: found running by the probe of worker1, worker2\""), std::string::npos)
        << yaml1;
    auto [ok, ok_out] = test::run_moestream("check --cluster " + dir / "c1/cluster.yaml", true);
    EXPECT_EQ(ok, 0) << ok_out;
    EXPECT_NE(ok_out.find("7001 (abcdef1) on head, worker1, worker2"), std::string::npos) << ok_out;

    // 2. Facts from before programs were probed: the planning host's PATH, under the old name too.
    const std::string old_head = write_facts("old-head.json", fixture_host("laptop-1node-smt"));
    const std::string old_w = write_facts("old-w.json", fixture_host("thp-never"));
    write_fake_llama_cpp(dir / "bin", "rpc-server", "6500");
    auto [rc2, text2] = plan(dir / "bin", " --head " + old_head + "@10.0.0.1 --worker " + old_w + "@10.0.0.2", dir / "c2");
    ASSERT_EQ(rc2, 0) << text2;
    EXPECT_NE(read_file(dir / "c2/worker1/rpc-server.service").find("ExecStart=" + dir / "bin/rpc-server -H"), std::string::npos);
    EXPECT_NE(read_file(dir / "c2/cluster.yaml").find("planning host's PATH under its older name rpc-server"), std::string::npos);
    auto [warn, warn_out] = test::run_moestream("check --cluster " + dir / "c2/cluster.yaml", true);
    EXPECT_EQ(warn, 1) << warn_out;  // the facts cannot say: WARN, probe again
    EXPECT_NE(warn_out.find("probe --json"), std::string::npos) << warn_out;

    // 3. Nowhere: llama.cpp's install location under its current name, and a warning at plan time.
    auto [rc3, text3] = plan("/nonexistent", " --head " + old_head + "@10.0.0.1 --worker " + old_w + "@10.0.0.2", dir / "c3");
    ASSERT_EQ(rc3, 0) << text3;
    EXPECT_NE(read_file(dir / "c3/worker1/rpc-server.service").find("ExecStart=/usr/local/bin/ggml-rpc-server -H"), std::string::npos);
    EXPECT_NE(text3.find("WARNING: no host's probe found rpc-server"), std::string::npos) << text3;

    // regen keeps what the plan chose, whatever PATH says now.
    auto [same, same_out] = test::run_moestream_env("PATH=/nonexistent", "regen --cluster " + dir / "c2/cluster.yaml");
    EXPECT_EQ(same, 0) << same_out;
    EXPECT_NE(same_out.find("nothing changed"), std::string::npos) << same_out;

    // check --cluster: a worker whose probe found another path FAILs with that path in the fix; mixed builds WARN.
    write_facts("w2.json", with_programs(fixture_host("thp-never"), "rpc-server", "/usr/bin/rpc-server"));
    auto [fail, fail_out] = test::run_moestream("check --cluster " + dir / "c1/cluster.yaml", true);
    EXPECT_EQ(fail, 2) << fail_out;
    EXPECT_NE(fail_out.find("--rpc-server-binary /usr/bin/rpc-server"), std::string::npos) << fail_out;
    write_facts("w2.json", with_programs(fixture_host("thp-never"), "rpc-server", "/opt/llama/bin/ggml-rpc-server", "6900 (0123456)"));
    auto [mixed, mixed_out] = test::run_moestream("check --cluster " + dir / "c1/cluster.yaml", true);
    EXPECT_EQ(mixed, 1) << mixed_out;
    EXPECT_NE(mixed_out.find("6900 (0123456) on worker2"), std::string::npos) << mixed_out;
}

// llama.cpp built from a source tree without git (a release tarball, a distribution package) reports
// "version: 0 (unknown)": it runs, and its build cannot tell two such builds apart, so check warns.
TEST(ClusterPlan, BuildWithoutGitRunsButCannotBeCompared) {
    test::TempDir dir;
    std::filesystem::create_directories(dir / "bin");
    std::ofstream(dir / "bin/llama-server") << "#!/bin/sh\necho \"version: 0 (unknown)\" >&2\necho \"built with GNU 12.2.0\" >&2\n";
    std::filesystem::permissions(dir / "bin/llama-server", std::filesystem::perms::owner_all);
    const LlamaCppFacts f = probe_llama_cpp(dir / "bin");
    ASSERT_EQ(f.binaries.size(), 1u);
    EXPECT_TRUE(f.binaries[0].runs) << f.binaries[0].detail;
    EXPECT_EQ(f.binaries[0].build, "0 (unknown)");
    const CheckRow row = llama_builds_row({{"head", "0 (unknown)"}, {"worker1", "0 (unknown)"}});
    EXPECT_EQ(row.status, CheckStatus::Warn) << row.measured;
    EXPECT_NE(row.fix.find("without git"), std::string::npos) << row.fix;
    EXPECT_EQ(llama_builds_row({{"head", "7001 (abcdef1)"}, {"worker1", "7001 (abcdef1)"}}).status, CheckStatus::Pass);
}

TEST(ClusterPlan, CliNeedsAddresses) {
    auto [rc, out] = test::run_moestream("plan --target llama-rpc --model /nonexistent.gguf --out /tmp/x --head h.json --worker w.json", true);
    EXPECT_EQ(rc, 2);
    EXPECT_NE(out.find("FACTS@ADDRESS"), std::string::npos) << out;
}

}  // namespace
}  // namespace moe

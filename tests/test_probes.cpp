// Probes on fixture /proc and /sys trees (tests/fixtures/hosts), a smoke run on this real host, and the
// storage probe with fio run for real.
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "probes/probes.h"
#include "probes/storage_probe.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::string fixture(const std::string& name) { return std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/hosts/" + name; }

TEST(Probes, LaptopWithSmt) {
    FsRoot fs(fixture("laptop-1node-smt"));
    CpuFacts c = probe_cpu(fs);
    EXPECT_EQ(c.model.value, "Intel(R) Core(TM) i7-1185G7 @ 3.00GHz");
    EXPECT_EQ(c.logical_cpus.value, 8);
    EXPECT_EQ(c.physical_cores.value, 4);
    EXPECT_EQ(c.sockets.value, 1);
    EXPECT_EQ(c.first_thread_per_core, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(c.smt_siblings_of_cpu0, (std::vector<int>{0, 4}));
    EXPECT_TRUE(c.simd.at("avx512_vnni"));
    EXPECT_FALSE(c.simd.at("avx512_bf16"));
    EXPECT_TRUE(c.simd.at("avx512vbmi"));  // Tiger Lake has VBMI
    NumaFacts n = probe_numa(fs);
    ASSERT_EQ(n.nodes.size(), 1u);
    EXPECT_EQ(n.nodes[0].mem_total_bytes, 32768000ull * 1024);
    MemoryFacts m = probe_memory(fs);
    EXPECT_EQ(m.thp_enabled.value, "madvise");
    EXPECT_EQ(m.swap_total_bytes.value, 8388608ull * 1024);
    BlockDeviceFacts d = probe_block_device(fs, "nvme0n1");
    EXPECT_EQ(d.model.value, "Samsung SSD 980 PRO 1TB");
    EXPECT_EQ(d.scheduler.value, "none");
    EXPECT_EQ(d.rotational.value, false);
    EXPECT_FALSE(d.numa_node.value) << "numa_node -1 must be unknown, never node 0";
}

// Facts files the fuzzer broke: every bad input is a runtime_error naming the file, never another exception.
TEST(Probes, FactsReaderRefusesWhatTheFuzzerFound) {
    auto message = [](const std::string& text) {
        try {
            host_facts_from_text(text, "f.yaml");
        } catch (const std::runtime_error& e) { return std::string(e.what()); }
        return std::string("accepted");
    };
    EXPECT_EQ(message("schema: 1\ncpu:\n  model: {value: \"\xa1\xa2\", source: x}\n"), "f.yaml: not UTF-8 text");
    EXPECT_EQ(message("schema: one\n"), "f.yaml: schema is not a number");
    EXPECT_EQ(message("schema: 9\n"), "f.yaml: facts schema 9 is newer than this moestream");
}

TEST(Probes, TwoSocketServerNvmeOnNode1) {
    FsRoot fs(fixture("server-2socket-nvme-node1"));
    CpuFacts c = probe_cpu(fs);
    EXPECT_EQ(c.physical_cores.value, 8);
    EXPECT_EQ(c.sockets.value, 2);
    NumaFacts n = probe_numa(fs);
    ASSERT_EQ(n.nodes.size(), 2u);
    EXPECT_EQ(n.nodes[1].cpus, (std::vector<int>{4, 5, 6, 7}));
    EXPECT_EQ(probe_block_device(fs, "nvme0n1").numa_node.value, 1);
    // Multipath head: no device/numa_node of its own, resolved through controller nvme3.
    BlockDeviceFacts head = probe_block_device(fs, "nvme1n1");
    EXPECT_EQ(head.numa_node.value, 1);
    EXPECT_NE(head.numa_node.source.find("/sys/class/nvme/nvme3"), std::string::npos);
    KernelFacts k = probe_kernel(fs, false);
    EXPECT_EQ(k.sysctl.at("kernel.numa_balancing").value, 1);
    EXPECT_EQ(probe_memory(fs).thp_enabled.value, "always");
}

TEST(Probes, ThpNeverBox) {
    FsRoot fs(fixture("thp-never"));
    EXPECT_EQ(probe_memory(fs).thp_enabled.value, "never");
    EXPECT_EQ(probe_memory(fs).swap_total_bytes.value, 0u);
}

TEST(Probes, MissingFilesAreUnknownNotGuessed) {
    FsRoot fs(fixture("missing-files"));
    CpuFacts c = probe_cpu(fs);
    EXPECT_FALSE(c.model.value);
    EXPECT_FALSE(c.physical_cores.value);
    EXPECT_NE(c.physical_cores.source.find("unknown"), std::string::npos);
    MemoryFacts m = probe_memory(fs);
    EXPECT_FALSE(m.total_bytes.value);
    EXPECT_NE(m.total_bytes.source.find("/proc/meminfo unreadable"), std::string::npos);
    KernelFacts k = probe_kernel(fs, false);
    EXPECT_FALSE(k.sysctl.at("vm.swappiness").value);
    EXPECT_NE(k.sysctl.at("vm.swappiness").source.find("unreadable: /proc/sys/vm/swappiness"), std::string::npos);
    EXPECT_FALSE(probe_block_device(fs, "sda").size_bytes.value);
    EXPECT_EQ(probe_numa(fs).nodes.size(), 1u);
}

TEST(Probes, CpuListParsing) {
    EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
    EXPECT_FALSE(parse_cpu_list("3-1"));
    EXPECT_FALSE(parse_cpu_list("a-b"));
}

TEST(Probes, RealHostSmoke) {
    HostFacts h = probe_host({.root = "/", .try_ring = true});
    EXPECT_EQ(h.cpu.logical_cpus.value, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
    EXPECT_GE(h.numa.nodes.size(), 1u);
    struct rlimit rl {};
    ::getrlimit(RLIMIT_MEMLOCK, &rl);
    EXPECT_EQ(h.limits.memlock_hard.value, rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : rl.rlim_max);
    EXPECT_GT(h.memory.total_bytes.value.value_or(0), 0u);
    ASSERT_TRUE(h.kernel.io_uring_works.value.has_value()) << h.kernel.io_uring_works.source;
}

TEST(FioJson, ParsesBandwidthAndLatency) {
    const std::string out = R"(note: both iodepth >= 1 and synchronous I/O engine are selected
{"fio version":"fio-3.33","jobs":[{"jobname":"x","error":0,"read":{"bw_bytes":1100000000,"iops":1049.5,
"runtime":5000,"clat_ns":{"percentile":{"50.000000":30000000,"99.000000":80000000}}}}]})";
    BandwidthResult r = parse_fio_json(out);
    EXPECT_DOUBLE_EQ(r.bytes_per_s, 1.1e9);
    EXPECT_DOUBLE_EQ(r.iops, 1049.5);
    EXPECT_DOUBLE_EQ(r.clat_p50_us, 30000);
    EXPECT_DOUBLE_EQ(r.clat_p99_us, 80000);
    EXPECT_THROW(parse_fio_json("fio: engine io_uring not loadable"), StorageProbeError);
    EXPECT_THROW(parse_fio_json(R"({"jobs":[]})"), StorageProbeError);
    EXPECT_THROW(parse_fio_json(R"({"jobs":[{"error":5,"read":{}}]})"), StorageProbeError);
    EXPECT_THROW(parse_fio_json(R"({"jobs":[{"read":{"iops":1}}]})"), StorageProbeError);
}

// A directory on a disk-backed filesystem (not tmpfs) for the storage probe.
std::string disk_dir() {
    for (const char* d : {"/var/tmp", MOESTREAM_SOURCE_DIR})
        if (std::filesystem::is_directory(d) && ::access(d, W_OK) == 0) return d;
    return ".";
}

TEST(StorageProbe, FioAndIoUringForRealOnAScratchFile) {
    test::TempDir dummy;  // only for cleanup of nothing: the probe removes its own scratch file
    StorageProbeOptions o;
    o.dir = disk_dir();
    o.seconds = 1;
    o.scratch_bytes = 64u << 20;
    o.block_sizes = {1 << 20};
    StorageFacts s = probe_storage(o);
    ASSERT_EQ(s.results.size(), 2u) << (s.notes.empty() ? "" : s.notes[0]);
    EXPECT_EQ(s.results[0].tool, "fio");
    EXPECT_GT(s.results[0].bytes_per_s, 1e6);
    EXPECT_GT(s.results[0].clat_p99_us, 0);
    EXPECT_EQ(s.results[1].tool, "io_uring-probe");
    EXPECT_GT(s.results[1].bytes_per_s, 1e6);
    for (const auto& e : std::filesystem::directory_iterator(o.dir))
        EXPECT_EQ(e.path().filename().string().find(".moestream-probe-" + std::to_string(::getpid())), std::string::npos)
            << "scratch file left behind";
}

TEST(StorageProbe, MissingFioFallsBackToTheBuiltInProbe) {
    StorageProbeOptions o;
    o.dir = disk_dir();
    o.seconds = 1;
    o.scratch_bytes = 32u << 20;
    o.fio_binary = "/nonexistent/fio";
    StorageFacts s = probe_storage(o);
    ASSERT_EQ(s.results.size(), 1u);
    EXPECT_EQ(s.results[0].tool, "io_uring-probe");
    ASSERT_FALSE(s.notes.empty());
    EXPECT_NE(s.notes[0].find("fio not found"), std::string::npos);
}

TEST(StorageProbe, FailingFioIsAClearError) {
    test::TempDir dir;
    const std::string fake = dir / "fio";
    std::ofstream(fake) << "#!/bin/sh\necho 'fio: engine io_uring not loadable' >&2\nexit 1\n";
    std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
    StorageProbeOptions o;
    o.dir = disk_dir();
    o.seconds = 1;
    o.scratch_bytes = 16u << 20;
    o.fio_binary = fake;
    try {
        probe_storage(o);
        FAIL() << "a failing fio was accepted";
    } catch (const StorageProbeError& e) {
        EXPECT_NE(std::string(e.what()).find("fio exited with status 1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("not loadable"), std::string::npos) << e.what();
    }
}

TEST(StorageProbe, RefusesTmpfs) {
    if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm on this host";
    StorageProbeOptions o;
    o.dir = "/dev/shm";
    try {
        probe_storage(o);
        FAIL() << "tmpfs accepted";
    } catch (const StorageProbeError& e) { EXPECT_NE(std::string(e.what()).find("tmpfs"), std::string::npos) << e.what(); }
}

// The replay log is fio's iolog v2: every file added and opened, the reads in submission order, then closed;
// a read naming a file the model does not have is an error, not a silent skip.
TEST(FioReplay, WritesTheReadsAsAnIologV2) {
    test::TempDir dir;
    const std::string log = dir / "replay.log";
    write_fio_iolog(log, {"/m/a.gguf", "/m/b.gguf"}, {{0, 4096, 1048576}, {1, 0, 8192}, {0, 8192, 4096}});
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(text,
              "fio version 2 iolog\n/m/a.gguf add\n/m/b.gguf add\n/m/a.gguf open\n/m/b.gguf open\n"
              "/m/a.gguf read 4096 1048576\n/m/b.gguf read 0 8192\n/m/a.gguf read 8192 4096\n/m/a.gguf close\n/m/b.gguf close\n");
    EXPECT_THROW(write_fio_iolog(log, {"/m/a.gguf"}, {{3, 0, 4096}}), StorageProbeError);
}

}  // namespace
}  // namespace moe

// The llama.cpp RPC cluster plan started for real on loopback addresses: a head on 127.0.0.1 and workers on
// 127.0.0.2 and 127.0.0.3 run the generated commands verbatim (each worker unit's ExecStart line, the head's
// launch.sh) with llama.cpp's own programs. Passing means the plan's flags, device names and -ot placement are
// ones llama.cpp accepts: the workers take the head's connection, each one holds its layers' tensors, and a
// completion comes back.
//
// llama.cpp is not a dependency: the test looks for its programs in MOESTREAM_LLAMA_CPP_BIN (a directory, as
// `cmake --build build --target llama-server ggml-rpc-server` leaves them in build/bin) and then on PATH, and
// skips with a message saying so where it finds none.
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>
#include <regex>
#include <sstream>
#include <thread>

#include "probes/probes.h"
#include "tests/http_client.h"
#include "tests/test_support.h"

namespace moe {
namespace {
namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
    std::ifstream f(p);
    return {std::istreambuf_iterator<char>(f), {}};
}

// The directory holding llama-server and an RPC worker under either of its names, or "".
std::string find_llama_cpp_dir() {
    std::vector<std::string> dirs;
    if (const char* d = std::getenv("MOESTREAM_LLAMA_CPP_BIN"); d && *d) dirs.push_back(d);
    if (const char* path = std::getenv("PATH")) {
        std::stringstream ss(path);
        for (std::string d; std::getline(ss, d, ':');)
            if (!d.empty()) dirs.push_back(d);
    }
    for (const auto& d : dirs) {
        const bool server = ::access((d + "/llama-server").c_str(), X_OK) == 0;
        const bool rpc = ::access((d + "/ggml-rpc-server").c_str(), X_OK) == 0 || ::access((d + "/rpc-server").c_str(), X_OK) == 0;
        if (server && rpc) return d;
    }
    return "";
}

// A TCP port nothing listens on now (the kernel's pick for a wildcard bind).
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

// Whether something listens on address:port, from /proc/net/tcp (connecting would take the rpc-server's one
// client slot).
bool listening(const std::string& address, int port) {
    in_addr a{};
    ::inet_pton(AF_INET, address.c_str(), &a);
    char want[32];
    std::snprintf(want, sizeof want, "%08X:%04X", a.s_addr, port);
    std::ifstream f("/proc/net/tcp");
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string slot, local, remote, state;
        ls >> slot >> local >> remote >> state;
        if (local == want && state == "0A") return true;
    }
    return false;
}

// A command line run by sh in its own process group, output to a log file; killed with the group at the end.
struct Started {
    pid_t pid = -1;
    fs::path log;
    Started(const std::string& command, const fs::path& log_path, const std::vector<std::string>& env) : log(log_path) {
        pid = ::fork();
        if (pid == 0) {
            ::setpgid(0, 0);
            const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            ::dup2(fd, 1);
            ::dup2(fd, 2);
            for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
            ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    bool running() const { return pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
    std::string output() const { return read_file(log); }
    ~Started() {
        if (pid <= 0) return;
        ::kill(-pid, SIGTERM);
        for (int i = 0; i < 50 && ::waitpid(pid, nullptr, WNOHANG) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
    }
};

std::string exec_start(const std::string& unit) {
    std::smatch m;
    return std::regex_search(unit, m, std::regex("\nExecStart=([^\n]+)")) ? m[1].str() : "";
}

TEST(ClusterLive, GeneratedCommandsServeACompletionOnLoopback) {
    const std::string bin = find_llama_cpp_dir();
    if (bin.empty())
        GTEST_SKIP() << "llama.cpp's llama-server and ggml-rpc-server (or rpc-server) not found in MOESTREAM_LLAMA_CPP_BIN or PATH: "
                        "the cluster plan was not started for real (build llama.cpp with -DGGML_RPC=ON and point "
                        "MOESTREAM_LLAMA_CPP_BIN at its build/bin)";
    ASSERT_EQ(::access("/proc/net/tcp", R_OK), 0) << "the test sees listening sockets through /proc/net/tcp";
    std::cerr << "[  NOTE    ] llama.cpp programs from " << bin << "\n";
    test::TempDir dir;
    const std::string model = dir / "m.gguf";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 4 --embd 64 --heads 2 --kv-heads 1 --head-dim 32 --experts 4 --experts-used 2 --ffn 64 "
                                  "--vocab-builtin --out " +
                                      model,
                                  true)
                  .first,
              0);

    // Facts as `probe` writes them on each host, with the programs the live probe finds in `bin` (so the plan's
    // binary paths come from the probes, as on a real cluster) and one core each (three processes, 2 CPUs).
    auto write_facts = [&](const std::string& name, const std::string& fixture) {
        HostFacts h = probe_host({.root = std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/hosts/" + fixture, .try_ring = false});
        h.llama_cpp = probe_llama_cpp(bin);
        h.cpu.physical_cores.value = 1;
        std::ofstream(dir / name) << to_json(h).dump();
        return dir / name;
    };
    const std::string head = write_facts("head.json", "laptop-1node-smt");
    const std::string w1 = write_facts("w1.json", "thp-never"), w2 = write_facts("w2.json", "thp-never");
    const int rpc_port = free_port(), http_port = free_port();
    const std::string out = dir / "cluster";
    auto [rc, text] = test::run_moestream("plan --target llama-rpc --model " + model + " --head " + head + "@127.0.0.1 --worker " + w1 +
                                              "@127.0.0.2 --worker " + w2 + "@127.0.0.3 --rpc-port " + std::to_string(rpc_port) + " --port " +
                                              std::to_string(http_port) + " --ctx 512 --out " + out,
                                          true);
    ASSERT_EQ(rc, 0) << text;
    // No FAIL row (a build from a source tree without git WARNs: its builds cannot be compared).
    auto [check_rc, check_out] = test::run_moestream("check --cluster " + out + "/cluster.yaml", true);
    EXPECT_LE(check_rc, 1) << check_out;

    // The workers: each unit's ExecStart verbatim; LLAMA_CACHE as the unit's Environment= sets it, pointed at
    // a directory of the test's (the unit's CacheDirectory=).
    std::vector<std::unique_ptr<Started>> workers;
    const std::vector<std::string> addresses = {"127.0.0.2", "127.0.0.3"};
    for (int i = 0; i < 2; ++i) {
        const std::string unit = read_file(out + "/worker" + std::to_string(i + 1) + "/rpc-server.service");
        const std::string command = exec_start(unit);
        ASSERT_NE(command.find(bin), std::string::npos) << "the probe's path is not in the unit: " << command;
        ASSERT_NE(unit.find("Environment=LLAMA_CACHE="), std::string::npos) << unit;
        fs::create_directories(dir / ("cache" + std::to_string(i)));
        workers.push_back(
            std::make_unique<Started>(command, dir / ("worker" + std::to_string(i) + ".log"),
                                      std::vector<std::string>{"LLAMA_CACHE=" + dir / ("cache" + std::to_string(i)), "GGML_RPC_DEBUG=1"}));
    }
    for (int i = 0; i < 2; ++i) {
        for (int t = 0; t < 300 && !listening(addresses[i], rpc_port) && workers[i]->running(); ++t)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        ASSERT_TRUE(listening(addresses[i], rpc_port)) << "worker " << addresses[i] << " does not listen:\n" << workers[i]->output();
    }

    // The head: launch.sh as written.
    Started head_server("exec sh " + out + "/head/launch.sh", dir / "head.log", {});
    int health = 0;
    for (int t = 0; t < 1200 && head_server.running(); ++t) {
        health = test::request(http_port, "GET", "/health").status;
        if (health == 200) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(health, 200) << "llama-server never became healthy:\n" << head_server.output();

    const auto reply = test::request(http_port, "POST", "/completion",
                                     R"({"prompt": "Hello there", "n_predict": 8, "ignore_eos": true, "temperature": 0})");
    ASSERT_EQ(reply.status, 200) << reply.body << "\n" << head_server.output();
    const auto body = nlohmann::json::parse(reply.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << reply.body;
    EXPECT_EQ(body.value("tokens_predicted", 0), 8) << reply.body;
    EXPECT_TRUE(body.contains("content") && body["content"].is_string()) << reply.body;

    // Each worker holds its layers: the head sent it at least the bytes of its share of the weights
    // (GGML_RPC_DEBUG logs each set_tensor with its size), and less than the whole model.
    const YAML::Node plan = YAML::LoadFile(out + "/cluster.yaml");
    const uint64_t model_bytes = fs::file_size(model);
    for (int i = 0; i < 2; ++i) {
        const std::string worker_log = workers[i]->output();
        const std::regex set_tensor(R"(\[set_tensor\][^\n]*size: (\d+))");
        uint64_t received = 0;
        for (auto it = std::sregex_iterator(worker_log.begin(), worker_log.end(), set_tensor); it != std::sregex_iterator(); ++it)
            received += std::stoull((*it)[1].str());
        const uint64_t share = plan["hosts"][i + 1]["weight_bytes"].as<uint64_t>();
        EXPECT_EQ(plan["hosts"][i + 1]["address"].as<std::string>(), addresses[i]);
        EXPECT_GT(share, 0u);
        std::cerr << "[  NOTE    ] " << addresses[i] << ": sent " << received << " bytes for a share of " << share << "\n";
        EXPECT_GE(received, share) << addresses[i] << " was sent " << received << " bytes of its " << share << ":\n" << worker_log;
        EXPECT_LT(received, model_bytes) << addresses[i];
    }
}

}  // namespace
}  // namespace moe

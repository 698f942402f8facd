// A live `moestream serve` child process on loopback for tests, and the suite fixture that writes its model.
#pragma once
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "tests/http_client.h"
#include "tests/budget.h"
#include "tests/test_support.h"

namespace moe::test {

class Server {
public:
    // `wrapper`: words before the command (e.g. a shell that moves itself into a cgroup, then execs the rest).
    Server(const std::string& model, std::vector<std::string> extra, std::vector<std::string> wrapper = {}) {
        port_file_ = dir_ / "port";
        std::vector<std::string> args = std::move(wrapper);
        for (std::string a : {std::string(MOESTREAM_BINARY), std::string("serve"), std::string("--model"), model, std::string("--port"),
                              std::string("0"), std::string("--port-file"), port_file_, std::string("--threads"), std::to_string(kServeThreads),
                              std::string("--alias"), std::string("m")})
            args.push_back(std::move(a));
        args.insert(args.end(), extra.begin(), extra.end());
        pid_ = ::fork();
        if (pid_ == 0) {
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            ::freopen((dir_ / "log").c_str(), "w", stderr);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        for (int i = 0; i < 300 && port_ == 0; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            std::ifstream f(port_file_);
            f >> port_;
        }
        for (int i = 0; i < 500 && port_; ++i) {
            if (request(port_, "GET", "/health").status == 200) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    ~Server() {
        if (pid_ > 0 && !exited_) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    int port() const { return port_; }
    pid_t pid() const { return pid_; }
    // SIGTERM and wait (bounded); returns the exit status, or -1 when it did not exit.
    int terminate() {
        ::kill(pid_, SIGTERM);
        for (int i = 0; i < 500; ++i) {
            int st = 0;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                exited_ = true;
                return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return -1;
    }
    std::string log() const {
        std::ifstream f(dir_ / "log");
        return {std::istreambuf_iterator<char>(f), {}};
    }

private:
    TempDir dir_;
    std::string port_file_;
    pid_t pid_ = -1;
    int port_ = 0;
    bool exited_ = false;
};

// /v1/engine/stats once its newest sample carries `key` (the monitor samples every second), or after ~4 s.
inline nlohmann::json engine_stats_with(int port, const std::string& key) {
    nlohmann::json stats;
    for (int i = 0; i < 40; ++i) {
        stats = nlohmann::json::parse(request(port, "GET", "/v1/engine/stats").body);
        if (!stats["samples"].empty() && stats["samples"].back().contains(key)) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return stats;
}

class ServeTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir;
        model_ = *dir_ / "chat.gguf";
        ASSERT_EQ(cli::dispatch({"mkmodel", "--layers",  "2", "--embd",         "64", "--heads", "2",  "--kv-heads",      "1",      "--head-dim",
                                 "32",      "--experts", "4", "--experts-used", "2",  "--ffn",   "64", "--vocab-builtin", "--seed", "9",
                                 "--out",   model_}),
                  0);
    }
    static void TearDownTestSuite() { delete dir_; }
    static inline TempDir* dir_ = nullptr;
    static inline std::string model_;
};

}  // namespace moe::test

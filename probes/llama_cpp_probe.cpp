// llama.cpp's programs on this host: each candidate run once with --version under a deadline, its build
// parsed from what it prints ("version: 6123 (1a2b3c4)"). rpc-server has no --version: it prints its usage
// and exits 0, which says it runs; its build is then the one llama-server beside it reports, if any.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "probes/probes.h"

namespace moe {
namespace fs = std::filesystem;

const std::vector<std::string>& llama_cpp_names(const std::string& role) {
    // llama.cpp installs its RPC worker as ggml-rpc-server now; releases before the rename called it rpc-server.
    static const std::vector<std::string> rpc = {"ggml-rpc-server", "rpc-server"}, server = {"llama-server"}, none;
    return role == "rpc-server" ? rpc : role == "llama-server" ? server : none;
}

namespace {

struct RunResult {
    bool started = false, exited = false;
    int status = -1;
    std::string output;
};

// `path --version` with stdin from /dev/null, stdout and stderr together, killed after `deadline`.
RunResult run_version(const std::string& path, std::chrono::milliseconds deadline) {
    RunResult r;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return r;
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(fds[0]), ::close(fds[1]);
        return r;
    }
    if (pid == 0) {
        ::setpgid(0, 0);  // its own group, so a timeout kills whatever it started too
        const int null = ::open("/dev/null", O_RDONLY);
        if (null >= 0) ::dup2(null, 0);
        ::dup2(fds[1], 1), ::dup2(fds[1], 2);
        ::execl(path.c_str(), path.c_str(), "--version", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(fds[1]);
    r.started = true;
    const auto until = std::chrono::steady_clock::now() + deadline;
    char buf[4096];
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
        if (left <= 0) break;
        pollfd p{fds[0], POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
        const ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n <= 0) break;  // EOF: the program closed its output (exited)
        if (r.output.size() < 65536) r.output.append(buf, static_cast<size_t>(n));
    }
    ::close(fds[0]);
    int st = 0;
    for (int i = 0; i < 50; ++i) {  // up to 0.5 s more to exit after closing its output
        if (::waitpid(pid, &st, WNOHANG) == pid) {
            r.exited = true;
            r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return r;
        }
        ::usleep(10000);
    }
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &st, 0);
    return r;
}

std::string first_line(const std::string& text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.find_first_not_of(" \t\r") != std::string::npos) return line.substr(0, 200);
    return "";
}

bool executable_file(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

LlamaCppFacts probe_llama_cpp(const std::string& path_env) {
    LlamaCppFacts f;
    f.probed = true;
    f.source = "PATH and /usr/local/bin, /usr/bin, each found program run with --version";
    std::vector<std::pair<std::string, std::string>> dirs;  // (dir, found_by)
    std::set<std::string> seen_dirs;
    std::stringstream ss(path_env);
    for (std::string d; std::getline(ss, d, ':');)
        if (!d.empty() && d[0] == '/' && seen_dirs.insert(d).second) dirs.push_back({d, "PATH"});
    for (const char* d : {"/usr/local/bin", "/usr/bin"})
        if (seen_dirs.insert(d).second) dirs.push_back({d, "install location"});
    // "version: 6123 (1a2b3c4)"; a build from a source tree without git says "version: 0 (unknown)".
    static const std::regex build_re(R"(version:?\s*(\d+)\s*\(([^()\s]+)\))");
    std::set<std::string> seen;
    for (const std::string role : {"llama-server", "rpc-server"}) {
        for (const auto& name : llama_cpp_names(role)) {
            for (const auto& [dir, how] : dirs) {
                const fs::path p = fs::path(dir) / name;
                if (!executable_file(p)) continue;
                std::error_code ec;
                const std::string real = fs::weakly_canonical(p, ec).string();
                if (!seen.insert(real.empty() ? p.string() : real).second) continue;  // a symlink to one already found
                LlamaCppBinary b{role, p.string(), how, false, "", "", ""};
                const RunResult r = run_version(b.path, std::chrono::milliseconds(5000));
                std::smatch m;
                if (std::regex_search(r.output, m, build_re)) b.build = m[1].str() + " (" + m[2].str() + ")", b.build_source = "--version";
                if (!r.started) b.detail = "could not be started";
                else if (!r.exited) b.detail = "did not exit within 5 s of --version";
                else if (r.status == 127 && r.output.empty()) b.detail = "exec failed (exit 127)";
                else if (r.status != 0) b.detail = "exit " + std::to_string(r.status) + ": " + first_line(r.output);
                else b.detail = first_line(r.output);
                // llama-server answers --version; rpc-server prints its usage ("unknown argument") and exits 0.
                b.runs = r.exited && r.status == 0 && (!b.build.empty() || r.output.find("sage") != std::string::npos);
                if (r.exited && r.status == 0 && !b.runs) b.detail = "exit 0 without a version or usage: " + first_line(r.output);
                f.binaries.push_back(b);
            }
        }
    }
    // rpc-server reports no build: the llama-server installed beside it comes from the same build tree.
    for (auto& b : f.binaries) {
        if (b.role != "rpc-server" || !b.build.empty() || !b.runs) continue;
        for (const auto& s : f.binaries)
            if (s.role == "llama-server" && !s.build.empty() && fs::path(s.path).parent_path() == fs::path(b.path).parent_path())
                b.build = s.build, b.build_source = "llama-server beside it";
    }
    return f;
}

}  // namespace moe

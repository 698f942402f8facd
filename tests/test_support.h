// Shared helpers for tests: where the llama.cpp oracle lives, and temporary directories.
#pragma once
#include <cctype>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/forward/runner.h"
#include "engine/gguf/gguf.h"
#include "engine/weights/weights.h"

namespace moe::test {

// MOESTREAM_ORACLE or ../shared/oracle relative to the source tree; empty when absent.
// A gtest parameter name from any text: every character but letters and digits becomes '_'.
inline std::string test_name(std::string n) {
    for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
}

inline std::string oracle_dir() {
    const char* env = std::getenv("MOESTREAM_ORACLE");
    std::string dir = env ? env : std::string(MOESTREAM_SOURCE_DIR) + "/../shared/oracle";
    return std::filesystem::is_directory(dir) ? dir : std::string();
}

// Skips (visibly) when the oracle is missing; .ci/run refuses to run without it, so CI never skips.
#define REQUIRE_ORACLE()                                                                                                                    \
    do {                                                                                                                                    \
        if (moe::test::oracle_dir().empty()) GTEST_SKIP() << "llama.cpp oracle not found (set MOESTREAM_ORACLE or place ../shared/oracle)"; \
    } while (0)

// Runs a shell command line; returns its exit code and its output.
// A file of tests/fixtures/chat_tools (templates' renderings), whole; empty (and a failure) when missing.
inline std::string chat_fixture(const std::string& name) {
    std::ifstream f(std::string(MOESTREAM_SOURCE_DIR) + "/tests/fixtures/chat_tools/" + name);
    EXPECT_TRUE(f) << name;
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

inline std::pair<int, std::string> run_moestream_cmd(const std::string& cmd) {
    FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int st = ::pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}
// Runs the real `moestream` binary with `args`; returns its exit code and its output (stderr too unless
// `with_stderr` is false).
inline std::pair<int, std::string> run_moestream(const std::string& args, bool with_stderr = true) {
    return run_moestream_cmd(std::string(MOESTREAM_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

// The same with `env` ("NAME=value ...") set for that command only.
inline std::pair<int, std::string> run_moestream_env(const std::string& env, const std::string& args) {
    return run_moestream_cmd(env + " " + std::string(MOESTREAM_BINARY) + " " + args + " 2>&1");
}

// A GGUF u16 value (split.count / split.no are u16 in llama.cpp's split files).
inline moe::GgufValue gguf_u16(uint16_t v) {
    moe::GgufValue g;
    g.type = moe::GgufValueType::UINT16;
    g.raw = {static_cast<uint8_t>(v & 0xff), static_cast<uint8_t>(v >> 8)};
    return g;
}

// Every tensor of a GGUF file with its bytes (to write an edited copy with write_gguf).
inline std::vector<moe::GgufTensorData> read_tensors(const std::string& path) {
    const moe::GgufFile f = moe::read_gguf_header(path);
    std::vector<moe::GgufTensorData> out;
    for (const auto& t : f.tensors) {
        moe::GgufTensorData d{t.name, t.ne, t.type(), std::vector<uint8_t>(t.nbytes)};
        moe::read_file_range(path, t.file_offset, t.nbytes, d.bytes.data());
        out.push_back(std::move(d));
    }
    return out;
}

// Every position's logits for `prompt` (one batch pass, chunks of 8), then `gen` greedy steps' logits.
inline std::vector<float> greedy_logits(const moe::Model& m, const std::vector<int32_t>& prompt, int gen) {
    moe::Runner r(m, {.n_ctx = 128, .n_threads = 2, .n_batch = 8});
    r.eval(prompt, true);
    std::vector<float> all(r.logits(0), r.logits(0) + prompt.size() * m.hp.n_vocab);
    for (int i = 0; i < gen; ++i) {
        const float* l = r.logits();
        int32_t next = static_cast<int32_t>(std::max_element(l, l + m.hp.n_vocab) - l);
        r.eval(std::span<const int32_t>(&next, 1));
        all.insert(all.end(), r.logits(), r.logits() + m.hp.n_vocab);
    }
    return all;
}

struct TempDir {
    std::filesystem::path path;
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "moestream-test-XXXXXX").string();
        path = ::mkdtemp(tmpl.data());
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace moe::test

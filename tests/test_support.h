// Shared helpers for tests: where the llama.cpp oracle lives, and temporary directories.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace moe::test {

// MOESTREAM_ORACLE or ../shared/oracle relative to the source tree; empty when absent.
inline std::string oracle_dir() {
    const char* env = std::getenv("MOESTREAM_ORACLE");
    std::string dir = env ? env : std::string(MOESTREAM_SOURCE_DIR) + "/../shared/oracle";
    return std::filesystem::is_directory(dir) ? dir : std::string();
}

// Skips (visibly) when the oracle is missing; .ci/run refuses to run without it, so CI never skips.
#define REQUIRE_ORACLE()                                                                                     \
    do {                                                                                                     \
        if (moe::test::oracle_dir().empty())                                                                 \
            GTEST_SKIP() << "llama.cpp oracle not found (set MOESTREAM_ORACLE or place ../shared/oracle)";   \
    } while (0)

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

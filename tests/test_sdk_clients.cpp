// The official `openai` and `@anthropic-ai/sdk` npm clients against a live server (tests/node/sdk_clients.mjs).
// Skipped, saying why, where Node.js or the pinned packages are missing (scripts/setup.sh installs them);
// under CI they must be there.
#include <cstdlib>
#include <filesystem>

#include "tests/serve_fixture.h"

namespace moe {
namespace {

using test::Server;
using test::ServeTest;

TEST_F(ServeTest, OfficialSdkClients) {
    const std::string dir = std::string(MOESTREAM_SOURCE_DIR) + "/tests/node";
    const bool have_node = std::system("node --version > /dev/null 2>&1") == 0;
    const bool have_packages = std::filesystem::exists(dir + "/node_modules/openai") &&
                               std::filesystem::exists(dir + "/node_modules/@anthropic-ai/sdk");
    if (!have_node || !have_packages) {
        const char* ci = std::getenv("CI");
        const std::string why = !have_node ? "node is not on PATH" : "the SDK packages are not installed in tests/node (run scripts/setup.sh)";
        if (ci && std::string(ci) == "true") FAIL() << why;
        GTEST_SKIP() << why;
    }
    Server s(model_, {"--api-key", "sk-sdk"});
    ASSERT_GT(s.port(), 0) << s.log();
    test::TempDir out;
    const std::string log = out / "sdk.log";
    const int rc = std::system(
        ("cd " + dir + " && timeout 120 node sdk_clients.mjs " + std::to_string(s.port()) + " sk-sdk > " + log + " 2>&1").c_str());
    std::ifstream f(log);
    const std::string text{std::istreambuf_iterator<char>(f), {}};
    EXPECT_EQ(rc, 0) << text;
    EXPECT_NE(text.find("all SDK checks passed"), std::string::npos) << text;
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace moe

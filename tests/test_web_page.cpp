// The web page in a real browser: Debian's chromium, headless, driven by playwright-core from npm
// (tests/node/web_page.mjs) against a live server; screenshots are kept in build/test-artifacts. Skipped,
// saying why, where node, the package or chromium is missing (scripts/setup.sh installs them); under CI they
// must be there. The page's static checks (no external URLs, the security headers) run everywhere.
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/serve_fixture.h"

namespace moe {
namespace {

using test::Server;
using test::ServeTest;

TEST_F(ServeTest, WebPageIsSelfContained) {
    Server s(model_, {"--api-key", "sk-web"});
    ASSERT_GT(s.port(), 0) << s.log();
    const auto page = test::request(s.port(), "GET", "/");  // static: no key needed
    ASSERT_EQ(page.status, 200);
    EXPECT_NE(page.headers.find("text/html"), std::string::npos);
    EXPECT_NE(page.headers.find("Content-Security-Policy: default-src 'none'"), std::string::npos) << page.headers;
    // Nothing loaded from elsewhere: no absolute URLs in src/href attributes, imports or fetches.
    EXPECT_FALSE(std::regex_search(page.body, std::regex(R"((src|href)\s*=\s*["']?(https?:)?//)"))) << "external resource in the page";
    EXPECT_FALSE(std::regex_search(page.body, std::regex(R"(fetch\(\s*["'`]https?:)"))) << "external fetch in the page";
    // Its data needs the key like every API route.
    EXPECT_EQ(test::request(s.port(), "GET", "/v1/engine/stats").status, 401);
    const auto stats = test::request(s.port(), "GET", "/v1/engine/stats", "", "Authorization: Bearer sk-web\r\n");
    ASSERT_EQ(stats.status, 200) << stats.body;
    const auto j = nlohmann::json::parse(stats.body);
    EXPECT_EQ(j["config"]["parallel"], 1);
    EXPECT_EQ(j["heat"]["counts"].size(), j["heat"]["layers"].get<size_t>() * j["heat"]["experts"].get<size_t>());
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST_F(ServeTest, WebPageInHeadlessChromium) {
    const std::string dir = std::string(MOESTREAM_SOURCE_DIR) + "/tests/node";
    const char* chromium_env = std::getenv("CHROMIUM");
    const std::string chromium = chromium_env ? chromium_env : "/usr/bin/chromium";
    std::string why;
    if (std::system("node --version > /dev/null 2>&1") != 0) why = "node is not on PATH";
    else if (!std::filesystem::exists(dir + "/node_modules/playwright-core"))
        why = "playwright-core is not installed in tests/node (run scripts/setup.sh)";
    else if (!std::filesystem::exists(chromium)) why = chromium + " is missing (apt-get install chromium; scripts/setup.sh does)";
    if (!why.empty()) {
        const char* ci = std::getenv("CI");
        if (ci && std::string(ci) == "true") FAIL() << why;
        GTEST_SKIP() << why;
    }
    Server s(model_, {"--api-key", "sk-web"});
    ASSERT_GT(s.port(), 0) << s.log();
    const std::string shots = (std::filesystem::path(MOESTREAM_BINARY).parent_path() / "test-artifacts").string();
    std::filesystem::create_directories(shots);
    test::TempDir out;
    const std::string log = out / "web.log";
    const int rc = std::system(("cd " + dir + " && CHROMIUM=" + chromium + " timeout 120 node web_page.mjs " + std::to_string(s.port()) + " sk-web " +
                                shots + " > " + log + " 2>&1")
                                   .c_str());
    std::ifstream f(log);
    const std::string text{std::istreambuf_iterator<char>(f), {}};
    EXPECT_EQ(rc, 0) << text;
    EXPECT_NE(text.find("all web page checks passed"), std::string::npos) << text;
    EXPECT_TRUE(std::filesystem::exists(shots + "/web-engine.png"));
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace moe

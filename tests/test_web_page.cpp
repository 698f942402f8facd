// The web page in a real browser: Debian's chromium, headless, driven by playwright-core from npm
// (tests/node/web_page.mjs) against a live server; screenshots are kept in build/test-artifacts. Skipped,
// saying why, where node, the package or chromium is missing (scripts/setup.sh installs them); under CI they
// must be there. The page's static checks (no external URLs, the security headers) run everywhere.
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "engine/model/model_facts.h"
#include "engine/runtime/cache_sim.h"
#include "engine/runtime/routing_trace.h"
#include "tests/budget.h"
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

// A streaming server's engine view carries its cache's recent hit rate beside Belady's MIN at the same budget,
// and those figures are exactly what replaying the same steps of the run's routing trace file gives.
TEST_F(ServeTest, EngineViewHasTheLiveBoundOfTheRunsOwnSteps) {
    test::TempDir dir;
    const std::string trace = dir / "serve.trace";
    const ModelFacts f = model_facts(open_gguf_model(model_));
    const std::string budget = test::budget_plus_working(model_, f.resident_bytes + f.kv_bytes(1024) + f.expert_bytes / 3, 1024, 1,
                                                         test::kServeThreads);
    Server s(model_, {"--api-key", "sk-web", "--ram-budget", budget, "--ctx", "1024", "--routing-trace", trace});
    ASSERT_GT(s.port(), 0) << s.log();
    ASSERT_NE(s.log().find("experts streamed"), std::string::npos) << s.log();
    for (int i = 0; i < 3; ++i) {
        const auto r = test::request(
            s.port(), "POST", "/v1/chat/completions",
            nlohmann::json{{"max_tokens", 24}, {"messages", {{{"role", "user"}, {"content", "bound " + std::to_string(i)}}}}}.dump(),
            "Authorization: Bearer sk-web\r\n");
        ASSERT_EQ(r.status, 200) << r.body;
    }
    nlohmann::json bound;
    for (int waited = 0; waited < 200 && bound.is_null(); ++waited) {  // a sample a second, the bound every 5 s
        const auto stats = test::request(s.port(), "GET", "/v1/engine/stats", "", "Authorization: Bearer sk-web\r\n");
        ASSERT_EQ(stats.status, 200);
        const auto samples = nlohmann::json::parse(stats.body)["samples"];
        if (!samples.empty() && samples.back().contains("cache_bound") && !samples.back()["cache_bound"].is_null())
            bound = samples.back()["cache_bound"];
        else std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_FALSE(bound.is_null()) << "no cache_bound in the engine view after 20 s";
    EXPECT_EQ(s.terminate(), 0) << s.log();

    const RoutingTrace all = read_routing_trace(trace);
    const uint64_t from = bound["window_first_step"], first = bound["first_step"], steps = bound["steps"];
    ASSERT_LE(first + steps, all.steps.size());
    RoutingTrace window;
    window.header = all.header;
    window.steps.assign(all.steps.begin() + static_cast<std::ptrdiff_t>(from), all.steps.begin() + static_cast<std::ptrdiff_t>(first + steps));
    const LiveCacheBound replay = live_cache_bound(window);
    ASSERT_EQ(replay.steps, steps);
    EXPECT_GT(replay.engine.lookups, 0u);
    EXPECT_EQ(bound["budget_bytes"].get<uint64_t>(), all.header.cache_bytes);
    EXPECT_EQ(bound["hit_rate"].get<double>(), replay.engine.hit_rate());
    EXPECT_EQ(bound["belady_hit_rate"].get<double>(), replay.belady.hit_rate());
    EXPECT_EQ(bound["bytes_per_token"].get<double>(), replay.engine.bytes_per_token());
    EXPECT_EQ(bound["belady_bytes_per_token"].get<double>(), replay.belady.bytes_per_token());
    std::cerr << "[  NOTE    ] over " << steps << " steps: hit rate " << replay.engine.hit_rate() << ", MIN's " << replay.belady.hit_rate() << "\n";
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
    // Streaming, so the engine view has every row to show (the cache's bound needs a few steps: one request).
    const ModelFacts facts = model_facts(open_gguf_model(model_));
    const std::string budget = test::budget_plus_working(model_, facts.resident_bytes + facts.kv_bytes(1024) + facts.expert_bytes / 3, 1024, 1,
                                                         test::kServeThreads);
    Server s(model_, {"--api-key", "sk-web", "--ram-budget", budget, "--ctx", "1024"});
    ASSERT_GT(s.port(), 0) << s.log();
    ASSERT_EQ(test::request(s.port(), "POST", "/v1/chat/completions",
                            nlohmann::json{{"max_tokens", 24}, {"messages", {{{"role", "user"}, {"content", "warm"}}}}}.dump(),
                            "Authorization: Bearer sk-web\r\n")
                  .status,
              200);
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

// serve --prompt-cache across a restart: the first server saves the long system prompt's prefix in the
// background, a second one over the same directory restores it for another conversation with that prompt and
// answers exactly what a server without the cache answers; /metrics and the web page's samples count it. A
// directory that cannot be used is one warning, and the server runs without the cache.
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "tests/serve_fixture.h"

namespace moe {
namespace {

using json = nlohmann::json;
using test::Server;
using test::ServeTest;

std::string system_prompt() {
    std::string s = "You are a coding agent. Rules:";
    for (int i = 0; i < 12; ++i) s += " rule " + std::to_string(i) + ": keep every answer short and exact;";
    return s;
}

json chat(const std::string& user) {
    return {{"messages", {{{"role", "system"}, {"content", system_prompt()}}, {{"role", "user"}, {"content", user}}}},
            {"max_tokens", 8},
            {"temperature", 0}};
}

double metric(int port, const std::string& name) {
    const std::string m = test::request(port, "GET", "/metrics").body;
    const size_t at = m.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::atof(m.c_str() + at + name.size() + 2);
}

class PromptCacheServe : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptCacheServe, APrefixSavedBeforeARestartIsRestoredAfterIt) {
    test::TempDir dir;
    const std::string model = dir / "m.gguf", cache = dir / "prompts";
    std::vector<std::string> args = {"mkmodel", "--arch",     GetParam(), "--layers",        "2",      "--embd",    "64",    "--heads",
                                     "2",       "--kv-heads", "1",        "--head-dim",      "32",     "--experts", "4",     "--experts-used",
                                     "2",       "--ffn",      "64",       "--vocab-builtin", "--seed", "9",         "--out", model};
    ASSERT_EQ(cli::dispatch(args), 0);
    const std::vector<std::string> with_cache = {"--ctx", "2048", "--prompt-cache", cache, "--prompt-cache-min", "64"};
    int saved_prompt = 0;
    {
        Server a(model, with_cache);
        ASSERT_GT(a.port(), 0) << a.log();
        const auto r = test::request(a.port(), "POST", "/v1/chat/completions", chat("first question").dump());
        ASSERT_EQ(r.status, 200) << r.body;
        saved_prompt = json::parse(r.body)["usage"]["prompt_tokens"].get<int>();
        for (int i = 0; i < 200 && metric(a.port(), "moestream_prompt_cache_saved_total") < 1; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_EQ(metric(a.port(), "moestream_prompt_cache_saved_total"), 1) << a.log();
        EXPECT_EQ(metric(a.port(), "moestream_prompt_cache_records"), 1);
        EXPECT_EQ(a.terminate(), 0) << a.log();
    }
    ASSERT_GT(saved_prompt, 200);

    const json second = chat("a different second question");
    Server plain(model, {"--ctx", "2048"});
    const auto want = test::request(plain.port(), "POST", "/v1/chat/completions", second.dump());
    ASSERT_EQ(want.status, 200) << want.body;
    EXPECT_EQ(plain.terminate(), 0);

    Server b(model, with_cache);
    ASSERT_GT(b.port(), 0) << b.log();
    EXPECT_NE(b.log().find("prompt cache " + cache + ": 1 records"), std::string::npos) << b.log();
    const auto got = test::request(b.port(), "POST", "/v1/chat/completions", second.dump());
    ASSERT_EQ(got.status, 200) << got.body;
    const json g = json::parse(got.body), w = json::parse(want.body);
    EXPECT_EQ(g["choices"][0]["message"]["content"], w["choices"][0]["message"]["content"]);
    // The system prompt and the template's text up to the user's words came from disk (a recurrent model:
    // up to its newest snapshot within them, which the saving server took 4 tokens before its prompt's end).
    const int cached = g["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    EXPECT_GT(cached, 200);
    EXPECT_LT(cached, g["usage"]["prompt_tokens"].get<int>());
    EXPECT_EQ(g["timings"]["prompt_restored"].get<int>(), cached);  // all of it from disk: the slot was empty
    EXPECT_EQ(metric(b.port(), "moestream_prompt_cache_restored_total"), 1);
    EXPECT_EQ(metric(b.port(), "moestream_prompt_cache_restored_tokens_total"), cached);
    EXPECT_EQ(metric(b.port(), "moestream_prompt_cache_rejected_total"), 0);
    // The web page's samples carry the same figures.
    const json stats = test::engine_stats_with(b.port(), "prompt_cache");
    ASSERT_FALSE(stats["samples"].empty());
    EXPECT_EQ(stats["samples"].back()["prompt_cache"]["restored"], 1);
    EXPECT_EQ(stats["config"]["prompt_cache"]["dir"], cache);
    EXPECT_EQ(b.terminate(), 0) << b.log();
}

INSTANTIATE_TEST_SUITE_P(Archs, PromptCacheServe, ::testing::Values("qwen3moe", "qwen35moe"));

// Two slots, many clients, prompts that share prefixes, streams cut short: saves are queued, extended,
// hurried and cancelled while slots take their rows back. Every record that lands is whole: a restart over the
// directory finds them all sound, and one restores.
TEST_F(ServeTest, PromptCacheUnderConcurrentLoadWritesOnlySoundRecords) {
    test::TempDir dir;
    const std::string cache = dir / "prompts";
    const std::vector<std::string> args = {"--parallel", "2", "--ctx", "1024", "--prompt-cache", cache, "--prompt-cache-min", "8"};
    std::atomic<long> ok{0}, other{0};
    {
        Server s(model_, args);
        ASSERT_GT(s.port(), 0) << s.log();
        auto client = [&](int c) {
            for (int i = 0; i < 12; ++i) {
                // Conversations A..D, each growing by one turn per request, interleaved across clients.
                json messages = {{{"role", "system"}, {"content", "agent " + std::to_string((c + i) % 4) + ": be brief and exact in every answer"}}};
                for (int t = 0; t <= i % 5; ++t) messages.push_back({{"role", "user"}, {"content", "step " + std::to_string(t)}});
                const json body = {{"messages", messages}, {"max_tokens", 4}, {"stream", i % 3 == 0}};
                if (i % 4 == 3) {  // a client that goes away once the answer starts
                    const std::string b = body.dump();
                    const int fd = test::connect_loopback(s.port());
                    test::send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                                           std::to_string(b.size()) + "\r\n\r\n" + b);
                    char buf[64];
                    ::recv(fd, buf, sizeof buf, 0);
                    ::close(fd);
                    continue;
                }
                const auto r = test::request(s.port(), "POST", "/v1/chat/completions", body.dump());
                (r.status == 200 ? ok : other)++;
            }
        };
        std::vector<std::thread> clients;
        for (int c = 0; c < 6; ++c) clients.emplace_back(client, c);
        for (auto& t : clients) t.join();
        EXPECT_EQ(other.load(), 0);
        EXPECT_GT(ok.load(), 0);
        EXPECT_EQ(s.terminate(), 0) << s.log();  // lets the last save land
        const std::string log = s.log();
        EXPECT_EQ(log.find("(removed)"), std::string::npos) << log;
        EXPECT_EQ(log.find("not saved"), std::string::npos) << log;
    }
    size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(cache)) {
        EXPECT_EQ(e.path().extension(), ".mspc") << "left behind: " << e.path();
        ++files;
    }
    EXPECT_GT(files, 0u);
    std::printf("[ load     ] %ld answered, %zu records on disk\n", ok.load(), files);
    Server again(model_, args);
    ASSERT_GT(again.port(), 0) << again.log();
    EXPECT_NE(again.log().find(": " + std::to_string(files) + " records ("), std::string::npos) << again.log();
    EXPECT_EQ(again.log().find("damaged"), std::string::npos) << again.log();
    const json first = {{"messages",
                         {{{"role", "system"}, {"content", "agent 1: be brief and exact in every answer"}},
                          {{"role", "user"}, {"content", "step 0"}},
                          {{"role", "user"}, {"content", "step 1"}},
                          {{"role", "user"}, {"content", "a new step"}}}},
                        {"max_tokens", 2}};
    const auto r = test::request(again.port(), "POST", "/v1/chat/completions", first.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_GT(json::parse(r.body)["timings"]["prompt_restored"].get<int>(), 0) << r.body;
    EXPECT_EQ(metric(again.port(), "moestream_prompt_cache_restored_total"), 1);
    EXPECT_EQ(metric(again.port(), "moestream_prompt_cache_rejected_total"), 0);
    EXPECT_EQ(again.terminate(), 0) << again.log();
}

TEST_F(ServeTest, PromptCacheDirectoryThatIsAFileIsOneWarning) {
    test::TempDir dir;
    const std::string file = dir / "not-a-dir";
    std::ofstream(file) << "x";
    Server s(model_, {"--prompt-cache", file});
    ASSERT_GT(s.port(), 0) << s.log();
    EXPECT_NE(s.log().find("WARNING: --prompt-cache " + file + " is not a directory: serving without a prompt cache"), std::string::npos) << s.log();
    EXPECT_EQ(test::request(s.port(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2})").status, 200);
    EXPECT_EQ(metric(s.port(), "moestream_prompt_cache_records"), -1);  // no cache, no figures
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace moe

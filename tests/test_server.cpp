// `moestream serve` for real on loopback: the OpenAI endpoints, SSE, auth, bad input, a burst of malformed
// requests, prefix reuse, client disconnects and SIGTERM.
#include <signal.h>
#include <sys/wait.h>

#include <arpa/inet.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "tests/http_client.h"
#include "tests/serve_fixture.h"
#include "tests/test_support.h"

namespace moe {
namespace {

using json = nlohmann::json;

using test::Server;
using test::ServeTest;

const std::string kChat =
    R"({"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}],"max_tokens":8,"temperature":0})";

TEST_F(ServeTest, EndpointsAndStreaming) {
    Server s(model_, {});
    ASSERT_GT(s.port(), 0) << s.log();
    auto models = json::parse(test::request(s.port(), "GET", "/v1/models").body);
    EXPECT_EQ(models["data"][0]["id"], "m");
    auto r = test::request(s.port(), "POST", "/v1/chat/completions", kChat);
    ASSERT_EQ(r.status, 200) << r.body;
    auto j = json::parse(r.body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["usage"]["completion_tokens"].get<int>() + j["usage"]["prompt_tokens"].get<int>(), j["usage"]["total_tokens"].get<int>());
    EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 8);
    // ignore_eos (llama-server's extension): no end token is drawn, so the answer runs to max_tokens.
    json long_body = json::parse(kChat);
    long_body["ignore_eos"] = true;
    long_body["max_tokens"] = 40;
    long_body["temperature"] = 1.0;
    auto lj = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", long_body.dump()).body);
    EXPECT_EQ(lj["usage"]["completion_tokens"].get<int>(), 40) << lj;
    EXPECT_EQ(lj["choices"][0]["finish_reason"], "length") << lj;
    // Greedy is repeatable: the same request gives the same text, and reuses the whole prompt but one token.
    auto j2 = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", kChat).body);
    EXPECT_EQ(j2["choices"][0]["message"]["content"], j["choices"][0]["message"]["content"]);
    EXPECT_EQ(j2["timings"]["prompt_reused"].get<int>(), j["usage"]["prompt_tokens"].get<int>() - 1);

    // Server-sent events: every line is "data: <json>" until "data: [DONE]"; the deltas add up to the text.
    json body = json::parse(kChat);
    body["stream"] = true;
    auto sr = test::request(s.port(), "POST", "/v1/chat/completions", body.dump());
    ASSERT_EQ(sr.status, 200);
    EXPECT_NE(sr.headers.find("text/event-stream"), std::string::npos);
    std::string text;
    bool done = false, usage = false;
    size_t pos = 0;
    while ((pos = sr.body.find("data: ", pos)) != std::string::npos) {
        size_t end = sr.body.find("\n\n", pos);
        std::string payload = sr.body.substr(pos + 6, end - pos - 6);
        pos = end;
        if (payload == "[DONE]") {
            done = true;
            break;
        }
        auto c = json::parse(payload);
        EXPECT_EQ(c["object"], "chat.completion.chunk");
        if (c["choices"][0]["delta"].contains("content")) text += c["choices"][0]["delta"]["content"].get<std::string>();
        usage |= c.contains("usage");
    }
    EXPECT_TRUE(done);
    EXPECT_TRUE(usage);
    EXPECT_EQ(json(text).dump(), json(j["choices"][0]["message"]["content"].get<std::string>()).dump());

    auto comp = test::request(s.port(), "POST", "/v1/completions", R"({"prompt":"Once upon","max_tokens":4})");
    ASSERT_EQ(comp.status, 200) << comp.body;
    EXPECT_EQ(json::parse(comp.body)["object"], "text_completion");
    auto metrics = test::request(s.port(), "GET", "/metrics").body;
    EXPECT_NE(metrics.find("moestream_generated_tokens_total"), std::string::npos);
    EXPECT_NE(metrics.find("moestream_requests_total{status=\"200\"}"), std::string::npos);
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST_F(ServeTest, PrefixReuseAcrossTurns) {
    Server s(model_, {});
    auto a = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", kChat).body);
    // Next turn: the history plus the assistant's answer as the client received it.
    json next = json::parse(kChat);
    next["messages"].push_back({{"role", "assistant"}, {"content", a["choices"][0]["message"]["content"]}});
    next["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
    auto b = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", next.dump()).body);
    // Everything the cache holds from turn one is reused: its prompt and all generated tokens but the last.
    const int held = a["usage"]["prompt_tokens"].get<int>() + a["usage"]["completion_tokens"].get<int>() - 1;
    EXPECT_GE(b["timings"]["prompt_reused"].get<int>(), held) << b.dump();
}

// A recurrent model (qwen35moe) cannot cut its state back: prefix reuse goes through checkpoints taken 4 tokens
// before a prompt's end and where its last user message starts.
// Both recurrent architectures: qwen35moe (DeltaNet) and kimi-k3 (KDA, with residual attention).
TEST_F(ServeTest, HybridModelReusesPrefixesThroughCheckpoints) {
    for (const std::vector<std::string>& arch :
         {std::vector<std::string>{"--arch", "qwen35moe", "--kv-heads", "1", "--head-dim", "32"},
          std::vector<std::string>{"--arch", "kimi-k3", "--full-attention-interval", "2", "--kv-lora", "32"}}) {
        SCOPED_TRACE(arch[1]);
        const std::string hybrid = *dir_ / (arch[1] + ".gguf");
        std::vector<std::string> args = {
            "mkmodel", "--layers", "4",  "--embd",           "64", "--heads",         "2",      "--experts", "4",     "--experts-used",
            "2",       "--ffn",    "64", "--shared-experts", "1",  "--vocab-builtin", "--seed", "9",         "--out", hybrid};
        args.insert(args.end(), arch.begin(), arch.end());
        ASSERT_EQ(cli::dispatch(args), 0);
        Server s(hybrid, {});
        ASSERT_GT(s.port(), 0) << s.log();
        auto a = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", kChat).body);
        const int p = a["usage"]["prompt_tokens"].get<int>();
        EXPECT_EQ(a["timings"]["prompt_reused"].get<int>(), 0);
        // The same request again: the state cannot stop one token short, so it restarts 4 tokens before the end.
        auto again = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", kChat).body);
        EXPECT_EQ(again["timings"]["prompt_reused"].get<int>(), p - 4) << again.dump();
        EXPECT_EQ(again["choices"][0]["message"]["content"], a["choices"][0]["message"]["content"]);
        // The next turn continues the live state: everything cached is reused.
        json next = json::parse(kChat);
        next["messages"].push_back({{"role", "assistant"}, {"content", a["choices"][0]["message"]["content"]}});
        next["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
        auto b = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", next.dump()).body);
        const int held = p + a["usage"]["completion_tokens"].get<int>() - 1;
        EXPECT_GE(b["timings"]["prompt_reused"].get<int>(), held) << b.dump();
        // A different last question: back to the checkpoint where that user message starts. With the byte vocabulary
        // "<|im_start|>user\nOther<|im_end|>\n<|im_start|>assistant\n" is 24 tokens.
        next["messages"].back()["content"] = "Other";
        auto c = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", next.dump()).body);
        EXPECT_EQ(c["timings"]["prompt_reused"].get<int>(), c["usage"]["prompt_tokens"].get<int>() - 24) << c.dump();
        EXPECT_EQ(s.terminate(), 0) << s.log();
    }
}

TEST_F(ServeTest, ApiKeyRequiredExceptHealth) {
    Server s(model_, {"--api-key", "s3cret"});
    EXPECT_EQ(test::request(s.port(), "GET", "/health").status, 200);
    auto denied = test::request(s.port(), "GET", "/v1/models");
    EXPECT_EQ(denied.status, 401);
    EXPECT_EQ(json::parse(denied.body)["error"]["code"], "invalid_api_key");
    EXPECT_EQ(test::request(s.port(), "GET", "/v1/models", "", "Authorization: Bearer wrong\r\n").status, 401);
    EXPECT_EQ(test::request(s.port(), "GET", "/v1/models", "", "Authorization: Bearer s3cret\r\n").status, 200);
}

TEST_F(ServeTest, BadRequestsGetOpenAiErrorsAndTheServerKeepsServing) {
    Server s(model_, {"--ctx", "64", "--max-body", "4096"});
    struct Case {
        std::string body;
        int status;
        std::string param;
    };
    const std::vector<Case> cases = {
        {"{not json", 400, ""},
        {R"({"messages":"hi"})", 400, "messages"},
        {R"({"messages":[]})", 400, "messages"},
        {R"({"model":"gpt-9","messages":[{"role":"user","content":"x"}]})", 404, "model"},
        {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", 400, "max_tokens"},
        {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":100000})", 400, "max_tokens"},
        {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", 400, "temperature"},
        {R"({"messages":[{"role":"user","content":"x"}],"ignore_eos":"yes"})", 400, "ignore_eos"},
        {R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "messages[0]"},
        {R"({"messages":[{"role":"user","content":")" + std::string(2000, 'a') + R"("}]})", 400, "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"" + std::string(5000, 'b') + "\"}]}", 413, ""},
        // A field of the wrong JSON type is the client's error (400 naming it), not an internal one (500).
        {R"({"messages":[{"role":"user","content":[{"type":5,"text":"x"}]}]})", 400, "messages[0].content"},
        {R"({"messages":[{"role":"assistant","content":"x","tool_calls":[{"id":7,"function":{"name":"f"}}]}]})", 400, "messages[0].tool_calls[0]"},
        {"{\"messages\":" + std::string(200, '[') + std::string(200, ']') + "}", 400, ""},
    };
    for (const auto& c : cases) {
        auto r = test::request(s.port(), "POST", "/v1/chat/completions", c.body);
        EXPECT_EQ(r.status, c.status) << c.body.substr(0, 80) << " -> " << r.body;
        auto j = json::parse(r.body, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << r.body;
        EXPECT_TRUE(j["error"]["message"].is_string()) << r.body;
        if (!c.param.empty()) { EXPECT_EQ(j["error"]["param"], c.param) << r.body; }
    }
    EXPECT_EQ(test::request(s.port(), "GET", "/v1/chat/completions").status, 405);
    EXPECT_EQ(test::request(s.port(), "GET", "/nope").status, 404);
    EXPECT_EQ(test::request(s.port(), "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"ok"}],"max_tokens":2})").status, 200);
}

TEST_F(ServeTest, SurvivesAThousandsOfMalformedRequests) {
    Server s(model_, {"--max-body", "65536"});
    std::mt19937 rng(7);
    const std::vector<std::string> seeds = {"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 20\r\n\r\n{\"messages\":[{\"role",
                                            "GET / HTTP/1.1\r\n\r\n",
                                            "POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\n[1,2]",
                                            "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                            "\x16\x03\x01\x02\x00\x01",
                                            "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
                                            "GARBAGE\r\n\r\n"};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int sent = 0;
    for (; sent < 2000 && std::chrono::steady_clock::now() < deadline; ++sent) {
        std::string raw = seeds[rng() % seeds.size()];
        for (int k = 0, flips = static_cast<int>(rng() % 4); k < flips && !raw.empty(); ++k) raw[rng() % raw.size()] = static_cast<char>(rng());
        if (rng() % 3 == 0) raw = raw.substr(0, rng() % (raw.size() + 1));
        int fd = test::connect_loopback(s.port());
        ASSERT_GE(fd, 0) << "server stopped accepting after " << sent << " requests\n" << s.log();
        test::send_all(fd, raw);
        ::shutdown(fd, SHUT_WR);
        char buf[4096];
        while (::recv(fd, buf, sizeof buf, 0) > 0) {}
        ::close(fd);
    }
    EXPECT_GE(sent, 500);
    auto ok = test::request(s.port(), "POST", "/v1/chat/completions", kChat);
    EXPECT_EQ(ok.status, 200) << ok.body;
}

// Starts a long sampled streaming generation and returns the open connection once its first bytes arrived
// (-1 when none came).
int start_long_stream(int port, int max_tokens) {
    json body = json::parse(kChat);
    body["max_tokens"] = max_tokens;
    body["stream"] = true;
    body["temperature"] = 1.0;
    body["ignore_eos"] = true;  // random sampling may draw an end token at once, which would free the worker
    int fd = test::connect_loopback(port);
    const std::string b = body.dump();
    test::send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b);
    char buf[256];
    if (::recv(fd, buf, sizeof buf, 0) <= 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

TEST_F(ServeTest, DisconnectCancelsAndSigtermExitsCleanly) {
    Server s(model_, {"--ctx", "4096"});
    // A long streaming request whose client leaves after the first bytes.
    int fd = start_long_stream(s.port(), 4000);
    ASSERT_GE(fd, 0);
    ::close(fd);
    // The generator becomes free for the next request long before 4000 tokens.
    auto next = test::request(s.port(), "POST", "/v1/chat/completions", kChat);
    EXPECT_EQ(next.status, 200);
    auto metrics = test::request(s.port(), "GET", "/metrics").body;
    auto at = metrics.find("\nmoestream_generated_tokens_total ");
    ASSERT_NE(at, std::string::npos);
    EXPECT_LT(std::stod(metrics.substr(at + 34)), 4000.0) << metrics;
    EXPECT_EQ(s.terminate(), 0) << s.log();
    EXPECT_NE(s.log().find("SIGTERM: finishing"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace moe

#include <sys/un.h>

#include "engine/server/api_service.h"

namespace moe {
namespace {

class CapturingResponder : public HttpResponder {
public:
    void send(int s, const std::string&, const std::string& b, const std::map<std::string, std::string>&) override {
        status = s;
        body = b;
    }
    bool begin_stream(const std::string&) override { return false; }
    bool write_chunk(const std::string&) override { return false; }
    void end_stream() override {}
    bool client_gone() override { return false; }
    int status = 0;
    std::string body;
};

TEST(ApiServiceUnit, HealthAndCompletionsAre503WhileLoading) {
    ApiService svc({.alias = "m", .model_file = "m.gguf", .api_key = "", .family = ChatFamily::ChatML, .bos_text = "", .max_tokens_default = 8},
                   nullptr, nullptr);
    CapturingResponder r;
    svc.handle({"GET", "/health", {}, ""}, r);
    EXPECT_EQ(r.status, 503);
    EXPECT_NE(r.body.find("loading"), std::string::npos);
    svc.handle({"POST", "/v1/chat/completions", {}, kChat}, r);
    EXPECT_EQ(r.status, 503);
    EXPECT_NE(r.body.find("still loading"), std::string::npos);
    svc.handle({"GET", "/metrics", {}, ""}, r);
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.body.find("moestream_ready 0"), std::string::npos);
    EXPECT_TRUE(keys_equal("abc", "abc"));
    EXPECT_FALSE(keys_equal("abc", "abd"));
    EXPECT_FALSE(keys_equal("abc", "abcd"));
}

TEST_F(ServeTest, QueueFullIs503) {
    Server s(model_, {"--max-queue", "0", "--ctx", "4096"});
    int fd = start_long_stream(s.port(), 3000);  // the long generation is running
    ASSERT_GE(fd, 0);
    auto busy = test::request(s.port(), "POST", "/v1/chat/completions", kChat);
    EXPECT_EQ(busy.status, 503) << busy.body;
    EXPECT_NE(busy.headers.find("Retry-After"), std::string::npos);
    ::close(fd);  // cancel it; the worker frees up
    int status = 0;
    for (int i = 0; i < 200 && status != 200; ++i) {
        status = test::request(s.port(), "POST", "/v1/chat/completions", kChat).status;
        if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(status, 200);
}

// Under systemd the server says READY=1 once loaded and STOPPING=1 on SIGTERM (sd_notify datagrams).
TEST_F(ServeTest, NotifiesSystemd) {
    test::TempDir dir;
    const std::string sock_path = dir / "notify";
    int sock = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, sock_path.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    struct timeval tv {
        10, 0
    };
    ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setenv("NOTIFY_SOCKET", sock_path.c_str(), 1);
    std::string messages;
    {
        Server s(model_, {});
        ::unsetenv("NOTIFY_SOCKET");
        char buf[4096];
        while (messages.find("READY=1") == std::string::npos) {
            ssize_t n = ::recv(sock, buf, sizeof buf, 0);
            if (n <= 0) break;
            messages.append(buf, static_cast<size_t>(n)).append("\n");
        }
        EXPECT_EQ(s.terminate(), 0);
        while (messages.find("STOPPING=1") == std::string::npos) {
            ssize_t n = ::recv(sock, buf, sizeof buf, 0);
            if (n <= 0) break;
            messages.append(buf, static_cast<size_t>(n)).append("\n");
        }
    }
    ::close(sock);
    EXPECT_NE(messages.find("EXTEND_TIMEOUT_USEC="), std::string::npos) << messages;
    EXPECT_NE(messages.find("READY=1"), std::string::npos) << messages;
    EXPECT_NE(messages.find("STOPPING=1"), std::string::npos) << messages;
}

// The main job: plan on this host, `moestream launch` (numactl-pinned serve), a streamed chat, SIGTERM.
TEST_F(ServeTest, PlanLaunchServeEndToEnd) {
    if (std::system("command -v numactl > /dev/null 2>&1") != 0) GTEST_SKIP() << "numactl not installed (scripts/setup.sh installs it)";
    test::TempDir dir;
    // A free port: bind to 0, read it back, release it.
    int probe = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len);
    const int port = ntohs(a.sin_port);
    ::close(probe);
    auto [rc, out] = test::run_moestream("plan --model " + model_ + " --out " + (dir / "plan") + " --no-storage --port " + std::to_string(port) +
                                         " --alias m --ctx 512");
    ASSERT_EQ(rc, 0) << out;
    pid_t pid = ::fork();
    if (pid == 0) {
        ::freopen((dir / "launch.log").c_str(), "w", stderr);
        ::execl(MOESTREAM_BINARY, MOESTREAM_BINARY, "launch", "--plan", (dir / "plan/plan.yaml").c_str(), nullptr);
        ::_exit(127);
    }
    int health = 0;
    for (int i = 0; i < 500 && health != 200; ++i) {
        health = test::request(port, "GET", "/health").status;
        if (health != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_EQ(health, 200);
    json body = json::parse(kChat);
    body["stream"] = true;
    auto r = test::request(port, "POST", "/v1/chat/completions", body.dump());
    auto launch_log = [&] {
        std::ifstream log(dir / "launch.log");
        return std::string((std::istreambuf_iterator<char>(log)), {});
    };
    EXPECT_EQ(r.status, 200) << launch_log();
    EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos) << r.body;
    ::kill(pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 500 && ::waitpid(pid, &st, WNOHANG) != pid; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    std::ifstream log(dir / "launch.log");
    std::string text((std::istreambuf_iterator<char>(log)), {});
    EXPECT_NE(text.find("launch: numactl --physcpubind="), std::string::npos) << text;
}

}  // namespace
}  // namespace moe

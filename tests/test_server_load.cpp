// The server under hostile and heavy traffic on loopback: idle and slow connections cannot lock others out,
// and a bounded load of mixed requests (streaming, tool calls, Anthropic, clients that vanish mid-stream)
// leaves it answering normally with its memory back where it was.
#include <nlohmann/json.hpp>
#include <atomic>

#include "tests/serve_fixture.h"

namespace moe {
namespace {

using json = nlohmann::json;
using test::Server;
using test::ServeTest;

long rss_kib(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
    return -1;
}

const std::string kSmallChat = R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0})";

TEST_F(ServeTest, IdleAndSlowClientsCannotLockOthersOut) {
    Server s(model_, {"--header-timeout", "1", "--idle-timeout", "2"});
    ASSERT_GT(s.port(), 0) << s.log();
    // 100 connections that never send a byte: each new one beyond the caps takes an idle one's place.
    std::vector<int> idle;
    for (int i = 0; i < 100; ++i) idle.push_back(test::connect_loopback(s.port()));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // idle, not just opened
    auto start = std::chrono::steady_clock::now();
    auto r = test::request(s.port(), "POST", "/v1/chat/completions", kSmallChat);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    for (int fd : idle) ::close(fd);

    // A slow client that sends half a header and stalls gets 408 once the header timeout passes.
    int slow = test::connect_loopback(s.port());
    test::send_all(slow, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n");
    start = std::chrono::steady_clock::now();
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(slow, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
    ::close(slow);
    EXPECT_NE(got.find(" 408 "), std::string::npos) << got;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));

    // A dribbling client (a byte every 300 ms) is cut off too: the deadline counts from its first byte.
    int drip = test::connect_loopback(s.port());
    const std::string header = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    start = std::chrono::steady_clock::now();
    bool cut = false;
    for (char c : header) {
        if (::send(drip, &c, 1, MSG_NOSIGNAL) != 1) { cut = true; break; }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(4)) break;
    }
    ::close(drip);
    EXPECT_TRUE(cut) << "the server kept reading a dribbling header for over 4 s";
    EXPECT_EQ(test::request(s.port(), "POST", "/v1/chat/completions", kSmallChat).status, 200);
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

// 100 connections from one address that send a header and one body byte, then stall (the slow-body attack):
// normal requests right after, from that address and another, are served at once, the stalled bodies are
// cut off with 408 once the body's grace and minimum rate run out, and a slow but moving upload is not.
TEST_F(ServeTest, StalledBodyFloodNeitherRefusesNorDelaysOthers) {
    Server s(model_, {"--body-grace", "1"});
    ASSERT_GT(s.port(), 0) << s.log();
    const std::string stalled = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{";
    std::vector<int> flood;
    for (int i = 0; i < 100; ++i) {
        flood.push_back(test::connect_loopback(s.port()));
        test::send_all(flood.back(), stalled);
    }
    const std::string chat = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                             "Content-Length: " + std::to_string(kSmallChat.size()) + "\r\n\r\n" + kSmallChat;
    for (const char* from : {"127.0.0.1", "127.0.0.2"}) {
        const auto start = std::chrono::steady_clock::now();
        const auto r = test::raw_request(s.port(), chat, from);
        EXPECT_EQ(r.status, 200) << "from " << from << ": " << r.body;
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2)) << "from " << from;
    }
    // The newest flood member survived the evictions: it is cut off by the body's rate, not the 60 s timeout.
    const auto start = std::chrono::steady_clock::now();
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(flood.back(), buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
    EXPECT_NE(got.find(" 408 "), std::string::npos) << got;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
    for (int fd : flood) ::close(fd);

    // 1,400 bytes at ~700 bytes/s: slower than the grace alone allows, faster than the minimum rate.
    const std::string body = R"({"messages":[{"role":"user","content":")" + std::string(1300, 'a') + R"("}],"max_tokens":1})";
    int slow = test::connect_loopback(s.port());
    test::send_all(slow, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n");
    for (size_t at = 0; at < body.size(); at += 100) {
        test::send_all(slow, body.substr(at, 100));
        std::this_thread::sleep_for(std::chrono::milliseconds(140));
    }
    got.clear();
    while ((n = ::recv(slow, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
    ::close(slow);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got.substr(0, 300);
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST_F(ServeTest, MixedLoadLeavesTheServerHealthy) {
    Server s(model_, {"--max-queue", "32"});
    ASSERT_GT(s.port(), 0) << s.log();
    const json tools = json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"enum":[1,2]}},"required":["x"]}}}])");
    auto request_of = [&](int i) -> std::pair<std::string, std::string> {
        switch (i % 4) {
            case 0: return {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"stream )" + std::to_string(i) + R"("}],"max_tokens":8,"stream":true})"};
            case 1: return {"/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", "call"}}}}, {"tools", tools}, {"tool_choice", "required"},
                                                         {"max_tokens", 60}, {"temperature", 0}}.dump()};
            case 2: return {"/v1/messages", R"({"max_tokens":8,"stream":true,"messages":[{"role":"user","content":"anthropic )" + std::to_string(i) + R"("}]})"};
            default: return {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"vanish"}],"max_tokens":200,"stream":true})"};
        }
    };
    auto send = [&](int i, std::atomic<int>& ok, std::atomic<int>& busy, std::atomic<int>& other) {
        const auto [path, body] = request_of(i);
        if (i % 4 == 3) {  // read the first bytes of the stream, then vanish
            int fd = test::connect_loopback(s.port());
            test::send_all(fd, "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
            char buf[256];
            ::recv(fd, buf, sizeof buf, 0);
            ::close(fd);
            ok++;
            return;
        }
        const auto r = test::request(s.port(), "POST", path, body);
        (r.status == 200 ? ok : r.status == 503 ? busy : other)++;
    };
    std::atomic<int> ok{0}, busy{0}, other{0};
    auto load = [&](int per_client) {
        std::vector<std::thread> clients;
        for (int c = 0; c < 16; ++c)
            clients.emplace_back([&, c, per_client] {
                for (int k = 0; k < per_client; ++k) send(c * per_client + k, ok, busy, other);
            });
        for (auto& t : clients) t.join();
    };
    // Warm-up with the same concurrency (threads get their allocator arenas), then the measured load.
    load(4);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const long rss_before = rss_kib(s.pid());
    ok = busy = other = 0;
    load(13);
    EXPECT_EQ(ok + busy + other, 208);
    EXPECT_EQ(other.load(), 0);
    EXPECT_GE(ok.load(), 200) << busy << " answered 503";
    // Afterwards: a normal answer, and memory back within 5% of the warmed-up value.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(test::request(s.port(), "POST", "/v1/chat/completions", kSmallChat).status, 200);
    const long rss_after = rss_kib(s.pid());
    EXPECT_LE(rss_after, rss_before * 105 / 100) << "RSS " << rss_before << " KiB -> " << rss_after << " KiB";
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace moe

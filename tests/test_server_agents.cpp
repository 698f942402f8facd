// What coding agents need from `moestream serve`, on a live server over loopback: tool calls (forced by a
// grammar so a random test model makes them), the tool round trip with prefix reuse, reasoning and logprobs
// fields, JSON-schema output, and Anthropic's Messages API plain and streaming.
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model_facts.h"
#include "tests/budget.h"
#include "synth/synthetic_model.h"
#include "tests/serve_fixture.h"

namespace moe {
namespace {

using json = nlohmann::json;
using test::Server;
using test::ServeTest;

const json kTools = json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather",
    "parameters":{"type":"object","properties":{"unit":{"enum":["c","f"]},"days":{"type":"integer"}},"required":["unit","days"]}}},
    {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"utc":{"type":"boolean"}},"required":["utc"]}}}])");

json chat(int port, const json& body, int expect = 200) {
    auto r = test::request(port, "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, expect) << r.body;
    return json::parse(r.body, nullptr, false);
}

// The SSE payloads of a response ("data: ..." lines; Anthropic's "event:" lines skipped).
std::vector<json> events(const std::string& body) {
    std::vector<json> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        const size_t end = body.find("\n\n", pos);
        const std::string payload = body.substr(pos + 6, end - pos - 6);
        pos = end;
        if (payload != "[DONE]") out.push_back(json::parse(payload));
    }
    return out;
}

void expect_weather_arguments(const std::string& arguments) {
    const json args = json::parse(arguments);
    ASSERT_TRUE(args.is_object()) << arguments;
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << arguments;
    EXPECT_TRUE(args["days"].is_number_integer()) << arguments;
    EXPECT_EQ(args.size(), 2u) << arguments;
}

TEST_F(ServeTest, ToolCallRoundTripReusesThePrefix) {
    Server s(model_, {});
    ASSERT_GT(s.port(), 0) << s.log();
    json req = {{"messages", {{{"role", "system"}, {"content", "Use tools."}}, {{"role", "user"}, {"content", "Weather in Oslo?"}}}},
                {"tools", kTools},
                {"temperature", 0},
                {"max_tokens", 200},
                {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
    const json a = chat(s.port(), req);
    ASSERT_EQ(a["choices"][0]["finish_reason"], "tool_calls") << a.dump();
    const json& msg = a["choices"][0]["message"];
    ASSERT_EQ(msg["tool_calls"].size(), 1u);
    EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
    EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
    expect_weather_arguments(msg["tool_calls"][0]["function"]["arguments"]);
    EXPECT_TRUE(msg["content"].is_null());

    // Turn 2: the call and its result come back; only the new tokens are evaluated.
    req["messages"].push_back(msg);
    req["messages"].push_back({{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "21C"}});
    req["tool_choice"] = "required";
    const json b = chat(s.port(), req);
    const int held_a = a["usage"]["prompt_tokens"].get<int>() + a["usage"]["completion_tokens"].get<int>() - 1;
    EXPECT_GE(b["timings"]["prompt_reused"].get<int>(), held_a) << b.dump();
    ASSERT_EQ(b["choices"][0]["finish_reason"], "tool_calls") << b.dump();
    const json& call_b = b["choices"][0]["message"]["tool_calls"][0];
    const json args_b = json::parse(call_b["function"]["arguments"].get<std::string>());
    if (call_b["function"]["name"] == "get_time") {
        EXPECT_TRUE(args_b["utc"].is_boolean());
    } else {
        expect_weather_arguments(call_b["function"]["arguments"]);
    }

    // Turn 3: again.
    req["messages"].push_back(b["choices"][0]["message"]);
    req["messages"].push_back({{"role", "tool"}, {"tool_call_id", call_b["id"]}, {"content", "ok"}});
    req["tool_choice"] = "none";
    req["max_tokens"] = 4;
    const json c = chat(s.port(), req);
    const int held_b = b["usage"]["prompt_tokens"].get<int>() + b["usage"]["completion_tokens"].get<int>() - 1;
    EXPECT_GE(c["timings"]["prompt_reused"].get<int>(), held_b) << c.dump();
    EXPECT_EQ(c["choices"][0]["message"].count("tool_calls"), 0u);

    // Streaming: the call arrives as a delta.tool_calls chunk, then finish_reason "tool_calls".
    json st = req;
    st["messages"] = {{{"role", "user"}, {"content", "Time?"}}};
    st["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
    st["max_tokens"] = 200;
    st["stream"] = true;
    auto sr = test::request(s.port(), "POST", "/v1/chat/completions", st.dump());
    ASSERT_EQ(sr.status, 200);
    std::string name, arguments, finish;
    for (const auto& e : events(sr.body)) {
        const json& ch = e["choices"][0];
        if (ch["delta"].contains("tool_calls")) {
            EXPECT_EQ(ch["delta"]["tool_calls"][0]["index"], 0);
            name += ch["delta"]["tool_calls"][0]["function"]["name"].get<std::string>();
            arguments += ch["delta"]["tool_calls"][0]["function"]["arguments"].get<std::string>();
        }
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    }
    EXPECT_EQ(name, "get_time");
    EXPECT_TRUE(json::parse(arguments)["utc"].is_boolean()) << arguments;
    EXPECT_EQ(finish, "tool_calls");

    // Bad tool requests get a 400 naming the field.
    json bad = req;
    bad["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
    EXPECT_NE(chat(s.port(), bad, 400)["error"]["message"].get<std::string>().find("nope"), std::string::npos);
    bad["tools"] = json::array({{{"type", "function"}, {"function", {{"description", "no name"}}}}});
    EXPECT_EQ(chat(s.port(), bad, 400)["error"]["param"], "tools[0]");
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST_F(ServeTest, JsonSchemaOutputAndLogprobs) {
    Server s(model_, {});
    ASSERT_GT(s.port(), 0) << s.log();
    const json schema = json::parse(
        R"({"type":"object","properties":{"ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},
        "n":{"type":"integer"}},"required":["ok","tags","n"],"additionalProperties":false})");
    for (int seed = 1; seed <= 3; ++seed) {
        json req = {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}},
                    {"max_tokens", 300},
                    {"temperature", 1.0},
                    {"seed", seed},
                    {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "answer"}, {"schema", schema}, {"strict", true}}}}}};
        const json r = chat(s.port(), req);
        ASSERT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
        const json out = json::parse(r["choices"][0]["message"]["content"].get<std::string>());
        EXPECT_TRUE(out["ok"].is_boolean());
        EXPECT_TRUE(out["n"].is_number_integer());
        ASSERT_TRUE(out["tags"].is_array());
        EXPECT_LE(out["tags"].size(), 3u);
        EXPECT_EQ(out.size(), 3u) << out.dump();
    }
    json obj = {{"messages", {{{"role", "user"}, {"content", "JSON please"}}}},
                {"max_tokens", 300},
                {"temperature", 0},
                {"response_format", {{"type", "json_object"}}}};
    const json o = chat(s.port(), obj);
    if (o["choices"][0]["finish_reason"] == "stop") {
        EXPECT_TRUE(json::parse(o["choices"][0]["message"]["content"].get<std::string>()).is_object());
    }
    json unsupported = obj;
    unsupported["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "string"}, {"pattern", "^a+$"}}}}}};
    EXPECT_NE(chat(s.port(), unsupported, 400)["error"]["message"].get<std::string>().find("'pattern'"), std::string::npos);

    // Logprobs: greedy picks the most likely token, so each token's logprob is its top alternative's.
    json lp = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}};
    const json l = chat(s.port(), lp);
    const json& content = l["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), static_cast<size_t>(l["usage"]["completion_tokens"].get<int>()));
    for (const auto& t : content) {
        ASSERT_EQ(t["top_logprobs"].size(), 3u);
        EXPECT_DOUBLE_EQ(t["logprob"].get<double>(), t["top_logprobs"][0]["logprob"].get<double>());
        EXPECT_LE(t["logprob"].get<double>(), 0.0);
        EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(), t["top_logprobs"][2]["logprob"].get<double>());
    }
    lp["top_logprobs"] = 21;
    chat(s.port(), lp, 400);
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST_F(ServeTest, AnthropicMessages) {
    Server s(model_, {"--api-key", "sk-test"});
    ASSERT_GT(s.port(), 0) << s.log();
    auto post = [&](const std::string& path, const json& body) {
        return test::request(s.port(), "POST", path, body.dump(), "x-api-key: sk-test\r\nanthropic-version: 2023-06-01\r\n");
    };
    const json tools = json::parse(
        R"([{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"unit":{"enum":["c","f"]},
        "days":{"type":"integer"}},"required":["unit","days"]}}])");
    json req = {{"model", "m"},
                {"max_tokens", 200},
                {"temperature", 0},
                {"system", "Use tools."},
                {"tools", tools},
                {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}},
                {"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
                {"metadata", {{"user_id", "u1"}}}};
    auto r = post("/v1/messages", req);
    ASSERT_EQ(r.status, 200) << r.body;
    const json m = json::parse(r.body);
    EXPECT_EQ(m["type"], "message");
    EXPECT_EQ(m["stop_reason"], "tool_use");
    const json& use = m["content"].back();
    ASSERT_EQ(use["type"], "tool_use") << m.dump();
    EXPECT_EQ(use["name"], "get_weather");
    expect_weather_arguments(use["input"].dump());

    // The result comes back as a tool_result block; the turn before is reused from the cache.
    req["messages"].push_back({{"role", "assistant"}, {"content", m["content"]}});
    req["messages"].push_back({{"role", "user"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", use["id"]}, {"content", "21C"}}}}});
    req["tool_choice"] = {{"type", "auto"}};
    req["max_tokens"] = 5;
    req["stream"] = true;
    auto sr = post("/v1/messages", req);
    ASSERT_EQ(sr.status, 200) << sr.body;
    std::vector<std::string> types;
    std::string text;
    json final_usage;
    for (const auto& e : events(sr.body)) {
        types.push_back(e["type"]);
        if (e["type"] == "content_block_delta" && e["delta"]["type"] == "text_delta") text += e["delta"]["text"].get<std::string>();
        if (e["type"] == "message_delta") final_usage = e["usage"];
    }
    ASSERT_GE(types.size(), 3u);
    EXPECT_EQ(types.front(), "message_start");
    EXPECT_EQ(types.back(), "message_stop");
    EXPECT_EQ(types[types.size() - 2], "message_delta");
    const int held = m["usage"]["input_tokens"].get<int>() + m["usage"]["cache_read_input_tokens"].get<int>() +
                     m["usage"]["output_tokens"].get<int>() - 1;
    EXPECT_GE(final_usage["cache_read_input_tokens"].get<int>(), held) << final_usage.dump();

    // Streaming a forced tool_use: input_json_delta carries the arguments.
    req["messages"] = {{{"role", "user"}, {"content", "Weather?"}}};
    req["tool_choice"] = {{"type", "any"}};
    req["max_tokens"] = 200;
    std::string partial;
    for (const auto& e : events(post("/v1/messages", req).body))
        if (e["type"] == "content_block_delta" && e["delta"]["type"] == "input_json_delta") partial += e["delta"]["partial_json"].get<std::string>();
    expect_weather_arguments(partial);

    auto count = post("/v1/messages/count_tokens", {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
    ASSERT_EQ(count.status, 200) << count.body;
    EXPECT_GT(json::parse(count.body)["input_tokens"].get<int>(), 0);
    // Errors in Anthropic's shape; a wrong key is an authentication_error.
    auto bad = post("/v1/messages", {{"messages", {{{"role", "user"}, {"content", "x"}}}}});
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(json::parse(bad.body)["type"], "error");
    EXPECT_EQ(json::parse(bad.body)["error"]["type"], "invalid_request_error");
    auto unauth = test::request(s.port(), "POST", "/v1/messages", req.dump(), "x-api-key: wrong\r\n");
    EXPECT_EQ(unauth.status, 401);
    EXPECT_EQ(json::parse(unauth.body)["error"]["type"], "authentication_error");
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

// DeepSeek-V4 files carry no chat template (the model ships its format as code): the server renders its own
// encoder's format for the architecture and holds a forced call to the tool's schema in DSML, string parameters
// (an enum here: a random model's free text would run to max_tokens) marked string="true", the others JSON with
// string="false"; the answer's call comes back as a tool call (the markers are many byte tokens in the test
// vocabulary, hence the token allowance).
TEST(ServeTagCalls, DeepSeekV4WithoutATemplateCallsInDsml) {
    test::TempDir dir;
    const std::string made = dir.path.string() + "/ds4-made.gguf", path = dir.path.string() + "/ds4.gguf";
    ASSERT_EQ(cli::dispatch({"mkmodel",
                             "--vocab-builtin",
                             "--arch",
                             "deepseek4",
                             "--layers",
                             "3",
                             "--compress-ratios",
                             "0,4,8",
                             "--head-dim",
                             "32",
                             "--rope-dims",
                             "8",
                             "--q-lora",
                             "32",
                             "--window",
                             "5",
                             "--indexer-heads",
                             "2",
                             "--indexer-dim",
                             "64",
                             "--indexer-top-k",
                             "2",
                             "--embd",
                             "128",
                             "--heads",
                             "4",
                             "--experts",
                             "4",
                             "--experts-used",
                             "2",
                             "--ffn",
                             "64",
                             "--seed",
                             "5",
                             "--out",
                             made}),
              0);
    const GgufFile f = read_gguf_header(made);
    std::vector<std::pair<std::string, GgufValue>> kv;
    for (const auto& e : f.kv)
        if (e.first != "tokenizer.chat_template") kv.push_back(e);
    write_gguf(path, kv, test::read_tensors(made));
    Server s(path, {});
    ASSERT_GT(s.port(), 0) << s.log();
    EXPECT_NE(s.log().find("(deepseek-v4 chat template)"), std::string::npos) << s.log();
    const json tools = json::parse(R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
        "properties":{"city":{"type":"string","enum":["Oslo","Bergen"]},"days":{"type":"integer"},"hourly":{"type":"boolean"}},"required":["city","days"]}}}])");
    json req = {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
                {"tools", tools},
                {"temperature", 0},
                {"max_tokens", 800},
                {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
    const json a = chat(s.port(), req);
    ASSERT_EQ(a["choices"][0]["finish_reason"], "tool_calls") << a.dump();
    const json& call = a["choices"][0]["message"]["tool_calls"][0];
    EXPECT_EQ(call["function"]["name"], "get_weather");
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"] == "Oslo" || args["city"] == "Bergen") << args;
    EXPECT_TRUE(args["days"].is_number_integer()) << args;
    EXPECT_TRUE(!args.contains("hourly") || args["hourly"].is_boolean()) << args;
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

double metric_value(const std::string& metrics, const std::string& name) {
    const size_t p = metrics.find("\n" + name + " ");
    return p == std::string::npos ? -1 : std::stod(metrics.substr(p + name.size() + 2));
}

// Each response's usage carries what the request cost the expert cache (usage.moestream, OpenAI and Anthropic
// shapes); over requests one at a time and two at once, the requests' bytes add up to the server's counter
// exactly (a shared decode step is split among its slots), and /metrics has a histogram entry per request.
TEST_F(ServeTest, RequestsReportTheirExpertReads) {
    const ModelFacts f = model_facts(open_gguf_model(model_));
    const std::string budget = test::budget_plus_working(model_, f.resident_bytes + 2 * f.kv_bytes(1024) + f.expert_bytes / 3, 1024, 2,
                                                         test::kServeThreads);
    Server s(model_, {"--ram-budget", budget, "--ctx", "1024", "--parallel", "2"});
    ASSERT_GT(s.port(), 0) << s.log();
    ASSERT_NE(s.log().find("experts streamed"), std::string::npos) << s.log();
    const double bytes_before = metric_value(test::request(s.port(), "GET", "/metrics").body, "moestream_expert_bytes_read_total");
    std::atomic<uint64_t> charged{0};
    std::atomic<int> answered{0};
    auto ask = [&](int i) {
        const bool anthropic = i % 2 == 1;
        const auto r = anthropic ? test::request(
                                       s.port(), "POST", "/v1/messages",
                                       json{{"max_tokens", 12}, {"messages", {{{"role", "user"}, {"content", "io " + std::to_string(i)}}}}}.dump())
                                 : test::request(
                                       s.port(), "POST", "/v1/chat/completions",
                                       json{{"max_tokens", 12}, {"messages", {{{"role", "user"}, {"content", "io " + std::to_string(i)}}}}}.dump());
        ASSERT_EQ(r.status, 200) << r.body;
        const json usage = json::parse(r.body)["usage"];
        ASSERT_TRUE(usage.contains("moestream")) << usage.dump();
        const json& io = usage["moestream"];
        EXPECT_GT(io["expert_cache_hits"].get<uint64_t>() + io["expert_cache_misses"].get<uint64_t>(), 0u) << io.dump();
        EXPECT_GE(io["expert_hit_rate"].get<double>(), 0.0);
        EXPECT_LE(io["expert_hit_rate"].get<double>(), 1.0);
        EXPECT_GE(io["expert_io_wait_ms"].get<double>(), 0.0);
        charged += io["expert_bytes_read"].get<uint64_t>();
        answered++;
    };
    for (int i = 0; i < 4; ++i) ask(i);  // one at a time
    std::vector<std::thread> together;
    for (int i = 4; i < 8; ++i) together.emplace_back(ask, i);  // two slots, four clients
    for (auto& t : together) t.join();
    ASSERT_EQ(answered.load(), 8);
    const std::string metrics = test::request(s.port(), "GET", "/metrics").body;
    const double bytes_after = metric_value(metrics, "moestream_expert_bytes_read_total");
    EXPECT_GT(charged.load(), 0u);
    EXPECT_EQ(static_cast<double>(charged.load()), bytes_after - bytes_before);
    EXPECT_EQ(metric_value(metrics, "moestream_request_expert_bytes_read_count"), 8);
    EXPECT_EQ(metric_value(metrics, "moestream_request_expert_bytes_read_sum"), static_cast<double>(charged.load()));
    EXPECT_NE(metrics.find("moestream_request_expert_hit_rate_bucket{le=\"+Inf\"} 8\n"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("# TYPE moestream_request_expert_wait_seconds histogram"), std::string::npos);
}

// --parallel 3: three requests generate together; the decode steps are batched, so fewer expert fetches than
// the same requests one after another, and every request still gets its whole answer. The long streamed request
// is generating before the other two are sent, so they overlap it however the host schedules the clients (sent
// together, short requests on a fast host could each finish before the next arrived).
TEST_F(ServeTest, ParallelSlotsBatchDecodeSteps) {
    constexpr int kLong = 1500, kShort = 32;
    auto run = [&](int parallel) {
        Server s(model_, {"--parallel", std::to_string(parallel)});
        EXPECT_GT(s.port(), 0) << s.log();
        std::atomic<bool> streaming{false};
        std::string streamed;
        std::thread streamer([&] {
            const json body = {{"messages", {{{"role", "user"}, {"content", "Tell a long story"}}}},
                               {"max_tokens", kLong},
                               {"ignore_eos", true},
                               {"temperature", 0.7},
                               {"seed", 1},
                               {"stream", true}};
            const int fd = test::connect_loopback(s.port());
            const std::string text = body.dump();
            test::send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                                   std::to_string(text.size()) + "\r\n\r\n" + text);
            char buf[4096];
            ssize_t n;
            while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
                streamed.append(buf, static_cast<size_t>(n));
                if (streamed.find("chat.completion.chunk") != std::string::npos) streaming = true;
                if (streamed.find("[DONE]") != std::string::npos) break;
            }
            streaming = true;  // (a failed stream must not leave the test waiting)
            ::close(fd);
        });
        while (!streaming) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::vector<std::thread> clients;
        std::vector<json> answers(2);
        for (int c = 0; c < 2; ++c)
            clients.emplace_back([&, c] {
                const json body = {{"messages", {{{"role", "user"}, {"content", "Tell story " + std::to_string(c)}}}},
                                   {"max_tokens", kShort},
                                   {"ignore_eos", true},
                                   {"temperature", 0.7},
                                   {"seed", c}};
                auto r = test::request(s.port(), "POST", "/v1/chat/completions", body.dump());
                EXPECT_EQ(r.status, 200) << r.body;
                answers[static_cast<size_t>(c)] = json::parse(r.body, nullptr, false);
            });
        for (auto& t : clients) t.join();
        streamer.join();
        EXPECT_NE(streamed.find("[DONE]"), std::string::npos) << streamed.substr(0, 500);
        for (const json& a : answers) EXPECT_EQ(a["usage"]["completion_tokens"].get<int>(), kShort) << a.dump();
        const std::string metrics = test::request(s.port(), "GET", "/metrics").body;
        EXPECT_EQ(metric_value(metrics, "moestream_slots"), parallel);
        EXPECT_EQ(metric_value(metrics, "moestream_slots_busy"), 0);
        EXPECT_EQ(s.terminate(), 0) << s.log();
        return std::pair{metric_value(metrics, "moestream_expert_loads_total"), metric_value(metrics, "moestream_generated_tokens_total")};
    };
    const auto [loads_one, tokens_one] = run(1);
    const auto [loads_three, tokens_three] = run(3);
    EXPECT_EQ(tokens_one, kLong + 2 * kShort);
    EXPECT_EQ(tokens_three, tokens_one);
    // Expert fetches per generated token: lower when the slots' steps share experts.
    EXPECT_LT(loads_three / tokens_three, loads_one / tokens_one) << loads_three << "/" << tokens_three << " vs " << loads_one << "/" << tokens_one;
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// A long prompt arriving while another slot streams is evaluated in chunks between that slot's decode
// steps: the stream keeps flowing while it is evaluated, and both requests complete whole.
TEST_F(ServeTest, LongPromptInterleavesWithAStreamingSlot) {
    Server s(model_, {"--parallel", "2"});
    ASSERT_GT(s.port(), 0) << s.log();
    const json streaming = {{"messages", {{{"role", "user"}, {"content", "Talk."}}}}, {"max_tokens", 400}, {"temperature", 0}, {"stream", true}};
    std::string long_text;
    for (int i = 0; i < 400; ++i) long_text += "word" + std::to_string(i) + " ";
    const json long_prompt = {{"messages", {{{"role", "user"}, {"content", long_text}}}}, {"max_tokens", 4}, {"temperature", 0}};
    std::atomic<int> chunks{0}, chunks_during{-1};
    std::atomic<bool> started{false};
    std::mutex arrivals_mu;
    std::vector<std::chrono::steady_clock::time_point> arrivals;  // when the stream's chunk count grew
    std::thread streamer([&] {
        const int fd = test::connect_loopback(s.port());
        const std::string body = streaming.dump();
        test::send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body);
        char buf[4096];
        ssize_t n;
        std::string all;
        while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
            all.append(buf, static_cast<size_t>(n));
            size_t count = 0;
            for (size_t p = all.find("chat.completion.chunk"); p != std::string::npos; p = all.find("chat.completion.chunk", p + 1)) ++count;
            if (static_cast<int>(count) > chunks) {
                std::lock_guard<std::mutex> lk(arrivals_mu);
                arrivals.push_back(std::chrono::steady_clock::now());
            }
            chunks = static_cast<int>(count);
            if (count > 3) started = true;
            if (all.find("[DONE]") != std::string::npos) break;
        }
        ::close(fd);
    });
    while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const int before = chunks;
    const auto sent = std::chrono::steady_clock::now();
    const auto r = test::request(s.port(), "POST", "/v1/chat/completions", long_prompt.dump());
    const auto answered = std::chrono::steady_clock::now();
    chunks_during = chunks - before;
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 512);  // more than two chunks of prompt
    streamer.join();
    EXPECT_GT(chunks_during.load(), 0) << "the stream stalled while the long prompt was evaluated";
    // The longest silence of the stream while the long request ran stays well under that prompt's whole
    // evaluation time: it was cut into chunks with the stream's tokens between them.
    const double prompt_ms = j["timings"]["prompt_ms"].get<double>();
    double longest_gap_ms = 0;
    {
        std::lock_guard<std::mutex> lk(arrivals_mu);
        for (size_t i = 1; i < arrivals.size(); ++i)
            if (arrivals[i] > sent && arrivals[i - 1] < answered)
                longest_gap_ms = std::max(longest_gap_ms, std::chrono::duration<double, std::milli>(arrivals[i] - arrivals[i - 1]).count());
    }
    if (prompt_ms >= 20) EXPECT_LT(longest_gap_ms, 0.75 * prompt_ms) << "prompt " << prompt_ms << " ms";
    else std::cerr << "[  NOTE    ] the long prompt took " << prompt_ms << " ms: too short to time the stream's gaps against\n";
    const std::string metrics = test::request(s.port(), "GET", "/metrics").body;
    EXPECT_NE(metrics.find("moestream_slots_busy 0"), std::string::npos);
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

// A forced call in Qwen3.5's XML format through the server: the whole call is held to the schema (the tag
// arguments grammar), so even a random model's call parses, with the enum's value written bare and a typed
// integer and boolean.
TEST(ServeTagCalls, ForcedQwen35CallIsHeldToTheSchema) {
    test::TempDir dir;
    synth::MetadataList vocab = synth::builtin_vocab();
    for (auto& [key, value] : vocab)
        if (key == "tokenizer.chat_template") value = GgufValue::string("{{- '<|im_start|>' -}}{{- '<function=' -}}{{- '<think>' -}}");
    synth::SyntheticSpec spec;
    spec.layers = 2, spec.embd = 64, spec.heads = 2, spec.kv_heads = 1, spec.head_dim = 32, spec.experts = 4, spec.used = 2, spec.ffn = 64,
    spec.seed = 5;
    const std::string path = dir.path.string() + "/q35.gguf";
    synth::write_synthetic_model(spec, vocab, path);
    Server s(path, {});
    ASSERT_GT(s.port(), 0) << s.log();
    EXPECT_NE(s.log().find("qwen3.5"), std::string::npos) << s.log();
    const json tools = json::parse(R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
        "properties":{"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"},"hourly":{"type":"boolean"}},"required":["unit","days"]}}},
        {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"utc":{"type":"boolean"}},"required":["utc"]}}}])");
    for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
        json req = {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
                    {"tools", tools},
                    {"temperature", 0},
                    {"max_tokens", 300},
                    {"tool_choice", choice}};
        const json a = chat(s.port(), req);
        ASSERT_EQ(a["choices"][0]["finish_reason"], "tool_calls") << a.dump();
        const json& call = a["choices"][0]["message"]["tool_calls"][0];
        const json args = json::parse(call["function"]["arguments"].get<std::string>());
        if (call["function"]["name"] == "get_time") {
            EXPECT_TRUE(args["utc"].is_boolean()) << args;
            continue;
        }
        EXPECT_EQ(call["function"]["name"], "get_weather");
        EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << args;
        EXPECT_TRUE(args["days"].is_number_integer()) << args;
        EXPECT_TRUE(!args.contains("hourly") || args["hourly"].is_boolean()) << args;
    }
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace moe

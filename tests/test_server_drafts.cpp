// serve --draft: greedy answers (text, tokens' logprobs) are the same with prompt-lookup drafts as without, on
// an attention model and on a recurrent one (whose rejected drafts roll back through a re-evaluation); the
// response's timings and /metrics say how many drafts were verified and kept.
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/serve_fixture.h"

namespace moe {
namespace {

using json = nlohmann::json;

// A code-editing style request: the answer is likely to repeat spans of the prompt, which is what lookup drafts.
const std::string kEdit =
    R"({"model":"m","prompt":"def area(w, h):\n    return w * h\n\ndef area(w, h):\n    return w * h\n\ndef area(w, h):\n","max_tokens":48,"temperature":0,"ignore_eos":true,"logprobs":2})";

json completion(const test::Server& s) {
    const auto r = test::request(s.port(), "POST", "/v1/completions", kEdit);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
}

class ServeDrafts : public test::ServeTest, public ::testing::WithParamInterface<bool> {};

TEST_P(ServeDrafts, GreedyAnswersAreTheSameWithLookupDrafts) {
    std::string model = model_;
    if (GetParam()) {
        model = *dir_ / "hybrid-drafts.gguf";
        ASSERT_EQ(cli::dispatch({"mkmodel", "--arch",     "qwen35moe", "--layers",         "4",  "--embd",          "64",     "--heads",
                                 "2",       "--kv-heads", "1",         "--head-dim",       "32", "--experts",       "4",      "--experts-used",
                                 "2",       "--ffn",      "64",        "--shared-experts", "1",  "--vocab-builtin", "--seed", "8",
                                 "--out",   model}),  // a seed whose answer repeats 2-grams: drafts
                  0);
    }
    json plain, drafted;
    {
        test::Server s(model, {"--draft", "off"});
        ASSERT_GT(s.port(), 0) << s.log();
        plain = completion(s);
        EXPECT_EQ(plain["timings"]["draft_n"], 0);
        EXPECT_EQ(test::request(s.port(), "GET", "/metrics").body.find("moestream_draft_tokens_total"), std::string::npos);
    }
    test::Server s(model, {"--draft", "lookup", "--draft-max", "6"});
    ASSERT_GT(s.port(), 0) << s.log();
    drafted = completion(s);
    EXPECT_EQ(drafted["choices"][0]["text"], plain["choices"][0]["text"]);
    EXPECT_EQ(drafted["choices"][0]["logprobs"], plain["choices"][0]["logprobs"]);
    EXPECT_EQ(drafted["usage"]["completion_tokens"], plain["usage"]["completion_tokens"]);
    const int n = drafted["timings"]["draft_n"].get<int>(), kept = drafted["timings"]["draft_n_accepted"].get<int>();
    EXPECT_GT(n, 0) << drafted.dump();
    EXPECT_GE(kept, 0);
    EXPECT_LE(kept, n);
    const std::string metrics = test::request(s.port(), "GET", "/metrics").body;
    EXPECT_NE(metrics.find("moestream_draft_tokens_total " + std::to_string(n) + "\n"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("moestream_draft_accepted_total " + std::to_string(kept) + "\n"), std::string::npos) << metrics;
    // The web page's samples carry the same figures.
    const json stats = test::engine_stats_with(s.port(), "drafts");
    ASSERT_FALSE(stats["samples"].empty());
    EXPECT_EQ(stats["config"]["draft"], "lookup");
    EXPECT_EQ(stats["samples"].back()["drafts"]["drafted"], n);
    EXPECT_EQ(stats["samples"].back()["drafts"]["accepted"], kept);
    // The next request on the same slot starts from what the cache really holds.
    const json again = completion(s);
    EXPECT_EQ(again["choices"][0]["text"], plain["choices"][0]["text"]);
    EXPECT_EQ(s.terminate(), 0) << s.log();
    // Up to a full context: the answer ends at the same token ("length") with drafts as without.
    const int n_ctx = plain["usage"]["prompt_tokens"].get<int>() + 20;
    json short_plain, short_drafted;
    {
        test::Server off(model, {"--draft", "off", "--ctx", std::to_string(n_ctx)});
        short_plain = completion(off);
    }
    test::Server on(model, {"--draft", "lookup", "--ctx", std::to_string(n_ctx)});
    short_drafted = completion(on);
    EXPECT_EQ(short_drafted["choices"][0]["text"], short_plain["choices"][0]["text"]);
    EXPECT_EQ(short_drafted["usage"]["completion_tokens"], short_plain["usage"]["completion_tokens"]);
    EXPECT_EQ(short_drafted["choices"][0]["finish_reason"], "length");
    EXPECT_LT(short_plain["usage"]["completion_tokens"].get<int>(), 48);  // the context, not max_tokens, ended it
}

INSTANTIATE_TEST_SUITE_P(Models, ServeDrafts, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "Recurrent" : "Attention"); });

// Two slots drafting at once: their tokens and drafts go through one verification batch, and each answer is
// the one it gets alone without drafts; a constrained request's drafts are judged by its grammar.
class ServeDraftSlots : public test::ServeTest {};

TEST_F(ServeDraftSlots, SlotsDraftingTogetherAnswerAsEachAlone) {
    json second = json::parse(kEdit);
    second["prompt"] = "x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2, 3]\nx = [1, 2";
    std::vector<std::string> bodies = {kEdit, second.dump()};
    const json constrained = {{"messages", {{{"role", "user"}, {"content", "JSON please"}}}},
                              {"max_tokens", 60},
                              {"temperature", 0},
                              {"response_format", {{"type", "json_object"}}}};
    std::vector<json> alone;
    json constrained_alone;
    {
        test::Server s(model_, {"--draft", "off"});
        ASSERT_GT(s.port(), 0) << s.log();
        for (const auto& b : bodies) alone.push_back(json::parse(test::request(s.port(), "POST", "/v1/completions", b).body));
        constrained_alone = json::parse(test::request(s.port(), "POST", "/v1/chat/completions", constrained.dump()).body);
    }
    test::Server s(model_, {"--draft", "lookup", "--parallel", "2"});
    ASSERT_GT(s.port(), 0) << s.log();
    for (int round = 0; round < 3; ++round) {
        std::vector<json> got(bodies.size());
        std::vector<std::thread> clients;
        for (size_t i = 0; i < bodies.size(); ++i)
            clients.emplace_back([&, i] { got[i] = json::parse(test::request(s.port(), "POST", "/v1/completions", bodies[i]).body); });
        for (auto& c : clients) c.join();
        for (size_t i = 0; i < bodies.size(); ++i) {
            EXPECT_EQ(got[i]["choices"][0]["text"], alone[i]["choices"][0]["text"]) << "request " << i << " round " << round;
            // (Later rounds reuse a cached prefix whose prompt chunks differ from a cold prompt's: the logprobs'
            // last bits may too, drafts or not.)
            if (round == 0) { EXPECT_EQ(got[i]["choices"][0]["logprobs"], alone[i]["choices"][0]["logprobs"]) << "request " << i; }
        }
    }
    // Under a grammar the drafts are judged by the constrained sampler: the same JSON as without drafts.
    const auto r = test::request(s.port(), "POST", "/v1/chat/completions", constrained.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = json::parse(r.body);
    EXPECT_EQ(c["choices"][0]["message"]["content"], constrained_alone["choices"][0]["message"]["content"]);
    EXPECT_GT(c["timings"]["draft_n"].get<int>(), 0) << c.dump();  // JSON repeats its own keys and spans: lookup drafts
    std::printf("[ drafts ] constrained request: %d drafted, %d kept\n", c["timings"]["draft_n"].get<int>(),
                c["timings"]["draft_n_accepted"].get<int>());
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

// serve --draft mtp on a glm-dsa file with a NextN block: two slots drafting from it at once (each its own block
// rows, verified in one batch) answer as each does alone without drafts, with drafts every step (--draft-min)
// and as the planner decides.
TEST_F(ServeDraftSlots, NextNDraftsFromTwoSlotsAnswerAsEachAlone) {
    const std::string model = *dir_ / "dsa-nextn.gguf";
    ASSERT_EQ(cli::dispatch({"mkmodel", "--arch",  "glm-dsa", "--layers",         "3",      "--embd",
                             "64",      "--heads", "2",       "--experts",        "4",      "--experts-used",
                             "2",       "--ffn",   "64",      "--shared-experts", "1",      "--dense-layers",
                             "1",       "--nextn", "1",       "--vocab-builtin",  "--seed", "4",
                             "--out",   model}),
              0);
    json second = json::parse(kEdit);
    second["prompt"] = "Once upon a time, in a small village by the sea, there lived";
    const std::vector<std::string> bodies = {kEdit, second.dump()};
    std::vector<json> alone;
    {
        test::Server s(model, {"--draft", "off"});
        ASSERT_GT(s.port(), 0) << s.log();
        for (const auto& b : bodies) alone.push_back(json::parse(test::request(s.port(), "POST", "/v1/completions", b).body));
    }
    for (const std::string min : {"3", "0"}) {
        test::Server s(model, {"--draft", "mtp", "--draft-min", min, "--draft-max", "3", "--parallel", "2"});
        ASSERT_GT(s.port(), 0) << s.log();
        std::vector<json> got(bodies.size());
        std::vector<std::thread> clients;
        for (size_t i = 0; i < bodies.size(); ++i)
            clients.emplace_back([&, i] { got[i] = json::parse(test::request(s.port(), "POST", "/v1/completions", bodies[i]).body); });
        for (auto& c : clients) c.join();
        int drafted = 0;
        for (size_t i = 0; i < bodies.size(); ++i) {
            EXPECT_EQ(got[i]["choices"][0]["text"], alone[i]["choices"][0]["text"]) << "--draft-min " << min << ", request " << i;
            EXPECT_EQ(got[i]["choices"][0]["logprobs"], alone[i]["choices"][0]["logprobs"]) << "--draft-min " << min << ", request " << i;
            drafted += got[i]["timings"]["draft_n"].get<int>();
        }
        if (min != "0") { EXPECT_GT(drafted, 0) << "--draft-min 3 drafts every step"; }
        std::printf("[ drafts ] --draft mtp --draft-min %s: %d drafted over two slots\n", min.c_str(), drafted);
        EXPECT_EQ(s.terminate(), 0) << s.log();
    }
}

// bench --draft: the drafts it verified and kept beside its tok/s.
TEST_F(ServeDraftSlots, BenchReportsItsDrafts) {
    const auto [rc, out] = test::run_moestream("bench --model " + model_ + " --tokens 48 --no-fio --parallel '' --draft lookup --json", false);
    ASSERT_EQ(rc, 0) << out;
    const json j = json::parse(out);
    ASSERT_TRUE(j.contains("draft")) << out;
    EXPECT_EQ(j["draft"]["mode"], "lookup");
    EXPECT_LE(j["draft"]["accepted"].get<int>(), j["draft"]["drafted"].get<int>());
    EXPECT_GT(j["gen_tokens_per_s"].get<double>(), 0);
}

TEST(ServeDraftFlags, BadValuesAreOneLineErrors) {
    const auto [rc, out] = test::run_moestream("serve --model /nonexistent.gguf --draft sometimes");
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("--draft sometimes: expected auto, off, lookup or mtp"), std::string::npos) << out;
    const auto [rc2, out2] = test::run_moestream("run --model /nonexistent.gguf -p x --draft mtp");
    EXPECT_NE(rc2, 0);
    EXPECT_NE(out2.find("/nonexistent.gguf"), std::string::npos) << out2;  // test_mtp.cpp: files without a block
    const auto [rc3, out3] = test::run_moestream("run --model /nonexistent.gguf -p x --draft lookup --draft-max 0");
    EXPECT_NE(rc3, 0);
    EXPECT_NE(out3.find("--draft-max 0 is out of range"), std::string::npos) << out3;
    const auto [rc4, out4] = test::run_moestream("serve --model /nonexistent.gguf --draft mtp --draft-max 2 --draft-min 3");
    EXPECT_NE(rc4, 0);
    EXPECT_NE(out4.find("--draft-min 3 is out of range (0..--draft-max 2)"), std::string::npos) << out4;
}

}  // namespace
}  // namespace moe

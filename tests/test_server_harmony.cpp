// gpt-oss through `moestream serve`: a gpt-oss model whose vocabulary has Harmony's control tokens and whose
// template is Harmony's. A forced call comes back as OpenAI's tool_calls (its <|call|> ends the turn), its result
// goes back as a commentary message, a json_object answer is written in the final channel, and a bad
// reasoning_effort is a 400 naming the field.
#include <nlohmann/json.hpp>

#include "synth/synthetic_model.h"
#include "tests/serve_fixture.h"

namespace moe {
namespace {

using json = nlohmann::json;

std::string harmony_model(const std::string& dir) {
    synth::MetadataList vocab = synth::builtin_vocab();
    for (auto& [key, value] : vocab) {
        if (key == "tokenizer.ggml.tokens") {
            std::vector<std::string> tokens = value.strs;
            for (const char* t : {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"})
                tokens.push_back(t);
            value = GgufValue::string_array(tokens);
        } else if (key == "tokenizer.ggml.token_type") {
            std::vector<int32_t> types = value.i32_array();
            types.insert(types.end(), 7, 3);  // control tokens
            value = GgufValue::i32_array_of(types);
        } else if (key == "tokenizer.chat_template") {
            value = GgufValue::string("{{- \"<|start|>system<|message|>\" }} ... \"<|channel|>analysis<|message|>\"");
        }
    }
    synth::SyntheticSpec s;
    s.arch = "gpt-oss";
    s.layers = 2, s.embd = 64, s.heads = 2, s.kv_heads = 1, s.head_dim = 32, s.experts = 4, s.used = 2, s.ffn = 64, s.window = 8, s.seed = 5;
    const std::string path = dir + "/oss.gguf";
    synth::write_synthetic_model(s, vocab, path);
    return path;
}

json chat(int port, const json& body, int expect = 200) {
    auto r = test::request(port, "POST", "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, expect) << r.body;
    return json::parse(r.body, nullptr, false);
}

TEST(ServeHarmony, ToolCallsJsonAnswersAndReasoningEffort) {
    test::TempDir dir;
    test::Server s(harmony_model(dir.path.string()), {});
    ASSERT_GT(s.port(), 0) << s.log();
    EXPECT_NE(s.log().find("(harmony chat template)"), std::string::npos) << s.log();
    const json tools = json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather",
        "parameters":{"type":"object","properties":{"unit":{"enum":["c","f"]},"days":{"type":"integer"}},"required":["unit","days"]}}}])");
    json req = {{"messages", {{{"role", "system"}, {"content", "Use tools."}}, {{"role", "user"}, {"content", "Weather in Oslo?"}}}},
                {"tools", tools},
                {"temperature", 0},
                {"max_tokens", 120},
                {"reasoning_effort", "low"},
                {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
    const json a = chat(s.port(), req);
    ASSERT_EQ(a["choices"][0]["finish_reason"], "tool_calls") << a.dump();
    const json& msg = a["choices"][0]["message"];
    ASSERT_EQ(msg["tool_calls"].size(), 1u) << a.dump();
    EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
    const json args = json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args;
    EXPECT_TRUE(args["days"].is_number_integer()) << args;

    // The result goes back; the next turn renders it as functions.get_weather's commentary message.
    req["messages"].push_back(msg);
    req["messages"].push_back({{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "21C"}});
    req["tool_choice"] = "none";
    req["max_tokens"] = 8;
    const json b = chat(s.port(), req);
    EXPECT_GT(b["usage"]["prompt_tokens"].get<int>(), a["usage"]["prompt_tokens"].get<int>()) << b.dump();
    EXPECT_EQ(b["choices"][0]["message"].count("tool_calls"), 0u);

    // response_format json_object: the answer is JSON, written after the final channel's header.
    json j = {{"messages", {{{"role", "user"}, {"content", "JSON please"}}}},
              {"temperature", 0},
              {"max_tokens", 60},
              {"response_format", {{"type", "json_object"}}}};
    const json c = chat(s.port(), j);
    const std::string content = c["choices"][0]["message"]["content"].get<std::string>();
    EXPECT_TRUE(json::parse(content, nullptr, false).is_object()) << c.dump();

    j["reasoning_effort"] = "extreme";
    const json bad = chat(s.port(), j, 400);
    EXPECT_NE(bad["error"]["message"].get<std::string>().find("extreme"), std::string::npos) << bad.dump();
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace moe

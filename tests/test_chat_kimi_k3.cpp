// Kimi K3's chat format: the edges of its template (fixtures/chat_tools/render_k3_edges.py on llama.cpp's
// Kimi-K3.jinja), its channels parsed back, and its markers, which K3 files make control tokens, shown in the
// server's output (as Harmony's): a forced call through `moestream serve` comes back as tool_calls.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/gguf/gguf.h"
#include "engine/server/chat_output.h"
#include "engine/server/chat_session.h"
#include "engine/tokenizer/tokenizer.h"
#include "synth/synthetic_model.h"
#include "tests/serve_fixture.h"
#include "tests/test_support.h"

namespace moe {
namespace {

using json = nlohmann::json;

std::string fixture(const std::string& name) { return test::chat_fixture(name); }

// render_k3_edges.py's conversation.
std::string render_edges(std::optional<bool> thinking, ReasoningEffort effort, const std::string& tool_choice = "",
                         const std::string& response_format = "", const ordered_json& schema = {}) {
    const auto decl = ordered_json::parse(
        R"({"type": "function", "function": {"name": "a&\"b", "description": "Zürich <x>", "parameters": {"type": "object", "properties": {"Zeta": {"type": "number"}, "alpha": {"type": "boolean"}, "Beta": {"type": "null"}}}}})");
    const std::vector<ToolSpec> tools = {{"a&\"b", "Zürich <x>", decl, decl["function"]["parameters"]}};
    std::vector<ChatMessage> ms = {{"user", "Go"},
                                   {"assistant",
                                    "<think>\nplan it\n</think>\n\nok",
                                    {},
                                    {{"x1", "a&\"b", R"({"Zeta": 1.5, "alpha": true, "Beta": null})"}, {"x2", "second", R"({"list": [1, "two"]})"}}},
                                   {"tool", "r2"},
                                   {"tool", "r1"},
                                   {"assistant", "", {}, {{"y1", "second", "{}"}}},
                                   {"tool", "unnamed"}};
    ms[2].tool_call_id = "x2";
    ms[3].tool_call_id = "x1";
    return segments_text(render_chat(ChatFamily::KimiK3, ms,
                                     {.add_generation_prompt = true,
                                      .enable_thinking = thinking,
                                      .bos_text = "",
                                      .tools = tools,
                                      .reasoning_effort = effort,
                                      .date_unix = 0,
                                      .tool_choice = tool_choice,
                                      .response_format = response_format,
                                      .response_schema = schema}));
}

TEST(ChatKimiK3, EdgesRenderAsItsTemplateDoes) {
    // Keys sorted case-insensitively, names escaped in attributes, arguments typed, reasoning kept in history,
    // results put in call order when each names its call, a result without an id named by its position.
    EXPECT_EQ(render_edges({}, ReasoningEffort::Low), fixture("kimi-k3-edges.txt"));
    EXPECT_EQ(render_edges(false, ReasoningEffort::Unset), fixture("kimi-k3-edges-nothink.txt"));
    // The template's closing system messages: tool_choice none / required, response_format with its schema's keys
    // sorted, or json_object.
    const auto schema = ordered_json::parse(
        R"({"type": "object", "properties": {"b": {"type": "string"}, "A": {"type": "integer"}}, "required": ["A"]})");
    EXPECT_EQ(render_edges({}, ReasoningEffort::Unset, "none", "json_schema", schema), fixture("kimi-k3-edges-formats.txt"));
    EXPECT_EQ(render_edges(false, ReasoningEffort::Unset, "required", "json_object"), fixture("kimi-k3-edges-required.txt"));
    EXPECT_EQ(detect_chat_family("{{- '<|open|>' + tag -}}...{{- '<|sep|>' -}}...{{- '<|close|>' + tag + '<|sep|>' -}}"), ChatFamily::KimiK3);
}

// A message's `name` (OpenAI's participant name) as Kimi-K3.jinja renders it: a name attribute on system, user and
// assistant tags (escaped & then "), and the tool of a result that answers no call by id.
TEST(ChatKimiK3, MessageNamesAreAttributesAsInItsTemplate) {
    std::vector<ChatMessage> ms = {{"system", "S"}, {"user", "Hi"}, {"assistant", "ok", {}, {{"c9", "find", "{}"}}}, {"tool", "R"}};
    ms[0].name = "ops";
    ms[1].name = "a\"&b";
    ms[2].name = "bot";
    ms[3].name = "lookup";
    ChatRenderOptions opt;
    opt.add_generation_prompt = true;
    opt.enable_thinking = false;
    const std::string got = segments_text(render_chat(ChatFamily::KimiK3, ms, opt));
    EXPECT_EQ(got,
              "<|open|>message role=\"system\" name=\"ops\"<|sep|>S<|close|>message<|sep|><|end_of_msg|>"
              "<|open|>message role=\"user\" name=\"a&quot;&amp;b\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>"
              "<|open|>message role=\"assistant\" name=\"bot\"<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|>"
              "<|open|>tools<|sep|><|open|>call tool=\"find\" index=\"1\"<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"
              "<|close|>message<|sep|><|end_of_msg|>"
              "<|open|>message role=\"tool\" tool=\"lookup\" index=\"1\"<|sep|>R<|close|>message<|sep|><|end_of_msg|>"
              "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
}

TEST(ChatKimiK3, ChannelsAnswerWithoutToolsAndCallsAsJsonBlocks) {
    // Thinking off: the answer comes straight after the prompt's response opening; its framing is not content.
    ChatOutputParser plain(ChatFamily::KimiK3,
                           {.split_reasoning = true, .starts_in_reasoning = false, .parse_tools = false, .tools = {}, .call_id_prefix = "c"});
    for (const char* piece : {"Hel", "lo <", "|close|>respo", "nse<|sep|><|close", "|>message<|sep|>"}) plain.push(piece);
    plain.finish();
    EXPECT_EQ(plain.content(), "Hello");
    EXPECT_EQ(plain.reasoning(), "");
    // A call whose arguments come as the template's JSON block, next to one with typed elements; an unknown tool
    // leaves the section as text.
    ChatOutputParser calls(ChatFamily::KimiK3,
                           {.split_reasoning = true, .starts_in_reasoning = true, .parse_tools = true, .tools = {}, .call_id_prefix = "c"});
    calls.push(
        "why<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
        "<|open|>json type=\"object\"<|sep|>{\"a\": [1]}<|close|>json<|sep|><|close|>call<|sep|><|open|>call tool=\"g\" index=\"2\"<|sep|>"
        "<|open|>argument key=\"n\" type=\"number\"<|sep|>7<|close|>argument<|sep|><|open|>argument key=\"s\" type=\"string\"<|sep|>7"
        "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>");
    calls.finish();
    EXPECT_EQ(calls.reasoning(), "why");
    EXPECT_EQ(calls.content(), "");
    ASSERT_EQ(calls.calls().size(), 2u);
    EXPECT_EQ(calls.calls()[0].arguments, R"({"a":[1]})");
    EXPECT_EQ(calls.calls()[1].arguments, R"({"n":7,"s":"7"})");
    const std::string broken =
        "<|open|>tools<|sep|><|open|>call tool=\"f\"<|sep|><|open|>argument key=\"x\"<|sep|>1<|close|>call<|sep|><|close|>tools<|sep|>";
    ChatOutputParser bad(ChatFamily::KimiK3,
                         {.split_reasoning = true, .starts_in_reasoning = false, .parse_tools = true, .tools = {}, .call_id_prefix = "c"});
    bad.push(broken);
    bad.finish();
    EXPECT_TRUE(bad.calls().empty());
    EXPECT_EQ(bad.content(), broken);
}

// A model whose vocabulary has K3's markers as control tokens (as K3 files do) and whose template is K3's.
std::string k3_model(const std::string& dir) {
    synth::MetadataList vocab = synth::builtin_vocab();
    const std::vector<std::string> markers = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
    for (auto& [key, value] : vocab) {
        if (key == "tokenizer.ggml.tokens") {
            std::vector<std::string> tokens = value.strs;
            tokens.insert(tokens.end(), markers.begin(), markers.end());
            value = GgufValue::string_array(tokens);
        } else if (key == "tokenizer.ggml.token_type") {
            std::vector<int32_t> types = value.i32_array();
            types.insert(types.end(), markers.size(), 3);  // control tokens
            value = GgufValue::i32_array_of(types);
        } else if (key == "tokenizer.chat_template") {
            value = GgufValue::string("{{- '<|open|>' + tag -}}{{- '<|sep|>' -}}{{- '<|close|>' + tag + '<|sep|>' -}}{{- '<|end_of_msg|>' -}}");
        }
    }
    synth::SyntheticSpec s;
    s.layers = 2, s.embd = 64, s.heads = 2, s.kv_heads = 1, s.head_dim = 32, s.experts = 4, s.used = 2, s.ffn = 64, s.seed = 9;
    const std::string path = dir + "/k3.gguf";
    synth::write_synthetic_model(s, vocab, path);
    return path;
}

TEST(ChatKimiK3, ControlMarkersAreShownInTheOutput) {
    test::TempDir dir;
    const auto tok = Tokenizer::from_gguf(read_gguf_header(k3_model(dir.path.string())));
    const int32_t open = *tok->find("<|open|>"), sep = *tok->find("<|sep|>"), end = *tok->find("<|end_of_msg|>");
    EXPECT_TRUE(tok->is_eog(end));  // a K3 turn ends with it
    const std::vector<int32_t> shown = shown_control_tokens(ChatFamily::KimiK3, *tok);
    EXPECT_EQ(shown.size(), 3u);  // <|open|>, <|close|>, <|sep|>; not the end of a message
    StreamDecoder k3(*tok, shown), chatml(*tok, shown_control_tokens(ChatFamily::ChatML, *tok));
    EXPECT_EQ(k3.push(open) + k3.push(sep), "<|open|><|sep|>");
    EXPECT_EQ(chatml.push(open) + chatml.push(sep), "");  // not a marker of that family: hidden, as before
}

TEST(ChatKimiK3, ForcedCallThroughTheServer) {
    test::TempDir dir;
    test::Server s(k3_model(dir.path.string()), {});
    ASSERT_GT(s.port(), 0) << s.log();
    EXPECT_NE(s.log().find("kimi-k3"), std::string::npos) << s.log();
    const json tools = json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather",
        "parameters":{"type":"object","properties":{"unit":{"enum":["c","f"]},"days":{"type":"integer"}},"required":["unit","days"]}}}])");
    json req = {{"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
                {"tools", tools},
                {"temperature", 0},
                {"max_tokens", 400},
                {"tool_choice", "required"}};
    auto r = test::request(s.port(), "POST", "/v1/chat/completions", req.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json a = json::parse(r.body);
    ASSERT_EQ(a["choices"][0]["finish_reason"], "tool_calls") << a.dump();
    const json& msg = a["choices"][0]["message"];
    ASSERT_EQ(msg["tool_calls"].size(), 1u) << a.dump();
    EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
    const json args = json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args;
    EXPECT_TRUE(args["days"].is_number_integer()) << args;
    // Its result goes back as a tool message named by the call.
    req["messages"].push_back(msg);
    req["messages"].push_back({{"role", "tool"}, {"tool_call_id", msg["tool_calls"][0]["id"]}, {"content", "21C"}});
    req["tool_choice"] = "none";
    req["max_tokens"] = 4;
    auto b = test::request(s.port(), "POST", "/v1/chat/completions", req.dump());
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(json::parse(b.body)["choices"][0]["message"].count("tool_calls"), 0u);
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace moe

// The request readers on their own (no model): limits named in the error, a field of the wrong JSON type
// answered as the client's error, earlier assistant turns offered for splicing before their reasoning is
// added back. Through a live server: test_server.cpp; any bytes: tests/fuzz/api_requests_fuzz.cpp.
#include <gtest/gtest.h>

#include <string>

#include "engine/server/api_requests.h"

namespace moe {
namespace {

ApiError rejection(const std::string& body, int api, const RequestLimits& limits = {}) {
    try {
        const ordered_json j = parse_request_body(body, limits);
        if (api == 0) read_openai_chat(j, limits, {});
        else if (api == 1) read_openai_completion(j, limits);
        else read_anthropic_messages(j, limits, {}, false);
    } catch (const ApiError& e) { return e; }
    return {0, "accepted", "", "", ""};
}

std::string user_messages(int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += std::string(i ? "," : "") + R"({"role":"user","content":"m"})";
    return s + "]";
}

TEST(ApiRequests, LimitsAreNamedWithTheirValues) {
    RequestLimits limits;
    limits.max_json_depth = 16;
    limits.max_messages = 8;
    limits.max_tools = 2;
    const ApiError deep = rejection(R"({"messages":[{"role":"user","content":"x","extra":)" + std::string(20, '[') + std::string(20, ']') + "}]}", 0,
                                    limits);
    EXPECT_EQ(deep.status, 400);
    EXPECT_NE(deep.message.find("deeper than 16 levels"), std::string::npos) << deep.message;
    // Brackets inside strings are text, not nesting.
    EXPECT_EQ(rejection(R"({"max_tokens":4,"messages":[{"role":"user","content":")" + std::string(40, '[') + R"("}]})", 2, limits).status, 0);

    const ApiError many = rejection(R"({"max_tokens":4,"messages":)" + user_messages(9) + "}", 2, limits);
    EXPECT_EQ(many.param, "messages");
    EXPECT_NE(many.message.find("9 entries; this server takes at most 8"), std::string::npos) << many.message;
    EXPECT_EQ(rejection(R"({"max_tokens":4,"messages":)" + user_messages(8) + "}", 2, limits).status, 0);

    std::string tools = "[";
    for (int i = 0; i < 3; ++i) tools += std::string(i ? "," : "") + R"({"type":"function","function":{"name":"f)" + std::to_string(i) + R"("}})";
    const ApiError tool_cap = rejection(R"({"messages":[{"role":"user","content":"x"}],"tools":)" + tools + "]}", 0, limits);
    EXPECT_EQ(tool_cap.param, "tools");
    EXPECT_NE(tool_cap.message.find("at most 2"), std::string::npos) << tool_cap.message;

    std::string stops = "[";
    for (int i = 0; i < 17; ++i) stops += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
    EXPECT_EQ(rejection(R"({"max_tokens":4,"messages":[{"role":"user","content":"x"}],"stop_sequences":)" + stops + "]}", 2).param, "stop_sequences");
    EXPECT_EQ(rejection(R"({"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})", 0).param, "stop");
    const ApiError long_stop = rejection(R"({"messages":[{"role":"user","content":"x"}],"stop":")" + std::string(2000, 'z') + "\"}", 0);
    EXPECT_NE(long_stop.message.find("2000 bytes; the limit is 1024"), std::string::npos) << long_stop.message;

    // A schema's size, in response_format and in each API's tool declarations (compact JSON bytes).
    limits.max_tools = 512;
    limits.max_schema_bytes = 200;
    const std::string big_schema = R"({"type":"object","description":")" + std::string(300, 'd') + R"("})";
    const ApiError rf = rejection(
        R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":)" + big_schema + "}}}", 0,
        limits);
    EXPECT_EQ(rf.status, 400);
    EXPECT_NE(rf.message.find("response_format.json_schema.schema is a schema of 334 bytes"), std::string::npos) << rf.message;
    EXPECT_NE(rf.message.find("at most 200"), std::string::npos) << rf.message;
    const ApiError tool = rejection(
        R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":)" + big_schema + "}}]}", 0,
        limits);
    EXPECT_NE(tool.message.find(".function.parameters is a schema of 334 bytes"), std::string::npos) << tool.message;
    const ApiError anthropic = rejection(
        R"({"max_tokens":4,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":)" + big_schema + "}]}", 2, limits);
    EXPECT_NE(anthropic.message.find(".input_schema is a schema of 334 bytes"), std::string::npos) << anthropic.message;
    EXPECT_EQ(
        rejection(
            R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}})", 0,
            limits)
            .status,
        0);
}

TEST(ApiRequests, WrongJsonTypesAreTheClientsError) {
    const std::vector<std::pair<std::string, int>> bodies = {
        {R"({"messages":[{"role":"user","content":[{"type":["text"],"text":"x"}]}]})", 0},
        {R"({"messages":[{"role":"tool","content":"r","tool_call_id":{"id":1}}]})", 0},
        {R"({"messages":[{"role":"assistant","content":"a","reasoning_content":5}]})", 0},
        {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":1,"function":{"name":"f"}}]})", 0},
        {R"({"max_tokens":4,"messages":[{"role":"user","content":[{"type":false}]}]})", 2},
        {R"({"max_tokens":4,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","id":3}]}]})", 2},
        {R"({"max_tokens":4,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":[1]}]}]})", 2},
        {R"({"max_tokens":4,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":2}})", 2},
        {R"({"max_tokens":4,"messages":[{"role":"user","content":"x"}],"thinking":{"type":null,"budget_tokens":5}})", 2},
        {R"({"max_tokens":4,"system":[{"type":{}}],"messages":[{"role":"user","content":"x"}]})", 2},
        {R"({"prompt":[1,"two"]})", 1},
    };
    for (const auto& [body, api] : bodies) {
        const ApiError e = rejection(body, api);
        if (body.find("\"type\":null") != std::string::npos) {
            EXPECT_EQ(e.status, 0) << body << ": a null type is an absent one";
            continue;
        }
        EXPECT_EQ(e.status, 400) << body << " -> " << e.message;
        EXPECT_FALSE(e.param.empty()) << body << " -> " << e.message;
    }
}

// The reasoning effort: OpenAI's field, gpt-oss's kwarg, or Kimi K3's (thinking_effort, whose highest is max).
TEST(ApiRequests, ReasoningEffortFromTheFieldOrEitherTemplatesKwarg) {
    auto effort_of = [](const std::string& extra) {
        return read_openai_chat(parse_request_body(R"({"messages":[{"role":"user","content":"q"}])" + extra + "}", {}), {}, {}).chat.reasoning_effort;
    };
    EXPECT_EQ(effort_of(""), ReasoningEffort::Unset);
    EXPECT_EQ(effort_of(R"(,"reasoning_effort":"max")"), ReasoningEffort::Max);
    EXPECT_EQ(effort_of(R"(,"reasoning_effort":"low")"), ReasoningEffort::Low);
    EXPECT_EQ(effort_of(R"(,"chat_template_kwargs":{"reasoning_effort":"high"})"), ReasoningEffort::High);
    EXPECT_EQ(effort_of(R"(,"chat_template_kwargs":{"thinking_effort":"medium"})"), ReasoningEffort::Medium);
    EXPECT_STREQ(effort_name(ReasoningEffort::Max), "max");
    const ApiError e = rejection(R"({"messages":[{"role":"user","content":"q"}],"chat_template_kwargs":{"thinking_effort":"maximal"}})", 0);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "chat_template_kwargs.thinking_effort") << e.message;
    EXPECT_NE(e.message.find("'maximal' is not low, medium, high or max"), std::string::npos) << e.message;
}

TEST(ApiRequests, AssistantTurnsAreRecalledBeforeTheirReasoningReturns) {
    std::vector<std::string> asked;
    const TurnRecall recall = [&](const std::string& content, const std::vector<ToolCall>& calls) -> std::optional<std::vector<int32_t>> {
        asked.push_back(content + "|" + std::to_string(calls.size()));
        return std::vector<int32_t>{1, 2, 3};
    };
    const ApiRequest o = read_openai_chat(parse_request_body(R"({"messages":[{"role":"user","content":"q"},
        {"role":"assistant","content":"answer","reasoning_content":"because",
         "tool_calls":[{"id":"c","function":{"name":"f","arguments":{"x":1}}}]}]})",
                                                             {}),
                                          {}, recall);
    ASSERT_EQ(asked.size(), 1u);
    EXPECT_EQ(asked[0], "answer|1");
    EXPECT_EQ(o.chat.messages[1].content, "<think>\nbecause\n</think>\n\nanswer");
    EXPECT_EQ(o.chat.messages[1].tool_calls[0].arguments, R"({"x":1})");
    ASSERT_TRUE(o.chat.messages[1].generated);
    EXPECT_FALSE(o.chat.messages[0].generated) << "only assistant turns are spliced";

    asked.clear();
    const ApiRequest a = read_anthropic_messages(parse_request_body(R"({"max_tokens":9,"stop_sequences":["END"],"messages":[
        {"role":"user","content":"q"},
        {"role":"assistant","content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":"t"},{"type":"tool_use","id":"u","name":"f","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"u","content":"r"}]}]})",
                                                                    {}),
                                                 {}, recall, false);
    ASSERT_EQ(asked.size(), 1u);
    EXPECT_EQ(asked[0], "t|1");
    ASSERT_EQ(a.chat.messages.size(), 3u);
    EXPECT_EQ(a.chat.messages[1].content, "<think>\nhm\n</think>\n\nt");
    EXPECT_EQ(a.chat.messages[2].role, "tool");
    EXPECT_EQ(a.chat.messages[2].tool_call_id, "u");
    EXPECT_EQ(a.max_tokens, 9);
    EXPECT_EQ(a.stop, std::vector<std::string>{"END"});
}

}  // namespace
}  // namespace moe

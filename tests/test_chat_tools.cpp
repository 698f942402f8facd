// Tools in the chat templates and in the model's output: a tool conversation rendered natively against the
// text each family's own template produces (fixtures/chat_tools, rendered with jinja2), and each family's
// call format parsed back into {name, arguments}, whole and in streamed pieces, with reasoning split off.
#include <fstream>
#include <random>
#include <sstream>

#include "engine/server/chat_output.h"
#include "engine/server/chat_session.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::string fixture(const std::string& name) { return test::chat_fixture(name); }

std::vector<ToolSpec> tools() {
    const auto decl = ordered_json::parse(R"([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "search", "description": "Web search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "opts": {"type": "object"}}, "required": ["q"]}}}])");
    std::vector<ToolSpec> out;
    for (const auto& t : decl) out.push_back({t["function"]["name"], t["function"]["description"], t, t["function"]["parameters"]});
    return out;
}

// The conversation of fixtures/chat_tools/render.py.
std::vector<ChatMessage> tool_conversation() {
    std::vector<ChatMessage> ms = {
        {"system", "You are terse."},
        {"user", "Weather in Paris and news?"},
        {"assistant",
         "Let me check.",
         {},
         {{"call_1", "get_weather", R"({"city":"Paris","days":2})"}, {"call_2", "search", R"({"q":"news \"today\"","opts":{"n":3,"lang":"fr"}})"}}},
        {"tool", R"({"temp": 21})"},
        {"tool", "Nothing new."},
        {"assistant", "21C; no news."},
        {"user", "And Rome?"},
        {"assistant", "", {}, {{"call_3", "get_weather", R"({"city":"Rome"})"}}},
        {"tool", R"({"temp": 25})"}};
    ms[3].tool_call_id = "call_1";
    ms[4].tool_call_id = "call_2";
    ms[8].tool_call_id = "call_3";
    return ms;
}

std::string render(ChatFamily f, std::optional<bool> thinking = {}) {
    return segments_text(
        render_chat(f, tool_conversation(),
                    {.add_generation_prompt = true, .enable_thinking = thinking, .bos_text = "<｜begin▁of▁sentence｜>", .tools = tools()}));
}

TEST(ChatTools, RenderedAsEachFamilysTemplateDoes) {
    EXPECT_EQ(render(ChatFamily::Qwen3), fixture("qwen3.txt"));
    EXPECT_EQ(render(ChatFamily::Qwen35), fixture("qwen35.txt"));
    EXPECT_EQ(render(ChatFamily::Glm4), fixture("glm46.txt"));
    EXPECT_EQ(render(ChatFamily::Glm47), fixture("glm47.txt"));
    EXPECT_EQ(render(ChatFamily::KimiK2), fixture("kimi.txt"));
    EXPECT_EQ(render(ChatFamily::KimiK3), fixture("kimi-k3.txt"));  // thinking unset: on, effort max
    EXPECT_EQ(render(ChatFamily::KimiK3, false), fixture("kimi-k3-nothink.txt"));
    EXPECT_EQ(render(ChatFamily::MiniMax), fixture("minimax-m2.txt"));
    EXPECT_EQ(render(ChatFamily::MiniMaxM3), fixture("minimax-m3.txt"));  // thinking unset: the template's adaptive mode
    // gpt-oss's Harmony: the reference template keeps one call per turn and drops reasoning once an answer
    // closed the tool loop; its "Current date" is the fixture's.
    EXPECT_EQ(
        segments_text(render_chat(ChatFamily::Harmony, tool_conversation(),
                                  {.add_generation_prompt = true, .enable_thinking = {}, .bos_text = "", .tools = tools(), .date_unix = 1767355200})),
        fixture("gpt-oss.txt"));
}

// Harmony without tools: no developer message unless there are instructions; the effort named; a last
// assistant turn without a generation prompt ends with <|return|> and shows its reasoning.
TEST(ChatTools, HarmonyWithoutToolsAndAsTrainingText) {
    const ChatRenderOptions opt{.add_generation_prompt = false,
                                .enable_thinking = {},
                                .bos_text = "",
                                .tools = {},
                                .reasoning_effort = ReasoningEffort::High,
                                .date_unix = 1767355200};
    const std::string head =
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n"
        "Current date: 2026-01-02\n\nReasoning: high\n\n# Valid channels: analysis, commentary, final. Channel must be included "
        "for every message.<|end|>";
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Harmony, {{"user", "Hi"}, {"assistant", "<think>\nGreet back.\n</think>\n\nHello!"}}, opt)),
              head +
                  "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>Greet back.<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>");
    EXPECT_EQ(
        segments_text(render_chat(ChatFamily::Harmony, {{"developer", "Be brief."}, {"user", "Hi"}},
                                  {.add_generation_prompt = true, .enable_thinking = {}, .bos_text = "", .tools = {}, .date_unix = 1767355200})),
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-01-02"
        "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
        "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant");
    EXPECT_EQ(detect_chat_family("{{- \"<|start|>system<|message|>\" }} ... <|channel|>analysis"), ChatFamily::Harmony);
}

// The schema shapes the template's TypeScript rendering distinguishes (its quirks included), against jinja2's
// output of the reference template for the same tool.
TEST(ChatTools, HarmonyToolTypes) {
    const auto decl = ordered_json::parse(
        R"({"type": "function", "function": {"name": "f", "description": "All kinds", "parameters": {"type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "integer"}}, "b": {"type": "string", "enum": ["x", "y"], "default": "x"},
        "c": {"type": ["string", "null"]}, "d": {"type": "object", "properties": {"e": {"type": "boolean"}}, "required": ["e"]},
        "g": {"type": "number", "default": 1.5}, "h": {"oneOf": [{"type": "string"}, {"type": "integer"}]}, "i": {"type": "string", "nullable": true}},
        "required": ["a"]}}})");
    const std::vector<ToolSpec> ts = {{"f", "All kinds", decl, decl["function"]["parameters"]}};
    const std::string text = segments_text(
        render_chat(ChatFamily::Harmony, {{"user", "Hi"}},
                    {.add_generation_prompt = true, .enable_thinking = {}, .bos_text = "", .tools = ts, .date_unix = 1767355200}));
    const std::string want =
        "type f = (_: {\na: number[],\nb?: \"x\" | \"y\", // default: x,\nc?: string | null,\nd?: {\ne: \n                boolean},\n"
        "g?: number, // default: 1.5,\nh?: string | \nnumber,\ni?: string | null,\n}) => any;";
    EXPECT_NE(text.find(want), std::string::npos) << text;
}

ChatOutputParser parse_in_pieces(ChatFamily f, const OutputParserOptions& opt, const std::string& text, unsigned seed);

// gpt-oss's output: analysis is the reasoning, final the answer, commentary to functions.NAME a call (header in
// either order); text without any header is the answer; arguments that are not JSON stay text.
TEST(ChatTools, HarmonyChannelsParseWholeAndStreamed) {
    const OutputParserOptions opt{
        .split_reasoning = true, .starts_in_reasoning = false, .parse_tools = true, .tools = tools(), .call_id_prefix = "call_"};
    for (unsigned seed = 0; seed < 20; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto answer = parse_in_pieces(
            ChatFamily::Harmony, opt,
            "<|channel|>analysis<|message|>Weather and news.<|end|><|start|>assistant<|channel|>final<|message|>Let me check.<|return|>", seed);
        EXPECT_EQ(answer.reasoning(), "Weather and news.");
        EXPECT_EQ(answer.content(), "Let me check.");
        EXPECT_TRUE(answer.calls().empty());
        auto call = parse_in_pieces(
            ChatFamily::Harmony, opt,
            "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
            "<|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 2}<|call|>",
            seed);
        EXPECT_EQ(call.reasoning(), "Need weather.");
        EXPECT_EQ(call.content(), "");
        ASSERT_EQ(call.calls().size(), 1u);
        EXPECT_EQ(call.calls()[0].name, "get_weather");
        EXPECT_EQ(call.calls()[0].arguments, R"({"city":"Paris","days":2})");
        EXPECT_EQ(call.calls()[0].id, "call_0");
        auto recipient_first = parse_in_pieces(ChatFamily::Harmony, opt,
                                               " to=functions.search<|channel|>commentary json<|message|>{\"q\": \"x\"}<|call|>", seed);
        ASSERT_EQ(recipient_first.calls().size(), 1u);
        EXPECT_EQ(recipient_first.calls()[0].name, "search");
        EXPECT_EQ(parse_in_pieces(ChatFamily::Harmony, opt, "Plain words, no channel.", seed).content(), "Plain words, no channel.");
        auto broken = parse_in_pieces(ChatFamily::Harmony, opt, "<|channel|>commentary to=functions.get_weather json<|message|>{\"city\": <|call|>",
                                      seed);
        EXPECT_TRUE(broken.calls().empty());
        EXPECT_EQ(broken.content(), "{\"city\": ");
        auto unclosed = parse_in_pieces(ChatFamily::Harmony, opt,
                                        "<|channel|>analysis<|message|>Think<|start|>assistant<|channel|>final<|message|>Answer", seed);
        EXPECT_EQ(unclosed.reasoning(), "Think");
        EXPECT_EQ(unclosed.content(), "Answer");
        // Output that ends before any header completes: text is the answer, a cut marker is dropped.
        EXPECT_EQ(parse_in_pieces(ChatFamily::Harmony, opt, " to", seed).content(), " to");
        // --reasoning-format none: the messages as written, markers included, but calls still taken out.
        OutputParserOptions raw = opt;
        raw.split_reasoning = false;
        auto verbatim = parse_in_pieces(ChatFamily::Harmony, raw,
                                        "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
                                        "<|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|>",
                                        seed);
        EXPECT_EQ(verbatim.content(), "<|channel|>analysis<|message|>x<|end|>");
        EXPECT_EQ(verbatim.reasoning(), "");
        ASSERT_EQ(verbatim.calls().size(), 1u);
        EXPECT_EQ(verbatim.calls()[0].arguments, R"({"city":"Oslo"})");
        auto cut = parse_in_pieces(ChatFamily::Harmony, opt, "<|channel|>analysis<|message|>Still thinking<|end|><|start|>assistant<|chan", seed);
        EXPECT_EQ(cut.reasoning(), "Still thinking");
        EXPECT_EQ(cut.content(), "");
    }
}

// MiniMax without a system message or tools: the template's default identity; assistant turns as sent (its
// think-splitting `set`s stay inside their loop under jinja2); thinking off closes the generation prompt's
// think block. The text is jinja2's rendering of unsloth-MiniMax-M2.jinja for these messages.
TEST(ChatTools, MiniMaxDefaultsAndEarlierReasoning) {
    const std::vector<ChatMessage> ms = {
        {"user", "Hi"}, {"assistant", "<think>\nplan\n</think>\n\nHello"}, {"user", "More?"}, {"assistant", "<think>\nR2\n</think>\n\nSure"}};
    EXPECT_EQ(
        segments_text(render_chat(ChatFamily::MiniMax, ms, {.add_generation_prompt = false, .enable_thinking = {}, .bos_text = "", .tools = {}})),
        "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<think>\nplan\n</think>\n\nHello[e~[\n]~b]user\nMore?"
        "[e~[\n]~b]ai\n<think>\nR2\n</think>\n\nSure[e~[\n");
    const std::string off = segments_text(
        render_chat(ChatFamily::MiniMax, {{"user", "Hi"}}, {.add_generation_prompt = true, .enable_thinking = false, .bos_text = "", .tools = {}}));
    EXPECT_EQ(off, "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<think>\n\n</think>\n\n");
    EXPECT_EQ(detect_chat_family("{{- ']~!b[' ~ ']~b]system' ~ '\\n' }}...{{- '[e~[' ~ '\\n' }}"), ChatFamily::MiniMax);
}

// MiniMax-M3: nested arguments as elements (null members dropped, booleans as JSON, <item> per array entry),
// reasoning shown on every turn, thinking on: "enabled" and a <mm:think> prefill. The text is jinja2's rendering
// of MiniMax-M3.jinja with thinking_mode "enabled".
TEST(ChatTools, MiniMaxM3NestedArgumentsAndThinkingModes) {
    std::vector<ChatMessage> ms = {
        {"user", "Hi"},
        {"assistant", "<mm:think>\nplan\n</mm:think>\n\nHello", {}, {{"c1", "f", R"({"a":[1,{"b":true,"c":null}],"d":2.5,"e":null})"}}},
        {"tool", "ok"},
        {"user", "More?"}};
    const std::string text = segments_text(
        render_chat(ChatFamily::MiniMaxM3, ms, {.add_generation_prompt = true, .enable_thinking = true, .bos_text = "", .tools = {}}));
    const std::string ns = "]<]minimax[>[";
    const std::string tail = "]~b]developer\nYou are a helpful assistant.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n<mm:think>plan</mm:think>Hello" + ns +
                             "<tool_call>\n" + ns + "<invoke name=\"f\">" + ns + "<a>" + ns + "<item>1" + ns + "</item>" + ns + "<item>" + ns +
                             "<b>true" + ns + "</b>" + ns + "</item>" + ns + "</a>" + ns + "<d>2.5" + ns + "</d>" + ns + "</invoke>\n" + ns +
                             "</tool_call>[e~[\n]~b]tool\n<response>ok</response>[e~[\n]~b]user\nMore?[e~[\n]~b]ai\n<mm:think>";
    ASSERT_GE(text.size(), tail.size());
    EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
    EXPECT_NE(text.find("Current thinking mode: enabled. You MUST think step by step before every response, including after receiving "
                        "function/tool results.\n</thinking_instructions>[e~[\n]~b]developer"),
              std::string::npos);
    const std::string off = segments_text(
        render_chat(ChatFamily::MiniMaxM3, {{"user", "Hi"}}, {.add_generation_prompt = true, .enable_thinking = false, .bos_text = "", .tools = {}}));
    const std::string off_tail = "[e~[\n]~b]ai\n</mm:think>";
    EXPECT_EQ(off.substr(off.size() - off_tail.size()), off_tail);
    EXPECT_NE(off.find("Current thinking mode: disabled."), std::string::npos);
    EXPECT_EQ(detect_chat_family("{%- set ns_token = ']<]minimax[>[' -%}{{- ']~!b[' ~ ']~b]' }}{{ '[e~[' }}"), ChatFamily::MiniMaxM3);

    // Its calls parse back: nested elements into objects and arrays, scalars typed by the schema.
    const auto decl = ordered_json::parse(R"({"type": "function", "function": {"name": "plan_trip", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "stops": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "nights": {"type": "integer"}}}},
        "flexible": {"type": "boolean"}, "note": {"type": "string"}}}}})");
    std::vector<ToolSpec> trip = {{"plan_trip", "", decl, decl["function"]["parameters"]}};
    const std::string out = "</mm:think>Planning." + ns + "<tool_call>\n" + ns + "<invoke name=\"plan_trip\">" + ns + "<city>Rome" + ns + "</city>" +
                            ns + "<days>3" + ns + "</days>" + ns + "<stops>" + ns + "<item>" + ns + "<name>Pisa" + ns + "</name>" + ns + "<nights>1" +
                            ns + "</nights>" + ns + "</item>" + ns + "<item>" + ns + "<name>007" + ns + "</name>" + ns + "</item>" + ns + "</stops>" +
                            ns + "<flexible>true" + ns + "</flexible>" + ns + "<note>12" + ns + "</note>" + ns + "</invoke>\n" + ns + "</tool_call>";
    for (unsigned seed = 0; seed < 10; ++seed) {
        auto p = parse_in_pieces(ChatFamily::MiniMaxM3,
                                 {.split_reasoning = true, .starts_in_reasoning = false, .parse_tools = true, .tools = trip, .call_id_prefix = "c"},
                                 out, seed);
        EXPECT_EQ(p.reasoning(), "");
        EXPECT_EQ(p.content(), "Planning.");
        ASSERT_EQ(p.calls().size(), 1u);
        EXPECT_EQ(p.calls()[0].arguments,
                  R"({"city":"Rome","days":3,"stops":[{"name":"Pisa","nights":1},{"name":"007"}],"flexible":true,"note":"12"})");
        auto thought = parse_in_pieces(
            ChatFamily::MiniMaxM3, {.split_reasoning = true, .starts_in_reasoning = false, .parse_tools = true, .tools = trip, .call_id_prefix = "c"},
            "<mm:think>Weigh it.</mm:think>Done.", seed);
        EXPECT_EQ(thought.reasoning(), "Weigh it.");
        EXPECT_EQ(thought.content(), "Done.");
    }
}

TEST(ChatTools, DeepSeekGetsTheModelCardsToolDescription) {
    const std::string text = render(ChatFamily::DeepSeekV31);
    const std::string head =
        "<｜begin▁of▁sentence｜>You are terse.\n\n## Tools\nYou have access to the following tools:\n\n### get_weather\n"
        "Description: Current weather for a city\n\nParameters: {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", "
        "\"description\": \"City name\"}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}\n\n### search\n";
    EXPECT_EQ(text.substr(0, head.size()), head);
    const std::string turns =
        "<｜User｜>Weather in Paris and news?<｜Assistant｜></think>Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        "{\"city\": \"Paris\", \"days\": 2}<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"news \\\"today\\\"\", \"opts\": {\"n\": 3, "
        "\"lang\": \"fr\"}}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>{\"temp\": 21}<｜tool▁output▁end｜>"
        "<｜tool▁output▁begin｜>Nothing new.<｜tool▁output▁end｜>21C; no news.<｜end▁of▁sentence｜><｜User｜>And Rome?<｜Assistant｜></think>"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Rome\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        "<｜tool▁output▁begin｜>{\"temp\": 25}<｜tool▁output▁end｜>";
    EXPECT_NE(text.find("- For multiple tool calls, chain them directly without separators or spaces\n<｜User｜>"), std::string::npos) << text;
    EXPECT_EQ(text.substr(text.size() - turns.size()), turns);
}

TEST(ChatTools, PythonJsonMatchesJsonDumps) {
    EXPECT_EQ(python_json(ordered_json::parse(R"({"b":1,"a":[true,null,2.5,"x\ny\u0001é"]})")), R"({"b": 1, "a": [true, null, 2.5, "x\ny\u0001é"]})");
    EXPECT_EQ(python_str(ordered_json(true)), "True");
    EXPECT_EQ(python_str(ordered_json(nullptr)), "None");
    EXPECT_EQ(python_str(ordered_json("bare")), "bare");
}

// Feeds `text` to a parser in pieces of random size (cut at UTF-8 character boundaries, as the generator
// sends them) and checks the streamed events add up to the parser's totals.
ChatOutputParser parse_in_pieces(ChatFamily f, const OutputParserOptions& opt, const std::string& text, unsigned seed) {
    ChatOutputParser p(f, opt);
    std::mt19937 rng(seed);
    std::string reasoning, content;
    std::vector<ToolCall> calls;
    auto take = [&](const std::vector<OutputEvent>& events) {
        for (const auto& e : events) {
            if (e.kind == OutputEvent::Reasoning) reasoning += e.text;
            else if (e.kind == OutputEvent::Content) content += e.text;
            else calls.push_back(e.call);
        }
    };
    size_t pos = 0;
    while (pos < text.size()) {
        size_t n = std::min(text.size() - pos, static_cast<size_t>(1 + rng() % 7));
        while (pos + n < text.size() && (static_cast<unsigned char>(text[pos + n]) & 0xC0) == 0x80) ++n;
        take(p.push(text.substr(pos, n)));
        pos += n;
    }
    take(p.finish());
    EXPECT_EQ(reasoning, p.reasoning());
    EXPECT_EQ(content, p.content());
    EXPECT_EQ(calls.size(), p.calls().size());
    return p;
}

// DeepSeek-V4 ships its format as a Python encoder, not a template: fixtures/chat_tools/render_dsv4.py runs it.
// Results given out of call order go back in it; thinking at effort max puts the encoder's directive first and
// keeps every turn's reasoning (tools declared); without tools, turns before the last user message lose theirs
// and consecutive user messages join into one turn.
TEST(ChatTools, DeepSeekV4AsItsOwnEncoderWritesIt) {
    std::vector<ChatMessage> ms = tool_conversation();
    std::swap(ms[3], ms[4]);
    const auto v4 = [&](const std::vector<ChatMessage>& conv, bool thinking, const std::vector<ToolSpec>& ts, ReasoningEffort effort) {
        return segments_text(render_chat(ChatFamily::DeepSeekV4, conv,
                                         {.add_generation_prompt = true,
                                          .enable_thinking = thinking,
                                          .bos_text = "<｜begin▁of▁sentence｜>",
                                          .tools = ts,
                                          .reasoning_effort = effort}));
    };
    EXPECT_EQ(v4(ms, false, tools(), ReasoningEffort::Unset), fixture("deepseek-v4.txt"));
    EXPECT_EQ(v4(ms, true, tools(), ReasoningEffort::Max), fixture("deepseek-v4-think.txt"));
    const std::vector<ChatMessage> history = {{"system", "You are terse."},
                                              {"user", "Hi"},
                                              {"assistant", "<think>\nA greeting.\n</think>\n\nHello."},
                                              {"user", "2+2?"},
                                              {"user", "Quickly."}};
    EXPECT_EQ(v4(history, true, {}, ReasoningEffort::Unset), fixture("deepseek-v4-history-think.txt"));
    EXPECT_EQ(v4(history, false, {}, ReasoningEffort::Unset), fixture("deepseek-v4-history.txt"));
    // This server's own turns go back as their tokens where the encoder shows all they were.
    std::vector<ChatMessage> spliced = history;
    spliced[2].generated = std::vector<int32_t>{5, 6, 7};
    EXPECT_NE(v4(spliced, false, {}, ReasoningEffort::Unset).find("<｜Assistant｜></think><tokens:3><｜end▁of▁sentence｜>"), std::string::npos);
    EXPECT_NE(v4(spliced, true, {}, ReasoningEffort::Unset).find("<｜Assistant｜></think>Hello.<｜end▁of▁sentence｜>"), std::string::npos);
    // A file without a template is rendered so when it is deepseek4; a template with DSML tool_calls too.
    EXPECT_EQ(chat_family_of("", "deepseek4"), ChatFamily::DeepSeekV4);
    EXPECT_EQ(chat_family_of("", "deepseek2"), ChatFamily::ChatML);
    EXPECT_EQ(detect_chat_family("{{'<｜User｜>'}}...{{'<｜DSML｜' + 'tool_calls>'}}"), ChatFamily::DeepSeekV4);
    EXPECT_EQ(detect_chat_family("{{'<｜User｜>'}}...{{'<｜DSML｜function_calls>'}}</think>thinking"), ChatFamily::DeepSeekV31);
}

struct ParseCase {
    ChatFamily family;
    bool starts_in_reasoning;
    std::string output;
};

TEST(ChatTools, EachFamilysCallsParseBackWholeAndStreamed) {
    const std::string paris = R"({"city":"Paris","days":2})", news = R"({"q":"news \"today\"","opts":{"n":3,"lang":"fr"}})";
    const std::vector<ParseCase> cases = {
        {ChatFamily::Qwen3, false,
         "<think>\nWeather and news.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"news \\\"today\\\"\", \"opts\": {\"n\": 3, \"lang\": \"fr\"}}}\n</tool_call>"},
        {ChatFamily::Qwen35, true,
         "Weather and news.\n</think>\n\nLet me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
         "</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=q>\nnews \"today\"\n</parameter>\n<parameter=opts>\n{\"n\": 3, \"lang\": \"fr\"}\n"
         "</parameter>\n</function>\n</tool_call>"},
        {ChatFamily::Glm4, false,
         "\n<think>Weather and news.</think>\nLet me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
         "<arg_value>2</arg_value>\n</tool_call>\n<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>news \"today\"</arg_value>\n<arg_key>opts</arg_key>\n"
         "<arg_value>{\"n\": 3, \"lang\": \"fr\"}</arg_value>\n</tool_call>"},
        {ChatFamily::Glm47, true,
         "Weather and news.</think>Let me check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value>"
         "</tool_call><tool_call>search<arg_key>q</arg_key><arg_value>news \"today\"</arg_value><arg_key>opts</arg_key><arg_value>{\"n\": 3, \"lang\": \"fr\"}</arg_value></tool_call>"},
        {ChatFamily::DeepSeekV31, true,
         "Weather and news.</think>Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 2}<｜tool▁call▁end｜>"
         "<｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"news \\\"today\\\"\", \"opts\": {\"n\": 3, \"lang\": \"fr\"}}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
        {ChatFamily::DeepSeek, false,
         "<think>\nWeather and news.\n</think>\n\nLet me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 2}\n```"
         "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"q\": \"news \\\"today\\\"\", \"opts\": {\"n\": 3, \"lang\": \"fr\"}}\n```<｜tool▁call▁end｜>"
         "<｜tool▁calls▁end｜>"},
        {ChatFamily::KimiK2, false,
         "<think>Weather and news.</think>Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
         "{\"city\": \"Paris\", \"days\": 2}<|tool_call_end|><|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>{\"q\": \"news \\\"today\\\"\", "
         "\"opts\": {\"n\": 3, \"lang\": \"fr\"}}<|tool_call_end|><|tool_calls_section_end|>"},
        {ChatFamily::MiniMaxM3, false,
         "<mm:think>Weather and news.</mm:think>Let me check.]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"get_weather\">]<]minimax[>[<city>Paris"
         "]<]minimax[>[</city>]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>[</invoke>\n]<]minimax[>[<invoke name=\"search\">]<]minimax[>[<q>news "
         "\"today\"]<]minimax[>[</q>]<]minimax[>[<opts>]<]minimax[>[<n>3]<]minimax[>[</n>]<]minimax[>[<lang>fr]<]minimax[>[</lang>]<]minimax[>[</opts>"
         "]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"},
        {ChatFamily::KimiK3, true,
         "Weather and news.<|close|>think<|sep|><|open|>response<|sep|>Let me check.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call "
         "tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|><|open|>argument "
         "key=\"days\" type=\"number\"<|sep|>2<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"search\" index=\"2\"<|sep|><|open|>argument "
         "key=\"q\" type=\"string\"<|sep|>news \"today\"<|close|>argument<|sep|><|open|>argument key=\"opts\" type=\"object\"<|sep|>{\"n\": 3, \"lang\": "
         "\"fr\"}<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"},
        {ChatFamily::DeepSeekV4, true,
         "Weather and news.</think>Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
         "string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
         "<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"q\" string=\"true\">news \"today\"</｜DSML｜parameter>\n<｜DSML｜parameter "
         "name=\"opts\" string=\"false\">{\"n\": 3, \"lang\": \"fr\"}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"},
        {ChatFamily::MiniMax, true,
         "Weather and news.\n</think>\n\nLet me check.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n"
         "<parameter name=\"days\">2</parameter>\n</invoke>\n<invoke name=\"search\">\n<parameter name=\"q\">news \"today\"</parameter>\n"
         "<parameter name=\"opts\">{\"n\": 3, \"lang\": \"fr\"}</parameter>\n</invoke>\n</minimax:tool_call>"},
    };
    for (const auto& c : cases) {
        for (unsigned seed = 0; seed < 20; ++seed) {
            OutputParserOptions opt{.split_reasoning = true,
                                    .starts_in_reasoning = c.starts_in_reasoning,
                                    .parse_tools = true,
                                    .tools = tools(),
                                    .call_id_prefix = "call_x_"};
            auto p = parse_in_pieces(c.family, opt, c.output, seed);
            SCOPED_TRACE(std::string(family_name(c.family)) + " seed " + std::to_string(seed));
            EXPECT_EQ(p.reasoning(), "Weather and news.");
            EXPECT_EQ(p.content(), "Let me check.");
            ASSERT_EQ(p.calls().size(), 2u);
            EXPECT_EQ(p.calls()[0].name, "get_weather");
            EXPECT_EQ(p.calls()[0].arguments, paris);  // "days" typed as the schema's integer, "city" kept a string
            EXPECT_EQ(p.calls()[0].id, "call_x_0");
            EXPECT_EQ(p.calls()[1].name, "search");
            EXPECT_EQ(p.calls()[1].arguments, news);
            EXPECT_EQ(p.calls()[1].id, "call_x_1");
        }
    }
}

TEST(ChatTools, MalformedOrUnknownCallsStayText) {
    OutputParserOptions opt{.split_reasoning = true, .starts_in_reasoning = false, .parse_tools = true, .tools = tools(), .call_id_prefix = "c"};
    auto p = parse_in_pieces(ChatFamily::Qwen3, opt, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", 1);
    EXPECT_TRUE(p.calls().empty());
    EXPECT_EQ(p.content(), "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>");
    auto unknown = parse_in_pieces(ChatFamily::Glm47, opt, "<tool_call>rm_rf<arg_key>path</arg_key><arg_value>/</arg_value></tool_call>", 2);
    EXPECT_TRUE(unknown.calls().empty());
    EXPECT_EQ(unknown.content(), "<tool_call>rm_rf<arg_key>path</arg_key><arg_value>/</arg_value></tool_call>");
    // MiniMax: text between invokes, an unclosed parameter, an unknown function: all text.
    for (const std::string bad :
         {"<minimax:tool_call>\n<invoke name=\"get_weather\">\n</invoke>\nand<invoke name=\"search\">\n</invoke>\n</minimax:tool_call>",
          "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo\n</invoke>\n</minimax:tool_call>",
          "<minimax:tool_call>\n<invoke name=\"rm_rf\">\n</invoke>\n</minimax:tool_call>"}) {
        auto m = parse_in_pieces(ChatFamily::MiniMax, opt, bad, 5);
        EXPECT_TRUE(m.calls().empty()) << bad;
        EXPECT_EQ(m.content(), bad);
    }
    // Cut off mid-call (max_tokens): the partial call is text.
    auto cut = parse_in_pieces(ChatFamily::Qwen35, opt, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", 3);
    EXPECT_TRUE(cut.calls().empty());
    EXPECT_EQ(cut.content(), "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar");
    // Without tools in the request, call markers are plain text; without reasoning split, so are think tags.
    OutputParserOptions plain{.split_reasoning = false, .starts_in_reasoning = false, .parse_tools = false, .tools = {}, .call_id_prefix = "c"};
    auto none = parse_in_pieces(ChatFamily::Qwen3, plain, "<think>x</think>y <tool_call>{}</tool_call>", 4);
    EXPECT_EQ(none.content(), "<think>x</think>y <tool_call>{}</tool_call>");
    EXPECT_EQ(none.reasoning(), "");
}

TEST(ChatTools, ReasoningUnclosedAndTextThatOnlyLooksLikeAMarker) {
    OutputParserOptions opt{.split_reasoning = true, .starts_in_reasoning = true, .parse_tools = true, .tools = tools(), .call_id_prefix = "c"};
    auto unclosed = parse_in_pieces(ChatFamily::Qwen35, opt, "\nstill thinking when max_tokens hit", 5);
    EXPECT_EQ(unclosed.reasoning(), "still thinking when max_tokens hit");
    EXPECT_EQ(unclosed.content(), "");
    auto lookalike = parse_in_pieces(
        ChatFamily::Qwen3, {.split_reasoning = true, .starts_in_reasoning = false, .parse_tools = true, .tools = tools(), .call_id_prefix = "c"},
        "a < b and <tool is not <tool_call", 6);
    EXPECT_EQ(lookalike.content(), "a < b and <tool is not <tool_call");
}

TEST(ChatTools, ForcedCallPrefixParsesAsTheCallItOpens) {
    for (ChatFamily f : {ChatFamily::Qwen3, ChatFamily::Qwen35, ChatFamily::Glm4, ChatFamily::Glm47, ChatFamily::DeepSeekV31, ChatFamily::DeepSeekV4,
                         ChatFamily::KimiK2, ChatFamily::KimiK3, ChatFamily::Harmony, ChatFamily::MiniMax, ChatFamily::MiniMaxM3}) {
        // What each model writes after its forced opening for get_weather.
        const std::map<ChatFamily, std::string> rest = {
            {ChatFamily::Qwen3, "{\"city\": \"Oslo\"}}\n</tool_call>"},
            {ChatFamily::Qwen35, "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"},
            {ChatFamily::Glm4, "<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>"},
            {ChatFamily::Glm47, "<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"},
            {ChatFamily::DeepSeekV31, "{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
            {ChatFamily::DeepSeekV4,
             "<｜DSML｜parameter name=\"city\" string=\"true\">Oslo</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"},
            {ChatFamily::KimiK2, "{\"city\": \"Oslo\"}<|tool_call_end|><|tool_calls_section_end|>"},
            {ChatFamily::KimiK3, "{\"city\": \"Oslo\"}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>"},
            {ChatFamily::Harmony, "{\"city\": \"Oslo\"}<|call|>"},
            {ChatFamily::MiniMax, "<parameter name=\"city\">Oslo</parameter>\n</invoke>\n</minimax:tool_call>"},
            {ChatFamily::MiniMaxM3, "]<]minimax[>[<city>Oslo]<]minimax[>[</city>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"}};
        ChatOutputParser p(f, {.split_reasoning = true, .starts_in_reasoning = false, .parse_tools = true, .tools = tools(), .call_id_prefix = "c"});
        EXPECT_TRUE(p.push(forced_call_prefix(f, "get_weather")).empty());
        p.push(rest.at(f));
        p.finish();
        ASSERT_EQ(p.calls().size(), 1u) << family_name(f);
        EXPECT_EQ(p.calls()[0].name, "get_weather");
        EXPECT_EQ(p.calls()[0].arguments, R"({"city":"Oslo"})");
    }
}

// A forced call in a tag-style family (Qwen3.5, GLM-4.5/4.7, MiniMax-M2) is held to the tool's schema past its
// opening: the call as the family's own template writes it is accepted, then parsed back; a wrong type, an
// unknown or missing required parameter, or an enum value not listed is refused; a string parameter is any
// text up to its closing tag, a near miss of that tag included.
TEST(ChatTools, ForcedTagCallsAreHeldToTheToolsSchema) {
    const auto decl = ordered_json::parse(R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}, "hourly": {"type": "boolean"},
        "extra": {"type": "object"}}, "required": ["city", "days"]}}})");
    const std::vector<ToolSpec> ts = {{"get_weather", "", decl, decl["function"]["parameters"]}};
    const std::string city = "Oslo </para and <b>\n  \"fjord\" \xC3\xB8";
    for (ChatFamily f :
         {ChatFamily::Qwen35, ChatFamily::Glm4, ChatFamily::Glm47, ChatFamily::MiniMax, ChatFamily::MiniMaxM3, ChatFamily::DeepSeekV4}) {
        SCOPED_TRACE(family_name(f));
        ChatInput in;
        in.messages = {{"user", "Weather?"}};
        in.tools = ts;
        in.tool_choice = ToolChoice::Named;
        in.forced_tool = "get_weather";
        const auto g = forced_call_grammar(in, f);
        ASSERT_TRUE(g);
        // The call as the template renders it in history, from just after the forced opening.
        const ToolCall call{"c1", "get_weather", ordered_json{{"city", city}, {"unit", "f"}, {"days", 3}, {"extra", {{"n", 1}}}}.dump()};
        const std::string history = segments_text(render_chat(f, {{"user", "Weather?"}, {"assistant", "", {}, {call}}}, ChatRenderOptions{}));
        const std::string opening = forced_call_prefix(f, "get_weather");
        const size_t at = history.find(opening);
        ASSERT_NE(at, std::string::npos) << history;
        const std::string end = call_syntax(f).tags->end;
        const std::string rest = history.substr(at + opening.size(), history.find(end, at) + end.size() - at - opening.size());
        GrammarMatcher m(g);
        EXPECT_TRUE(m.feed(rest)) << rest;
        EXPECT_TRUE(m.can_end()) << rest;
        ChatOutputParser p(f, {.split_reasoning = true, .starts_in_reasoning = false, .parse_tools = true, .tools = ts, .call_id_prefix = "c"});
        p.push(opening);
        p.push(rest);
        p.finish();
        ASSERT_EQ(p.calls().size(), 1u) << rest;
        EXPECT_EQ(ordered_json::parse(p.calls()[0].arguments), ordered_json::parse(call.arguments));

        // Each refusal: the valid call up to a point, then what the schema does not allow there.
        const auto refused = [&](const std::string& good_until, const std::string& bad) {
            const size_t cut = rest.find(good_until);
            ASSERT_NE(cut, std::string::npos) << good_until;
            GrammarMatcher r(g);
            ASSERT_TRUE(r.feed(rest.substr(0, cut)));
            EXPECT_FALSE(r.feed(bad)) << "after " << rest.substr(0, cut) << " accepted " << bad;
        };
        const TagArguments tags = *call_syntax(f).tags;
        const auto close = [&](const std::string& key) { return tags.close_names_key ? tags.value_close + key + tags.key_close : tags.value_close; };
        refused(tags.key_open + "unit", tags.key_open + "wind");  // not a parameter
        refused(end, tags.key_open + "unit");                     // declared order: unit before days
        refused("3", "three");                                    // an integer
        refused("f" + close("unit"), "k");                        // not among the enum's values
        refused(tags.key_open + "unit", end);                     // days is required
        GrammarMatcher optional(g);                               // unit and hourly may be left out
        const std::string& string_key_close = tags.key_close_string.empty() ? tags.key_close : tags.key_close_string;
        EXPECT_TRUE(optional.feed(tags.key_open + "city" + string_key_close + "x" + close("city") + tags.key_open + "days" + tags.key_close + "-2" +
                                  close("days") + end));
        EXPECT_TRUE(optional.can_end());
        if (!tags.key_close_string.empty()) {  // DeepSeek-V4: a string parameter marked string="false" is refused, and the reverse
            refused(tags.key_open + "city" + string_key_close, tags.key_open + "city" + tags.key_close);
            refused(tags.key_open + "days" + tags.key_close, tags.key_open + "days" + string_key_close);
        }
    }
    // tool_choice required: the name's head first, for any of the tools.
    ChatInput any;
    any.messages = {{"user", "Weather?"}};
    any.tools = ts;
    any.tool_choice = ToolChoice::Required;
    GrammarMatcher m(forced_call_grammar(any, ChatFamily::Qwen35));
    EXPECT_FALSE(GrammarMatcher(forced_call_grammar(any, ChatFamily::Qwen35)).feed("get_time>\n"));
    EXPECT_TRUE(m.feed("get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=days>\n1\n</parameter>\n</function>\n</tool_call>"));
    EXPECT_TRUE(m.can_end());
}

TEST(ChatTools, TurnKeysIgnoreArgumentFormatting) {
    EXPECT_EQ(turn_key("ok", {{"a", "f", R"({"x": 1, "y": [1, 2]})"}}), turn_key("ok", {{"b", "f", R"({"x":1,"y":[1,2]})"}}));
    EXPECT_NE(turn_key("ok", {{"a", "f", R"({"x": 1})"}}), turn_key("ok", {{"a", "f", R"({"x": 2})"}}));
    EXPECT_EQ(turn_key("plain", {}), "plain");
}

}  // namespace
}  // namespace moe

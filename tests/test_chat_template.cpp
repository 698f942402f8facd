// Chat templates per family on a multi-turn conversation with a system message, against the text each
// family's own template produces; and the splice of generated turns that keeps the prefix stable.
#include "engine/server/chat_template.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::vector<ChatMessage> conversation() {
    return {{"system", "You are terse.", {}},
            {"user", "Hi", {}},
            {"assistant", "<think>\nThe user greets.\n</think>\n\nHello!", {}},
            {"user", "Bye", {}}};
}

TEST(ChatTemplate, DetectsFamilies) {
    EXPECT_EQ(detect_chat_family("{%- if enable_thinking %}<|im_start|>..."), ChatFamily::Qwen3);
    EXPECT_EQ(detect_chat_family("{{'<|im_start|>' + message['role']}}"), ChatFamily::ChatML);
    EXPECT_EQ(detect_chat_family("[gMASK]<sop>{% for m in messages %}<|user|>{{ '/nothink' }}"), ChatFamily::Glm4);
    EXPECT_EQ(detect_chat_family("{{'<｜User｜>' + message['content']}}"), ChatFamily::DeepSeek);
    EXPECT_EQ(detect_chat_family(""), ChatFamily::ChatML);
    EXPECT_EQ(detect_chat_family("<|im_start|>... <tool_call>\\n<function=example_function_name> ... {{- '<think>\\n' }}"), ChatFamily::Qwen35);
    // Qwen3-Coder's XML tool calls without thinking stay Qwen3/ChatML.
    EXPECT_EQ(detect_chat_family("<|im_start|>... <function=example_function_name>"), ChatFamily::ChatML);
}

// Qwen3.5's template (its tokenizer_config's chat_template): contents trimmed, reasoning shown only after the
// last real user query, consecutive tool results in one user turn, "<think>\n" opened by the generation prompt.
TEST(ChatTemplate, Qwen35) {
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Qwen35, conversation(), {})),
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n");
    std::vector<ChatMessage> tool_loop = {
        {"user", " Weather? ", {}}, {"assistant", "<think>\nneed a tool\n</think>\n\nChecking.", {}}, {"tool", "sunny", {}}, {"tool", "25C", {}}};
    const std::string expected_loop =
        "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\nneed a tool\n</think>\n\nChecking.<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n25C\n</tool_response><|im_end|>\n";
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Qwen35, tool_loop, {})), expected_loop + "<|im_start|>assistant\n<think>\n");
    EXPECT_EQ(segments_text(
                  render_chat(ChatFamily::Qwen35, tool_loop, {.add_generation_prompt = true, .enable_thinking = false, .bos_text = "", .tools = {}})),
              expected_loop + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    // A turn the server generated, still in the current query: its tokens follow the "<think>\n" prefill.
    tool_loop[1].generated = std::vector<int32_t>{5, 6, 7};
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Qwen35, tool_loop, {})),
              "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\n<tokens:3><|im_end|>\n"
              "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n25C\n</tool_response><|im_end|>\n"
              "<|im_start|>assistant\n<think>\n");
}

TEST(ChatTemplate, Qwen3DropsEarlierReasoning) {
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Qwen3, conversation(), {})),
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Qwen3, {{"user", "Hi", {}}},
                                        {.add_generation_prompt = true, .enable_thinking = false, .bos_text = "", .tools = {}})),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, ChatMLKeepsTurnsVerbatim) {
    EXPECT_EQ(segments_text(render_chat(ChatFamily::ChatML, conversation(), {})),
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\n<think>\nThe user greets.\n</think>\n\nHello!<|im_end|>\n"
              "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Glm45) {
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Glm4, conversation(), {})),
              "[gMASK]<sop><|system|>\nYou are terse.<|user|>\nHi<|assistant|>\n<think></think>\nHello!<|user|>\nBye<|assistant|>");
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Glm4, {{"user", "Hi", {}}},
                                        {.add_generation_prompt = true, .enable_thinking = false, .bos_text = "", .tools = {}})),
              "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>");
}

TEST(ChatTemplate, DeepSeekV3) {
    EXPECT_EQ(
        segments_text(render_chat(ChatFamily::DeepSeek, conversation(),
                                  {.add_generation_prompt = true, .enable_thinking = true, .bos_text = "<｜begin▁of▁sentence｜>", .tools = {}})),
        "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜>");
}

// GLM-4.7 / GLM-5.x (llama.cpp's GLM-4.7 template port; GLM-5.1's chat_template.jinja has the same shape):
// no newline after role tags, "</think>" before a history answer, reasoning kept after the last user turn.
TEST(ChatTemplate, Glm5) {
    EXPECT_EQ(detect_chat_family("[gMASK]<sop>{%- if tools -%}...{{- '</think>' }}..."), ChatFamily::Glm47);
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Glm47, conversation(), {})),
              "[gMASK]<sop><|system|>You are terse.<|user|>Hi<|assistant|></think>Hello!<|user|>Bye<|assistant|><think>");
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Glm47, {{"user", "Hi", {}}},
                                        {.add_generation_prompt = true, .enable_thinking = false, .bos_text = "", .tools = {}})),
              "[gMASK]<sop><|user|>Hi<|assistant|></think>");
    // A tool cycle: the turn after the last user message keeps its reasoning; consecutive tool results share
    // one <|observation|>.
    const std::vector<ChatMessage> tools = {
        {"user", "Weather?", {}}, {"assistant", "<think>\nneed a tool\n</think>\nChecking.", {}}, {"tool", "sunny", {}}, {"tool", "warm", {}}};
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Glm47, tools, {})),
              "[gMASK]<sop><|user|>Weather?<|assistant|><think>need a tool</think>Checking."
              "<|observation|><tool_response>sunny</tool_response><tool_response>warm</tool_response><|assistant|><think>");
}

// DeepSeek-V3.1 (llama.cpp's models/templates/deepseek-ai-DeepSeek-V3.1.jinja): thinking off by default.
TEST(ChatTemplate, DeepSeekV31) {
    EXPECT_EQ(detect_chat_family("{%- if not thinking is defined -%}...{{'<｜Assistant｜></think>'}}"), ChatFamily::DeepSeekV31);
    const std::string bos = "<｜begin▁of▁sentence｜>";
    EXPECT_EQ(segments_text(render_chat(ChatFamily::DeepSeekV31, conversation(),
                                        {.add_generation_prompt = true, .enable_thinking = {}, .bos_text = bos, .tools = {}})),
              bos + "You are terse.<｜User｜>Hi<｜Assistant｜></think>\n\nHello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜></think>");
    EXPECT_EQ(segments_text(render_chat(ChatFamily::DeepSeekV31, {{"user", "Hi", {}}},
                                        {.add_generation_prompt = true, .enable_thinking = true, .bos_text = bos, .tools = {}})),
              bos + "<｜User｜>Hi<｜Assistant｜><think>");
    // After a tool result the assistant continues without a tag, and no generation prompt follows a tool turn.
    const std::vector<ChatMessage> tools = {{"system", "A", {}},      {"system", "B", {}},
                                            {"user", "Weather?", {}}, {"assistant", "Checking.", {}},
                                            {"tool", "sunny", {}},    {"assistant", "It is sunny.", {}},
                                            {"tool", "ok", {}}};
    EXPECT_EQ(segments_text(
                  render_chat(ChatFamily::DeepSeekV31, tools, {.add_generation_prompt = true, .enable_thinking = {}, .bos_text = bos, .tools = {}})),
              bos +
                  "A\n\nB<｜User｜>Weather?<｜Assistant｜></think>Checking.<｜end▁of▁sentence｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>"
                  "It is sunny.<｜end▁of▁sentence｜><｜tool▁output▁begin｜>ok<｜tool▁output▁end｜>");
}

// Kimi-K2 (llama.cpp's models/templates/moonshotai-Kimi-K2.jinja): role header and <|im_middle|>, a default
// system prompt when the conversation has none.
TEST(ChatTemplate, KimiK2) {
    EXPECT_EQ(detect_chat_family("{{ '<|im_user|>user<|im_middle|>' }}"), ChatFamily::KimiK2);
    EXPECT_EQ(segments_text(render_chat(ChatFamily::KimiK2, conversation(), {})),
              "<|im_system|>system<|im_middle|>You are terse.<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
              "<|im_assistant|>assistant<|im_middle|><think>\nThe user greets.\n</think>\n\nHello!<|im_end|>"
              "<|im_user|>user<|im_middle|>Bye<|im_end|><|im_assistant|>assistant<|im_middle|>");
    EXPECT_EQ(segments_text(render_chat(ChatFamily::KimiK2, {{"user", "Hi", {}}, {"tool", "42", {}}}, {})),
              "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
              "<|im_system|>tool<|im_middle|>## Return of functions.unknown:0\n42<|im_end|><|im_assistant|>assistant<|im_middle|>");
}

TEST(ChatTemplate, GeneratedTurnsAreSplicedAsTokens) {
    // The server generated the assistant turn (with its reasoning); the client sends back only the answer.
    auto msgs = conversation();
    msgs[2].content = "Hello!";
    msgs[2].generated = std::vector<int32_t>{11, 12, 13, 14};
    for (ChatFamily f : {ChatFamily::Qwen3, ChatFamily::ChatML, ChatFamily::Glm4, ChatFamily::Glm47, ChatFamily::DeepSeek, ChatFamily::DeepSeekV31,
                         ChatFamily::KimiK2}) {
        auto segs = render_chat(f, msgs, {});
        int spliced = 0;
        for (const auto& s : segs) spliced += s.tokens == std::vector<int32_t>{11, 12, 13, 14};
        EXPECT_EQ(spliced, 1) << family_name(f) << ": " << segments_text(segs);
    }
    EXPECT_EQ(strip_thinking("<think>\nx\n</think>\n\nanswer"), "answer");
    EXPECT_EQ(strip_thinking("plain"), "plain");
}

}  // namespace
}  // namespace moe

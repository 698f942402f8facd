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
    EXPECT_EQ(detect_chat_family("[gMASK]<sop>{% for m in messages %}<|user|>"), ChatFamily::Glm4);
    EXPECT_EQ(detect_chat_family("{{'<｜User｜>' + message['content']}}"), ChatFamily::DeepSeek);
    EXPECT_EQ(detect_chat_family(""), ChatFamily::ChatML);
}

TEST(ChatTemplate, Qwen3DropsEarlierReasoning) {
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Qwen3, conversation(), {})),
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Qwen3, {{"user", "Hi", {}}}, {.add_generation_prompt = true, .enable_thinking = false, .bos_text = ""})),
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
    EXPECT_EQ(segments_text(render_chat(ChatFamily::Glm4, {{"user", "Hi", {}}}, {.add_generation_prompt = true, .enable_thinking = false, .bos_text = ""})),
              "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>");
}

TEST(ChatTemplate, DeepSeekV3) {
    EXPECT_EQ(segments_text(render_chat(ChatFamily::DeepSeek, conversation(), {.add_generation_prompt = true, .enable_thinking = true, .bos_text = "<｜begin▁of▁sentence｜>"})),
              "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜>");
}

TEST(ChatTemplate, GeneratedTurnsAreSplicedAsTokens) {
    // The server generated the assistant turn (with its reasoning); the client sends back only the answer.
    auto msgs = conversation();
    msgs[2].content = "Hello!";
    msgs[2].generated = std::vector<int32_t>{11, 12, 13, 14};
    for (ChatFamily f : {ChatFamily::Qwen3, ChatFamily::ChatML, ChatFamily::Glm4, ChatFamily::DeepSeek}) {
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

// Pre-tokenizer splits for the names without llama.cpp test vectors in ../shared/oracle: each expected split
// is worked out by hand from llama.cpp's splitter for that name (llama-vocab.cpp, unicode.cpp).
#include <gtest/gtest.h>

#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace moe {
namespace {

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, KimiK2KeepsHanRunsApartAndLettersWhole) {
    PreTokenizer k2("kimi-k2");
    // Han runs stand alone; other letters form one run whatever their case (llama.cpp's splitter does not
    // split camelCase as Moonshot's tiktoken pattern would); a contraction stays with its word; digits in threes.
    EXPECT_EQ(k2.split("Hello世界getUserName's 12345 ok!!\n\n  x"),
              (Pieces{"Hello", "世界", "getUserName's", " ", "123", "45", " ok", "!!\n\n", " ", " x"}));
    // A leading space or punctuation joins a following non-Han word, never a Han run.
    EXPECT_EQ(k2.split(" 世界 abc,def"), (Pieces{" ", "世界", " abc", ",def"}));
    // Kana are letters but not Han: they join the letter run.
    EXPECT_EQ(k2.split("東京タワーへ"), (Pieces{"東京", "タワーへ"}));
    EXPECT_EQ(k2.split("I'LL we'Re"), (Pieces{"I'LL", " we'Re"}));
}

TEST(PreTokenizer, Qwen35KeepsCombiningMarksInWords) {
    PreTokenizer q35("qwen35"), q2("qwen2");
    const std::string decomposed = "cafe\xCC\x81 na\xCC\x88ive 2026";  // e + U+0301, a + U+0308
    EXPECT_EQ(q35.split(decomposed), (Pieces{"cafe\xCC\x81", " na\xCC\x88ive", " ", "2", "0", "2", "6"}));
    // Qwen2's pattern cuts at each mark: the difference the qwen35 name exists for.
    EXPECT_NE(q2.split(decomposed), q35.split(decomposed));
    // Without marks the two agree.
    EXPECT_EQ(q35.split("Hello, world! 42\n"), q2.split("Hello, world! 42\n"));
}

TEST(PreTokenizer, TraitsFollowLlamaCpp) {
    EXPECT_TRUE(PreTokenizer::traits("llama-bpe").ignore_merges);
    EXPECT_TRUE(PreTokenizer::traits("falcon3").add_bos_default);
    EXPECT_FALSE(PreTokenizer::traits("qwen2").ignore_merges);
    EXPECT_FALSE(PreTokenizer::traits("qwen35").add_bos_default);
    EXPECT_TRUE(PreTokenizer::traits("kimi-k2").merges_optional);
    EXPECT_FALSE(PreTokenizer::traits("gpt-2").merges_optional);
}

TEST(PreTokenizer, EveryKnownNameCompiles) {
    for (const std::string& name : PreTokenizer::known_names()) {
        PreTokenizer p(name);
        EXPECT_FALSE(p.split("Tokenize this: 1234 ÉTÉ 日本語\n").empty()) << name;
    }
    EXPECT_THROW(PreTokenizer("no-such-pre"), TokenizerError);
}

}  // namespace
}  // namespace moe

// llama.cpp's own tokenizer vectors (../shared/oracle/vocab): every string, byte for byte, and decode back.
#include <fstream>
#include <sstream>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<std::string> split_inputs(const std::string& all) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> out;
    size_t start = 0, pos;
    while ((pos = all.find(sep, start)) != std::string::npos) {
        out.push_back(all.substr(start, pos - start));
        start = pos + sep.size();
    }
    return out;  // the text after the last separator is not a case
}

class VocabVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectors, MatchLlamaCppByteForByte) {
    REQUIRE_ORACLE();
    const std::string base = test::oracle_dir() + "/vocab/ggml-vocab-" + GetParam() + ".gguf";
    auto tok = Tokenizer::from_gguf(read_gguf_header(base));
    auto inputs = split_inputs(slurp(base + ".inp"));
    std::istringstream expected(slurp(base + ".out"));
    ASSERT_GT(inputs.size(), 10u);
    int checked = 0;
    for (const std::string& text : inputs) {
        std::string line;
        ASSERT_TRUE(std::getline(expected, line)) << "fewer .out lines than inputs";
        std::vector<int32_t> want;
        std::istringstream ls(line);
        for (int32_t id; ls >> id;) want.push_back(id);
        auto got = tok->encode(text, /*add_bos=*/false, /*parse_special=*/false);
        EXPECT_EQ(got, want) << GetParam() << " input: '" << text << "'";
        // Decoding gives the input back (SentencePiece drops the space it added in front).
        EXPECT_EQ(tok->decode(got), text) << GetParam() << " decode of '" << text << "'";
        ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(inputs.size()));
}

INSTANTIATE_TEST_SUITE_P(Oracle, VocabVectors, ::testing::Values("llama-spm", "gpt-2", "deepseek-llm", "starcoder", "qwen3"), [](const auto& info) {
    std::string n = info.param;
    for (char& c : n)
        if (c == '-') c = '_';
    return n;
});

}  // namespace
}  // namespace moe

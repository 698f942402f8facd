// Pre-tokenizer: splits text into words with the regex list llama.cpp uses for each `tokenizer.ggml.pre`
// value, run with PCRE2 (UTF + UCP) so \p{L}, \p{N} and friends are real Unicode classes.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace moe {

class PreTokenizer {
public:
    // Throws TokenizerError for a pre-tokenizer name this build does not know.
    explicit PreTokenizer(const std::string& pre_name);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer&) = delete;
    PreTokenizer& operator=(const PreTokenizer&) = delete;
    // Each regex in turn splits every piece further; unmatched gaps stay as pieces.
    std::vector<std::string> split(std::string_view text) const;
    static std::vector<std::string> known_names();

private:
    struct Compiled;
    std::vector<Compiled*> regexes_;
};

}  // namespace moe

// Pre-tokenizer: splits text into words with the regex list llama.cpp uses for each `tokenizer.ggml.pre`
// value, run with PCRE2 (UTF + UCP) so \p{L}, \p{N} and friends are real Unicode classes.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace moe {

// How llama.cpp treats a `tokenizer.ggml.pre` name beyond its regexes.
struct PreTokenizerTraits {
    bool ignore_merges = false;    // a word that is itself a token is taken whole
    bool add_bos_default = false;  // BOS added when tokenizer.ggml.add_bos_token is absent
    bool merges_optional = false;  // tokenizer.ggml.merges may be absent
};

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
    static PreTokenizerTraits traits(const std::string& pre_name);

private:
    struct Compiled;
    std::vector<Compiled*> regexes_;
};

}  // namespace moe

// Tokenizers read from GGUF metadata: byte-level BPE (`tokenizer.ggml.model = gpt2`, pre-tokenizer regexes
// per `tokenizer.ggml.pre`, run with PCRE2) and SentencePiece-style (`llama`). Tables are immutable after
// construction; encode/decode allocate only per call, so one Tokenizer serves many threads.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/gguf/gguf.h"

namespace moe {

struct TokenizerError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class PreTokenizer;

class Tokenizer {
public:
    enum class Kind { Bpe, Spm };

    // Throws TokenizerError naming the key when metadata is missing or inconsistent.
    static std::shared_ptr<const Tokenizer> from_gguf(const GgufFile& meta);
    ~Tokenizer();

    // add_bos: prepend BOS when the model asks for it (tokenizer.ggml.add_bos_token);
    // parse_special: match control tokens such as <|im_start|> in the text (user-defined tokens always match).
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
    // Bytes a token stands for; control tokens give their text only when render_special.
    std::string piece(int32_t id, bool render_special = false) const;
    // Concatenated pieces; for SentencePiece the space added before the first word is removed.
    std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

    Kind kind() const { return kind_; }
    int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
    const std::string& token_text(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
    std::optional<int32_t> find(const std::string& text) const;
    int32_t bos() const { return bos_; }
    int32_t eos() const { return eos_; }
    bool adds_bos() const { return add_bos_; }
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_tokens() const { return eog_; }
    const std::string& pre_name() const { return pre_name_; }

private:
    Tokenizer() = default;
    void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
    void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
    int32_t byte_token(uint8_t b) const;

    Kind kind_ = Kind::Bpe;
    std::string pre_name_;
    std::vector<std::string> tokens_;
    std::vector<TokenType> types_;
    std::vector<float> scores_;
    std::unordered_map<std::string, int32_t> index_;
    std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank (BPE)
    std::vector<int32_t> specials_;                        // longest first, for partitioning text
    std::vector<int32_t> eog_;
    std::unique_ptr<PreTokenizer> pre_;
    int32_t bos_ = -1, eos_ = -1, unk_ = -1;
    bool add_bos_ = false;
    bool add_space_prefix_ = true;  // SPM
    bool ignore_merges_ = false;    // BPE, Llama 3 family
};

// Turns a stream of token ids into text without splitting a UTF-8 sequence across outputs.
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tok, bool render_special = false) : tok_(tok), special_(render_special) {}
    // Control tokens whose text is shown although render_special is off: a chat family's markers (Harmony's
    // <|channel|>, Kimi K3's <|open|>) that files mark as control tokens, as llama-server's preserved tokens.
    StreamDecoder(const Tokenizer& tok, std::vector<int32_t> shown_controls) : tok_(tok), special_(false), shown_(std::move(shown_controls)) {}
    // Text that is complete so far (may be empty while a multi-byte character is pending).
    std::string push(int32_t id);
    // Whatever is still held back (an incomplete sequence at the end of generation).
    std::string flush();

private:
    const Tokenizer& tok_;
    bool special_;
    std::vector<int32_t> shown_;
    bool first_ = true;
    std::string pending_;
};

// Length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace moe

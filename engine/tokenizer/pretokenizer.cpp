#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <map>
#include <set>

#include "engine/tokenizer/tokenizer.h"

namespace moe {
namespace {

// The regex lists of llama.cpp's llama-vocab.cpp, keyed by the `tokenizer.ggml.pre` names that select them.
const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const std::string kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: Qwen2's split with combining marks (\p{M}) kept in words and out of the punctuation runs.
const std::string kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Kimi-K2 as llama.cpp splits it (its hand-written "kimi_k2" splitter, not Moonshot's tiktoken pattern, which
// uses class intersections and splits camelCase): Han runs alone, other letters in one run with an optional
// leading non-letter and an English contraction, digits in threes, then llama3's punctuation and spaces.
// "Han" is llama.cpp's list of CJK ideograph blocks, not the Unicode script.
const std::string kHan =
    R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{2CEB0}-\x{2EBEF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])";
const std::string kKimiK2 = kHan + "+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!" + kHan +
                            R"()\p{L})+(?:'[sStTmMdD]|'[rR][eE]|'[vV][eE]|'[lL][lL])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kBailing =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const std::string kSeedCoder =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Written with \x{} escapes where Unicode normalisation would otherwise change the code point.
const std::string kDeepseekLlmLetters =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

const std::map<std::string, std::vector<std::string>>& table() {
    static const std::map<std::string, std::vector<std::string>> t = [] {
        std::map<std::string, std::vector<std::string>> m;
        const std::vector<std::string> deflt = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
        const std::vector<std::string> starcoder = {R"(\p{N})", kGpt2};
        for (auto n : {"default"}) m[n] = deflt;
        for (auto n : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx", "smaug-bpe", "glm4",
                       "chatglm-bpe", "jina-v5-nano"})
            m[n] = {kLlama3};
        for (auto n : {"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "kormo", "f2llmv2", "grok-2", "solar-open"}) m[n] = {kQwen2};
        m["qwen35"] = {kQwen35};
        m["kimi-k2"] = {kKimiK2};
        for (auto n : {"bailingmoe", "bailingmoe2", "llada-moe"}) m[n] = {kBailing};
        m["seed-coder"] = {kSeedCoder};
        for (auto n : {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "mpt", "olmo",
                       "jais", "trillion", "a.x-4.0", "mellum", "exaone4", "granite-docling", "modern-bert", "roberta-bpe"})
            m[n] = {kGpt2};
        for (auto n : {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}) m[n] = starcoder;
        m["falcon"] = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
        m["deepseek-llm"] = {"[\r\n]", kDeepseekLlmLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", R"(\p{N}+)"};
        m["deepseek-coder"] = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})"};
        m["deepseek-v3"] = m["hunyuan-dense"] = {
            R"(\p{N}{1,3})", "[一-龥\u3040-ゟ゠-ヿ]+",
            R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
        for (auto n : {"gpt-4o", "llama4", "minimax-m2", "kanana2", "talkie"}) m[n] = {kGpt4o};
        for (auto n : {"poro-chat", "bloom", "gpt3-finnish"}) m[n] = {R"( ?[^(\s|.,!?…。，、।۔،)]+)"};
        m["viking"] = {R"( ?[^(\s|.,!?…。，、।۔،)]+)", R"(\p{N})"};
        m["tekken"] = {
            R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
        return m;
    }();
    return t;
}

}  // namespace

struct PreTokenizer::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::string& pre_name) {
    auto it = table().find(pre_name);
    if (it == table().end()) throw TokenizerError("tokenizer.ggml.pre = '" + pre_name + "' is not a pre-tokenizer this build knows");
    for (const std::string& pattern : it->second) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto* c = new Compiled;
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err,
                                &err_off, nullptr);
        if (!c->code) {
            delete c;
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            throw TokenizerError("pre-tokenizer '" + pre_name + "': regex does not compile at " + std::to_string(err_off) + ": " +
                                 reinterpret_cast<char*>(msg));
        }
        pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // a speed-up when available, not required
        regexes_.push_back(c);
    }
}

PreTokenizer::~PreTokenizer() {
    for (auto* c : regexes_) delete c;
}

PreTokenizerTraits PreTokenizer::traits(const std::string& pre_name) {
    // llama.cpp's per-name flags (llama-vocab.cpp): the Llama 3 family and tekken take a word that is itself a
    // token whole, and add BOS unless the file says otherwise; Kimi-K2 files may come without merges.
    static const std::set<std::string> llama3_family = {"llama3",  "llama-v3", "llama-bpe", "falcon3",     "falcon-h1",
                                                        "pixtral", "midm-2.0", "lfm2",      "jina-v5-nano"};
    PreTokenizerTraits t;
    const bool whole_words = llama3_family.count(pre_name) || pre_name == "tekken";
    t.ignore_merges = whole_words;
    t.add_bos_default = whole_words || pre_name == "chameleon";
    t.merges_optional = pre_name == "kimi-k2";
    return t;
}

std::vector<std::string> PreTokenizer::known_names() {
    std::vector<std::string> out;
    for (const auto& [k, v] : table()) out.push_back(k);
    return out;
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string> pieces{std::string(text)};
    for (const Compiled* re : regexes_) {
        std::vector<std::string> next;
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
        for (const std::string& piece : pieces) {
            PCRE2_SIZE start = 0, prev = 0;
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
            while (start <= piece.size()) {
                int rc = pcre2_match(re->code, subject, piece.size(), start, 0, md, nullptr);
                if (rc < 0) break;
                PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                PCRE2_SIZE ms = ov[0], me = ov[1];
                if (me == ms) {  // empty match: step one character forward
                    start = ms + 1;
                    while (start < piece.size() && (static_cast<uint8_t>(piece[start]) & 0xC0) == 0x80) ++start;
                    continue;
                }
                if (ms > prev) next.push_back(piece.substr(prev, ms - prev));
                next.push_back(piece.substr(ms, me - ms));
                prev = start = me;
            }
            if (prev < piece.size()) next.push_back(piece.substr(prev));
        }
        pcre2_match_data_free(md);
        pieces.swap(next);
    }
    return pieces;
}

}  // namespace moe

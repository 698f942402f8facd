// Vocabulary loading, special-token partitioning, decoding, and the two encoders (BPE, SentencePiece).
#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <list>
#include <map>
#include <queue>

#include "engine/tokenizer/pretokenizer.h"

namespace moe {
namespace {

// GPT-2's byte <-> printable-unicode mapping: printable bytes map to themselves, the rest to U+0100 upward.
struct ByteMap {
    std::string byte_to_utf8[256];
    std::unordered_map<uint32_t, uint8_t> cp_to_byte;
    ByteMap() {
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
            byte_to_utf8[b] = encode(cp);
            cp_to_byte[cp] = static_cast<uint8_t>(b);
        }
    }
    static std::string encode(uint32_t cp) {
        std::string s;
        if (cp < 0x80) s += static_cast<char>(cp);
        else if (cp < 0x800) {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            s += static_cast<char>(0xE0 | (cp >> 12));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        }
        return s;
    }
};
const ByteMap& byte_map() {
    static const ByteMap m;
    return m;
}

size_t utf8_len(uint8_t lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;  // stray continuation or invalid lead: one byte on its own
}

// Splits into UTF-8 characters (invalid bytes become single-byte pieces).
std::vector<std::string> utf8_chars(std::string_view s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        size_t n = std::min(utf8_len(static_cast<uint8_t>(s[i])), s.size() - i);
        out.emplace_back(s.substr(i, n));
        i += n;
    }
    return out;
}

const std::string kSpmSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
    // Walk back over at most 3 continuation bytes to find the last lead byte.
    size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; ++back) {
        uint8_t c = static_cast<uint8_t>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;
        size_t need = utf8_len(c);
        return need > back ? n - back : n;
    }
    return n;
}

Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::from_gguf(const GgufFile& meta) {
    std::shared_ptr<Tokenizer> t(new Tokenizer);
    auto model = meta.get_string("tokenizer.ggml.model");
    if (!model) throw TokenizerError(meta.path + ": metadata tokenizer.ggml.model is missing");
    if (*model == "gpt2") t->kind_ = Kind::Bpe;
    else if (*model == "llama") t->kind_ = Kind::Spm;
    else throw TokenizerError(meta.path + ": tokenizer.ggml.model = '" + *model + "' is not supported (gpt2, llama)");
    const GgufValue* toks = meta.find("tokenizer.ggml.tokens");
    if (!toks || toks->elem_type != GgufValueType::STRING || toks->strs.empty())
        throw TokenizerError(meta.path + ": metadata tokenizer.ggml.tokens is missing or not a string array");
    t->tokens_ = toks->strs;
    const size_t n = t->tokens_.size();
    t->types_.assign(n, TokenType::Normal);
    if (const GgufValue* tt = meta.find("tokenizer.ggml.token_type")) {
        auto v = tt->i32_array();
        if (v.size() != n)
            throw TokenizerError(meta.path + ": tokenizer.ggml.token_type has " + std::to_string(v.size()) + " entries for " + std::to_string(n) +
                                 " tokens");
        for (size_t i = 0; i < n; ++i) t->types_[i] = static_cast<TokenType>(v[i]);
    }
    if (const GgufValue* sc = meta.find("tokenizer.ggml.scores")) {
        t->scores_ = sc->f32_array();
        if (t->scores_.size() != n)
            throw TokenizerError(meta.path + ": tokenizer.ggml.scores has " + std::to_string(t->scores_.size()) + " entries for " +
                                 std::to_string(n) + " tokens");
    }
    t->index_.reserve(n);
    for (size_t i = 0; i < n; ++i) t->index_.emplace(t->tokens_[i], static_cast<int32_t>(i));

    auto id_key = [&](const char* key, int32_t fallback) {
        auto v = meta.get_int(key);
        if (!v) return fallback;
        if (*v < 0 || *v >= static_cast<int64_t>(n))
            throw TokenizerError(meta.path + ": " + key + " = " + std::to_string(*v) + " is outside the vocabulary");
        return static_cast<int32_t>(*v);
    };
    if (t->kind_ == Kind::Spm) {
        t->bos_ = id_key("tokenizer.ggml.bos_token_id", 1);
        t->eos_ = id_key("tokenizer.ggml.eos_token_id", 2);
        t->unk_ = id_key("tokenizer.ggml.unknown_token_id", 0);
        t->add_bos_ = meta.get_int("tokenizer.ggml.add_bos_token").value_or(1) != 0;
        t->add_space_prefix_ = meta.get_int("tokenizer.ggml.add_space_prefix").value_or(1) != 0;
        t->pre_name_ = "spm";
    } else {
        t->bos_ = id_key("tokenizer.ggml.bos_token_id", -1);
        t->eos_ = id_key("tokenizer.ggml.eos_token_id", -1);
        t->pre_name_ = meta.get_string("tokenizer.ggml.pre").value_or("default");
        t->pre_ = std::make_unique<PreTokenizer>(t->pre_name_);
        const PreTokenizerTraits traits = PreTokenizer::traits(t->pre_name_);
        t->add_bos_ = meta.get_int("tokenizer.ggml.add_bos_token").value_or(traits.add_bos_default) != 0;
        t->ignore_merges_ = traits.ignore_merges;
        const GgufValue* merges = meta.find("tokenizer.ggml.merges");
        if (merges && merges->elem_type != GgufValueType::STRING)
            throw TokenizerError(meta.path + ": metadata tokenizer.ggml.merges is not an array of strings");
        if (!merges && !traits.merges_optional)
            throw TokenizerError(meta.path + ": metadata tokenizer.ggml.merges is missing (needed by gpt2 tokenizers)");
        static const std::vector<std::string> no_merges;
        const std::vector<std::string>& merge_list = merges ? merges->strs : no_merges;
        t->merge_rank_.reserve(merge_list.size());
        for (size_t i = 0; i < merge_list.size(); ++i) t->merge_rank_.emplace(merge_list[i], static_cast<int32_t>(i));
    }
    if (t->add_bos_ && t->bos_ < 0) throw TokenizerError(meta.path + ": tokenizer.ggml.add_bos_token is set but there is no bos_token_id");
    for (size_t i = 0; i < n; ++i)
        if (t->types_[i] == TokenType::Control || t->types_[i] == TokenType::UserDefined || t->types_[i] == TokenType::Unknown)
            if (!t->tokens_[i].empty()) t->specials_.push_back(static_cast<int32_t>(i));
    std::stable_sort(t->specials_.begin(), t->specials_.end(), [&](int32_t a, int32_t b) { return t->tokens_[a].size() > t->tokens_[b].size(); });
    // End of generation: EOS, EOT, and the chat end markers families use.
    for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
        if (auto v = meta.get_int(key); v && *v >= 0 && *v < static_cast<int64_t>(n)) t->eog_.push_back(static_cast<int32_t>(*v));
    for (const char* text : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|user|>", "<|observation|>", "<｜end▁of▁sentence｜>",
                             "</s>", "<|end_of_msg|>"})
        if (auto id = t->find(text); id && t->types_[*id] == TokenType::Control) t->eog_.push_back(*id);
    // gpt-oss (Harmony): a turn ends with <|return|> or a call with <|call|>; <|end|> only closes one message of
    // the turn (analysis before final), so it never ends generation even where a file names it EOT (as llama.cpp).
    if (auto ret = t->find("<|return|>"), call = t->find("<|call|>"); ret && call) {
        t->eog_.push_back(*ret);
        t->eog_.push_back(*call);
        if (auto end = t->find("<|end|>")) std::erase(t->eog_, *end);
    }
    return t;
}

std::optional<int32_t> Tokenizer::find(const std::string& text) const {
    auto it = index_.find(text);
    if (it == index_.end()) return std::nullopt;
    return it->second;
}

bool Tokenizer::is_eog(int32_t id) const { return std::find(eog_.begin(), eog_.end(), id) != eog_.end(); }

int32_t Tokenizer::byte_token(uint8_t b) const {
    if (kind_ == Kind::Spm) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        if (auto id = find(buf)) return *id;
        return unk_;
    }
    if (auto id = find(byte_map().byte_to_utf8[b])) return *id;
    return -1;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    // Partition into raw text and special tokens, longest special first (llama.cpp's st_partition).
    struct Fragment {
        bool special;
        int32_t id;
        std::string text;
    };
    std::list<Fragment> frags;
    if (!text.empty()) frags.push_back({false, -1, std::string(text)});
    for (int32_t sid : specials_) {
        if (!parse_special && types_[sid] != TokenType::UserDefined) continue;
        const std::string& st = tokens_[sid];
        for (auto it = frags.begin(); it != frags.end(); ++it) {
            if (it->special) continue;
            size_t pos = it->text.find(st);
            if (pos == std::string::npos) continue;
            std::string rest = it->text;
            auto insert_at = std::next(it);
            it = frags.erase(it);
            size_t start = 0;
            while ((pos = rest.find(st, start)) != std::string::npos) {
                if (pos > start) frags.insert(insert_at, {false, -1, rest.substr(start, pos - start)});
                frags.insert(insert_at, {true, sid, {}});
                start = pos + st.size();
            }
            if (start < rest.size()) frags.insert(insert_at, {false, -1, rest.substr(start)});
            it = std::prev(insert_at);
        }
    }
    std::vector<int32_t> out;
    if (add_bos && add_bos_) out.push_back(bos_);
    bool prev_special = true;
    for (const Fragment& f : frags) {
        if (f.special) {
            out.push_back(f.id);
            prev_special = true;
            continue;
        }
        if (kind_ == Kind::Spm) {
            std::string s = (add_space_prefix_ && prev_special) ? " " + f.text : f.text;
            std::string escaped;
            for (char c : s) escaped += (c == ' ') ? kSpmSpace : std::string(1, c);
            encode_spm(escaped, out);
        } else {
            encode_bpe(f.text, out);
        }
        prev_special = false;
    }
    return out;
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
    for (const std::string& word : pre_->split(text)) {
        std::string mapped;
        for (unsigned char c : word) mapped += byte_map().byte_to_utf8[c];
        if (auto whole = find(mapped); whole && ignore_merges_) {
            out.push_back(*whole);
            continue;
        }
        std::vector<std::string> sym = utf8_chars(mapped);
        // Repeatedly merge the adjacent pair with the lowest rank (leftmost on ties).
        for (;;) {
            int best = -1, best_rank = INT32_MAX;
            for (size_t i = 0; i + 1 < sym.size(); ++i) {
                auto it = merge_rank_.find(sym[i] + " " + sym[i + 1]);
                if (it != merge_rank_.end() && it->second < best_rank) {
                    best_rank = it->second;
                    best = static_cast<int>(i);
                }
            }
            if (best < 0) break;
            sym[best] += sym[best + 1];
            sym.erase(sym.begin() + best + 1);
        }
        for (const std::string& s : sym) {
            if (auto id = find(s)) {
                out.push_back(*id);
                continue;
            }
            for (const std::string& ch : utf8_chars(s))  // unknown symbol: its characters one by one
                if (auto id = find(ch)) out.push_back(*id);
        }
    }
}

void Tokenizer::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
    struct Sym {
        int prev, next;
        size_t off, n;
    };
    std::vector<Sym> sym;
    for (size_t off = 0; off < text.size();) {
        size_t n = std::min(utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
        sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, off, n});
        off += n;
    }
    if (sym.empty()) return;
    sym.back().next = -1;
    struct Bigram {
        int left, right;
        float score;
        size_t size;
    };
    auto cmp = [](const Bigram& a, const Bigram& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
    std::map<std::string, std::pair<int, int>> rev_merge;
    auto try_add = [&](int l, int r) {
        if (l < 0 || r < 0) return;
        std::string s(text.substr(sym[l].off, sym[l].n + sym[r].n));
        auto id = find(s);
        if (!id) return;
        queue.push({l, r, scores_.empty() ? 0.f : scores_[*id], s.size()});
        rev_merge[s] = {l, r};
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!queue.empty()) {
        Bigram b = queue.top();
        queue.pop();
        Sym &l = sym[b.left], &r = sym[b.right];
        if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
        l.n += r.n;
        r.n = 0;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = b.left;
        try_add(l.prev, b.left);
        try_add(b.left, l.next);
    }
    std::function<void(size_t, size_t)> resegment;
    resegment = [&](size_t off, size_t n) {
        std::string s(text.substr(off, n));
        if (auto id = find(s)) {
            out.push_back(*id);
            return;
        }
        auto it = rev_merge.find(s);
        if (it == rev_merge.end()) {
            for (unsigned char c : s) out.push_back(byte_token(c));
            return;
        }
        const size_t left_len = sym[it->second.second].off - sym[it->second.first].off;
        resegment(off, left_len);
        resegment(off + left_len, n - left_len);
    };
    for (int i = 0; i >= 0; i = sym[i].next) resegment(sym[i].off, sym[i].n);
}

std::string Tokenizer::piece(int32_t id, bool render_special) const {
    if (id < 0 || id >= n_vocab()) return {};
    const TokenType type = types_[id];
    const std::string& text = tokens_[id];
    if (type == TokenType::Control || type == TokenType::Unknown) return render_special && type == TokenType::Control ? text : "";
    if (type == TokenType::UserDefined) return text;
    if (kind_ == Kind::Spm) {
        if (type == TokenType::Byte && text.size() == 6 && text.rfind("<0x", 0) == 0)
            return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
        std::string s;
        for (size_t i = 0; i < text.size();) {
            if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
                s += ' ';
                i += kSpmSpace.size();
            } else s += text[i++];
        }
        return s;
    }
    std::string s;
    for (size_t i = 0; i < text.size();) {
        uint8_t c = static_cast<uint8_t>(text[i]);
        size_t n = std::min(utf8_len(c), text.size() - i);
        uint32_t cp = c;
        if (n == 2) cp = ((c & 0x1F) << 6) | (text[i + 1] & 0x3F);
        else if (n == 3) cp = ((c & 0x0F) << 12) | ((text[i + 1] & 0x3F) << 6) | (text[i + 2] & 0x3F);
        auto it = byte_map().cp_to_byte.find(cp);
        if (n <= 3 && it != byte_map().cp_to_byte.end()) s += static_cast<char>(it->second);
        else s.append(text, i, n);  // not a byte-level symbol: keep as is
        i += n;
    }
    return s;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) {
        std::string p = piece(ids[i], render_special);
        if (i == 0 && kind_ == Kind::Spm && add_space_prefix_ && !p.empty() && p[0] == ' ') p.erase(0, 1);
        s += p;
    }
    return s;
}

std::string StreamDecoder::push(int32_t id) {
    std::string p = tok_.piece(id, special_ || std::find(shown_.begin(), shown_.end(), id) != shown_.end());
    if (first_ && tok_.kind() == Tokenizer::Kind::Spm && !p.empty() && p[0] == ' ') p.erase(0, 1);
    first_ = false;
    pending_ += p;
    size_t ok = utf8_complete_prefix(pending_);
    std::string out = pending_.substr(0, ok);
    pending_.erase(0, ok);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    out.swap(pending_);
    return out;
}

}  // namespace moe

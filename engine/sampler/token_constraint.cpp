#include "engine/sampler/token_constraint.h"

namespace moe {

void VocabTrie::Trie::add(const std::string& piece, int32_t id) {
    if (nodes.empty()) nodes.push_back({});
    if (next_token.size() <= static_cast<size_t>(id)) next_token.resize(static_cast<size_t>(id) + 1, -1);
    uint32_t at = 0;
    for (char ch : piece) {
        const uint8_t b = static_cast<uint8_t>(ch);
        uint32_t child = nodes[at].first_child;
        while (child && nodes[child].byte != b) child = nodes[child].next_sibling;
        if (!child) {
            child = static_cast<uint32_t>(nodes.size());
            nodes.push_back({.first_child = 0, .next_sibling = nodes[at].first_child, .first_token = -1, .byte = b});
            nodes[at].first_child = child;
        }
        at = child;
    }
    next_token[static_cast<size_t>(id)] = nodes[at].first_token;
    nodes[at].first_token = id;
}

namespace {
// Whole UTF-8 characters (well-formed lead and continuation bytes), none of them '"', '\\' or below 0x20.
bool plain_string_text(const std::string& p) {
    size_t i = 0;
    while (i < p.size()) {
        const uint8_t c = static_cast<uint8_t>(p[i]);
        if (c < 0x20 || c == '"' || c == '\\') return false;
        const size_t len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (len == 0 || i + len > p.size()) return false;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<uint8_t>(p[i + k]) & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}
}  // namespace

VocabTrie::VocabTrie(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {
    all_.nodes.push_back({});
    special_.nodes.push_back({});
    all_.next_token.assign(pieces_.size(), -1);
    special_.next_token.assign(pieces_.size(), -1);
    plain_.assign(pieces_.size(), 0);
    for (size_t id = 0; id < pieces_.size(); ++id) {
        const std::string& p = pieces_[id];
        if (p.empty()) continue;  // never allowed
        all_.add(p, static_cast<int32_t>(id));
        if (plain_string_text(p)) plain_[id] = 1;
        else special_.add(p, static_cast<int32_t>(id));
    }
}

TokenConstraint::TokenConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const VocabTrie> vocab)
    : vocab_(std::move(vocab)), matcher_(std::move(grammar)) {}

bool TokenConstraint::allows(int32_t id, bool end_of_generation) const {
    if (end_of_generation) return matcher_.can_end();
    const std::string& p = vocab_->piece(id);
    if (p.empty()) return false;
    std::vector<GrammarMatcher::Stack> stacks = matcher_.stacks_;
    for (char ch : p)
        if (!matcher_.feed_byte(static_cast<uint8_t>(ch), stacks)) return false;
    return true;
}

void TokenConstraint::walk(const VocabTrie::Trie& trie, uint32_t node, const std::vector<GrammarMatcher::Stack>& stacks,
                           std::vector<uint8_t>& allowed) const {
    for (uint32_t child = trie.nodes[node].first_child; child; child = trie.nodes[child].next_sibling) {
        std::vector<GrammarMatcher::Stack> next = stacks;
        if (!matcher_.feed_byte(trie.nodes[child].byte, next)) continue;
        for (int32_t t = trie.nodes[child].first_token; t >= 0; t = trie.next_token[static_cast<size_t>(t)]) allowed[static_cast<size_t>(t)] = 1;
        walk(trie, child, next, allowed);
    }
}

bool TokenConstraint::in_free_string() const {
    for (const auto& s : matcher_.stacks_) {
        if (s.empty()) return false;
        const auto& f = s.back();
        const auto& n = matcher_.g_->node(f.node);
        if (n.kind != JsonGrammar::Kind::String || f.phase != 1 || f.key_pos != 0 || n.max_count != UINT32_MAX) return false;
    }
    return !matcher_.stacks_.empty();
}

void TokenConstraint::mask(std::vector<uint8_t>& allowed) const {
    if (in_free_string()) {  // every plain token goes; only the others need the walk
        allowed = vocab_->plain_;
        walk(vocab_->special_, 0, matcher_.stacks_, allowed);
        return;
    }
    allowed.assign(vocab_->n_tokens(), 0);
    walk(vocab_->all_, 0, matcher_.stacks_, allowed);
}

void TokenConstraint::accept(int32_t id) { matcher_.feed(vocab_->piece(id)); }

}  // namespace moe

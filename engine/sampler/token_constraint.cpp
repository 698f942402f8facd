#include "engine/sampler/token_constraint.h"

namespace moe {

VocabTrie::VocabTrie(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {
    nodes_.push_back({});
    next_token_.assign(pieces_.size(), -1);
    for (size_t id = 0; id < pieces_.size(); ++id) {
        uint32_t at = 0;
        for (char ch : pieces_[id]) {
            const uint8_t b = static_cast<uint8_t>(ch);
            uint32_t child = nodes_[at].first_child;
            while (child && nodes_[child].byte != b) child = nodes_[child].next_sibling;
            if (!child) {
                child = static_cast<uint32_t>(nodes_.size());
                nodes_.push_back({.first_child = 0, .next_sibling = nodes_[at].first_child, .first_token = -1, .byte = b});
                nodes_[at].first_child = child;
            }
            at = child;
        }
        if (at == 0) continue;  // empty: never allowed
        next_token_[id] = nodes_[at].first_token;
        nodes_[at].first_token = static_cast<int32_t>(id);
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

void TokenConstraint::walk(uint32_t node, const std::vector<GrammarMatcher::Stack>& stacks, std::vector<uint8_t>& allowed) const {
    for (uint32_t child = vocab_->nodes_[node].first_child; child; child = vocab_->nodes_[child].next_sibling) {
        std::vector<GrammarMatcher::Stack> next = stacks;
        if (!matcher_.feed_byte(vocab_->nodes_[child].byte, next)) continue;
        for (int32_t t = vocab_->nodes_[child].first_token; t >= 0; t = vocab_->next_token_[static_cast<size_t>(t)]) allowed[static_cast<size_t>(t)] = 1;
        walk(child, next, allowed);
    }
}

void TokenConstraint::mask(std::vector<uint8_t>& allowed) const {
    allowed.assign(vocab_->n_tokens(), 0);
    walk(0, matcher_.stacks_, allowed);
}

void TokenConstraint::accept(int32_t id) { matcher_.feed(vocab_->piece(id)); }

}  // namespace moe

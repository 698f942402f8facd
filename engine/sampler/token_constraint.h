// Grammar-constrained sampling over a vocabulary: which tokens keep the output inside the grammar. The
// vocabulary's byte strings sit in a trie, so the allowed set is found in one walk that feeds each shared
// prefix to the matcher once (a token that is a partial UTF-8 character is judged by its bytes, which is
// what the matcher consumes). The generator first checks the token the sampler drew and builds the full mask
// only when that token is not allowed, as llama.cpp does.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler/json_grammar.h"

namespace moe {

class VocabTrie {
public:
    // pieces[id]: the token's bytes; empty for tokens never allowed by a grammar (end-of-generation, unused).
    explicit VocabTrie(std::vector<std::string> pieces);
    const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
    size_t n_tokens() const { return pieces_.size(); }

private:
    friend class TokenConstraint;
    struct Node {
        uint32_t first_child = 0, next_sibling = 0;  // 0: none (node 0 is the root)
        int32_t first_token = -1;                    // tokens ending here, chained through next_token_
        uint8_t byte = 0;
    };
    struct Trie {
        std::vector<Node> nodes;
        std::vector<int32_t> next_token;
        void add(const std::string& piece, int32_t id);
    };
    std::vector<std::string> pieces_;
    Trie all_;      // every token
    Trie special_;  // the tokens that are not plain string text
    // plain_[id]: the token is whole UTF-8 characters, none of them '"', '\\' or a control character, so
    // inside a JSON string of unbounded length it is always allowed: the mask there walks special_ only.
    std::vector<uint8_t> plain_;
};

class TokenConstraint {
public:
    TokenConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const VocabTrie> vocab);
    // Whether `id` may come next (end_of_generation: whether the output may end here).
    bool allows(int32_t id, bool end_of_generation) const;
    // allowed[id] = 1 for every token that may come next, 0 otherwise (end-of-generation tokens excluded:
    // ask can_end()).
    void mask(std::vector<uint8_t>& allowed) const;
    bool can_end() const { return matcher_.can_end(); }
    void accept(int32_t id);

private:
    void walk(const VocabTrie::Trie& trie, uint32_t node, const std::vector<GrammarMatcher::Stack>& stacks, std::vector<uint8_t>& allowed) const;
    // Every alternative is inside the characters of an unbounded JSON string.
    bool in_free_string() const;
    std::shared_ptr<const VocabTrie> vocab_;
    GrammarMatcher matcher_;
};

}  // namespace moe

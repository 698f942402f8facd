// Token sampling: greedy at temperature 0, else repetition penalty -> top-k -> top-p -> min-p -> temperature
// -> draw, with a seeded generator so a run is repeatable.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace moe {

struct SamplerParams {
    float temperature = 0.f;     // 0: greedy (argmax, lowest id on ties)
    int top_k = 40;              // 0: off
    float top_p = 0.95f;         // 1: off
    float min_p = 0.05f;         // 0: off
    float repeat_penalty = 1.f;  // 1: off; applied to the last repeat_last_n tokens
    int repeat_last_n = 64;
    uint64_t seed = 0;
};

class Sampler {
public:
    explicit Sampler(SamplerParams p) : p_(p), rng_(p.seed) {}
    // Picks the next token from n_vocab logits given the tokens so far.
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
    // The distribution sample() draws from: (token, probability) pairs, most likely first (greedy: the one token).
    std::vector<std::pair<int32_t, double>> distribution(std::span<const float> logits, std::span<const int32_t> history);
    // Speculative decoding's rule for a drafted token (a draft that proposes one token, probability 1): it is
    // kept with the probability the sampler gives it; otherwise the token is drawn from the sampler's
    // distribution without it (renormalised). The tokens kept this way have exactly sample()'s distribution;
    // greedy, the draft is kept when it is the argmax, else the argmax is returned.
    struct Verdict {
        bool accepted;
        int32_t token;  // the draft when accepted, else its replacement
    };
    Verdict verify(std::span<const float> logits, std::span<const int32_t> history, int32_t draft);
    const SamplerParams& params() const { return p_; }

private:
    bool greedy() const { return p_.temperature <= 0.f; }
    // Fills cand_ with the kept tokens and returns their unnormalised weights (the same order).
    std::vector<double> candidates(std::span<const float> logits, std::span<const int32_t> history);
    SamplerParams p_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> cand_;  // reused between calls
};

int32_t argmax(std::span<const float> logits);
// Softmax in double over all logits; returns the top n (id, probability), largest first.
std::vector<std::pair<int32_t, double>> top_probs(std::span<const float> logits, int n);

// log-softmax of logits / temperature (in double): the chosen token's logprob and the top n (id, logprob),
// most likely first, lowest id on ties.
std::pair<double, std::vector<std::pair<int32_t, double>>> token_logprobs(std::span<const float> logits, int32_t chosen, int n, float temperature);

}  // namespace moe

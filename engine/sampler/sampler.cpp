#include "engine/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace moe {

int32_t argmax(std::span<const float> logits) {
    // Max first with eight independent running maxima (no branch chain over 150k logits), then the first
    // index holding it: the lowest id wins ties, as before.
    const size_t n = logits.size();
    if (n == 0) return 0;
    float m[8];
    for (float& v : m) v = logits[0];
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) m[k] = logits[i + k] > m[k] ? logits[i + k] : m[k];
    float best = m[0];
    for (int k = 1; k < 8; ++k) best = m[k] > best ? m[k] : best;
    for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
    for (size_t j = 0; j < n; ++j)
        if (logits[j] == best) return static_cast<int32_t>(j);
    return 0;  // all NaN
}

std::vector<std::pair<int32_t, double>> top_probs(std::span<const float> logits, int n) {
    double max = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
    std::vector<int32_t> idx(logits.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
    n = std::min<int>(n, static_cast<int>(idx.size()));
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    std::vector<std::pair<int32_t, double>> out;
    for (int i = 0; i < n; ++i) out.emplace_back(idx[i], std::exp(static_cast<double>(logits[idx[i]]) - max) / sum);
    return out;
}

std::pair<double, std::vector<std::pair<int32_t, double>>> token_logprobs(std::span<const float> logits, int32_t chosen, int n, float temperature) {
    const double inv_t = 1.0 / static_cast<double>(temperature);
    const double max = *std::max_element(logits.begin(), logits.end()) * inv_t;
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) * inv_t - max);
    const double log_z = max + std::log(sum);
    auto logprob = [&](int32_t id) { return static_cast<double>(logits[static_cast<size_t>(id)]) * inv_t - log_z; };
    std::vector<std::pair<int32_t, double>> top;
    if (n > 0) {
        std::vector<int32_t> idx(logits.size());
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
        n = std::min<int>(n, static_cast<int>(idx.size()));
        std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                          [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
        for (int i = 0; i < n; ++i) top.emplace_back(idx[i], logprob(idx[i]));
    }
    return {logprob(chosen), std::move(top)};
}

std::vector<double> Sampler::candidates(std::span<const float> logits, std::span<const int32_t> history) {
    cand_.clear();
    cand_.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) cand_.emplace_back(logits[i], static_cast<int32_t>(i));
    if (p_.repeat_penalty != 1.f && p_.repeat_last_n > 0) {
        std::unordered_set<int32_t> recent;
        for (size_t i = history.size() > static_cast<size_t>(p_.repeat_last_n) ? history.size() - p_.repeat_last_n : 0; i < history.size(); ++i)
            recent.insert(history[i]);
        for (int32_t id : recent)
            if (id >= 0 && static_cast<size_t>(id) < cand_.size()) {
                float& l = cand_[id].first;
                l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
            }
    }
    auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    if (greedy()) {
        cand_ = {*std::min_element(cand_.begin(), cand_.end(), by_logit)};
        return {1.0};
    }
    size_t keep = cand_.size();
    if (p_.top_k > 0) keep = std::min<size_t>(keep, static_cast<size_t>(p_.top_k));
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
    cand_.resize(keep);
    // Probabilities at temperature 1 for the top-p / min-p cuts, as llama.cpp orders them before temperature.
    std::vector<double> prob(cand_.size());
    double sum = 0;
    for (size_t i = 0; i < cand_.size(); ++i) sum += prob[i] = std::exp(static_cast<double>(cand_[i].first - cand_[0].first));
    for (double& p : prob) p /= sum;
    if (p_.top_p < 1.f) {
        double cum = 0;
        size_t k = 0;
        while (k < prob.size()) {
            cum += prob[k++];
            if (cum >= p_.top_p) break;
        }
        cand_.resize(k);
        prob.resize(k);
    }
    if (p_.min_p > 0.f) {
        size_t k = 0;
        while (k < prob.size() && prob[k] >= p_.min_p * prob[0]) ++k;
        cand_.resize(std::max<size_t>(k, 1));
    }
    std::vector<double> w(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) w[i] = std::exp(static_cast<double>(cand_[i].first - cand_[0].first) / p_.temperature);
    return w;
}

// The weights candidates() returns, summing to one.
static std::vector<double> normalized(std::vector<double> w) {
    double total = 0;
    for (double x : w) total += x;
    for (double& x : w) x /= total;
    return w;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    if (greedy() && p_.repeat_penalty == 1.f) return argmax(logits);  // greedy: no candidate list
    const std::vector<double> w = candidates(logits, history);
    if (w.size() == 1) return cand_[0].second;
    std::discrete_distribution<size_t> dist(w.begin(), w.end());
    return cand_[dist(rng_)].second;
}

std::vector<std::pair<int32_t, double>> Sampler::distribution(std::span<const float> logits, std::span<const int32_t> history) {
    const std::vector<double> w = normalized(candidates(logits, history));
    std::vector<std::pair<int32_t, double>> out;
    for (size_t i = 0; i < w.size(); ++i) out.emplace_back(cand_[i].second, w[i]);
    return out;
}

Sampler::Verdict Sampler::verify(std::span<const float> logits, std::span<const int32_t> history, int32_t draft) {
    if (greedy()) {
        const int32_t best = sample(logits, history);
        return {best == draft, best};
    }
    const std::vector<double> w = normalized(candidates(logits, history));
    double p_draft = 0;
    for (size_t i = 0; i < w.size(); ++i)
        if (cand_[i].second == draft) p_draft = w[i];
    if (p_draft >= 1.0 || std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p_draft) return {true, draft};
    // Rejected: the residual max(0, p - q) with q the draft's point mass is p without the draft.
    std::vector<double> rest = w;
    for (size_t i = 0; i < rest.size(); ++i)
        if (cand_[i].second == draft) rest[i] = 0;
    std::discrete_distribution<size_t> dist(rest.begin(), rest.end());
    return {false, cand_[dist(rng_)].second};
}

}  // namespace moe

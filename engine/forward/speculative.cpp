#include "engine/forward/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace moe {

DraftMode parse_draft_mode(const std::string& name) {
    if (name == "off") return DraftMode::Off;
    if (name == "auto") return DraftMode::Auto;
    if (name == "lookup") return DraftMode::Lookup;
    if (name == "mtp") return DraftMode::Mtp;
    throw std::invalid_argument("--draft " + name + ": expected auto, off, lookup or mtp");
}

const char* draft_mode_name(DraftMode mode) {
    switch (mode) {
        case DraftMode::Off: return "off";
        case DraftMode::Auto: return "auto";
        case DraftMode::Lookup: return "lookup";
        case DraftMode::Mtp: return "mtp";
    }
    return "?";
}

std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int max_tokens, int min_ngram, int max_ngram) {
    const int len = static_cast<int>(context.size());
    if (max_tokens <= 0) return {};
    for (int n = std::min(max_ngram, len - 1); n >= std::max(min_ngram, 1); --n) {
        const int32_t* tail = context.data() + len - n;
        // Latest start first: the most recent repetition is the likeliest to continue the same way.
        for (int start = len - n - 1; start >= 0; --start) {
            if (!std::equal(tail, tail + n, context.data() + start)) continue;
            // What followed the match, continued with the same period past the context's end: a match close
            // to the end (a loop of a few tokens) still drafts max_tokens.
            std::vector<int32_t> draft;
            for (int i = start + n; static_cast<int>(draft.size()) < max_tokens; ++i)
                draft.push_back(i < len ? context[static_cast<size_t>(i)] : draft[static_cast<size_t>(i - len)]);
            return draft;
        }
    }
    return {};
}

double StepCost::expert_sets(int n) const {
    if (n_expert == 0 || n_used == 0) return n;
    const double X = n_expert, U = std::min<double>(n_used, n_expert);
    return X * (1 - std::pow(1 - U / X, n)) / U;
}

StepCost step_cost_of(const ModelFacts& facts, bool streaming) {
    const double active = static_cast<double>(facts.active_bytes_per_token());
    const double share = streaming ? 1.0 : active > 0 ? static_cast<double>(facts.expert_bytes_per_token()) / active : 1.0;
    return {share, facts.n_expert, facts.n_expert_used};
}

DraftPlanner::DraftPlanner(int max_draft, StepCost cost)
    : max_(std::max(0, max_draft)), cost_(cost), share_(std::clamp(cost.expert_share, 0.0, 1.0)) {}

// Running averages: the first samples count fully, later ones with a fixed weight, so the estimate follows a
// cache that warms up or a disk that slows down.
static void running_average(double& avg, int& n, double sample) {
    ++n;
    avg += (sample - avg) / std::min(n, 16);
}

void DraftPlanner::observe_step(int rows, double seconds) {
    if (rows <= 0 || !(seconds >= 0)) return;
    if (rows == 1) return running_average(one_row_, one_row_n_, seconds);
    const double more_sets = cost_.expert_sets(rows) - 1;
    if (one_row_n_ == 0 || more_sets <= 0) return;  // nothing to take the extra rows' share from yet
    running_average(share_, share_n_, std::clamp((seconds - one_row_) / (one_row_ * more_sets), 0.0, 2.0));
    since_probe_ = 0;
}

void DraftPlanner::observe_drafts(int drafted, int accepted) {
    if (drafted <= 0) return;
    // Per drafted position reached: kept, or the first rejection (the drafts after it were never judged).
    const int judged = std::min(drafted, accepted + 1);
    constexpr double kDecay = 0.97;  // about the last 30 positions
    for (int i = 0; i < judged; ++i) {
        kept_ = kept_ * kDecay + (i < accepted ? 1 : 0);
        tried_ = tried_ * kDecay + 1;
    }
}

void DraftPlanner::observe_draft_cost(int drafted, double seconds) {
    if (drafted > 0 && seconds >= 0) running_average(draft_s_, draft_n_, seconds / drafted);
}

double DraftPlanner::step_seconds(int rows) const { return one_row_ * ((1 - share_) + share_ * cost_.expert_sets(rows)); }

double DraftPlanner::expected_tokens(int k) const {
    const double p = acceptance();
    double total = 0, reach = 1;
    for (int i = 0; i <= k; ++i, reach *= p) total += reach;
    return total;
}

int DraftPlanner::depth(int available) {
    const int most = std::min(available, max_);
    if (most <= 0) return 0;
    if (one_row_n_ == 0) return 0;  // a plain step first, to know what drafts must beat
    int best = 0;
    double best_rate = 1.0 / one_row_;
    for (int k = 1; k <= most; ++k) {
        const double rate = expected_tokens(k) / (step_seconds(1 + k) + (k - 1) * draft_s_);  // the first draft row is needed anyway
        if (rate > best_rate * 1.03) best = k, best_rate = rate;                              // a margin: a near tie is not worth the variance
    }
    // Until a few multi-row steps have been measured the experts' share is a guess: now and then verify one draft
    // to measure it (at most one step in 64 that could have drafted).
    if (best == 0 && share_n_ < 3 && ++since_probe_ >= 64) {
        since_probe_ = 0;
        return 1;
    }
    return best;
}

Drafter::Drafter(DraftMode mode, int max_draft, StepCost cost) : mode_(mode), max_(std::max(0, max_draft)), planner_(max_draft, cost) {}

std::vector<int32_t> Drafter::propose(std::span<const int32_t> history, int limit, int trunk_past) {
    // Drafts proposed last time but not verified: the tokens generated since say how many would have been
    // kept (for a sampled token, kept with the probability the sampler gave the draft: the acceptance rate).
    if (!shadow_.empty() && history.size() > shadow_at_) {
        const size_t seen = std::min(shadow_.size(), history.size() - shadow_at_);
        size_t same = 0;
        while (same < seen && history[shadow_at_ + same] == shadow_[same]) ++same;
        planner_.observe_drafts(static_cast<int>(same < seen ? same + 1 : seen), static_cast<int>(same));
        shadow_.clear();
    }
    limit = std::min(limit, max_);
    if (mode_ == DraftMode::Off || limit <= 0) return {};
    if (trunk_past < 0) trunk_past = static_cast<int>(history.size()) - 1;
    // The block's drafts, timed for the planner (they cost a layer's work per token, lookup's nothing).
    auto block_drafts = [&](int k) {
        const auto start = std::chrono::steady_clock::now();
        std::vector<int32_t> d = mtp_->draft(seq_, history.back(), k, trunk_past);
        planner_.observe_draft_cost(static_cast<int>(d.size()), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        return d;
    };
    if (mode_ == DraftMode::Lookup) return lookup_draft(history, limit);
    if (mode_ == DraftMode::Mtp && !mtp_) return {};
    if (mode_ == DraftMode::Mtp && held_left_ > 0) {
        if (--held_left_ > 0) return {};
        mtp_->hold(seq_, false);  // the next draft catches the block up in one batch
    }
    std::vector<int32_t> drafts = mode_ == DraftMode::Auto ? lookup_draft(history, limit) : std::vector<int32_t>{};
    const int offered = mode_ == DraftMode::Auto ? static_cast<int>(drafts.size()) : limit;
    const int depth = std::min(offered, std::max(planner_.depth(offered), min_));
    // From the block, one draft even where none pays: the block evaluates that row anyway (the trunk's newest
    // state), and judging it against the next token keeps the acceptance measured.
    if (mode_ == DraftMode::Mtp && limit > 0) drafts = block_drafts(std::max(depth, 1));
    if (depth == 0 && !drafts.empty()) {
        shadow_ = drafts;
        shadow_at_ = history.size();
    }
    if (mode_ == DraftMode::Mtp) {
        // Keeping the block's cache current costs a layer per token: not while its drafts keep not paying.
        if (depth > 0) idle_ = 0, next_hold_ = kFirstHold;
        else if (++idle_ >= kIdleSteps) {
            idle_ = 0;
            held_left_ = next_hold_;
            next_hold_ = std::min(2 * next_hold_, kLongestHold);
            mtp_->hold(seq_, true);
        }
    }
    drafts.resize(std::min(drafts.size(), static_cast<size_t>(depth)));
    return drafts;
}

void Drafter::observe(int rows, double seconds, int drafted, int accepted) {
    planner_.observe_step(rows, seconds);
    planner_.observe_drafts(drafted, accepted);
    if (drafted > 0) {
        stats_.steps++;
        stats_.drafted += static_cast<uint64_t>(drafted);
        stats_.accepted += static_cast<uint64_t>(accepted);
    }
}

void keep_verified(Runner& runner, const Runner::Checkpoint& mark, std::span<const int32_t> batch, int kept) {
    if (mark.pos + kept >= runner.n_past()) return;
    if (runner.has_recurrent_state()) {
        // A recurrent state cannot be cut back: from the mark, the kept tokens again (the same rows' bits).
        runner.rewind(mark);
        runner.eval(batch.first(static_cast<size_t>(kept)), false, Runner::Rows::OneByOne);
    } else {
        runner.rewind({mark.pos + kept, {}, {}});
    }
}

StepOutcome speculative_step(Runner& runner, Sampler& sampler, std::vector<int32_t>& history, std::span<const int32_t> drafts,
                             const EmitToken& emit) {
    if (history.empty()) throw std::invalid_argument("speculative_step: no pending token");
    StepOutcome out;
    const int n_vocab = runner.n_vocab();
    std::vector<int32_t> batch{history.back()};
    batch.insert(batch.end(), drafts.begin(), drafts.end());
    out.rows = static_cast<int>(batch.size());
    if (drafts.empty()) {
        runner.eval(batch);
        const std::span<const float> row(runner.logits(), static_cast<size_t>(n_vocab));
        const int32_t next = sampler.sample(row, history);
        history.push_back(next);
        out.stopped = !emit(next, row);
        return out;
    }
    const Runner::Checkpoint before = runner.mark();
    runner.eval(batch, true, Runner::Rows::OneByOne);
    // Row i holds the logits after batch[i]: they judge drafts[i].
    int i = 0;
    int32_t next = -1;
    for (; i < static_cast<int>(drafts.size()); ++i) {
        const std::span<const float> row(runner.logits(i), static_cast<size_t>(n_vocab));
        const Sampler::Verdict v = sampler.verify(row, history, drafts[static_cast<size_t>(i)]);
        history.push_back(v.token);
        if (!v.accepted) {
            next = v.token;
            out.stopped = !emit(v.token, row);
            break;
        }
        ++out.accepted;
        if (!emit(v.token, row)) {
            out.stopped = true;
            break;
        }
    }
    // Kept in the cache: the pending token and the drafts accepted (a rejected one and those after it go).
    keep_verified(runner, before, batch, 1 + out.accepted);
    if (next < 0 && !out.stopped) {  // every draft kept: the last row gives one more token
        const std::span<const float> row(runner.logits(static_cast<int>(drafts.size())), static_cast<size_t>(n_vocab));
        next = sampler.sample(row, history);
        history.push_back(next);
        out.stopped = !emit(next, row);
    }
    return out;
}

StepOutcome Drafter::step(Runner& runner, Sampler& sampler, std::vector<int32_t>& history, std::span<const int32_t> drafts, const EmitToken& emit) {
    const auto start = std::chrono::steady_clock::now();
    const StepOutcome o = speculative_step(runner, sampler, history, drafts, emit);
    observe(o.rows, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), static_cast<int>(drafts.size()), o.accepted);
    return o;
}

}  // namespace moe

// Speculative decoding: tokens drafted cheaply are verified by the model in one batch, which reads each weight
// (and each routed expert the batch needs) once for all of them. Greedy output is token for token what
// decoding without drafts gives (the batch's rows use one-token kernels, Runner::Rows::OneByOne); sampled
// output keeps the sampler's distribution (Sampler::verify). How many drafts a step verifies is chosen from
// what this sequence measured: the seconds a step costs per row, and how often drafts were kept.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/forward/mtp_draft.h"
#include "engine/forward/runner.h"
#include "engine/sampler/sampler.h"

namespace moe {

enum class DraftMode {
    Off,
    Auto,    // prompt-lookup drafts, as many as the measured cost pays for (often none)
    Lookup,  // prompt-lookup drafts whenever the context offers some, up to the maximum
    Mtp,     // the model's NextN/MTP block (mtp_draft.h), as many as the measured cost pays for
};
// "off", "auto", "lookup", "mtp"; std::invalid_argument naming the value otherwise.
DraftMode parse_draft_mode(const std::string& name);
const char* draft_mode_name(DraftMode mode);

// Prompt lookup: the tokens that followed the latest earlier occurrence of the context's last n tokens, for
// the longest n in [min_ngram, max_ngram] that occurs, max_tokens of them (continued with the repetition's
// period past the context's end). Agents resend and re-emit spans of code and text, which this copies.
std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int max_tokens, int min_ngram = 2, int max_ngram = 4);

// What a decode step's time is made of, for predicting a verification batch's: the share of a one-token step
// that goes to routed experts (their reads from RAM or disk and their matmuls), and the routing that says how
// many distinct experts n tokens need (n_expert 0: a dense model, whose extra rows cost share each).
struct StepCost {
    double expert_share = 0.5;
    uint32_t n_expert = 0, n_used = 0;
    // Distinct experts n tokens choosing independently and uniformly need, in units of one token's (1 for n = 1;
    // real routing is skewed and needs fewer: the measured share absorbs that).
    double expert_sets(int n) const;
};
// From the file's layout: the routed experts' share of the bytes a token reads (streamed experts: the whole
// step, until measured otherwise).
StepCost step_cost_of(const ModelFacts& facts, bool streaming);

// How many drafts to verify. A step of 1 + k rows is predicted to cost T1 * ((1 - s) + s * expert_sets(1 + k)),
// T1 a one-row step and s the experts' share, both measured on this sequence (s starts at StepCost's guess),
// and to yield 1 + p + ... + p^k tokens, p the measured rate at which a draft is kept given the ones before it
// were. The depth maximises tokens per second; it is 0 unless that beats a plain step by a margin.
class DraftPlanner {
public:
    DraftPlanner(int max_draft, StepCost cost);
    int depth(int available);
    void observe_step(int rows, double seconds);
    // Drafts that cost time of their own (MTP): `drafted` of them took `seconds`.
    void observe_draft_cost(int drafted, double seconds);
    // A step that verified `drafted` tokens kept the first `accepted` of them.
    void observe_drafts(int drafted, int accepted);
    double acceptance() const { return kept_ / tried_; }
    double one_row_seconds() const { return one_row_; }
    double expert_share() const { return share_; }
    double step_seconds(int rows) const;
    double expected_tokens(int k) const;

private:
    int max_;
    StepCost cost_;
    double one_row_ = 0, share_;  // running averages (one_row_ 0 until measured)
    int one_row_n_ = 0, share_n_ = 0;
    double draft_s_ = 0;  // seconds per drafted token (0: free, as prompt lookup's)
    int draft_n_ = 0;
    double kept_ = 1, tried_ = 2;  // the acceptance estimate's counts, decaying (prior: one half, weight two)
    int since_probe_ = 0;          // chances passed up since the last measured multi-row step
};

struct DraftStats {
    uint64_t steps = 0;     // verification steps with at least one draft
    uint64_t drafted = 0;   // drafted tokens verified
    uint64_t accepted = 0;  // of them kept
};

// Called for each token a step produces, with the logits row it was chosen from; false stops the step.
using EmitToken = std::function<bool(int32_t token, std::span<const float> logits)>;

struct StepOutcome {
    int rows = 0;          // tokens evaluated
    int accepted = 0;      // drafts kept
    bool stopped = false;  // emit asked to stop
};

// One sequence's drafts: where they come from and how many a step verifies.
class Drafter {
public:
    Drafter(DraftMode mode, int max_draft, StepCost cost);
    DraftMode mode() const { return mode_; }
    // Mtp: drafts from this block's rows for sequence `seq` (not owned); without it no drafts.
    // Where the planner decides the depth (auto, mtp): at least `n` drafts a step all the same (--draft-min).
    void set_min_drafts(int n) { min_ = std::max(0, n); }
    void use_mtp(MtpDraft* mtp, int seq) {
        mtp_ = mtp;
        seq_ = seq;
    }
    // Drafts to verify after `history` (its last token is the one the next step evaluates; the positions before
    // it are in the runner's cache: trunk_past of them, history.size() - 1 when not given), at most `limit`.
    // Mtp: after kIdleSteps steps whose drafts did not pay, the block is held (MtpDraft::hold) for kFirstHold
    // steps, doubling up to kLongestHold while they still do not; a step that drafts resets that.
    std::vector<int32_t> propose(std::span<const int32_t> history, int limit, int trunk_past = -1);
    // A new context (the next request in a server slot): drafts passed up earlier are not judged against it.
    void forget_context() { shadow_.clear(); }
    // What the step did: rows evaluated, its wall time, drafts verified and kept.
    void observe(int rows, double seconds, int drafted, int accepted);
    // speculative_step (below) with `drafts`, timed and observed.
    StepOutcome step(Runner& runner, Sampler& sampler, std::vector<int32_t>& history, std::span<const int32_t> drafts, const EmitToken& emit);
    const DraftStats& stats() const { return stats_; }
    const DraftPlanner& planner() const { return planner_; }

private:
    DraftMode mode_;
    int max_, min_ = 0;
    DraftPlanner planner_;
    DraftStats stats_;
    MtpDraft* mtp_ = nullptr;
    int seq_ = 0;
    std::vector<int32_t> shadow_;  // drafts the planner passed up, judged against the tokens that follow
    size_t shadow_at_ = 0;         // the history position of shadow_[0]
    // Mtp: steps in a row the planner passed the block's drafts up; while held, the steps left before the block
    // catches up and drafts again (its shadow drafts re-measure whether they pay), and the next hold's length.
    int idle_ = 0, held_left_ = 0, next_hold_ = kFirstHold;
    static constexpr int kIdleSteps = 16, kFirstHold = 32, kLongestHold = 1024;
};

// After a verification batch evaluated from `mark`: keeps its first `kept` rows in the selected sequence and
// forgets the rest (recurrent models: back to the mark's state, the kept tokens evaluated again).
void keep_verified(Runner& runner, const Runner::Checkpoint& mark, std::span<const int32_t> batch, int kept);

// One decode step on the runner's selected sequence. history's last token is the pending one (chosen, not yet
// evaluated); it and `drafts` are evaluated as one batch. Drafts are kept in order while the sampler accepts
// them; the sequence is rolled back past the first rejected one; then the sampler's token from the last kept
// row is emitted and appended to history (the next pending token). Every kept draft is emitted and appended
// too. With no drafts this is a plain decode step.
StepOutcome speculative_step(Runner& runner, Sampler& sampler, std::vector<int32_t>& history, std::span<const int32_t> drafts, const EmitToken& emit);

}  // namespace moe

// Drafts from the model's own NextN/MTP block (Model::mtp), as llama.cpp's MTP drafts compute it: the block's
// row at position i is eh_proj . [enorm(embedding of token i+1); hnorm(the trunk's final, output-normed hidden
// state at i)] through one more decoder layer with a KV cache of its own, whose output (head_norm, output head)
// predicts token i+2. A draft of k tokens chains the block on itself: the next row takes the drafted token's
// embedding and the block's own output (before head_norm) as the hidden state. deepseek4's block takes the
// trunk's four hyper-connection streams before the output head, each projected with the embedding, runs them
// through its layer and the file's output head, and chains on its own streams.
//
// The block's cache follows the trunk's: every chunk the trunk evaluates hands its final hidden rows over
// (Runner::set_hidden_sink), and the rows whose next token is known are evaluated by the block in one batch
// (the prompt too, so drafts see the whole context, as llama.cpp's MTP warm-up does). Positions past a rewind of
// the trunk are forgotten when the trunk's next rows or draft request show it.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/forward/runner.h"

namespace moe {

class MtpDraft {
public:
    // `trunk`: a model loaded with LoadOptions::mtp (trunk.mtp set, else std::invalid_argument naming why);
    // opt: the trunk runner's (context, sequences, threads, numerics, cache types).
    MtpDraft(const Model& trunk, const RunnerOptions& opt);
    // The callback for the trunk runner's set_hidden_sink.
    std::function<void(const HiddenRows&)> hidden_sink() {
        return [this](const HiddenRows& h) { take_rows(h); };
    }
    // Up to k greedy drafts for sequence `seq` after `pending` (chosen, not yet evaluated by the trunk, which
    // holds trunk_past positions of the sequence). Fewer (none) when the block has not seen the trunk's last
    // hidden state (the sequence was just truncated below it).
    std::vector<int32_t> draft(int seq, int32_t pending, int k, int trunk_past);
    // Held, a sequence's block evaluates nothing: the trunk's last kBacklogRows rows are kept and evaluated in
    // one batch by the next draft after the hold ends; older ones are skipped, as after a prompt-cache restore
    // (their cache rows stay stale: the drafts' context, never an answer). What a planner does while the
    // block's drafts do not pay: a token then costs no block layer.
    static constexpr int kBacklogRows = 64;
    void hold(int seq, bool on);
    bool held(int seq) const { return seqs_.at(static_cast<size_t>(seq)).held; }
    // The logits of the last drafted token's row.
    const float* logits() const { return runner_.logits(); }
    // Block rows evaluated (catching up with the trunk, and drafting), for the cost model.
    uint64_t rows_evaluated() const { return rows_; }
    // The block's passes (each reads its weights once, for one row or a batch).
    uint64_t passes() const { return passes_; }
    double seconds() const { return seconds_; }
    // Positions a cut could not keep (no snapshot there): evaluated again from the trunk's rows, or skipped.
    uint64_t rows_redone() const { return rows_redone_; }

private:
    struct Sequence {
        int past = 0;      // block positions filled: [0, past)
        int tail_pos = 0;  // the trunk's final hidden rows kept for positions [tail_pos, tail_pos + tail_n)
        int tail_n = 0;
        std::vector<float> tail;           // [tail_n][W_] (output-normed; deepseek4: the streams)
        std::vector<int32_t> tail_tokens;  // [tail_n]: the token each of those rows evaluated
        int32_t last_next = -1;            // the next token the row at past - 1 was evaluated with
        bool held = false;
    };
    void take_rows(const HiddenRows& h);
    // Evaluates the block's rows [past, end) from the tail (rows it no longer has are skipped).
    void catch_up(int seq, Sequence& s, int end);
    // The trunk holds `trunk_pos` positions now (it may have been cut back): forget block rows past them.
    void follow_trunk(Sequence& s, int trunk_pos);
    // Evaluates block rows for positions pos0.. from trunk hidden rows and the tokens that follow each.
    void eval_rows(int seq, int pos0, const float* hidden, const int32_t* next_tokens, int n, bool want_logits);
    const float* hidden_at(const Sequence& s, int pos) const;
    // The block's cache cut back to `pos` positions (a block whose window is state: through its snapshots and
    // the tail); skip_to takes positions up to `pos` as evaluated without evaluating them.
    void rewind(int seq, int pos);
    void skip_to(int seq, int pos);
    static constexpr int kSnapshots = 16;

    const Model& trunk_;
    const Model& block_;
    Runner runner_;
    int E_;
    int W_;  // a hidden row's floats: E_, or deepseek4's four streams
    std::vector<Sequence> seqs_;
    std::vector<float> in_, cat_, last_pre_;
    uint64_t rows_ = 0, passes_ = 0, rows_redone_ = 0;
    double seconds_ = 0;
};

}  // namespace moe

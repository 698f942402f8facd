#include "engine/forward/mtp_draft.h"

#include "engine/sampler/sampler.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace moe {

static const Model& block_of(const Model& trunk) {
    if (!trunk.mtp) throw std::invalid_argument("the model was loaded without its NextN/MTP block");
    return *trunk.mtp;
}

MtpDraft::MtpDraft(const Model& trunk, const RunnerOptions& opt)
    : trunk_(trunk), block_(block_of(trunk)), runner_(block_,
                                                      [&] {
                                                          RunnerOptions o = opt;
                                                          o.routing_trace = nullptr;  // the trace describes the trunk's layers
                                                          // snapshots of a block whose window is state (deepseek4's):
                                                          // one per evaluation, so cuts land on one (none for others)
                                                          o.max_checkpoints = kSnapshots;
                                                          return o;
                                                      }()),
      E_(static_cast<int>(trunk.hp.n_embd)), W_(Runner::hidden_width(trunk)), seqs_(static_cast<size_t>(std::max(1, opt.n_seq))) {}

const float* MtpDraft::hidden_at(const Sequence& s, int pos) const {
    if (pos < s.tail_pos || pos >= s.tail_pos + s.tail_n) return nullptr;
    return &s.tail[static_cast<size_t>(pos - s.tail_pos) * W_];
}

void MtpDraft::follow_trunk(Sequence& s, int trunk_pos) {
    s.tail_n = std::clamp(trunk_pos - s.tail_pos, 0, s.tail_n);
    if (s.past <= trunk_pos) return;
    // Rows past the trunk's positions came from tokens it dropped (rejected drafts, another prompt). The row at
    // trunk_pos - 1 took its next token from them too: evaluated again when its hidden state is still here.
    s.past = hidden_at(s, trunk_pos - 1) ? trunk_pos - 1 : trunk_pos;
}

void MtpDraft::eval_rows(int seq, int pos0, const float* hidden, const int32_t* next_tokens, int n, bool want_logits) {
    const auto start = std::chrono::steady_clock::now();
    runner_.select_sequence(seq);
    if (runner_.n_past() < pos0) throw std::logic_error("MtpDraft: block positions out of step with the trunk");
    if (runner_.n_past() > pos0) rewind(seq, pos0);
    const size_t E = static_cast<size_t>(E_), S = static_cast<size_t>(W_ / E_);  // S: hyper-connection streams (or 1)
    const ops::FloatOps& f = runner_.float_ops();
    const float eps = block_.hp.rms_eps;
    const Tensor& embd = block_.tok_embd;
    const MtpInput& in = block_.nextn;
    std::vector<float> row(E);
    cat_.resize(static_cast<size_t>(n) * S * 2 * E);
    in_.resize(static_cast<size_t>(n) * S * E);
    // Each stream of each row: eh_proj . [enorm(embedding); hnorm(that stream)] (deepseek4 projects its four
    // streams apart, the embedding repeated, as llama.cpp's MTP graph does).
    for (int r = 0; r < n; ++r) {
        float* c0 = &cat_[static_cast<size_t>(r) * S * 2 * E];
        kernels::dequantize_row(embd.type, embd.row(next_tokens[r]), row.data(), E_);
        f.norm(row.data(), in.enorm.f32(), c0, E_, eps);
        for (size_t h = 0; h < S; ++h) {
            float* c = c0 + h * 2 * E;
            if (h) std::copy_n(c0, E, c);
            f.norm(hidden + static_cast<size_t>(r) * W_ + h * E, in.hnorm.f32(), c + E, E_, eps);
        }
    }
    runner_.project(in.eh_proj, cat_.data(), n * static_cast<int>(S), in_.data());
    runner_.eval_embedded(in_.data(), n, want_logits);
    runner_.checkpoint();
    rows_ += static_cast<uint64_t>(n);
    ++passes_;
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void MtpDraft::rewind(int seq, int pos) {
    runner_.select_sequence(seq);
    const int kept = runner_.truncate(pos);
    if (kept == pos) return;
    // A block whose window is state goes back to its last snapshot at or below pos: the rows up to pos again
    // from the tail where it still holds them (their hidden states and next tokens), else skipped.
    const Sequence& s = seqs_.at(static_cast<size_t>(seq));
    const bool in_tail = kept >= s.tail_pos && pos < s.tail_pos + s.tail_n;
    rows_redone_ += static_cast<uint64_t>(pos - kept);
    if (in_tail) eval_rows(seq, kept, hidden_at(s, kept), &s.tail_tokens[static_cast<size_t>(kept + 1 - s.tail_pos)], pos - kept, false);
    else skip_to(seq, pos);
}

void MtpDraft::skip_to(int seq, int pos) {
    runner_.select_sequence(seq);
    std::vector<Runner::Checkpoint> state;
    if (runner_.has_recurrent_state()) {  // the state it has, as that of pos (drafts' context only, never an answer)
        state.push_back(runner_.mark());
        state.back().pos = pos;
    }
    runner_.adopt_prefix(pos, std::move(state));
}

void MtpDraft::take_rows(const HiddenRows& h) {
    Sequence& s = seqs_.at(static_cast<size_t>(h.seq));
    follow_trunk(s, h.pos0);
    // A row drafted with another pending token than the one the trunk evaluated: again.
    if (s.past == h.pos0 && h.pos0 > 0 && s.last_next != h.tokens[0] && hidden_at(s, h.pos0 - 1)) s.past = h.pos0 - 1;
    // The chunk's rows join the tail (held: the last kBacklogRows; else what the block has not evaluated yet).
    const int keep_before = s.held ? kBacklogRows - h.n : (s.past < h.pos0 ? h.pos0 - s.past : 0);
    if (s.tail_pos + s.tail_n != h.pos0) s.tail_n = 0, s.tail_pos = h.pos0;
    const int drop = std::clamp(s.tail_n - std::max(keep_before, 0), 0, s.tail_n);
    s.tail.erase(s.tail.begin(), s.tail.begin() + static_cast<ptrdiff_t>(drop) * W_);
    s.tail_tokens.erase(s.tail_tokens.begin(), s.tail_tokens.begin() + drop);
    s.tail.resize(static_cast<size_t>(s.tail_n - drop) * W_);
    s.tail_tokens.resize(static_cast<size_t>(s.tail_n - drop));
    s.tail_pos += drop;
    s.tail_n -= drop;
    s.tail.insert(s.tail.end(), h.post, h.post + static_cast<size_t>(h.n) * W_);
    s.tail_tokens.insert(s.tail_tokens.end(), h.tokens, h.tokens + h.n);
    s.tail_n += h.n;
    // Rows [past, pos0 + n - 1): their next token is in the tail now.
    if (!s.held) catch_up(h.seq, s, h.pos0 + h.n - 1);
}

void MtpDraft::catch_up(int seq, Sequence& s, int end) {
    if (s.past < s.tail_pos && end > s.tail_pos) {
        // Positions the trunk took without handing their hidden states over (a prompt cache restored them, or a
        // hold outlasted its backlog): the block skips them.
        skip_to(seq, s.tail_pos);
        s.past = s.tail_pos;
    }
    if (end <= s.past) return;
    const int first = s.past, chunk = std::max(1, runner_.n_batch());
    for (int p = first; p < end; p += chunk) {
        const int c = std::min(chunk, end - p);
        eval_rows(seq, p, hidden_at(s, p), &s.tail_tokens[static_cast<size_t>(p + 1 - s.tail_pos)], c, false);
    }
    s.past = end;
    s.last_next = s.tail_tokens[static_cast<size_t>(end - s.tail_pos)];
}

void MtpDraft::hold(int seq, bool on) { seqs_.at(static_cast<size_t>(seq)).held = on; }

std::vector<int32_t> MtpDraft::draft(int seq, int32_t pending, int k, int trunk_past) {
    Sequence& s = seqs_.at(static_cast<size_t>(seq));
    follow_trunk(s, trunk_past);
    std::vector<int32_t> out;
    const float* h = hidden_at(s, trunk_past - 1);
    if (k <= 0 || !h || s.held) return out;
    catch_up(seq, s, trunk_past - 1);  // rows a hold left behind
    if (s.past < trunk_past - 1) return out;
    // The row at trunk_past - 1 (the trunk's last hidden state, the pending token) stays: the trunk evaluates
    // that token next. The chained rows after it are dropped again.
    eval_rows(seq, trunk_past - 1, h, &pending, 1, true);
    s.past = trunk_past;
    s.last_next = pending;
    auto greedy = [&] { return argmax({runner_.logits(), block_.hp.n_vocab}); };
    out.push_back(greedy());
    std::vector<float> prev;
    for (int j = 1; j < k && trunk_past + j <= runner_.n_ctx(); ++j) {
        prev.assign(runner_.last_hidden(), runner_.last_hidden() + W_);
        eval_rows(seq, trunk_past + j - 1, prev.data(), &out.back(), 1, true);
        out.push_back(greedy());
    }
    rewind(seq, trunk_past);
    return out;
}

}  // namespace moe

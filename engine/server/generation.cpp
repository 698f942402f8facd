#include "engine/server/generation.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "engine/server/chat_template.h"
#include "engine/server/prompt_cache.h"

namespace moe {

const char* finish_reason_name(FinishReason f) {
    switch (f) {
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::Cancelled: return "cancelled";
        case FinishReason::Error: return "error";
    }
    return "stop";
}

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
constexpr size_t kMemoryTurns = 256;
}  // namespace

// A request in a slot, with everything its generation carries between steps.
struct Generator::Slot {
    int seq = 0;
    bool active = false;
    std::vector<int32_t> cached;  // tokens whose K/V this slot's cache holds, in order
    GenerationRequest req;
    std::promise<GenerationResult> promise;
    GenerationResult r;
    std::optional<Sampler> sampler;
    std::optional<TokenConstraint> constraint;
    std::optional<StreamDecoder> stream;
    std::vector<int32_t> history;
    std::string held;  // text not yet sent: it may be the start of a stop string
    size_t max_stop = 0;
    int drawn = 0;              // tokens drawn so far (the end-of-generation token included)
    std::vector<float> logits;  // for the next draw
    // Speculative decoding: this slot's drafts and their measured costs; a token the last verification chose
    // in place of a rejected draft (taken next instead of a draw; its row is in logits), else -1.
    std::optional<Drafter> drafter;
    int32_t pending = -1;
    Clock::time_point t1;    // generation start
    uint64_t last_used = 0;  // for choosing among equally good free slots
    // Prompt evaluation still going (interleaved with the other slots' decode steps): where it must stop to
    // snapshot a recurrent state, the next of them, and where the evaluated part began.
    bool prefilling = false;
    std::vector<int> cuts;
    size_t next_cut = 0;
    size_t common = 0;
    Clock::time_point t0;
    // The prompt cache's writes of this slot's rows: at most one being written and one waiting.
    std::vector<std::shared_ptr<PromptCache::Pending>> saves;
};

Generator::Generator(const Model& model, std::shared_ptr<const Tokenizer> tok, RunnerOptions opt, size_t max_queue)
    : model_(model), tok_(std::move(tok)), runner_(model, opt), runner_options_(opt), recurrent_(runner_.has_recurrent_state()),
      max_queue_(max_queue) {
    for (int i = 0; i < runner_.n_seq(); ++i) {
        slots_.push_back(std::make_unique<Slot>());
        slots_.back()->seq = i;
    }
    thread_ = std::thread([this] { worker(); });
}

Generator::~Generator() {
    shutdown();
    if (thread_.joinable()) thread_.join();
    if (prompt_cache_) {  // saves read the slots' rows: they end before the runner goes
        prompt_cache_->flush(10);
        for (auto& sp : slots_)
            for (auto& p : sp->saves) prompt_cache_->cancel(p);
    }
}

std::optional<std::future<GenerationResult>> Generator::submit(GenerationRequest req) {
    std::lock_guard<std::mutex> lk(mu_);
    // max_queue counts requests waiting beyond those a free slot takes at once.
    const size_t free_slots = slots_.size() - static_cast<size_t>(slots_busy_.load());
    if (stop_ || queue_.size() >= max_queue_ + free_slots) return std::nullopt;
    std::promise<GenerationResult> p;
    auto f = p.get_future();
    queue_.emplace_back(std::move(req), std::move(p));
    cv_.notify_one();
    return f;
}

size_t Generator::queued() const {
    std::lock_guard<std::mutex> lk(mu_);
    return queue_.size();
}

void Generator::shutdown() {
    std::deque<std::pair<GenerationRequest, std::promise<GenerationResult>>> dropped;
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
        for (auto& c : running_cancels_) c->store(true);
        dropped.swap(queue_);
    }
    cv_.notify_all();
    for (auto& [req, p] : dropped) {
        GenerationResult r;
        r.finish_reason = FinishReason::Cancelled;
        r.error = "the server is shutting down";
        p.set_value(r);
    }
}

void Generator::worker() {
    for (;;) {
        std::vector<std::pair<GenerationRequest, std::promise<GenerationResult>>> admitted;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !queue_.empty() || slots_busy_.load() > 0; });
            if (stop_ && queue_.empty() && slots_busy_.load() == 0) return;
            const int free_slots = static_cast<int>(slots_.size()) - slots_busy_.load();
            while (!queue_.empty() && static_cast<int>(admitted.size()) < free_slots) {
                admitted.push_back(std::move(queue_.front()));
                queue_.pop_front();
                running_cancels_.push_back(admitted.back().first.cancel);
            }
            slots_busy_ += static_cast<int>(admitted.size());
            busy_ = slots_busy_.load() > 0;
        }
        const auto busy_from = Clock::now();
        for (auto& job : admitted) {
            // The free slot whose cache shares the longest prefix with this prompt (least recently used on ties).
            Slot* best = nullptr;
            size_t best_common = 0;
            for (auto& sp : slots_) {
                if (sp->active) continue;
                size_t common = 0;
                const auto& prompt = job.first.prompt;
                while (common < sp->cached.size() && common < prompt.size() && sp->cached[common] == prompt[common]) ++common;
                if (!best || common > best_common || (common == best_common && sp->last_used < best->last_used)) {
                    best = sp.get();
                    best_common = common;
                }
            }
            best->req = std::move(job.first);
            best->promise = std::move(job.second);
            start(*best);
        }
        step();
        stats_.busy_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - busy_from).count());
        if (++steps_ % 16 == 0) publish_counters();
    }
}

void Generator::charge(const std::vector<Slot*>& slots, const ExpertSourceStats& before) {
    if (slots.empty()) return;
    const ExpertSourceStats now = model_.experts->stats();
    const uint64_t n = slots.size();
    auto share = [&](uint64_t total, size_t i) { return total / n + (i == 0 ? total % n : 0); };  // nothing lost
    for (size_t i = 0; i < slots.size(); ++i) {
        RequestExpertIo& io = slots[i]->r.experts;
        io.bytes_read += share(now.bytes_read - before.bytes_read, i);
        io.hits += share(now.hits - before.hits, i);
        io.misses += share(now.misses - before.misses, i);
        io.io_wait_ms += static_cast<double>(now.wait_ns - before.wait_ns) / 1e6 / static_cast<double>(n);
    }
}

std::string Generator::request_io_metrics() const {
    std::lock_guard<std::mutex> lk(expert_stats_mu_);
    return request_bytes_.prometheus("moestream_request_expert_bytes_read", "Expert bytes read from disk per finished request.") +
           request_hit_rate_.prometheus("moestream_request_expert_hit_rate", "Share of a finished request's expert lookups served from RAM.") +
           request_io_wait_.prometheus("moestream_request_expert_wait_seconds", "Time a finished request's forward passes blocked on expert reads.");
}

void Generator::publish_counters() {
    std::lock_guard<std::mutex> lk(expert_stats_mu_);
    expert_stats_ = model_.experts->stats();
    heat_ = runner_.expert_selections();
}

std::vector<uint64_t> Generator::expert_heat() const {
    std::lock_guard<std::mutex> lk(expert_stats_mu_);
    return heat_;
}

void Generator::start(Slot& slot) {
    slot.active = true;
    slot.t1 = Clock::now();
    slot.last_used = ++slot_uses_;
    slot.r = GenerationResult{};
    GenerationResult& r = slot.r;
    const auto& prompt = slot.req.prompt;
    r.prompt_tokens = static_cast<int>(prompt.size());
    try {
        runner_.select_sequence(slot.seq);
        slot.t0 = Clock::now();  // prompt time includes a restore from the prompt cache
        // Reuse the longest common prefix; at least the last prompt token is evaluated to get logits.
        size_t common = 0;
        while (common < slot.cached.size() && common < prompt.size() && slot.cached[common] == prompt[common]) ++common;
        if (common == prompt.size()) --common;
        common = static_cast<size_t>(runner_.truncate(static_cast<int>(common)));  // a recurrent model may go back further
        slot.cached.resize(common);
        common = restore_prefix(slot, common);
        stop_save_above(slot, common);
        slot.common = common;
        r.prompt_reused = static_cast<int>(common);
        const int P = static_cast<int>(prompt.size());
        slot.cuts.clear();
        if (runner_.keeps_snapshots()) {  // a later request may need to go back further than a cut keeps
            for (int h : slot.req.checkpoint_at) slot.cuts.push_back(h);
            slot.cuts.push_back(P - 4);
            for (int p = kCheckpointEvery; p < P; p += kCheckpointEvery) slot.cuts.push_back(p);
            std::erase_if(slot.cuts, [&](int c) { return c <= static_cast<int>(common) || c >= P; });
            std::sort(slot.cuts.begin(), slot.cuts.end());
            slot.cuts.erase(std::unique(slot.cuts.begin(), slot.cuts.end()), slot.cuts.end());
        }
        slot.cuts.push_back(P);
        slot.next_cut = 0;
        slot.prefilling = true;
    } catch (const std::exception& e) { return fail(slot, e.what()); }
    // Alone, the whole prompt now; beside slots that are generating, a chunk per step (prefill_some).
    bool others_decoding = false;
    for (auto& sp : slots_) others_decoding = others_decoding || (sp.get() != &slot && sp->active && !sp->prefilling);
    prefill_some(slot, others_decoding ? kPrefillChunk : INT32_MAX);
}

size_t Generator::restore_prefix(Slot& slot, size_t common) {
    if (!prompt_cache_) return common;
    const auto& prompt = slot.req.prompt;
    // Restoring reads the whole record: worth it for a real gain over what the slot holds.
    const size_t min_gain = static_cast<size_t>(std::min(64, prompt_cache_->min_tokens()));
    const auto match = prompt_cache_->best_match(prompt, static_cast<int>(prompt.size()) - 1, recurrent_);
    if (!match || static_cast<size_t>(match->tokens) < common + min_gain) return common;
    stop_save_above(slot, 0);  // the restore rewrites the slot's rows from position 0
    bool rows_written = false;
    if (auto snapshots = prompt_cache_->restore(*match, runner_.sequence_cache(), rows_written)) {
        runner_.adopt_prefix(match->tokens, std::move(*snapshots));
        slot.cached.assign(prompt.begin(), prompt.begin() + match->tokens);
        slot.r.prompt_restored = match->tokens - static_cast<int>(common);
        return static_cast<size_t>(match->tokens);
    }
    if (!rows_written) return common;  // gone or unreadable before anything was read: the slot's prefix stands
    // A damaged record (logged, counted, removed) overwrote part of the slot's prefix.
    slot.cached.clear();
    return static_cast<size_t>(runner_.truncate(0));
}

void Generator::save_prefix(Slot& slot) {
    const auto& prompt = slot.req.prompt;
    size_t n = prompt.size();
    if (recurrent_) {  // the state exists only where a snapshot was taken
        const auto& cps = runner_.checkpoints();
        n = cps.empty() ? 0 : static_cast<size_t>(cps.back().pos);
    }
    const std::span<const int32_t> prefix(prompt.data(), n);
    if (!prompt_cache_->worth_saving(prefix)) return;  // before copying the snapshots' states
    auto pending = prompt_cache_->save(std::vector<int32_t>(prefix.begin(), prefix.end()), runner_.sequence_cache(),
                                       recurrent_ ? runner_.checkpoints() : std::vector<Runner::Checkpoint>{});
    if (!pending) return;
    // The new record extends this slot's earlier ones: one still waiting is dropped, one being written goes
    // on (an agent's next turn often lands before a long prefix is written; cancelling would never finish).
    std::erase_if(slot.saves, [&](const auto& p) {
        prompt_cache_->cancel_if_queued(p);
        return p->done();
    });
    slot.saves.push_back(std::move(pending));
}

void Generator::stop_save_above(Slot& slot, size_t kept) {
    if (!prompt_cache_) return;
    std::erase_if(slot.saves, [&](const auto& p) {
        // Up to a second of full-speed writing (about 1 GB on an NVMe disk) before the slot takes its rows.
        if (!p->released() && static_cast<size_t>(p->tokens()) > kept) prompt_cache_->finish_or_cancel(p, 1.0);
        return p->released();
    });
}

void Generator::prefill_some(Slot& slot, int budget) {
    GenerationResult& r = slot.r;
    const auto& prompt = slot.req.prompt;
    const int P = static_cast<int>(prompt.size());
    try {
        runner_.select_sequence(slot.seq);
        while (budget > 0 && slot.next_cut < slot.cuts.size()) {
            const int begin = runner_.n_past(), cut = slot.cuts[slot.next_cut];
            const int end = static_cast<int>(std::min<int64_t>(cut, int64_t{begin} + budget));
            const ExpertSourceStats before = model_.experts->stats();
            const auto t_eval = Clock::now();
            runner_.eval(std::span<const int32_t>(prompt.data() + begin, static_cast<size_t>(end - begin)));
            stats_.prompt_eval_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t_eval).count());
            charge({&slot}, before);
            budget -= end - begin;
            if (end == cut) {
                if (cut < P) runner_.checkpoint();
                ++slot.next_cut;
            }
        }
        if (slot.next_cut < slot.cuts.size()) return;  // more next step
        slot.cached.insert(slot.cached.end(), prompt.begin() + static_cast<long>(slot.common), prompt.end());
        stats_.prompt_evaluated += prompt.size() - slot.common;
        r.prompt_ms = ms_since(slot.t0);
        if (prompt_cache_) save_prefix(slot);
        slot.logits.assign(runner_.logits(), runner_.logits() + runner_.n_vocab());
    } catch (const std::exception& e) {
        slot.prefilling = false;
        return fail(slot, e.what());
    }
    slot.prefilling = false;
    slot.sampler.emplace(slot.req.sampling);
    slot.constraint.reset();
    if (slot.req.grammar) slot.constraint.emplace(slot.req.grammar, vocab_trie());
    slot.stream.emplace(*tok_, slot.req.shown_controls);
    slot.history = prompt;
    slot.held.clear();
    slot.max_stop = 0;
    for (const auto& st : slot.req.stop) slot.max_stop = std::max(slot.max_stop, st.size());
    slot.drawn = 0;
    slot.pending = -1;
    if (slot.drafter) slot.drafter->forget_context();
    slot.t1 = Clock::now();
    r.finish_reason = FinishReason::Length;
    if (slot.req.max_tokens <= 0) finish(slot);
}

bool Generator::take_token(Slot& slot, int32_t next, int position) {
    GenerationRequest& req = slot.req;
    GenerationResult& r = slot.r;
    ++slot.drawn;
    if (next < 0) {
        r.finish_reason = FinishReason::Stop;
        return false;
    }  // the grammar allows nothing more
    if (tok_->is_eog(next)) {
        r.finish_reason = FinishReason::Stop;
        return false;
    }
    if (req.logprobs >= 0) {
        const auto lp = token_logprobs(slot.logits, next, req.logprobs, req.sampling.temperature > 0 ? req.sampling.temperature : 1.f);
        TokenLogprob t{next, lp.first, lp.second};
        if (req.on_logprob) req.on_logprob(t);
        r.logprobs.push_back(std::move(t));
    }
    if (slot.constraint) slot.constraint->accept(next);
    stats_.tokens_decoded++;
    r.tokens.push_back(next);
    slot.history.push_back(next);
    slot.held += slot.stream->push(next);
    bool stopped = false;
    for (const auto& s : req.stop) {
        auto pos = slot.held.find(s);
        if (!s.empty() && pos != std::string::npos) {
            slot.held.resize(pos);
            stopped = true;
            r.stop_string = s;
        }
    }
    // Send what can no longer be the beginning of a stop string.
    const size_t keep = stopped ? 0 : std::min(slot.held.size(), slot.max_stop ? slot.max_stop - 1 : 0);
    std::string ready = slot.held.substr(0, slot.held.size() - keep);
    ready.resize(utf8_complete_prefix(ready));
    slot.held.erase(0, ready.size());
    r.text += ready;
    if (req.on_text && !ready.empty() && !req.on_text(ready)) {
        r.finish_reason = FinishReason::Cancelled;
        return false;
    }
    if (stopped || req.finish_now->load()) {
        r.finish_reason = FinishReason::Stop;
        return false;
    }
    if ((position >= 0 ? position : runner_.n_past_of(slot.seq)) >= runner_.n_ctx()) return false;  // context full: finish as "length"
    return slot.drawn < req.max_tokens;
}

void Generator::step() {
    std::vector<int> seqs;
    std::vector<int32_t> tokens;
    std::vector<Slot*> going;
    for (auto& sp : slots_) {
        Slot& slot = *sp;
        if (!slot.active) continue;
        if (slot.req.cancel->load()) {
            slot.r.finish_reason = FinishReason::Cancelled;
            slot.prefilling = false;
            finish(slot);
            continue;
        }
        if (slot.prefilling) {  // a long prompt beside generating slots: one chunk per step
            prefill_some(slot, kPrefillChunk);
            continue;
        }
        if (slot.req.ignore_eos)
            for (int32_t id : tok_->eog_tokens()) slot.logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
        const int32_t next = slot.pending >= 0 ? std::exchange(slot.pending, -1)
                             : slot.constraint ? constrained_sample(*slot.sampler, slot.logits, slot.history, *slot.constraint)
                                               : slot.sampler->sample(slot.logits, slot.history);
        if (!take_token(slot, next)) {
            finish(slot);
            continue;
        }
        seqs.push_back(slot.seq);
        tokens.push_back(next);
        going.push_back(&slot);
    }
    if (tokens.empty()) return;
    // Each drafting slot's drafts, within its token budget, its context and the batch.
    std::vector<std::vector<int32_t>> drafts(going.size());
    bool drafting = false;
    int rows = static_cast<int>(tokens.size());
    for (size_t i = 0; i < going.size(); ++i) {
        Slot& slot = *going[i];
        if (!slot.drafter) continue;
        const int limit = std::min({slot.req.max_tokens - slot.drawn, runner_.n_ctx() - runner_.n_past_of(slot.seq) - 1, kMaxBatchRows - rows});
        drafts[i] = slot.drafter->propose(slot.history, limit, runner_.n_past_of(slot.seq));
        rows += static_cast<int>(drafts[i].size());
        drafting = drafting || !drafts[i].empty();
    }
    const ExpertSourceStats before = model_.experts->stats();
    if (drafting) return verify(going, tokens, drafts, before);
    const auto started = Clock::now();
    try {
        if (tokens.size() == 1) {  // one slot: the single-sequence path (llama.cpp's one-token numerics)
            runner_.select_sequence(seqs[0]);
            runner_.eval(tokens);
        } else {
            // With drafts on, every multi-slot step computes its rows as one-token steps, as verification batches
            // do: each slot's output is then what it gives alone, whichever steps drafted.
            runner_.eval_batch(seqs, tokens, draft_mode_ == DraftMode::Off ? Runner::Rows::Batch : Runner::Rows::OneByOne);
        }
        charge(going, before);
    } catch (const std::exception& e) {
        charge(going, before);
        if (going.size() > 1) return retry_alone(going, tokens);
        for (Slot* slot : going) fail(*slot, e.what());
        return;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    for (size_t i = 0; i < going.size(); ++i) {
        const float* l = runner_.logits(tokens.size() == 1 ? -1 : static_cast<int>(i));
        going[i]->logits.assign(l, l + runner_.n_vocab());
        going[i]->cached.push_back(tokens[i]);
        if (going[i]->drafter) going[i]->drafter->observe(static_cast<int>(tokens.size()), seconds, 0, 0);
    }
}

void Generator::use_drafts(DraftMode mode, int max_draft, StepCost cost, int min_draft) {
    draft_mode_ = mode;
    if (mode == DraftMode::Mtp && !mtp_) {
        mtp_ = std::make_unique<MtpDraft>(model_, runner_options_);  // std::invalid_argument without a block
        runner_.set_hidden_sink(mtp_->hidden_sink());
    }
    for (auto& sp : slots_) {
        if (mode == DraftMode::Off) sp->drafter.reset();
        else sp->drafter.emplace(mode, max_draft, cost);
        if (!sp->drafter) continue;
        sp->drafter->use_mtp(mtp_.get(), sp->seq);
        sp->drafter->set_min_drafts(min_draft);
    }
}

void Generator::verify(const std::vector<Slot*>& going, const std::vector<int32_t>& tokens, const std::vector<std::vector<int32_t>>& drafts,
                       const ExpertSourceStats& before) {
    // One batch: each slot's token, then its drafts; every row with one-token kernels, so each slot's logits
    // are those of decoding it alone.
    std::vector<int> seqs;
    std::vector<int32_t> batch;
    std::vector<size_t> first(going.size());
    std::vector<Runner::Checkpoint> marks(going.size());
    for (size_t i = 0; i < going.size(); ++i) {
        first[i] = batch.size();
        batch.push_back(tokens[i]);
        batch.insert(batch.end(), drafts[i].begin(), drafts[i].end());
        seqs.resize(batch.size(), going[i]->seq);
        if (!drafts[i].empty()) {
            runner_.select_sequence(going[i]->seq);
            marks[i] = runner_.mark();
        }
    }
    const auto started = Clock::now();
    try {
        runner_.eval_batch(seqs, batch, Runner::Rows::OneByOne);
    } catch (const std::exception& e) {  // no position moved: each slot's token again on its own, without drafts
        charge(going, before);
        if (going.size() > 1) return retry_alone(going, tokens);
        return fail(*going[0], e.what());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    charge(going, before);  // before any of them finishes
    // All rows are read before any slot rolls back (a recurrent slot's re-evaluation overwrites the logits).
    std::vector<int> kept(going.size(), 0);
    std::vector<bool> goes_on(going.size(), true);
    for (size_t i = 0; i < going.size(); ++i) {
        Slot& slot = *going[i];
        auto row_to_slot = [&](size_t row) {
            slot.logits.assign(runner_.logits(static_cast<int>(row)), runner_.logits(static_cast<int>(row)) + runner_.n_vocab());
            if (slot.req.ignore_eos)
                for (int32_t id : tok_->eog_tokens()) slot.logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
        };
        slot.cached.push_back(tokens[i]);
        const int base = marks[i].pos;  // draft j goes to position base + 1 + j
        for (size_t j = 0; j < drafts[i].size(); ++j) {
            row_to_slot(first[i] + j);  // row j judges draft j (and is what take_token's logprobs read)
            // Under a grammar: the token the constrained sampler draws from this row; the draft is kept when it is
            // that token (an independent draw equal to the draft: kept with the draft's probability, and the
            // token emitted either way has the constrained sampler's distribution).
            const Sampler::Verdict v = [&] {
                if (!slot.constraint) return slot.sampler->verify(slot.logits, slot.history, drafts[i][j]);
                const int32_t t = constrained_sample(*slot.sampler, slot.logits, slot.history, *slot.constraint);
                return Sampler::Verdict{t == drafts[i][j], t};
            }();
            if (!v.accepted) {
                slot.pending = v.token;  // taken next step, from this row
                break;
            }
            ++kept[i];
            // The position it would be evaluated at without drafts: the batch already moved the sequence's end.
            const bool more = take_token(slot, v.token, base + 1 + static_cast<int>(j));
            slot.cached.push_back(v.token);
            if (!more) {
                goes_on[i] = false;
                break;
            }
        }
        if (goes_on[i] && kept[i] == static_cast<int>(drafts[i].size())) row_to_slot(first[i] + drafts[i].size());  // the next draw's row
    }
    for (size_t i = 0; i < going.size(); ++i) {
        Slot& slot = *going[i];
        const int n = static_cast<int>(drafts[i].size());
        if (n > 0) {
            try {
                runner_.select_sequence(slot.seq);
                keep_verified(runner_, marks[i], std::span<const int32_t>(batch).subspan(first[i], static_cast<size_t>(1 + n)), 1 + kept[i]);
            } catch (const std::exception& e) {  // a recurrent slot's re-evaluation could not read an expert
                fail(slot, e.what());
                continue;
            }
            slot.r.drafted += n;
            slot.r.draft_accepted += kept[i];
            stats_.draft_steps++;
            stats_.draft_tokens += static_cast<uint64_t>(n);
            stats_.draft_accepted += static_cast<uint64_t>(kept[i]);
        }
        if (slot.drafter) slot.drafter->observe(static_cast<int>(batch.size()), seconds, n, kept[i]);
        if (!goes_on[i]) finish(slot);
    }
}

void Generator::fail(Slot& slot, const std::string& error) {
    slot.r.finish_reason = FinishReason::Error;
    slot.r.error = error;
    slot.cached.clear();  // the cache is in an unknown state: start over next time
    runner_.select_sequence(slot.seq);
    runner_.truncate(0);
    finish(slot);
}

void Generator::retry_alone(const std::vector<Slot*>& going, const std::vector<int32_t>& tokens) {
    // A batched step failed (an expert read failed: disk error): the step wrote no position yet (n_past moves
    // at its end) and rows it half wrote are rewritten, so each slot's token goes again on its own. Only the
    // requests that need what cannot be read fail; the others keep generating.
    for (size_t i = 0; i < going.size(); ++i) {
        Slot& slot = *going[i];
        const ExpertSourceStats before = model_.experts->stats();
        try {
            runner_.select_sequence(slot.seq);
            if (recurrent_) {
                // The failed step had advanced this slot's recurrent state in place, layer by layer: back to its
                // newest snapshot, then what followed it, the prompt's rest at once and each generated token alone.
                const int at = runner_.n_past(), P = static_cast<int>(slot.req.prompt.size());
                int p = at > 0 ? runner_.truncate(at - 1) : 0;
                if (p < std::min(P, at)) {
                    runner_.eval(std::span<const int32_t>(slot.cached.data() + p, static_cast<size_t>(std::min(P, at) - p)));
                    p = std::min(P, at);
                }
                for (; p < at; ++p) runner_.eval(std::span<const int32_t>(slot.cached.data() + p, 1));
            }
            runner_.eval(std::span<const int32_t>(&tokens[i], 1));
            charge({&slot}, before);
        } catch (const std::exception& e) {
            charge({&slot}, before);
            fail(slot, e.what());
            continue;
        }
        slot.logits.assign(runner_.logits(), runner_.logits() + runner_.n_vocab());
        slot.cached.push_back(tokens[i]);
    }
}

void Generator::finish(Slot& slot) {
    GenerationResult r = std::move(slot.r);
    if (slot.stream && r.finish_reason != FinishReason::Cancelled && r.finish_reason != FinishReason::Error) {
        slot.held += slot.stream->flush();
        r.text += slot.held;
        if (slot.req.on_text && !slot.held.empty()) slot.req.on_text(slot.held);
    }
    slot.held.clear();
    r.gen_ms = ms_since(slot.t1);
    r.completion_tokens = static_cast<int>(r.tokens.size());
    stats_.requests++;
    stats_.prompt_tokens += static_cast<uint64_t>(r.prompt_tokens);
    stats_.prompt_reused += static_cast<uint64_t>(r.prompt_reused);
    stats_.generated_tokens += static_cast<uint64_t>(r.completion_tokens);
    stats_.gen_ms_total += static_cast<uint64_t>(r.gen_ms);
    if (r.completion_tokens > 1 && r.gen_ms > 0) stats_.last_tok_per_s = (r.completion_tokens - 1) * 1000.0 / r.gen_ms;
    if (r.finish_reason != FinishReason::Cancelled && r.finish_reason != FinishReason::Error) remember(r.text, r.tokens);
    publish_counters();
    {
        std::lock_guard<std::mutex> lk(expert_stats_mu_);
        request_bytes_.add(static_cast<double>(r.experts.bytes_read));
        const uint64_t lookups = r.experts.hits + r.experts.misses;
        if (lookups) request_hit_rate_.add(static_cast<double>(r.experts.hits) / static_cast<double>(lookups));
        request_io_wait_.add(r.experts.io_wait_ms / 1e3);
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        std::erase(running_cancels_, slot.req.cancel);
        slots_busy_--;
        busy_ = slots_busy_.load() > 0;
    }
    slot.active = false;
    slot.sampler.reset();
    slot.constraint.reset();
    slot.stream.reset();
    slot.req.on_text = nullptr;
    slot.req.on_logprob = nullptr;
    slot.promise.set_value(std::move(r));
}

void Generator::remember(const std::string& raw_text, const std::vector<int32_t>& tokens) {
    for (const std::string& key : {raw_text, strip_thinking(raw_text)}) remember_turn(key, tokens);
}

void Generator::remember_turn(const std::string& raw_key, const std::vector<int32_t>& tokens) {
    // Key by the text as the client receives it: invalid UTF-8 replaced by U+FFFD on the wire.
    using json = nlohmann::json;
    const std::string key = json::parse(json(raw_key).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
    std::lock_guard<std::mutex> lk(memory_mu_);
    if (!memory_.count(key)) memory_order_.push_back(key);
    memory_[key] = tokens;
    while (memory_order_.size() > kMemoryTurns) {
        memory_.erase(memory_order_.front());
        memory_order_.pop_front();
    }
}

std::shared_ptr<const VocabTrie> Generator::vocab_trie() {
    if (!trie_) {
        // Special tokens by their text (a forced call's markers are special tokens in DeepSeek and Kimi);
        // end-of-generation tokens empty: the grammar decides when the output may end.
        std::vector<std::string> pieces(static_cast<size_t>(tok_->n_vocab()));
        for (int32_t id = 0; id < tok_->n_vocab(); ++id)
            if (!tok_->is_eog(id)) pieces[static_cast<size_t>(id)] = tok_->piece(id, true);
        trie_ = std::make_shared<VocabTrie>(std::move(pieces));
    }
    return trie_;
}

int32_t Generator::constrained_sample(Sampler& sampler, std::span<const float> logits, const std::vector<int32_t>& history,
                                      TokenConstraint& constraint) {
    const auto t0 = Clock::now();
    int32_t next = sampler.sample(logits, history);
    stats_.grammar_tokens++;
    if (!constraint.allows(next, tok_->is_eog(next))) {
        std::vector<uint8_t> allowed;
        constraint.mask(allowed);
        const bool can_end = constraint.can_end();
        masked_.assign(logits.begin(), logits.end());
        bool any = false;
        for (size_t i = 0; i < masked_.size(); ++i) {
            const bool ok = tok_->is_eog(static_cast<int32_t>(i)) ? can_end : allowed[i] != 0;
            if (!ok) masked_[i] = -std::numeric_limits<float>::infinity();
            any = any || ok;
        }
        next = any ? sampler.sample(masked_, history) : -1;
        stats_.grammar_masks++;
    }
    stats_.grammar_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    return next;
}

ExpertSourceStats Generator::expert_stats() const {
    std::lock_guard<std::mutex> lk(expert_stats_mu_);
    return expert_stats_;
}

std::optional<std::vector<int32_t>> Generator::remembered_turn(const std::string& key) const {
    std::lock_guard<std::mutex> lk(memory_mu_);
    auto it = memory_.find(key);
    if (it == memory_.end()) return std::nullopt;
    return it->second;
}

}  // namespace moe

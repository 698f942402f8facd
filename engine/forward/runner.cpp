// The layer loop of the fast forward pass and its matmul helpers; attention and feed-forward kinds live in
// their own files.
#include "engine/forward/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/kernels/attention.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/forward/residual_mix.h"
#include "engine/forward/routing.h"

namespace moe {

// A file made by ik_llama.cpp is computed as ik's AVX2 build computes it (the build ../shared/oracle recorded; ik's
// AVX-512 build has other kernels), whatever llama.cpp build the host would default to.
static RunnerOptions numerics_for(const Model& m, RunnerOptions opt) {
    if (m.ik_numerics) opt.flavor = kernels::Flavor::Avx2;
    return opt;
}

Runner::Runner(const Model& model, RunnerOptions opt)
    : m_(model), opt_(numerics_for(model, opt)), pool_(opt.n_threads),
      kt_(model.ik_numerics ? ik::kernel_table(kernels::active_table(opt_.flavor)) : kernels::active_table(opt_.flavor)),
      kv_kt_(kernels::active_table(opt_.flavor)),
      fops_(model.ik_numerics ? ik::float_ops(kernels::simd_float_ops(opt_.flavor)) : kernels::simd_float_ops(opt_.flavor)),
      attend_(model.ik_numerics ? fops_.attend : kernels::attention_kernel(opt_.flavor)), attend_typed_(kernels::typed_attention_kernel(opt_.flavor)),
      attend_tiled_(model.ik_numerics ? fops_.attend_tiled : kernels::tiled_attention_kernel(opt_.flavor)),
      attend_tiled_group_(model.ik_numerics ? nullptr : kernels::tiled_attention_group_kernel(opt_.flavor)) {
    const Hparams& hp = m_.hp;
    if (opt_.n_ctx <= 0) throw std::invalid_argument("context size must be positive");
    if (opt_.n_batch <= 0) opt_.n_batch = 512;
    if (opt_.n_seq < 1) throw std::invalid_argument("the number of sequences must be positive");
    for (int i = 0; i < opt_.n_seq; ++i) caches_.push_back(SequenceCache::make(m_, opt_.n_ctx, opt_.kv_types(), opt_.swa_full ? 0 : opt_.n_batch));
    past_.assign(static_cast<size_t>(opt_.n_seq), 0);
    seq_checkpoints_.resize(static_cast<size_t>(opt_.n_seq));
    select_sequence(0);
    scratch_plan(m_, opt_, [this](auto member, size_t n) { (this->*member).resize(n); });
    attention_units_.resize(kAttentionKindCount);
    for (AttentionKind kind : attention_kinds_of(m_)) attention_units_[static_cast<size_t>(kind)] = attention_kind_info(kind).make(m_, opt_);
    ffn_units_.resize(kFeedForwardKindCount);
    for (FeedForwardKind kind : feed_forward_kinds_of(m_)) ffn_units_[static_cast<size_t>(kind)] = feed_forward_kind_info(kind).make(m_, opt_);
    const MoeConfig& mc = hp.moe;
    selections_.assign(size_t{hp.n_layer} * std::max(mc.n_expert, 1u), 0);
}

template <class Size>
void Runner::scratch_plan(const Model& m, const RunnerOptions& opt, Size&& size) {
    const Hparams& hp = m.hp;
    const size_t B = batch_rows(opt), E = hp.n_embd;
    size(&Runner::x_, B * E);
    if (opt.n_seq > 1) {
        size(&Runner::seg_in_, B * E);
        size(&Runner::seg_out_, B * E);
    }
    size(&Runner::xn_, B * E);
    size(&Runner::tmp_, B * E);
    if (hp.res_block) size(&Runner::res_banked_, B * E * ((hp.n_layer + hp.res_block - 1) / hp.res_block));  // res_banks()
    if (const HyperConfig& hc = hp.hyper; hc.n) {
        size(&Runner::hc_, B * hc.n * E);
        size(&Runner::hc_norm_, B * hc.n * E);
        size(&Runner::hc_mixes_, B * hc.n_mix());
        size(&Runner::hc_in_, B * E);
        size(&Runner::hc_mix_, B);
    }
}

uint64_t Runner::working_bytes(const Model& layout, const RunnerOptions& opt) {
    uint64_t total = 0;
    scratch_plan(layout, opt, [&total](auto member, size_t n) {
        using Vec = std::remove_reference_t<decltype(std::declval<Runner&>().*member)>;
        total += n * sizeof(typename Vec::value_type);
    });
    const Hparams& hp = layout.hp;
    const uint64_t B = uint64_t{batch_rows(opt)};
    total += static_cast<uint64_t>(std::max(opt.n_seq, 1)) * hp.n_vocab * 4;  // one logits row per sequence
    // Grown on first use, counted here at their largest, in f32 (the widest activation type; quantized ones take
    // about a quarter). act_: one matmul's rows, or a group's (up to deepseek4's seven projections of one
    // input), or a per-head matmul's heads.
    const MoeConfig& mc = hp.moe;
    const uint64_t widest = std::max<uint64_t>({hp.n_embd, mc.n_ff_exp, hp.n_ff_dense, mc.n_ff_shexp, hp.gqa.n_head * hp.gqa.head_dim,
                                                hp.mla.n_head * hp.mla.v_head, hp.mla.q_lora_rank, hp.ssm.state * hp.ssm.n_v_heads,
                                                hp.csa.q_lora_rank, uint64_t{hp.csa.out_groups} * hp.csa.out_rank});
    const uint64_t heads_width = std::max<uint64_t>(
        {uint64_t{hp.mla.n_head} * std::max(hp.mla.qk_nope, hp.mla.kv_lora_rank), uint64_t{hp.csa.n_head} * hp.csa.head_dim});
    total += B * std::max(8 * widest, heads_width) * 4;
    // kv_f32_: a batch's f32 copy of one layer's keys (in tiles of 64 rows) and values, n_ctx positions.
    const uint64_t rows = static_cast<uint64_t>(opt.n_ctx) + 64;
    uint64_t kv_f32 = 0;
    for (const Layer& L : layout.layers) {
        if (L.attn == AttentionKind::Gqa) kv_f32 = std::max(kv_f32, uint64_t{hp.gqa.n_head_kv} * 2 * hp.gqa.head_dim);
        if (L.attn == AttentionKind::Mla) kv_f32 = std::max(kv_f32, uint64_t{hp.mla.kv_lora_rank} * 2 + hp.mla.qk_rope);
    }
    total += rows * kv_f32 * 4;
    // kv_cast_: an f32 cache's layer in f16 for its attention, n_ctx positions.
    if (opt.cache_type_k == GgmlType::F32 || opt.cache_type_v == GgmlType::F32) total += rows * kv_f32 * 2;
    // split_partials_: a split step's chunk results, per row (at most kSplitGroupRows), head and thread.
    const uint64_t heads = std::max(hp.gqa.n_head, hp.mla.n_head), dv = std::max(hp.gqa.head_dim, hp.mla.kv_lora_rank);
    total += uint64_t{kSplitGroupRows} * heads * static_cast<uint64_t>(std::max(opt.n_threads, 1)) * (dv + 2) * 4;
    total += uint64_t{hp.n_layer} * std::max(hp.moe.n_expert, 1u) * 8;  // routing counters
    for (AttentionKind kind : attention_kinds_of(layout)) total += attention_kind_info(kind).scratch_bytes(layout, opt);
    for (FeedForwardKind kind : feed_forward_kinds_of(layout)) total += feed_forward_kind_info(kind).scratch_bytes(layout, opt);
    return total;
}

void Runner::select_sequence(int seq) {
    if (seq < 0 || seq >= static_cast<int>(caches_.size()))
        throw std::out_of_range("sequence " + std::to_string(seq) + " (the runner has " + std::to_string(caches_.size()) + ")");
    active_ = seq;
    cache_ = &caches_[static_cast<size_t>(seq)];
    checkpoints_ = &seq_checkpoints_[static_cast<size_t>(seq)];
    n_past_ = past_[static_cast<size_t>(seq)];
}

int Runner::truncate(int n) {
    if (n < 0 || n > n_past_) throw std::out_of_range("truncate beyond the cached positions");
    auto kept = [&](int p) { return past_[static_cast<size_t>(active_)] = n_past_ = p; };
    if (n == n_past_) return kept(n);
    while (!checkpoints_->empty() && checkpoints_->back().pos > n) checkpoints_->pop_back();
    if (!cache_->has_recurrent() && n >= cache_->reach()) return kept(n);
    if (checkpoints_->empty()) {
        cache_->reset_recurrent();
        cache_->high = 0;  // everything again from position 0
        return kept(0);
    }
    const Checkpoint& c = checkpoints_->back();
    if (cache_->has_recurrent()) cache_->restore_recurrent(c.state);
    if (cache_->has_ring()) cache_->restore_window(c.pos, c.window);
    return kept(c.pos);
}

void Runner::checkpoint() {
    if (!keeps_snapshots() || opt_.max_checkpoints <= 0) return;
    while (!checkpoints_->empty() && checkpoints_->back().pos >= n_past_) checkpoints_->pop_back();
    if (static_cast<int>(checkpoints_->size()) >= opt_.max_checkpoints) checkpoints_->erase(checkpoints_->begin());
    Checkpoint c{n_past_, {}, {}};
    if (cache_->has_recurrent()) cache_->save_recurrent(c.state);
    if (cache_->has_ring()) cache_->save_window(n_past_, c.window);
    checkpoints_->push_back(std::move(c));
}

Runner::Checkpoint Runner::mark() const {
    Checkpoint c{n_past_, {}, {}};
    if (cache_->has_recurrent()) cache_->save_recurrent(c.state);
    return c;
}

void Runner::rewind(const Checkpoint& mark) {
    if (mark.pos < 0 || mark.pos > n_past_) throw std::out_of_range("rewind beyond the cached positions");
    if (mark.pos < cache_->reach()) throw std::logic_error("rewind further back than the sliding-window ring keeps");
    if (cache_->has_recurrent()) {
        if (mark.state.empty()) throw std::invalid_argument("rewind: a recurrent sequence needs the mark's state");
        cache_->restore_recurrent(mark.state);
    }
    while (!checkpoints_->empty() && checkpoints_->back().pos > mark.pos) checkpoints_->pop_back();
    past_[static_cast<size_t>(active_)] = n_past_ = mark.pos;
}

void Runner::adopt_prefix(int n, std::vector<Checkpoint> snapshots) {
    if (n < 0 || n > opt_.n_ctx) throw std::out_of_range("adopt_prefix beyond the context");
    std::erase_if(snapshots, [&](const Checkpoint& c) { return c.pos > n; });
    if (cache_->has_recurrent()) {
        if (snapshots.empty() || snapshots.back().pos != n) throw std::invalid_argument("a recurrent prefix needs the state at its end");
        cache_->restore_recurrent(snapshots.back().state);
    }
    // Rows written from outside up to n (rings: position order, so the ring holds the last ones).
    cache_->high = n;
    const auto keep = static_cast<ptrdiff_t>(std::max(0, opt_.max_checkpoints));
    if (static_cast<ptrdiff_t>(snapshots.size()) > keep) snapshots.erase(snapshots.begin(), snapshots.end() - keep);
    *checkpoints_ = std::move(snapshots);
    past_[static_cast<size_t>(active_)] = n_past_ = n;
}

const float* Runner::logits(int i) const {
    if (logits_rows_ == 0) throw std::logic_error("no logits: eval() has not run");
    if (i < 0) i = logits_rows_ - 1;
    return logits_.data() + static_cast<size_t>(i) * m_.hp.n_vocab;
}

void Runner::matmul(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int n_tok,
                    float* out, int64_t out_stride, bool dense, bool strided) {
    const size_t ab = kernels::activation_bytes(type, cols);
    if (act_.size() < ab * n_tok) act_.resize(ab * n_tok);
    for (int t = 0; t < n_tok; ++t) kernels::prepare_activations(type, x + t * x_stride, act_.data() + t * ab, cols);
    // F32 weights read strided activations directly in llama.cpp, which keeps them off llamafile's GEMM.
    const bool gemm_ok = dense && !(strided && type == GgmlType::F32);
    const kernels::MatmulDots dots = kernels::matmul_dots(kt_, type, rows, cols, kernel_rows(n_tok), gemm_ok, opt_.n_threads);
    const uint8_t* act = act_.data();
    parallel_rows(rows, dots.row_group,
                  [&](int64_t r0, int64_t r1) { matmul_rows(dots, w, row_bytes, cols, r0, r1, act, ab, n_tok, out, out_stride); });
}

// Rows [r0, r1) of a matmul for n_tok prepared activation rows: out[t * out_stride + r]. With row kernels, a
// slice of rows small enough to stay in cache meets every token before the next slice is read, and each kernel
// call covers the slice (several rows per register where the kernel can). Results are the per-row dot's bits.
void matmul_rows(const kernels::MatmulDots& dots, const uint8_t* w, size_t row_bytes, int64_t cols, int64_t r0, int64_t r1, const uint8_t* act,
                 size_t act_bytes, int n_tok, float* out, int64_t out_stride) {
    const int n_grouped = std::min(dots.n_grouped, n_tok);
    if (n_tok > 1 && (n_grouped == n_tok || dots.single_tile) && (n_grouped == 0 || dots.grouped_tile)) {
        const int64_t slice = std::max<int64_t>(8, static_cast<int64_t>((size_t{96} << 10) / row_bytes) & ~int64_t{7});
        for (int64_t a = r0; a < r1; a += slice) {
            const int64_t b = std::min(r1, a + slice);
            const uint8_t* wa = w + a * row_bytes;
            if (n_grouped > 0) dots.grouped_tile(cols, wa, row_bytes, b - a, act, act_bytes, n_grouped, out + a, out_stride);
            if (n_grouped < n_tok)
                dots.single_tile(cols, wa, row_bytes, b - a, act + n_grouped * act_bytes, act_bytes, n_tok - n_grouped,
                                 out + n_grouped * out_stride + a, out_stride);
        }
        return;
    }
    bool row_kernels = true;
    for (int t = 0; t < n_tok && row_kernels; ++t) row_kernels = dots.rows_at(t) != nullptr;
    if (!row_kernels) {
        for (int64_t r = r0; r < r1; ++r) {
            const uint8_t* row = w + r * row_bytes;
            for (int t = 0; t < n_tok; ++t) out[t * out_stride + r] = dots.at(t)(cols, row, act + t * act_bytes);
        }
        return;
    }
    const int64_t slice = n_tok == 1 ? r1 - r0 : std::max<int64_t>(8, static_cast<int64_t>((size_t{96} << 10) / row_bytes) & ~int64_t{7});
    for (int64_t a = r0; a < r1; a += slice) {
        const int64_t b = std::min(r1, a + slice);
        for (int t = 0; t < n_tok; ++t) dots.rows_at(t)(cols, w + a * row_bytes, row_bytes, b - a, act + t * act_bytes, out + t * out_stride + a);
    }
}

void Runner::matmul_group(std::initializer_list<MatmulOut> outs, const float* x, int64_t x_stride, int n_tok) {
    struct Part {
        MatmulOut o;
        size_t act_bytes, act_off;
        int64_t first_row;
        kernels::MatmulDots dots;
    };
    for (const MatmulOut& o : outs)
        if (kernels::matmul_dots(kt_, o.w->type, o.w->ne1, o.w->ne0, kernel_rows(n_tok), true, opt_.n_threads).row_group > 1) {
            // Interleaved rows cannot share one loop's arbitrary row ranges: one matmul each.
            for (const MatmulOut& p : outs) matmul(*p.w, x, x_stride, n_tok, p.out, p.out_stride);
            return;
        }
    std::vector<Part> parts;
    size_t total = 0;
    int64_t rows = 0;
    for (const MatmulOut& o : outs) {
        const size_t ab = kernels::activation_bytes(o.w->type, o.w->ne0);
        parts.push_back({o, ab, total, rows, kernels::matmul_dots(kt_, o.w->type, o.w->ne1, o.w->ne0, kernel_rows(n_tok), true, opt_.n_threads)});
        total += ab * static_cast<size_t>(n_tok);
        rows += o.w->ne1;
    }
    if (act_.size() < total) act_.resize(total);
    for (const Part& p : parts)
        for (int t = 0; t < n_tok; ++t)
            kernels::prepare_activations(p.o.w->type, x + t * x_stride, act_.data() + p.act_off + t * p.act_bytes, p.o.w->ne0);
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (const Part& p : parts) {
            // This thread's share of this tensor's rows.
            const int64_t a = std::max(r0, p.first_row) - p.first_row, b = std::min(r1, p.first_row + p.o.w->ne1) - p.first_row;
            if (a >= b) continue;
            const Tensor& w = *p.o.w;
            const uint8_t* act = act_.data() + p.act_off;
            matmul_rows(p.dots, w.data, w.row_bytes, w.ne0, a, b, act, p.act_bytes, n_tok, p.o.out, p.o.out_stride);
        }
    });
}

void Runner::matmul_heads(const Tensor& w, int heads, int64_t rows, const float* x, int64_t x_head, int64_t x_stride, int n_tok, float* out,
                          int64_t out_head, int64_t out_stride) {
    const int64_t cols = w.ne0;
    const size_t ab = kernels::activation_bytes(w.type, cols);
    const size_t need = ab * static_cast<size_t>(n_tok) * heads;
    if (act_.size() < need) act_.resize(need);
    for (int h = 0; h < heads; ++h)
        for (int t = 0; t < n_tok; ++t)
            kernels::prepare_activations(w.type, x + h * x_head + t * x_stride, act_.data() + (static_cast<size_t>(h) * n_tok + t) * ab, cols);
    // Each head is a MUL_MAT over a strided view of the activations (permuted heads).
    const kernels::MatmulDots dots = kernels::matmul_dots(kt_, w.type, rows, cols, kernel_rows(n_tok), w.type != GgmlType::F32, opt_.n_threads);
    // An interleaved form's group must not straddle two heads (the loaders refuse such files; kept
    // here so no kernel ever meets a cut group).
    if (rows % dots.row_group != 0)
        throw std::invalid_argument(type_name(static_cast<uint32_t>(w.type)) + " stores rows in groups of " + std::to_string(dots.row_group) +
                                    " but each of this matrix's " + std::to_string(heads) + " heads has " + std::to_string(rows) + " rows");
    if (n_tok == 1 && dots.single_rows) {  // decode: each head's rows in one kernel call
        pool_.parallel_for(heads, [&](int64_t h0, int64_t h1) {
            for (int64_t h = h0; h < h1; ++h)
                dots.single_rows(cols, w.row(h * rows), w.row_bytes, rows, act_.data() + static_cast<size_t>(h) * ab, out + h * out_head);
        });
        return;
    }
    parallel_rows(static_cast<int64_t>(heads) * rows, dots.row_group, [&](int64_t i0, int64_t i1) {
        while (i0 < i1) {  // this thread's rows, head by head
            const int64_t h = i0 / rows, r = i0 % rows, end = std::min(i1, (h + 1) * rows) - h * rows;
            matmul_rows(dots, w.row(h * rows), w.row_bytes, cols, r, end, act_.data() + static_cast<size_t>(h) * n_tok * ab, ab, n_tok,
                        out + h * out_head, out_stride);
            i0 += end - r;
        }
    });
}

void Runner::eval(std::span<const int32_t> tokens, bool want_all_logits, Rows rows) {
    if (tokens.empty()) return;
    if (static_cast<int64_t>(n_past_) + static_cast<int64_t>(tokens.size()) > opt_.n_ctx)
        throw std::length_error("the prompt needs " + std::to_string(n_past_ + tokens.size()) + " positions but the context holds " +
                                std::to_string(opt_.n_ctx));
    for (int32_t t : tokens)
        if (t < 0 || t >= static_cast<int32_t>(m_.hp.n_vocab))
            throw std::out_of_range("token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(m_.hp.n_vocab - 1) + ")");
    const int total = static_cast<int>(tokens.size());
    logits_rows_ = want_all_logits ? total : 1;
    logits_.resize(static_cast<size_t>(logits_rows_) * m_.hp.n_vocab);
    for (int off = 0; off < total; off += opt_.n_batch) {
        const int n = std::min(opt_.n_batch, total - off);
        segs_ = {{0, n, active_}};
        const bool last_chunk = off + n == total;
        if (want_all_logits || last_chunk) eval_chunk(tokens.data() + off, n, want_all_logits, want_all_logits ? off : -1, rows);
        else eval_chunk(tokens.data() + off, n, false, -2, rows);
    }
}

void Runner::set_hidden_sink(std::function<void(const HiddenRows&)> sink) {
    on_hidden_ = std::move(sink);
    const size_t rows = on_hidden_ ? x_.size() : 0;
    for (auto* b : {&hid_save_, &hid_pre_, &hid_post_}) b->assign(rows, 0.f);
}

uint64_t Runner::hidden_sink_bytes(const Model& layout, const RunnerOptions& opt) {
    return 3ull * uint64_t{batch_rows(opt)} * layout.hp.n_embd * sizeof(float);
}

void Runner::eval_embedded(const float* rows, int n, bool want_logits) {
    if (n <= 0) return;
    if (n_past_ + n > opt_.n_ctx) throw std::length_error("the context holds " + std::to_string(opt_.n_ctx) + " positions");
    logits_rows_ = want_logits ? 1 : 0;
    logits_.resize(static_cast<size_t>(logits_rows_) * m_.hp.n_vocab);
    const size_t W = static_cast<size_t>(hidden_width(m_));
    for (int off = 0; off < n; off += opt_.n_batch) {
        const int c = std::min(opt_.n_batch, n - off);
        segs_ = {{0, c, active_}};
        eval_chunk(nullptr, c, false, want_logits && off + c == n ? -1 : -2, Rows::Batch, rows + static_cast<size_t>(off) * W);
    }
}

void Runner::eval_batch(std::span<const int> seqs, std::span<const int32_t> tokens, Rows rows) {
    if (seqs.size() != tokens.size() || tokens.empty()) throw std::invalid_argument("eval_batch: one sequence per token");
    if (tokens.size() > static_cast<size_t>(opt_.n_batch)) throw std::invalid_argument("eval_batch: more tokens than the batch holds");
    segs_.clear();
    std::vector<bool> seen(caches_.size(), false);
    for (size_t i = 0; i < tokens.size(); ++i) {
        const int s = seqs[i];
        if (tokens[i] < 0 || tokens[i] >= static_cast<int32_t>(m_.hp.n_vocab))
            throw std::out_of_range("token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
        if (i > 0 && s == seqs[i - 1]) {  // the sequence's next position: the same segment
            segs_.back().n++;
        } else {
            if (s < 0 || s >= static_cast<int>(caches_.size()) || seen[static_cast<size_t>(s)])
                throw std::invalid_argument("eval_batch: each sequence's tokens must be valid and together");
            seen[static_cast<size_t>(s)] = true;
            segs_.push_back({static_cast<int>(i), 1, s});
        }
        if (past_[static_cast<size_t>(s)] + segs_.back().n > opt_.n_ctx)
            throw std::length_error("sequence " + std::to_string(s) + " has no context left");
    }
    const int n = static_cast<int>(tokens.size());
    logits_rows_ = n;
    logits_.resize(static_cast<size_t>(n) * m_.hp.n_vocab);
    eval_chunk(tokens.data(), n, true, 0, rows);
}

void Runner::attention_kind(uint32_t l, int n) {
    LayerContext cx(*this);
    attention_units_[static_cast<size_t>(m_.layers[l].attn)]->forward(cx, l, n);
}

void Runner::attention_by_sequence(uint32_t l, int n) {
    if (segs_.size() == 1 || attention_units_[static_cast<size_t>(m_.layers[l].attn)]->splits_segments()) {
        // One sequence, or a kind that splits the rows by sequence itself.
        select_sequence(segs_[0].seq);
        return attention_kind(l, n);
    }
    // Each sequence's rows through the attention kind on their own (they read and write their own cache at
    // their own positions): its rows moved to the front of xn_, its output collected from the front of tmp_.
    const size_t E = m_.hp.n_embd;
    const int keep = active_;
    for (const Segment& sg : segs_) {
        select_sequence(sg.seq);
        std::copy_n(xn_.begin() + static_cast<long>(sg.row0 * E), sg.n * E, seg_in_.begin());
        std::swap(xn_, seg_in_);
        attention_kind(l, sg.n);
        std::swap(xn_, seg_in_);
        std::copy_n(tmp_.begin(), sg.n * E, seg_out_.begin() + static_cast<long>(sg.row0 * E));
    }
    std::copy_n(seg_out_.begin(), n * E, tmp_.begin());
    select_sequence(keep);
}

// out_base >= 0: write logits of all n tokens at row out_base; -1: last token only at row 0; -2: none.
void Runner::eval_chunk(const int32_t* tokens, int n, bool want_all_logits, int out_base, Rows row_mode, const float* embedded) {
    one_by_one_ = row_mode == Rows::OneByOne;  // read by kernel_rows() while this chunk runs
    struct Reset {
        bool& flag;
        ~Reset() { flag = false; }
    } reset{one_by_one_};
    const Hparams& hp = m_.hp;
    const int E = static_cast<int>(hp.n_embd);
    const bool hyper = hp.hyper.n > 0;
    if (embedded && hyper) std::copy_n(embedded, static_cast<size_t>(n) * hp.hyper.n * E, hc_.begin());  // every stream given
    else if (embedded) std::copy_n(embedded, static_cast<size_t>(n) * E, x_.begin());
    else
        for (int t = 0; t < n; ++t) kernels::dequantize_row(m_.tok_embd.type, m_.tok_embd.row(tokens[t]), &x_[t * E], E);
    last_layer_rows_ = want_all_logits ? n : (out_base == -2 ? 0 : 1);
    // Rows are stored from here on (before any layer may fail), so a ring counts them as written.
    for (const Segment& sg : segs_) {
        SequenceCache& c = caches_[static_cast<size_t>(sg.seq)];
        c.high = std::max(c.high, past_[static_cast<size_t>(sg.seq)] + sg.n);
    }

    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const auto chunk_start = Clock::now();
    const uint64_t wait_start = opt_.routing_trace ? m_.experts->stats().wait_ns : 0;
    if (opt_.routing_trace) opt_.routing_trace->begin_step(static_cast<uint32_t>(n));
    m_.experts->begin_step(static_cast<uint32_t>(n));
    n_banked_ = 0;
    if (tokens) row_tokens_.assign(tokens, tokens + n);
    else row_tokens_.assign(static_cast<size_t>(n), 0);
    bool hidden_computed = false;
    const uint32_t bank_every = hp.res_block;
    if (hyper && !embedded)  // every copy of the stream starts as the embedding
        for (int t = 0; t < n; ++t)
            for (uint32_t h = 0; h < hp.hyper.n; ++h) std::copy_n(&x_[t * E], E, &hc_[(t * hp.hyper.n + h) * E]);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        const Layer& L = m_.layers[l];
        if (hyper) hyper_pre(L.hc_attn, n);
        mixed_norm(L.attn_res_score, L.attn_norm, n);
        // Residual attention: a banking layer's stream restarts from its attention output.
        const bool banks = bank_every && l % bank_every == 0;
        if (banks) bank_input(n);
        const auto attention_start = Clock::now();
        attention_by_sequence(l, n);
        stats_.attention_seconds += seconds_since(attention_start);
        if (hyper) hyper_post(tmp_.data(), n);
        else if (banks) std::copy_n(tmp_.begin(), static_cast<size_t>(n) * E, x_.begin());
        else
            for (int i = 0; i < n * E; ++i) x_[i] += tmp_[i];

        // As llama.cpp: the last layer's feed-forward runs only for the rows whose logits are wanted (moved to
        // the front): none in a middle chunk, else the last token, else all. Nothing else reads the others, and
        // the router's summation order depends on how many rows it sees.
        int n_ffn = n;
        if (l + 1 == hp.n_layer && !want_all_logits && !hp.output_rows_after_norm) {
            n_ffn = last_layer_rows_;
            if (on_hidden_ && n_ffn < n) {
                hidden_all_rows(l, n);
                hidden_computed = true;
            }
            if (n_ffn == 1 && n > 1) std::copy_n(&x_[static_cast<size_t>(n - 1) * E], E, x_.data());
        }
        if (hyper) hyper_pre(L.hc_ffn, n_ffn);
        mixed_norm(L.ffn_res_score, L.ffn_norm, n_ffn);
        if (n_ffn == 0) continue;
        if (hyper) {  // the feed-forward's output alone goes to the remix: it adds onto zeros
            std::copy_n(x_.begin(), static_cast<size_t>(n_ffn) * E, hc_in_.begin());
            std::fill_n(x_.begin(), static_cast<size_t>(n_ffn) * E, 0.f);
        }
        const auto ffn_start = Clock::now();
        feed_forward(l, n_ffn);
        stats_.feed_forward_seconds += seconds_since(ffn_start);
        if (hyper) hyper_post(x_.data(), n_ffn);
    }
    for (const Segment& sg : segs_) past_[static_cast<size_t>(sg.seq)] += sg.n;
    select_sequence(active_);
    stats_.tokens_evaluated += static_cast<uint64_t>(n);
    if (opt_.routing_trace)
        opt_.routing_trace->end_step(static_cast<uint64_t>(seconds_since(chunk_start) * 1e9), m_.experts->stats().wait_ns - wait_start);
    if (out_base == -2) {
        if (on_hidden_) report_hidden(tokens, n, hidden_computed);
        stats_.eval_seconds += seconds_since(chunk_start);
        return;
    }
    if (on_hidden_) report_hidden(tokens, n, hidden_computed);
    const int rows = want_all_logits ? n : 1;
    if (!want_all_logits && n > 1 && hp.output_rows_after_norm) {
        std::copy_n(&x_[static_cast<size_t>(n - 1) * E], E, x_.data());
        if (n_banked_) std::copy_n(&res_banked_[(n - 1) * res_banks() * E], static_cast<size_t>(n_banked_) * E, res_banked_.data());
        if (hyper) std::copy_n(&hc_[static_cast<size_t>(n - 1) * hp.hyper.n * E], hp.hyper.n * E, hc_.data());
    }
    if (hyper) hyper_head(rows);
    mixed_norm(m_.output_res_score, m_.output_norm, rows);
    float* out = logits_.data() + static_cast<size_t>(std::max(0, out_base)) * hp.n_vocab;
    matmul(m_.output, xn_.data(), E, rows, out, hp.n_vocab);
    stats_.eval_seconds += seconds_since(chunk_start);
}

// Speculative prefetch of layer l's experts: its router applied to the current residual stream (which changes
// slowly between layers), the union of every token's selection.
void Runner::predict_and_prefetch(uint32_t l, int n, bool track) {
    const Hparams& hp = m_.hp;
    const Layer& L = m_.layers[l];
    if (!L.moe) return;
    const int E = static_cast<int>(hp.n_embd), X = static_cast<int>(hp.moe.n_expert), U = static_cast<int>(hp.moe.n_expert_used);
    // The last layer's feed-forward runs only for the rows whose logits are wanted (eval_chunk): the last ones.
    const int first = l + 1 == hp.n_layer && !hp.output_rows_after_norm ? n - std::min(n, last_layer_rows_) : 0;
    n -= first;
    if (n == 0) return;
    std::vector<float> norm(static_cast<size_t>(n) * E), logits(static_cast<size_t>(n) * X), w(static_cast<size_t>(U));
    // With residual attention the router reads a mixture of the banked inputs, not the stream alone (which a
    // banking layer restarts): the guess mixes with what is banked so far.
    const size_t banks = res_banks();
    std::vector<float> mixed(hp.res_block ? E : 0), scratch(mixed.size());
    for (int t = 0; t < n; ++t) {
        // (hyper-connections: x_ collects the feed-forward's output; its input is in hc_in_)
        const float* row = hp.hyper.n ? &hc_in_[(first + t) * E] : &x_[(first + t) * E];
        if (hp.res_block) {
            residual_mix(fops_, &res_banked_[(first + t) * banks * E], n_banked_, E, row, L.ffn_res_score.f32(), E, hp.rms_eps, mixed.data(),
                         scratch.data());
            row = mixed.data();
        }
        fops_.norm(row, L.ffn_norm.f32(), &norm[t * E], E, hp.rms_eps);
    }
    matmul(L.experts.router, norm.data(), E, n, logits.data(), X);
    std::vector<char> chosen(static_cast<size_t>(X), 0);
    std::vector<int> top(static_cast<size_t>(U));
    for (int t = 0; t < n; ++t) {
        route_token(hp.moe, L.experts, fops_, &logits[t * X], top.data(), w.data(), row_tokens_[first + t]);
        for (int e : top) chosen[e] = 1;
    }
    std::vector<uint32_t> guess;
    for (int e = 0; e < X; ++e)
        if (chosen[e]) guess.push_back(static_cast<uint32_t>(e));
    m_.experts->prefetch(l, guess);
    if (track) {
        predicted_ = std::move(guess);
        predicted_layer_ = static_cast<int>(l);
    }
}

void Runner::hidden_all_rows(uint32_t l, int n) {
    const Layer& L = m_.layers[l];
    const size_t E = m_.hp.n_embd, all = static_cast<size_t>(n) * E;
    std::copy_n(x_.begin(), all, hid_save_.begin());
    mixed_norm(L.ffn_res_score, L.ffn_norm, n);
    struct Pass {
        bool& on;
        ~Pass() { on = false; }
    } pass{hidden_pass_ = true};
    feed_forward(l, n);
    std::copy_n(x_.begin(), all, hid_pre_.begin());
    std::copy_n(hid_save_.begin(), all, x_.begin());
}

void Runner::report_hidden(const int32_t* tokens, int n, bool computed) {
    const size_t E = m_.hp.n_embd;
    if (const size_t HE = E * m_.hp.hyper.n; HE) {  // every row ran every layer (output_rows_after_norm): the streams
        for (const Segment& sg : segs_)
            on_hidden_({sg.seq, past_[static_cast<size_t>(sg.seq)] - sg.n, sg.n, tokens ? tokens + sg.row0 : nullptr, &hc_[sg.row0 * HE],
                        &hc_[sg.row0 * HE]});
        return;
    }
    if (!computed) std::copy_n(x_.begin(), static_cast<size_t>(n) * E, hid_pre_.begin());
    for (int t = 0; t < n; ++t) fops_.norm(&hid_pre_[t * E], m_.output_norm.f32(), &hid_post_[t * E], static_cast<int>(E), m_.hp.rms_eps);
    for (const Segment& sg : segs_)
        on_hidden_({sg.seq, past_[static_cast<size_t>(sg.seq)] - sg.n, sg.n, tokens ? tokens + sg.row0 : nullptr, &hid_pre_[sg.row0 * E],
                    &hid_post_[sg.row0 * E]});
}

void Runner::hyper_mixes(const HyperWeights& w, int n) {
    const HyperConfig& c = m_.hp.hyper;
    const int E = static_cast<int>(m_.hp.n_embd), HE = static_cast<int>(c.n) * E;
    for (int t = 0; t < n; ++t) hyper_norm(c, &hc_[t * HE], E, m_.hp.rms_eps, &hc_norm_[t * HE]);
    matmul(w.fn, hc_norm_.data(), HE, n, hc_mixes_.data(), w.fn.ne1);
}

void Runner::hyper_pre(const HyperWeights& w, int n) {
    const HyperConfig& c = m_.hp.hyper;
    const int E = static_cast<int>(m_.hp.n_embd), HE = static_cast<int>(c.n) * E, M = static_cast<int>(c.n_mix());
    hyper_mixes(w, n);
    for (int t = 0; t < n; ++t) {
        hc_mix_[t] = hyper_mix(c, &hc_mixes_[t * M], w);
        hyper_collapse(c, hc_mix_[t], &hc_[t * HE], E, &x_[t * E]);
    }
}

void Runner::hyper_post(const float* y, int n) {
    const HyperConfig& c = m_.hp.hyper;
    const int E = static_cast<int>(m_.hp.n_embd), HE = static_cast<int>(c.n) * E;
    pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) hyper_expand(c, hc_mix_[t], y + t * E, &hc_[t * HE], E, &hc_norm_[t * HE]);
    });
}

void Runner::hyper_head(int n) {
    const HyperConfig& c = m_.hp.hyper;
    const int E = static_cast<int>(m_.hp.n_embd), HE = static_cast<int>(c.n) * E, M = static_cast<int>(c.n);
    hyper_mixes(m_.output_hc, n);
    for (int t = 0; t < n; ++t) hyper_collapse(c, hyper_head_mix(c, &hc_mixes_[t * M], m_.output_hc), &hc_[t * HE], E, &x_[t * E]);
}

void Runner::bank_input(int n) {
    const size_t E = m_.hp.n_embd, banks = res_banks();
    for (int t = 0; t < n; ++t) std::copy_n(&x_[t * E], E, &res_banked_[(t * banks + n_banked_) * E]);
    ++n_banked_;
}

void Runner::mixed_norm(const Tensor& score, const Tensor& norm, int n) {
    const Hparams& hp = m_.hp;
    const int E = static_cast<int>(hp.n_embd);
    if (!hp.res_block) {
        for (int t = 0; t < n; ++t) fops_.norm(&x_[t * E], norm.f32(), &xn_[t * E], E, hp.rms_eps);
        return;
    }
    const size_t banks = res_banks();
    pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
        std::vector<float> mixed(static_cast<size_t>(E)), scratch(static_cast<size_t>(E));
        for (int64_t t = t0; t < t1; ++t) {
            residual_mix(fops_, &res_banked_[t * banks * E], n_banked_, static_cast<size_t>(E), &x_[t * E], score.f32(), E, hp.rms_eps, mixed.data(),
                         scratch.data());
            fops_.norm(mixed.data(), norm.f32(), &xn_[t * E], E, hp.rms_eps);
        }
    });
}

}  // namespace moe

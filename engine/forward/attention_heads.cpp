// Runner::attention_heads: flash attention of a batch's query rows against the selected sequence's cache, as
// llama.cpp's CPU flash attention runs it for that many rows: one-row, tiled (64 or more rows), typed caches,
// sliding windows and sinks, DSA / MSA key selections, and the split of a lone row's keys over the threads.
#include <algorithm>

#include "engine/forward/runner.h"
#include "engine/kernels/attention.h"
#include "engine/kernels/ggml_numerics.h"
#include "engine/kernels/ik/ik_ref.h"

namespace moe {

// One query row per (token, head) against the cache view `base` (n_kv grows with the token's position); heads
// map to kv heads in groups (GQA). With `sel`, each token's (and kv head's) selection limits the positions it sees.
void Runner::attention_heads(const ops::KvView& base, const float* q, int64_t q_tok_stride, int64_t q_head_stride, int heads, int kv_heads, int n,
                             float scale, float* out, int64_t out_tok_stride, int64_t out_head_stride, const KeySelection* sel, int window,
                             const float* sinks, int ring) {
    // An f32 K or V as llama.cpp attends it: cast to f16 first (then, with no quantized part, an f16 cache's paths).
    if (has_f32_part(base) && !fops_.ik) {
        const int rows = cache_->wrapped(ring, n_past_ + n) ? ring : n_past_ + n;
        const ops::KvView cast = cast_f32_parts_to_f16(base, rows, kv_heads * base.dk, kv_heads * base.dv, kv_cast_, &pool_);
        return attention_heads(cast, q, q_tok_stride, q_head_stride, heads, kv_heads, n, scale, out, out_tok_stride, out_head_stride, sel, window,
                               sinks, ring);
    }
    // As llama.cpp for a batch of n query rows (ik's attention has one path for all); caches of other types
    // always take flash attention's one-row path there.
    const bool tiled = !fops_.ik && !base.typed() && ops::tiled_attention(opt_.flavor, kernel_rows(n), base.dv);
    const ops::AttendFn fn = base.typed() ? attend_typed_ : tiled ? attend_tiled_ : attend_;
    const int group = heads / kv_heads;
    // The tiled path's keys and values converted to f32 once for the batch (per kv head), not per query row.
    size_t k_tile_floats = 0, v_floats = 0;
    // A typed cache's quantized (or bf16) values, for a batch of rows: each row would convert every value row
    // again, so they are converted once per kv head into f32 (the type's to_float: the same values) and read there.
    const bool typed_v_f32 = base.typed() && kernel_rows(n) >= 4 && base.v_type != GgmlType::F16 && base.v_type != GgmlType::F32;
    // One kv head's view of the cache with n_kv positions (and, tiled, its f32 copies).
    auto head_view = [&](int kvh, int n_kv) {
        ops::KvView kv = kv_view_head(base, kvh);
        kv.n_kv = n_kv;
        if (tiled) {
            kv.k_tiles = kv_f32_.data() + static_cast<size_t>(kvh) * (k_tile_floats + v_floats);
            kv.v_f32 = kv.k_tiles + k_tile_floats;
        }
        if (typed_v_f32) {
            kv.v_raw = reinterpret_cast<const uint8_t*>(kv_f32_.data() + static_cast<size_t>(kvh) * v_floats);
            kv.v_row = static_cast<size_t>(base.dv) * sizeof(float);
            kv.v_type = GgmlType::F32;
        }
        return kv;
    };
    // Rows the batch's views span: every position up to its last row, or a wrapped ring's rows.
    const bool wrapped = cache_->wrapped(ring, n_past_ + n);
    const int view_rows = wrapped ? ring : n_past_ + n;
    if (typed_v_f32) {
        const int n_kv = view_rows;
        v_floats = static_cast<size_t>(n_kv) * base.dv;
        if (kv_f32_.size() < v_floats * kv_heads) kv_f32_.resize(v_floats * kv_heads);
        pool_.parallel_for(kv_heads, [&](int64_t h0, int64_t h1) {
            for (int64_t h = h0; h < h1; ++h) {
                const ops::KvView src = kv_view_head(base, static_cast<int>(h));
                float* dst = kv_f32_.data() + static_cast<size_t>(h) * v_floats;
                for (int j = 0; j < n_kv; ++j)
                    kernels::dequantize_row(base.v_type, src.v_raw + static_cast<size_t>(j) * src.v_row, dst + static_cast<size_t>(j) * base.dv,
                                            base.dv);
            }
        });
    }
    if (tiled) {
        const int n_kv = view_rows, tiles = (n_kv + ggml::kFaTile - 1) / ggml::kFaTile;
        k_tile_floats = static_cast<size_t>(tiles) * ggml::kFaTile * base.dk;
        v_floats = static_cast<size_t>(n_kv) * base.dv;
        if (kv_f32_.size() < (k_tile_floats + v_floats) * kv_heads) kv_f32_.resize((k_tile_floats + v_floats) * kv_heads);
        pool_.parallel_for(kv_heads, [&](int64_t h0, int64_t h1) {
            for (int64_t h = h0; h < h1; ++h) {
                float* k_tiles = kv_f32_.data() + static_cast<size_t>(h) * (k_tile_floats + v_floats);
                ops::convert_kv_for_tiles(head_view(static_cast<int>(h), n_kv), k_tiles, k_tiles + k_tile_floats);
            }
        });
    }
    // Tiled: the heads of a kv head go through one call, which reads each key/value tile once for all of them.
    // (ik's attention: its group form, which converts each key block once for all the rows.)
    // (A typed cache, batches of fewer than 4 rows: the group form of its one-row kernel, the same bits per row,
    // each key and value row read and converted once per group: a 4,096-position q8_0 decode step 1.2-1.3x. Larger
    // batches convert their values once anyway, and their rows one by one measured faster than in groups: 2,163
    // vs 2,080 tok/s for a 4,096-token q8_0 prompt.)
    const ops::AttendGroupFn group_fn = tiled          ? attend_tiled_group_
                                        : base.typed() ? (kernel_rows(n) >= 4 ? nullptr : kernels::typed_attention_group_kernel(opt_.flavor))
                                        : fops_.ik     ? fops_.attend_group
                                                       : nullptr;
    if (group_fn && !sel && window == 0 && kernel_rows(n) > 1) {
        // And for a block of consecutive tokens at once (each row still sees only its own causal prefix): in a
        // long prompt every token re-reading the whole cache from memory is what bounds attention.
        constexpr int kTokenBlock = 16;
        // Last blocks first, one at a time: a block's cost grows with its causal prefix, so the longest go
        // first and the short ones even out the threads' ends (in order and in chunks of an eighth, the thread
        // that drew the last chunk ran ~12% past the other at 4,096 tokens on two threads).
        const int blocks = (n + kTokenBlock - 1) / kTokenBlock;
        const int64_t items = static_cast<int64_t>(blocks) * kv_heads;
        pool_.parallel_for(items, 1, [&](int64_t i0, int64_t i1) {
            thread_local ops::AttnScratch scratch;  // per thread, kept between blocks
            thread_local std::vector<float> q_block, out_block;
            for (int64_t j = i0; j < i1; ++j) {
                const int64_t i = items - 1 - j;
                const int t0 = static_cast<int>(i / kv_heads) * kTokenBlock, kvh = static_cast<int>(i % kv_heads);
                const int tokens = std::min(kTokenBlock, n - t0), rows = tokens * group, h0 = kvh * group;
                q_block.resize(static_cast<size_t>(rows) * base.dk);
                out_block.resize(static_cast<size_t>(rows) * base.dv);
                for (int r = 0; r < rows; ++r)
                    std::copy_n(q + (t0 + r / group) * q_tok_stride + (h0 + r % group) * q_head_stride, base.dk,
                                &q_block[static_cast<size_t>(r) * base.dk]);
                ops::KvView kv = head_view(kvh, n_past_ + t0 + 1);
                kv.rows_per_position = group;
                if (sinks) kv.sinks = sinks + h0, kv.n_sinks = group;  // rows are (token, head of the group)
                group_fn(q_block.data(), base.dk, rows, kv, scale, out_block.data(), base.dv, scratch);
                for (int r = 0; r < rows; ++r)
                    std::copy_n(&out_block[static_cast<size_t>(r) * base.dv], base.dv,
                                out + (t0 + r / group) * out_tok_stride + (h0 + r % group) * out_head_stride);
            }
        });
        return;
    }
    // Rows per call: a kv head's query heads, or with a typed cache, where the batch has fewer (token, kv head)
    // pairs than threads (a decoding step of MLA's one latent head), parts of them, so every thread has some.
    const int wanted_parts = group_fn && base.typed() ? std::clamp((opt_.n_threads + n * kv_heads - 1) / (n * kv_heads), 1, group) : 1;
    const int part_rows = (group + wanted_parts - 1) / wanted_parts, parts = (group + part_rows - 1) / part_rows;
    // A typed cache's step where every kv head sees the same keys and there are more (token, kv head) pairs than
    // threads: the kv heads go through a call in sets (as many as the threads leave each), so a position's row is
    // read in one piece rather than each head's slice at the row's stride.
    const kernels::AttendTypedHeadsFn heads_fn = group_fn && base.typed() && !sel && parts == 1 ? kernels::typed_attention_heads_kernel(opt_.flavor)
                                                                                                : nullptr;
    int together = 1;
    if (heads_fn)
        for (int d = std::min(kv_heads, std::max(1, n * kv_heads / opt_.n_threads)); d > 1; --d)
            if (kv_heads % d == 0) {
                together = d;
                break;
            }
    const int per_token = group_fn ? kv_heads / together * parts : heads;
    // A step of one query row (or rows computed as such) over an fp16 cache where it sees every position before
    // it: llama.cpp splits the keys over its threads once its view reaches 512 (ops::split_kv_chunk).
    int step_rows = 0;
    for (const Segment& sg : segs_) step_rows += sg.n;
    // (DSA's picked positions are a mask over that view; MSA's gathered blocks are a view of their own.)
    const bool lone_rows = (one_by_one_ || step_rows == 1) && !fops_.ik && !base.typed() && !tiled && !group_fn && (!sel || !sel->gather);
    // A sliding-window layer's cache in llama.cpp is its ring (or, not ringed, the context).
    const int cache_rows = ring ? ring : opt_.n_ctx;
    const ops::AttendChunkFn chunk_fn = lone_rows ? kernels::attention_chunk_kernel(opt_.flavor) : nullptr;
    if (lone_rows && split_lone_rows(base, q, q_tok_stride, q_head_stride, heads, kv_heads, n, scale, out, out_tok_stride, out_head_stride, sel,
                                     window, sinks, ring))
        return;
    pool_.parallel_for(static_cast<int64_t>(n) * per_token, [&](int64_t i0, int64_t i1) {
        ops::AttnScratch scratch;
        std::vector<uint8_t> visible, gathered;
        int visible_for = -1, window_mask_for = -1;  // whose selection / window `visible` holds
        for (int64_t i = i0; i < i1; ++i) {
            const int t = static_cast<int>(i / per_token);
            const int unit = static_cast<int>(i % per_token);
            const int h = group_fn ? unit / parts * group * together + unit % parts * part_rows : unit, kvh = h / group;
            const int rows = !group_fn ? 1 : together > 1 ? group * together : std::min(part_rows, (kvh + 1) * group - h);
            const int pos = n_past_ + t;
            // A lone row splits its keys over the threads once llama.cpp's view of the cache reaches 512 cells.
            const int chunk = lone_rows ? ops::split_kv_chunk(wrapped ? ring : pos + 1, window ? cache_rows : opt_.n_ctx, opt_.n_threads) : 0;
            ops::KvView kv = head_view(kvh, wrapped ? ring : pos + 1);
            if (sinks) kv.sinks = sinks + h, kv.n_sinks = rows;
            if (wrapped) {
                // Position p is in row p % ring (the slack keeps a batch's rows off the window), so this token
                // sees the rows of its window's positions. One mask per token, for all its heads.
                if (window_mask_for != t) {
                    visible.assign(static_cast<size_t>(ring), 0);
                    for (int p = std::max(0, pos - window + 1); p <= pos; ++p) visible[static_cast<size_t>(p % ring)] = 1;
                    window_mask_for = t;
                }
                kv.visible = visible.data();
            } else if (const int first = window > 0 ? std::max(0, kv.n_kv - window) : 0; first > 0 && chunk > 0) {
                // Split, the view is llama.cpp's whole view with the window masked (the chunks are cut from it).
                if (window_mask_for != t) {
                    visible.assign(static_cast<size_t>(kv.n_kv), 1);
                    std::fill_n(visible.begin(), first, 0);
                    window_mask_for = t;
                }
                kv.visible = visible.data();
            } else if (first > 0) {
                // Positions before a sliding window are masked. One-row kernels skip masked positions one by one,
                // so their view simply starts at the window; tiles (and ik's 128-position blocks) keep their origin,
                // as llama.cpp's do, so the view starts at the window's tile or block and masks the rest of it (a
                // wholly masked tile or block changes nothing): the same bits without visiting older positions.
                const bool one_row = kv.typed() || (!tiled && !fops_.ik);
                const int block = one_row ? 1 : tiled ? ggml::kFaTile : ik::kAttentionBlock;
                const int start = first / block * block;
                if (kv.typed()) kv.k_raw += start * kv.k_row, kv.v_raw += start * kv.v_row;
                else kv.k += start * kv.k_stride, kv.v += start * kv.v_stride;
                if (kv.k_tiles) kv.k_tiles += static_cast<size_t>(start) * base.dk, kv.v_f32 += static_cast<size_t>(start) * base.dv;
                kv.n_kv -= start;
                if (first > start) {
                    visible.assign(static_cast<size_t>(kv.n_kv), 1);
                    std::fill_n(visible.begin(), first - start, 0);
                    kv.visible = visible.data();
                    visible_for = window_mask_for = -1;
                }
            }
            if (sel) {
                const int entry = t * sel->groups + (sel->groups > 1 ? kvh : 0);
                const int* items = sel->items + static_cast<size_t>(entry) * sel->stride;
                if (sel->gather) {
                    kv = gather_positions(kv, items, sel->counts[entry], sel->span, gathered);
                } else {
                    if (visible_for != entry) {
                        visible.assign(static_cast<size_t>(kv.n_kv), 0);
                        for (int s = 0; s < sel->counts[entry]; ++s)
                            std::fill(visible.begin() + std::min(kv.n_kv, items[s] * sel->span),
                                      visible.begin() + std::min(kv.n_kv, (items[s] + 1) * sel->span), 1);
                        visible_for = entry;
                        window_mask_for = -1;
                    }
                    kv.visible = visible.data();
                }
            }
            if (chunk > 0)
                ops::attend_split_causal(opt_.flavor, q + t * q_tok_stride + h * q_head_stride, kv, chunk, opt_.n_threads, scale,
                                         out + t * out_tok_stride + h * out_head_stride, scratch, chunk_fn);
            else if (together > 1)
                heads_fn(q + t * q_tok_stride + h * q_head_stride, q_head_stride, group, together, kv, scale,
                         out + t * out_tok_stride + h * out_head_stride, out_head_stride, scratch);
            else if (group_fn)
                group_fn(q + t * q_tok_stride + h * q_head_stride, q_head_stride, rows, kv, scale, out + t * out_tok_stride + h * out_head_stride,
                         out_head_stride, scratch);
            else fn(q + t * q_tok_stride + h * q_head_stride, kv, scale, out + t * out_tok_stride + h * out_head_stride, scratch);
        }
    });
}

// Lone rows whose every view splits (decode steps at 512 or more cells): llama.cpp's split as work items of one
// chunk of one kv head, in which all the query heads of that kv head pass over the chunk's keys together (the
// group chunk kernel: each head's bits as on its own, a long cache read once per group instead of once per head),
// then each head's chunks merged in order. One chunk per item keeps every thread busy where there is a single kv
// head (MLA). False (nothing done) where the group kernel is not in use or some row does not split.
bool Runner::split_lone_rows(const ops::KvView& base, const float* q, int64_t q_tok_stride, int64_t q_head_stride, int heads, int kv_heads, int n,
                             float scale, float* out, int64_t out_tok_stride, int64_t out_head_stride, const KeySelection* sel, int window,
                             const float* sinks, int ring) {
    const ops::AttendChunkGroupFn group_chunk = kernels::attention_chunk_group_kernel(opt_.flavor);
    if (!group_chunk || base.typed() || n > kSplitGroupRows) return false;
    const bool wrapped = cache_->wrapped(ring, n_past_ + n);
    const int cache_rows = ring ? ring : opt_.n_ctx, threads = opt_.n_threads, group = heads / kv_heads;
    std::vector<int> chunk(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) {
        chunk[t] = ops::split_kv_chunk(wrapped ? ring : n_past_ + t + 1, window ? cache_rows : opt_.n_ctx, threads);
        if (chunk[t] == 0) return false;
    }
    // What each (token, kv head) may see, as the one-by-one path masks it: a selection, else a wrapped ring's
    // window, else the positions before a window.
    const int mask_heads = sel && sel->groups > 1 ? kv_heads : 1;
    std::vector<std::vector<uint8_t>> masks(static_cast<size_t>(n) * mask_heads);
    for (int t = 0; t < n; ++t)
        for (int mh = 0; mh < mask_heads; ++mh) {
            const int pos = n_past_ + t, n_kv = wrapped ? ring : pos + 1;
            std::vector<uint8_t>& visible = masks[static_cast<size_t>(t) * mask_heads + mh];
            if (sel) {
                const int entry = t * sel->groups + (sel->groups > 1 ? mh : 0);
                const int* items = sel->items + static_cast<size_t>(entry) * sel->stride;
                visible.assign(static_cast<size_t>(n_kv), 0);
                for (int s = 0; s < sel->counts[entry]; ++s)
                    std::fill(visible.begin() + std::min(n_kv, items[s] * sel->span), visible.begin() + std::min(n_kv, (items[s] + 1) * sel->span),
                              1);
            } else if (wrapped) {
                visible.assign(static_cast<size_t>(ring), 0);
                for (int p = std::max(0, pos - window + 1); p <= pos; ++p) visible[static_cast<size_t>(p % ring)] = 1;
            } else if (const int first = window > 0 ? std::max(0, n_kv - window) : 0; first > 0) {
                visible.assign(static_cast<size_t>(n_kv), 1);
                std::fill_n(visible.begin(), first, 0);
            }
        }
    // Where every kv head sees the same keys, an item takes a chunk of all of them: a position's row holds the kv
    // heads side by side, so one pass reads it whole rather than each head's part at the row's stride (which
    // brings the other heads' bytes in for nothing).
    const int together = mask_heads > 1 ? 1 : kv_heads, passes = kv_heads / together;
    const size_t row = static_cast<size_t>(base.dv) + 2, per_chunk = static_cast<size_t>(together) * group * row;
    split_partials_.resize(static_cast<size_t>(n) * passes * threads * per_chunk);
    pool_.parallel_for(static_cast<int64_t>(n) * passes * threads, 1, [&](int64_t i0, int64_t i1) {
        thread_local ops::AttnScratch scratch;
        for (int64_t i = i0; i < i1; ++i) {
            const int c = static_cast<int>(i % threads), pass = static_cast<int>(i / threads % passes), t = static_cast<int>(i / threads / passes);
            const int kvh = pass * together;
            ops::KvView kv = kv_view_head(base, kvh);
            kv.n_kv = wrapped ? ring : n_past_ + t + 1;
            kv.sinks = sinks ? sinks + kvh * group : nullptr;
            const std::vector<uint8_t>& visible = masks[static_cast<size_t>(t) * mask_heads + (mask_heads > 1 ? kvh : 0)];
            if (!visible.empty()) kv.visible = visible.data();
            ops::attend_split_chunk_group(q + t * q_tok_stride + kvh * group * q_head_stride, q_head_stride, group, together, kv, chunk[t], c, scale,
                                          &split_partials_[static_cast<size_t>(i) * per_chunk], scratch, group_chunk);
        }
    });
    pool_.parallel_for(static_cast<int64_t>(n) * heads, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int t = static_cast<int>(i / heads), h = static_cast<int>(i % heads), pass = h / (together * group), r = h % (together * group);
            const float* first = &split_partials_[((static_cast<size_t>(t) * passes + pass) * threads) * per_chunk + static_cast<size_t>(r) * row];
            ops::merge_split_partials(first, threads, per_chunk, base.dv, out + t * out_tok_stride + h * out_head_stride);
        }
    });
    return true;
}

}  // namespace moe

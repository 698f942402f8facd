#include "engine/forward/compressed_attention.h"

#include <algorithm>
#include <cmath>

#include "engine/kernels/kernels.h"
#include "engine/kernels/kv_cache_types.h"
#include "engine/model/cache_shape.h"

namespace moe {

namespace {

// llama.cpp's default micro-batch: its raw window cache holds sliding_window + this many rows.
constexpr uint32_t kLlamaUbatch = 512;

// The size of llama.cpp's rotation blocks for a row of n: the largest power of two dividing it.
int hadamard_block(int n) { return n & -n; }

void rotate_row(float* x, int n) {
    const int b = hadamard_block(n);
    for (int i = 0; i < n; i += b) ops::hadamard(x + i, b);
}

// RoPE on the last n_rot dims of a head of `dim` (ggml_rope_set_offset(dim - n_rot)).
void rope_tail(float* head, int dim, const ops::RopeParams& p, const std::vector<float>& cs) { ops::rope(head + dim - p.n_rot, p, cs); }

// A compressor's ring of token rows in the layer's f32 state: slot p % slots holds token p's kv then its score.
struct Compressor {
    float* slots;
    uint32_t n_slots, width;  // width: coff * D values of kv, then as many of score
    float* kv(int pos) const { return slots + static_cast<size_t>(pos % static_cast<int>(n_slots)) * 2 * width; }
    float* score(int pos) const { return kv(pos) + width; }
};

// Stores token t's compressor row (its score plus ape[pos % ratio]); when pos closes a block, writes the
// block's compressed row (D values, normed and roped at the block's first position) to out and returns true.
bool compress(const ops::FloatOps& fops, const Compressor& c, const CompressorWeights& w, uint32_t ratio, int D, int pos, const float* kv,
              float* score, const ops::RopeParams& rope, float rms_eps, float* out, CompressedAttnScratch& s) {
    const bool overlap = ratio == CompressedAttnConfig::kOverlapRatio;
    const int width = static_cast<int>(c.width), r = static_cast<int>(ratio);
    s.row.resize(static_cast<size_t>(width));
    kernels::dequantize_row(w.ape.type, w.ape.row(pos % r), s.row.data(), width);  // get_rows of the position's bias
    for (int i = 0; i < width; ++i) score[i] += s.row[i];
    std::copy_n(kv, width, c.kv(pos));
    std::copy_n(score, width, c.score(pos));
    if ((pos + 1) % r) return false;

    const int first = pos + 1 - r;  // the block's first position
    // Per channel: the entries the softmax pools, oldest first (ratio 4: the previous block's tokens at channel i,
    // then this block's at channel D + i; before block 0 a row of kv 0 and score -inf).
    const int entries = overlap ? 2 * r : r;
    s.pool_w.resize(static_cast<size_t>(entries));
    s.pool_v.resize(static_cast<size_t>(entries));
    for (int i = 0; i < D; ++i) {
        int e = 0;
        if (overlap)
            for (int p = first - r; p < first; ++p, ++e) {
                s.pool_v[e] = p < 0 ? 0.f : c.kv(p)[i];
                s.pool_w[e] = p < 0 ? -INFINITY : c.score(p)[i];
            }
        const int ch = overlap ? D + i : i;
        for (int p = first; p <= pos; ++p, ++e) {
            s.pool_v[e] = c.kv(p)[ch];
            s.pool_w[e] = c.score(p)[ch];
        }
        fops.softmax(s.pool_w.data(), entries);
        double sum = 0;  // ggml_sum_rows of the products
        for (int k = 0; k < entries; ++k) sum += static_cast<double>(s.pool_v[k] * s.pool_w[k]);
        out[i] = static_cast<float>(sum);
    }
    fops.norm(out, w.norm.f32(), out, D, rms_eps);
    ops::rope_cache(rope, first, s.cs);
    rope_tail(out, D, rope, s.cs);
    return true;
}

// The lightning indexer: the top_k of the token's visible compressed rows, ascending, into s.picked.
void pick_rows(const Hparams& hp, const ops::FloatOps& fops, const SequenceCache& cache, uint32_t l, CompressedAttnToken& t, int visible,
               CompressedAttnScratch& s) {
    const CompressedAttnConfig& c = hp.csa;
    const int heads = static_cast<int>(c.ix_heads), dim = static_cast<int>(c.ix_dim);
    s.picked.clear();
    if (visible <= static_cast<int>(c.ix_top_k)) {  // all of them, whatever the scores
        for (int j = 0; j < visible; ++j) s.picked.push_back(j);
        return;
    }
    ops::rope_cache(c.rope_compressed, t.pos, s.cs);
    for (int h = 0; h < heads; ++h) {
        rope_tail(t.ix_q + h * dim, dim, c.rope_compressed, s.cs);
        rotate_row(t.ix_q + h * dim, dim);
    }
    const float w_scale = 1.0f / std::sqrt(static_cast<float>(dim * heads));
    // llama.cpp scores a row padded to a multiple of 256 (masked -inf), and ggml_top_k's ties depend on its length.
    const int padded = (visible + 255) / 256 * 256;
    s.keys.resize(static_cast<size_t>(visible) * dim);
    cache.load_ix(l, visible, s.keys.data());
    s.scores.assign(static_cast<size_t>(padded), -INFINITY);
    for (int j = 0; j < visible; ++j) {
        float score = 0.0f;
        for (int h = 0; h < heads; ++h) {
            const float qk = fops.dot_f32(t.ix_q + h * dim, &s.keys[static_cast<size_t>(j) * dim], dim);
            score = std::fma(std::max(qk, 0.0f), t.ix_w[h] * w_scale, score);  // ggml_lightning_indexer, contracted
        }
        s.scores[j] = score;
    }
    ops::top_k_set(s.scores.data(), padded, static_cast<int>(c.ix_top_k), s.picked);  // ascending: the attention reads rows in cache order
    s.picked.erase(std::remove_if(s.picked.begin(), s.picked.end(), [&](int j) { return j >= visible; }), s.picked.end());
}

}  // namespace

void compressed_attention_token(const Model& m, uint32_t l, const ops::FloatOps& fops, SequenceCache& cache, CompressedAttnToken& t, int n_batch_rows,
                                int n_threads, float* out, CompressedAttnScratch& s, const ParallelFor& parallel, const AttendKernels* kernels) {
    AttendKernels k = kernels ? *kernels : AttendKernels{fops.attend, fops.attend_tiled, nullptr, nullptr, nullptr};
    if (!k.typed) k.typed = ops::attend_typed;
    if (!k.table) k.table = &kernels::reference_table(fops.flavor);
    const Hparams& hp = m.hp;
    const CompressedAttnConfig& c = hp.csa;
    const Layer& L = m.layers[l];
    const CompressedAttnWeights& w = L.csa;
    const uint32_t ratio = L.compress_ratio;
    const int D = static_cast<int>(c.head_dim), H = static_cast<int>(c.n_head), W = static_cast<int>(c.window);
    const ops::RopeParams& rope = ratio ? c.rope_compressed : c.rope_plain;
    // The cache's type. Flash attention reads a quantized or bf16 view in its type (one row at a time, never split
    // or tiled); an f32 view it first casts to f16, which gives the f16 cache's bits.
    const GgmlType type = cache.types.k;
    const bool typed = type != GgmlType::F16 && type != GgmlType::F32;
    // llama.cpp rotates the main cache when its head is the indexer's size, and any quantized cache (attn_rot_k).
    const bool rotate_main = c.head_dim == c.ix_dim || kernels::kv_rotation_k(type, D) != 0;

    // 1. queries and the key/value row: normed, roped at the token's position
    for (int h = 0; h < H; ++h) fops.norm(t.q + h * D, nullptr, t.q + h * D, D, hp.rms_eps);
    fops.norm(t.kv, w.kv_norm.f32(), t.kv, D, hp.rms_eps);
    ops::rope_cache(rope, t.pos, s.cs);
    for (int h = 0; h < H; ++h) rope_tail(t.q + h * D, D, rope, s.cs);
    rope_tail(t.kv, D, rope, s.cs);
    if (rotate_main) {
        for (int h = 0; h < H; ++h) rotate_row(t.q + h * D, D);
        rotate_row(t.kv, D);
    }
    const CompressedStateLayout st = compressed_state_layout(hp, ratio);
    float* ring = cache.conv[l].data();
    float* raw = ring + static_cast<size_t>(t.pos % W) * D;
    std::copy_n(t.kv, D, raw);  // stored in the cache's type when gathered below (the same bits as on write)

    // 2. the compressors: a block's last token writes its compressed row (and indexer key)
    const int visible = visible_compressed_rows(t.pos, ratio);
    if (ratio) {
        float* state = cache.ssm[l].data();
        std::vector<float> row(static_cast<size_t>(std::max(D, static_cast<int>(c.ix_dim))));
        if (compress(fops, {state, st.slots, st.width}, w.comp, ratio, D, t.pos, t.comp_kv, t.comp_score, c.rope_compressed, hp.rms_eps, row.data(),
                     s)) {
            if (rotate_main) rotate_row(row.data(), D);
            cache.store_k(l, visible - 1, row.data());
        }
        if (st.ix_slots && compress(fops, {state + st.comp_floats(), st.ix_slots, st.ix_width}, w.ix_comp, ratio, static_cast<int>(c.ix_dim), t.pos,
                                    t.ix_kv, t.ix_score, c.rope_compressed, hp.rms_eps, row.data(), s)) {
            rotate_row(row.data(), static_cast<int>(c.ix_dim));
            cache.store_ix(l, visible - 1, row.data());
        }
    }

    // 3. the rows this token sees, in the order of llama.cpp's view of its caches: every cell of the raw window
    //    cache in use (sliding_window + a ubatch of cells, padded to 256; the engine takes position p to sit in
    //    cell p % cells, as it does until the cache wraps) then the compressed rows (ratio 4: the indexer's pick)
    s.picked.clear();
    if (ratio == CompressedAttnConfig::kOverlapRatio && visible > 0) pick_rows(hp, fops, cache, l, t, visible, s);
    else
        for (int j = 0; j < visible; ++j) s.picked.push_back(j);
    const int raw_cells = static_cast<int>((c.window + kLlamaUbatch + 255) / 256 * 256);
    const int first_raw = std::max(0, t.pos - W + 1), n_raw = t.pos - first_raw + 1;
    int wrap = 0;  // the window's first row in cell order
    for (int i = 1; i < n_raw; ++i)
        if ((first_raw + i) % raw_cells == 0) wrap = i;
    const int rows = n_raw + static_cast<int>(s.picked.size());
    // one row of the cache's type (layers without compressed rows keep no K rows, so not cache.k_row)
    const size_t typed_row = static_cast<size_t>(row_bytes(type, static_cast<uint64_t>(D)).value_or(0));
    s.view_index.clear();
    if (typed) s.kv_typed.resize(static_cast<size_t>(rows) * typed_row);
    else s.kv16.resize(static_cast<size_t>(rows) * D);
    uint16_t* dst = s.kv16.data();
    uint8_t* dst_typed = s.kv_typed.data();
    for (int i = 0; i < n_raw; ++i) {
        const int p = first_raw + (wrap + i) % n_raw;
        const float* src = ring + static_cast<size_t>(p % W) * D;
        if (typed) kernels::store_kv_row(type, src, dst_typed, D), dst_typed += typed_row;
        else
            for (int d = 0; d < D; ++d) *dst++ = fp32_to_fp16(src[d]);
        s.view_index.push_back(p % raw_cells);
    }
    const int raw_view = std::min(raw_cells, (t.pos + 1 + 255) / 256 * 256);
    const uint8_t* compressed = cache.k[l].data();
    for (int j : s.picked) {
        const uint8_t* src = compressed + static_cast<size_t>(j) * cache.k_row[l];
        if (typed) dst_typed = std::copy_n(src, typed_row, dst_typed);
        else if (type == GgmlType::F32)
            for (int d = 0; d < D; ++d) *dst++ = fp32_to_fp16(reinterpret_cast<const float*>(src)[d]);
        else dst = std::copy_n(reinterpret_cast<const uint16_t*>(src), D, dst);
        s.view_index.push_back(raw_view + j);
    }

    // 4. attention per head with its sink; K = V. One query row over a view of 512 or more keys is split, as
    //    llama.cpp does, into one chunk of keys per thread whose partial results are merged.
    ops::KvView kv;
    if (typed) {
        kv.k_raw = kv.v_raw = s.kv_typed.data();
        kv.k_row = kv.v_row = typed_row;
        kv.k_type = kv.v_type = type;
        kv.table = k.table;
    } else {
        kv.k = kv.v = s.kv16.data();
        kv.k_stride = kv.v_stride = static_cast<size_t>(D);
    }
    kv.dk = kv.dv = D;
    kv.n_kv = rows;
    const bool tiled = !typed && ops::tiled_attention(fops.flavor, n_batch_rows, D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int view = raw_view + (visible ? (visible + 255) / 256 * 256 : 0);
    const int chunk = n_batch_rows == 1 && !typed ? ops::split_chunk(view, n_threads) : 0;
    const bool split = chunk > 0;
    if (split) {
        s.chunk_of.clear();
        for (int v : s.view_index) s.chunk_of.push_back(v / chunk);
    }
    if (s.head_scratch.size() < static_cast<size_t>(H)) s.head_scratch.resize(static_cast<size_t>(H));
    // The tiled path's 64-position tiles are llama.cpp's view positions, not the rows' order here.
    if (tiled) kv.positions = s.view_index.data();
    auto heads = [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) {
            ops::KvView head = kv;
            head.sinks = w.sinks.f32() + h;
            ops::AttnScratch& scratch = s.head_scratch[static_cast<size_t>(h)];
            if (split) ops::attend_split(fops.flavor, t.q + h * D, head, s.chunk_of.data(), n_threads, scale, out + h * D, scratch, k.chunk);
            else (typed ? k.typed : tiled ? k.tiled : k.one_row)(t.q + h * D, head, scale, out + h * D, scratch);
        }
    };
    if (parallel) parallel(H, heads);
    else heads(0, H);

    // 5. the output's rotation undone (ggml_rope_ext_back: the same angles, sin negated)
    ops::rope_cache(rope, t.pos, s.cs_back);
    for (size_t i = 1; i < s.cs_back.size(); i += 2) s.cs_back[i] = -s.cs_back[i];
    for (int h = 0; h < H; ++h) {
        if (rotate_main) rotate_row(out + h * D, D);
        rope_tail(out + h * D, D, rope, s.cs_back);
    }
}

}  // namespace moe

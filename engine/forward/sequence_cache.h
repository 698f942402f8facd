// What a sequence keeps between tokens, per layer and by attention kind (its shape: model/cache_shape.h): K and V rows for GQA layers, one latent
// row (kv_lora + qk_rope) for MLA layers, indexer keys for DSA full-indexer layers and MSA layers, and for gated DeltaNet
// layers a fixed-size f32 recurrent state (the conv window and the delta-rule matrices).
//
// Positional rows are stored in the cache types asked for (llama.cpp's -ctk / -ctv: f16 by default; MLA's latent
// and the DSA keys take K's type, as llama.cpp's do; MSA's keys are f32 in its MSA cache); kernels/kv_cache_types.h
// writes them as llama.cpp does.
// They can be cut back to any prefix; a recurrent state cannot (it has no history), so prefix reuse on hybrid
// models goes through snapshots of it (Runner::Checkpoint). Sliding-window layers may keep a ring of rows instead
// of every position (as llama.cpp's SWA cache does): a cut then keeps its window only within the ring's slack
// (reach()); further back, prefix reuse goes through snapshots of the window (save_window).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernels/float_ops.h"
#include "engine/kernels/kv_cache_types.h"
#include "engine/model/model.h"
#include "engine/util/weight_memory.h"

namespace moe {

class ThreadPool;

// Why a model cannot keep its cache in these types (one line naming the type and the reason), or "" if it can:
// llama.cpp's rules (MLA keeps V inside K, so K and V must agree; a quantized type's block must divide the head).
std::string kv_cache_types_problem(const Model& m, kernels::KvCacheTypes types);

struct SequenceCache {
    int n_ctx = 0;
    kernels::KvCacheTypes types;
    // Huge pages where the host allows them: at long contexts a decoding step walks every row.
    using Rows = std::vector<uint8_t, StreamedAllocator<uint8_t>>;
    std::vector<Rows> k;                // [layer][n_ctx * k_row(layer)]
    std::vector<Rows> v;                // [layer][n_ctx * v_row(layer)] (empty for MLA: V is the latent)
    std::vector<Rows> ix;               // [layer][n_ctx * ix_row] (DSA full layers and MSA layers only)
    std::vector<int> k_width, v_width;  // values per row
    // Per layer: 0 where position p is row p, else the ring's rows (position p in row p % ring[l]).
    std::vector<int> ring;
    int window = 0;  // sliding-window layers (ringed or not): the positions a token sees (0: none)
    bool ringed = false;
    int high = 0;                      // positions stored through (a cut back leaves rows above it until they are overwritten)
    std::vector<size_t> k_row, v_row;  // bytes per row
    int ix_width = 0;
    size_t ix_row = 0;
    GgmlType ix_type = GgmlType::F16;
    // DeltaNet layers: conv[layer] holds, per conv channel, the K-1 previous inputs (oldest first); ssm[layer]
    // holds per v head the S x S state, row j = the state's column j (ggml's transposed layout).
    std::vector<std::vector<float>> conv, ssm;

    // ring_batch: the most rows an eval chunk stores; sliding-window layers then keep a ring of
    // sliding_ring_rows(window, ring_batch) rows where that is shorter than n_ctx (0: every position).
    static SequenceCache make(const Model& m, int n_ctx, kernels::KvCacheTypes types = {}, int ring_batch = 0);
    bool has_ring() const { return ringed; }
    size_t row_of(size_t l, int pos) const { return static_cast<size_t>(ring[l] ? pos % ring[l] : pos); }
    // Whether a ring of `rows` rows, positions below `end` stored, is no longer position-ordered (has wrapped).
    bool wrapped(int rows, int end) const { return rows && std::max(high, end) > rows; }
    // The shortest prefix a cut can keep with its window intact (0 without rings): rows stored above a cut
    // must not have overwritten the window below it.
    int reach() const;
    // The ring layers' K and V rows of the window before `pos` (positions pos - window + 1 .. pos - 1), and
    // writing such a snapshot back, after which the rows above pos count as unwritten.
    void save_window(int pos, std::vector<uint8_t>& out) const;
    void restore_window(int pos, const std::vector<uint8_t>& in);
    uint64_t window_bytes() const;
    uint64_t bytes() const;
    bool has_recurrent() const;
    uint64_t recurrent_bytes() const;
    // The recurrent part, all layers concatenated; restore takes what save produced for the same model.
    void save_recurrent(std::vector<float>& out) const;
    void restore_recurrent(const std::vector<float>& in);
    void reset_recurrent();

    // Writes position pos of layer l from f32 values (a whole row), as llama.cpp's set_rows stores them.
    void store_k(size_t l, int pos, const float* x);
    void store_v(size_t l, int pos, const float* x);
    void store_ix(size_t l, int pos, const float* x);
    // Indexer keys of positions [0, n) as f32 (the type's to_float), n * ix_width values.
    void load_ix(size_t l, int n, float* out) const;
    // Layer l as an attention view over all its positions (n_kv 0: the caller sets it), keys dk and values dv wide
    // for head 0 (heads are offsets within a row: kv_view_head); MLA's values are the first dv of each K row.
    // f16 caches give the fp16 view, others a typed one read with `table`'s dot kernels (ops::attend_typed).
    ops::KvView view(size_t l, int dk, int dv, const kernels::KernelTable* table) const;
};

// The view of kv head h within a view's rows (h * dk keys and h * dv values in).
ops::KvView kv_view_head(const ops::KvView& base, int h);
// llama.cpp casts an f32 K or V to f16 before its flash attention (build_attn_mha), so an f32 cache is attended
// with an f16 cache's bits: the view with its f32 part(s) converted for positions [0, rows), k_width and v_width
// values of each row (all kv heads of a layer's view, dk and dv of one head's), into `buf`; an fp16 view where no
// part is quantized. MLA's values (the leading part of each K row) follow the converted keys. Where the view has
// no f32 part, the view itself. With `pool`, the rows are converted over its threads.
bool has_f32_part(const ops::KvView& view);
ops::KvView cast_f32_parts_to_f16(const ops::KvView& view, int rows, int k_width, int v_width, std::vector<uint16_t>& buf,
                                  ThreadPool* pool = nullptr);
// A one-row view of the positions [items[i] * span, (items[i] + 1) * span) below head.n_kv, i = 0..count-1 in
// that order, their keys and values copied from `head` into `buf` (llama.cpp's get_rows before an attention).
ops::KvView gather_positions(const ops::KvView& head, const int* items, int count, int span, std::vector<uint8_t>& buf);

}  // namespace moe

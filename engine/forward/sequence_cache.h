// What a sequence keeps between tokens, per layer and by attention kind (its shape: model/cache_shape.h): K and V rows for GQA layers, one latent
// row (kv_lora + qk_rope) for MLA layers, indexer keys for DSA full-indexer layers and MSA layers, and for gated DeltaNet
// layers a fixed-size f32 recurrent state (the conv window and the delta-rule matrices).
//
// Positional rows are stored in the cache types asked for (llama.cpp's -ctk / -ctv: f16 by default; MLA's latent
// and the DSA keys take K's type, as llama.cpp's do; MSA's keys are f32 in its MSA cache); kernels/kv_cache_types.h
// writes them as llama.cpp does.
// They can be cut back to any prefix; a recurrent state cannot (it has no history), so prefix reuse on hybrid
// models goes through snapshots of it (RecurrentSnapshot, kept by the Runner).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernels/float_ops.h"
#include "engine/kernels/kv_cache_types.h"
#include "engine/model/model.h"

namespace moe {

// Why a model cannot keep its cache in these types (one line naming the type and the reason), or "" if it can:
// llama.cpp's rules (MLA keeps V inside K, so K and V must agree; a quantized type's block must divide the head).
std::string kv_cache_types_problem(const Model& m, kernels::KvCacheTypes types);

struct SequenceCache {
    int n_ctx = 0;
    kernels::KvCacheTypes types;
    std::vector<std::vector<uint8_t>> k;   // [layer][n_ctx * k_row(layer)]
    std::vector<std::vector<uint8_t>> v;   // [layer][n_ctx * v_row(layer)] (empty for MLA: V is the latent)
    std::vector<std::vector<uint8_t>> ix;  // [layer][n_ctx * ix_row] (DSA full layers and MSA layers only)
    std::vector<int> k_width, v_width;     // values per row
    std::vector<size_t> k_row, v_row;      // bytes per row
    int ix_width = 0;
    size_t ix_row = 0;
    GgmlType ix_type = GgmlType::F16;
    // DeltaNet layers: conv[layer] holds, per conv channel, the K-1 previous inputs (oldest first); ssm[layer]
    // holds per v head the S x S state, row j = the state's column j (ggml's transposed layout).
    std::vector<std::vector<float>> conv, ssm;

    static SequenceCache make(const Model& m, int n_ctx, kernels::KvCacheTypes types = {});
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
// A one-row view of the positions [items[i] * span, (items[i] + 1) * span) below head.n_kv, i = 0..count-1 in
// that order, their keys and values copied from `head` into `buf` (llama.cpp's get_rows before an attention).
ops::KvView gather_positions(const ops::KvView& head, const int* items, int count, int span, std::vector<uint8_t>& buf);

}  // namespace moe

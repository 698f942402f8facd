// DeepSeek-V4's compressed attention after its projections, one token at a time (llama.cpp's
// build_attention_impl in src/models/deepseek4.cpp and its cache, src/llama-kv-cache-dsv4.cpp). Shared by the
// reference and the fast forward, which differ only in how they run the matmuls around it:
//   x-round:  q_a . x, kv . x, compressor kv / gate . x, indexer compressor kv / gate . x, indexer proj . x
//   qr-round: q_b . qr, indexer q_b . qr           (qr = rms_norm(q_a . x) * q_a_norm)
//   then this step, then the output LoRA per group of heads (attn_output_a) and attn_output_b.
// Per token at position p (one key = value head of D; H query heads):
//   q_h = rms_norm(q_h) (no weight), kv = rms_norm(kv) * kv_norm, RoPE (NORM pairs) on the last n_rot dims;
//   kv joins the layer's raw window (the last sliding_window rows, in the cache's type);
//   with a compression ratio r, the token's compressor row (kv, gate + ape[p % r]) joins its block; the block's
//   last token turns it into a compressed row: per channel a softmax over the block's tokens (ratio 4: the
//   previous block's first half of the channels, then this block's second half), the weighted sum,
//   rms_norm * norm, RoPE at the block's first position; stored as row p / r in the cache's type (-ctk, which
//   llama.cpp requires -ctv to equal: K is V), Hadamard-rotated (as q, and undone on the output) where the head
//   is the indexer's size or the type is quantized;
//   ratio 4: the lightning indexer scores the visible compressed rows (relu(q_I . k) weighted per head, both
//   Hadamard-rotated) and attention sees only its top_k of them; other ratios see all visible rows;
//   attention with the per-head sink over [window rows | compressed rows], then the rotation undone on the
//   output's last n_rot dims.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/forward/sequence_cache.h"
#include "engine/kernels/float_ops.h"
#include "engine/model/model.h"

namespace moe {

// One token's projections (row pointers into the caller's buffers; modified in place).
struct CompressedAttnToken {
    int pos = 0;
    float* q = nullptr;              // [H*D]   q_b . qr
    float* kv = nullptr;             // [D]     attn_kv . x
    const float* comp_kv = nullptr;  // [coff*D]  compressor kv . x                (ratio > 0)
    float* comp_score = nullptr;     // [coff*D]  compressor gate . x              (ratio > 0)
    const float* ix_kv = nullptr;    // [2*ix_dim] indexer compressor kv . x       (ratio 4)
    float* ix_score = nullptr;       // [2*ix_dim] indexer compressor gate . x     (ratio 4)
    float* ix_q = nullptr;           // [ix_heads*ix_dim] indexer q_b . qr          (ratio 4)
    const float* ix_w = nullptr;     // [ix_heads]  indexer proj . x               (ratio 4)
};

struct CompressedAttnScratch {
    std::vector<float> cs, cs_back, row, pool_w, pool_v, keys, scores;
    std::vector<int> picked, view_index, chunk_of;
    std::vector<uint16_t> kv16;                  // the rows the token attends to, fp16 (f16 and f32 caches)
    std::vector<uint8_t> kv_typed;               // the same as rows of the cache's type (other cache types)
    std::vector<ops::AttnScratch> head_scratch;  // one per head (heads may run on several threads)
};

// Runs the step for one token against layer l's state and rows in `cache`; writes the heads' output (H*D,
// rotation undone) to out. n_batch_rows: the rows of the batch the token is in (llama.cpp's attention takes
// another path from 64 rows, and splits a single row's keys across its n_threads). parallel (may be empty): runs
// fn over [0, n) in ranges on several threads (the heads' attention; each head's bits are the same either way).
// kernels (null: fops' reference attention): the attention variants to run, each with the reference's bits.
using ParallelFor = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& fn)>;
struct AttendKernels {
    ops::AttendFn one_row, tiled;
    ops::AttendChunkFn chunk;                     // a split view's chunks (null: the reference's)
    ops::AttendFn typed;                          // caches of other types (null: the reference's)
    const kernels::KernelTable* table = nullptr;  // their dot kernels (null: the reference table)
};
void compressed_attention_token(const Model& m, uint32_t l, const ops::FloatOps& fops, SequenceCache& cache, CompressedAttnToken& t, int n_batch_rows,
                                int n_threads, float* out, CompressedAttnScratch& s, const ParallelFor& parallel = {},
                                const AttendKernels* kernels = nullptr);

// Which compressed rows the token at pos may see: rows [0, (pos + 1) / ratio).
inline int visible_compressed_rows(int pos, uint32_t ratio) { return ratio ? (pos + 1) / static_cast<int>(ratio) : 0; }

}  // namespace moe

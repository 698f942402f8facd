// MiniMax Sparse Attention (minimax-m3), the part both forward passes share: the indexer's query heads and key
// for a token, and the blocks of positions a query's kv group may attend to (llama.cpp's minimax-m3 graph and
// its MSA cache: block scores by max-pooling q.k over each block's causal positions, the query's own block
// forced in, the top_k blocks). The attention itself is the GQA kernels' with the other blocks masked.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/kernels/float_ops.h"
#include "engine/model/model.h"

namespace moe::msa {

// One token's indexer values in place: q (n_head_kv heads of msa.head_dim) and k (one head), each RMS-normed per
// head with its weight, then RoPE at the token's position (`cs`: ops::rope_cache) on the first n_rot dims as the
// attention's own q and k.
void prepare(const Hparams& hp, const GqaWeights& w, const ops::FloatOps& fops, const std::vector<float>& cs, float* q, float* k);

// The blocks the query at position `pos` may attend to, for one indexer query head q against keys[0..pos]
// (msa.head_dim floats each): block b's score is the largest q.k over its positions up to pos; the query's own
// block and the local_blocks - 1 before it rank first; then the top_k by score (ties to the lower block). Writes
// at most top_k blocks and returns how many, in ggml_top_k's order (best first, then its first two swapped):
// llama.cpp's decode gathers the blocks' rows in that order, and the online softmax's sums follow it.
int select_blocks(const MsaConfig& c, const ops::FloatOps& fops, const float* q, const float* keys, int pos, std::vector<float>& scores, int* blocks);

// visible[j] = 1 for the positions j < n_kv of the chosen blocks, 0 elsewhere.
void mark_visible(const MsaConfig& c, const int* blocks, int count, int n_kv, uint8_t* visible);

}  // namespace moe::msa

// The plain reference forward pass: one token at a time, scalar kernels, no threads, every architecture. It is
// the oracle the fast path (runner.h) is tested against; keep it simple, never optimise it.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/forward/sequence_cache.h"
#include "engine/kernels/flavor.h"
#include "engine/model/model.h"

namespace moe {

struct RefState {
    kernels::Flavor flavor = kernels::default_flavor();
    int n_past = 0;
    SequenceCache cache;
    // [layer * n_expert + e]: the current batch's tokens routed to expert e before this one (counted from the batch's
    // index 0, its tokens run in index order): ik computes an expert's tokens in whole chunks of 16 by another
    // kernel for some types (kernels::KernelTable::batch_chunk), which takes a token's place among them.
    std::vector<uint32_t> expert_rank;
    int rank_index = -1;  // the batch index of the last token counted (a gap or a restart begins the counts again)
};

// llama.cpp's summation order for a matmul depends on how many activation rows it multiplies at once and on
// the row's place among them (see kernels::matmul_dots). The reference runs one token at a time, so it is told
// the batch the fast path would put the token in: its size and the token's index, for the layers (dense
// matmuls) and for the output head (which sees only the rows whose logits are wanted).
struct RefBatch {
    int n_tok = 1, index = 0;
    int n_out = 1, out_index = 0;
    // The fast path's threads: ik_llama.cpp converts a dense matmul's rows for a large batch only where each thread
    // gets 32 rows (kernels::matmul_dots).
    int n_threads = 1;
    // [layer * n_expert + e]: the tokens the batch routes to each expert (ik converts an expert's rows from 32),
    // e.g. Runner::expert_selections() of a fresh runner after the batch; null: one token each.
    const uint64_t* expert_tokens = nullptr;
};

RefState make_ref_state(const Model& m, int n_ctx, kernels::Flavor flavor = kernels::default_flavor(), kernels::KvCacheTypes kv_types = {});
// Runs `token` at position st.n_past, appends to the cache, writes n_vocab logits.
void forward_ref(const Model& m, RefState& st, int token, float* logits, RefBatch batch = {});

}  // namespace moe

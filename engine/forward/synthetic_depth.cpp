#include "engine/forward/synthetic_depth.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/forward/sequence_cache.h"
#include "engine/model/cache_shape.h"

namespace moe {

std::string synthetic_depth_problem(Runner& runner, int depth) {
    // The next token goes to position depth, which must still be inside the context.
    if (depth < 1 || depth >= runner.n_ctx())
        return "depth " + std::to_string(depth) + " leaves no room in the context (1.." + std::to_string(runner.n_ctx() - 1) + ")";
    if (runner.n_past() != 1)
        return "the sequence holds " + std::to_string(runner.n_past()) + " positions; a synthetic fill follows one evaluated token";
    return "";
}

void fill_synthetic_depth(Runner& runner, int depth, uint64_t seed) {
    if (const std::string why = synthetic_depth_problem(runner, depth); !why.empty()) throw std::invalid_argument("synthetic depth: " + why);
    SequenceCache& cache = runner.sequence_cache();
    // Positions per row (deepseek4's compressed rows hold several); rings come from the cache itself.
    const std::vector<LayerCacheShape> shape = cache_shape(runner.model());
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> unit(-1.f, 1.f);
    std::vector<float> row;
    auto random_row = [&](size_t width) -> const float* {
        row.resize(width);
        for (float& x : row) x = unit(rng);
        return row.data();
    };
    for (size_t l = 0; l < cache.k.size(); ++l) {
        const uint64_t per_row = l < shape.size() ? std::max<uint32_t>(1, shape[l].positions_per_row) : 1;
        const uint64_t needed = (static_cast<uint64_t>(depth) + per_row - 1) / per_row;
        // A ring's row r holds the latest position p with p % ring == r: writing rows 0..ring-1 covers them all.
        const uint64_t rows = cache.ring[l] ? std::min<uint64_t>(cache.ring[l], needed) : needed;
        for (uint64_t r = 0; r < rows; ++r) {
            const int pos = static_cast<int>(r);  // row_of(l, r) == r for r below the ring (and without one)
            if (cache.k_width[l] > 0 && !cache.k[l].empty()) cache.store_k(l, pos, random_row(static_cast<size_t>(cache.k_width[l])));
            if (cache.v_width[l] > 0 && !cache.v[l].empty()) cache.store_v(l, pos, random_row(static_cast<size_t>(cache.v_width[l])));
            if (l < cache.ix.size() && !cache.ix[l].empty()) cache.store_ix(l, pos, random_row(static_cast<size_t>(cache.ix_width)));
        }
    }
    std::vector<Runner::Checkpoint> snapshots;
    if (runner.has_recurrent_state()) {
        snapshots.push_back(runner.mark());
        snapshots.back().pos = depth;
    }
    runner.adopt_prefix(depth, std::move(snapshots));
}

}  // namespace moe

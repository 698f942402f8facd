// A sequence at a given depth without evaluating that many prompt tokens, for measuring decode speed against
// context length (`moestream bench --depth-fill synthetic`, bench/long_context.sh). A decoding step's cost at
// depth D depends on how many cached positions its attention reads, not on what they hold, while filling D
// positions through the prompt costs O(D^2) attention: a 128k-token prompt runs for most of an hour on two cores.
#pragma once
#include <cstdint>
#include <string>

#include "engine/forward/runner.h"

namespace moe {

// Why `depth` positions of the runner's selected sequence cannot be filled so (one line), or "" if they can.
std::string synthetic_depth_problem(Runner& runner, int depth);

// After one evaluated token (n_past 1), takes the selected sequence to n_past == depth: every positional cache
// row of positions [0, depth) (K, V, MLA's latent, indexer keys; a sliding-window ring's last rows) is written
// from random values in [-1, 1) in the cache's own type, as a prompt's rows are stored, and a recurrent state
// stays the evaluated token's. The next eval then decodes at position `depth` over all of them.
void fill_synthetic_depth(Runner& runner, int depth, uint64_t seed = 1);

}  // namespace moe

// The decode performance model of ../shared/design.md section 4, with every input kept for display.
#pragma once
#include <cstdint>
#include <string>

#include "engine/model/model_facts.h"

namespace moe {

struct DecodeEstimate {
    uint64_t expert_bytes_per_token = 0;  // n_expert_used experts per MoE layer, no hits
    double hit_rate = 0;                  // cache bytes / expert bytes, capped at 1 (uniform routing)
    double io_bytes_per_token = 0;        // misses only
    double ssd_bytes_per_s = 0;           // fio randread, O_DIRECT, same block size and depth
    double t_io = 0;
    uint64_t active_bytes_per_token = 0;  // resident + selected experts
    double mem_bytes_per_s = 0;
    double t_compute = 0;
    double tokens_per_s = 0;  // 1 / max(t_io, t_compute): perfect overlap
    std::string bound;        // "disk" or "memory"

    std::string formula() const;  // the computation with its numbers, one line
};

DecodeEstimate estimate_decode(const ModelFacts& m, uint64_t cache_bytes, double ssd_bytes_per_s, double mem_bytes_per_s);
// The same with a measured hit rate instead of the uniform-routing guess (cache bytes / expert bytes).
DecodeEstimate estimate_decode_with_hit_rate(const ModelFacts& m, double hit_rate, double ssd_bytes_per_s, double mem_bytes_per_s);

}  // namespace moe

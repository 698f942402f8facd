// `moestream bench --plot FILE.svg`: the run's generation as curves over time (tok/s, expert read GB/s with
// fio's figure as a reference line, cache hit rate), one self-contained SVG to read a benchmark at a glance.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace moe::cli {

struct BenchPoint {
    double t = 0;                  // seconds since the generation started, after this token
    double bytes_read = 0;         // expert bytes read so far in the generation
    double hits = 0, lookups = 0;  // expert cache hits and lookups so far
};

// Rates over a sliding window of `window` tokens. fio_bytes_per_s <= 0: no reference line.
std::string render_bench_svg(const std::vector<BenchPoint>& points, double fio_bytes_per_s, const std::string& title, int window = 8);

// `moestream cache-sim --plot FILE.svg`: hit rate against cache budget, one line per policy (and the bound).
struct HitRateCurve {
    std::string name;
    std::vector<std::pair<double, double>> points;  // (budget bytes, hit rate 0..1), budgets ascending
    bool bound = false;                             // drawn dashed (Belady's MIN)
};
std::string render_hit_rate_svg(const std::vector<HitRateCurve>& curves, const std::string& title);

}  // namespace moe::cli

// Prometheus text for /metrics: one-value metrics (counters, gauges), and histograms (cumulative buckets, sum,
// count) for per-request figures whose spread matters more than their total (expert bytes read, time blocked
// on reads).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace moe {

// "# HELP", "# TYPE" and the value line of one metric (integers print without a fraction).
inline std::string prometheus_metric(const std::string& name, const char* type, const std::string& help, double v) {
    char value[32];
    std::snprintf(value, sizeof value, "%.17g", v);
    return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + value + "\n";
}

struct Histogram {
    std::vector<double> bounds;    // bucket upper bounds, ascending (+Inf is implicit)
    std::vector<uint64_t> counts;  // observations per bucket, the last for +Inf
    double sum = 0;
    uint64_t count = 0;

    explicit Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}
    void add(double v) {
        size_t i = 0;
        while (i < bounds.size() && v > bounds[i]) ++i;
        counts[i]++;
        sum += v;
        count++;
    }
    std::string prometheus(const std::string& name, const std::string& help) const {
        std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
        uint64_t cumulative = 0;
        char line[160];
        for (size_t i = 0; i <= bounds.size(); ++i) {
            cumulative += counts[i];
            if (i < bounds.size())
                std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name.c_str(), bounds[i], static_cast<unsigned long long>(cumulative));
            else std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name.c_str(), static_cast<unsigned long long>(cumulative));
            out += line;
        }
        std::snprintf(line, sizeof line, "%s_sum %.17g\n%s_count %llu\n", name.c_str(), sum, name.c_str(), static_cast<unsigned long long>(count));
        return out + line;
    }
};

}  // namespace moe

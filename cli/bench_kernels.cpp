#include "cli/bench_kernels.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "engine/kernels/kernels.h"

namespace moe::cli {
namespace {

struct TypeUse {
    uint64_t bytes = 0;
    uint64_t row_len = 0;  // of the largest tensor of that type
    uint64_t largest = 0;
};

// The best rate of `pass` (work units per second) over short rounds for about `seconds`: the least disturbed
// round is the kernel's speed on a noisy shared host.
template <class Pass>
double best_rate(Pass&& pass, double work_per_pass, double seconds) {
    pass();  // warm the cache and the branch predictors
    using Clock = std::chrono::steady_clock;
    double best = 0;
    const auto end = Clock::now() + std::chrono::duration<double>(seconds);
    do {
        int passes = 0;
        const auto t0 = Clock::now();
        double elapsed = 0;
        do {
            pass();
            ++passes;
            elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        } while (elapsed < seconds / 5);
        best = std::max(best, work_per_pass * passes / elapsed);
    } while (Clock::now() < end);
    return best;
}

// Weight bytes per second of `table`'s kernel for type t over `rows` rows of n.
double weight_bytes_per_s(const kernels::KernelTable& table, GgmlType t, int64_t n, const std::vector<uint8_t>& weights, size_t row_bytes,
                          int64_t rows, const std::vector<uint8_t>& act, double seconds) {
    const int i = kernels::type_slot(t);
    std::vector<float> out(static_cast<size_t>(rows));
    const double rate = best_rate(
        [&] {
            if (table.dot_rows[i]) {
                table.dot_rows[i](n, weights.data(), row_bytes, rows, act.data(), out.data());
            } else {
                for (int64_t r = 0; r < rows; ++r) out[r] = table.dot[i](n, weights.data() + static_cast<size_t>(r) * row_bytes, act.data());
            }
        },
        static_cast<double>(weights.size()), seconds);
    volatile float sink = out[0];  // keep the work observable
    (void)sink;
    return rate;
}

// A prompt's expert matmul: kPromptTokens tokens through the rows x tokens kernel the active table runs for it,
// against the same order's dot once per (row, token). Returns {tile, pairs} in weight bytes x tokens per second.
constexpr int kPromptTokens = 16;
std::pair<double, double> prompt_tile_rates(const kernels::KernelTable& table, GgmlType t, int64_t n, const std::vector<uint8_t>& weights,
                                            size_t row_bytes, int64_t rows, double seconds) {
    const kernels::MatmulDots dots = kernels::matmul_dots(table, t, rows, n, kPromptTokens, false);
    if (!dots.single_tile) return {0, 0};
    const size_t ab = kernels::activation_bytes(t, n);
    std::vector<uint8_t> act(ab * kPromptTokens);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<size_t>(n));
    for (int k = 0; k < kPromptTokens; ++k) {
        for (auto& v : x) v = normal(rng);
        kernels::prepare_activations(t, x.data(), act.data() + k * ab, n);
    }
    std::vector<float> out(static_cast<size_t>(rows) * kPromptTokens);
    const double work = static_cast<double>(weights.size()) * kPromptTokens;
    const double tile = best_rate([&] { dots.single_tile(n, weights.data(), row_bytes, rows, act.data(), ab, kPromptTokens, out.data(), rows); },
                                  work, seconds);
    const double pairs = best_rate(
        [&] {
            for (int64_t r = 0; r < rows; ++r)
                for (int k = 0; k < kPromptTokens; ++k)
                    out[k * rows + r] = dots.single(n, weights.data() + static_cast<size_t>(r) * row_bytes, act.data() + k * ab);
        },
        work, seconds);
    volatile float sink = out[0];
    (void)sink;
    return {tile, pairs};
}

}  // namespace

nlohmann::json bench_weight_kernels(const GgufModel& model, kernels::Flavor flavor, double seconds_per_kernel) {
    std::map<GgmlType, TypeUse> uses;
    for (const auto& ti : model.tensors) {
        if (ti.ne.size() < 2 || !type_info(ti.raw_type)) continue;  // norms and biases are not matmuls
        TypeUse& u = uses[ti.type()];
        u.bytes += ti.nbytes;
        if (ti.nbytes > u.largest) {
            u.largest = ti.nbytes;
            u.row_len = ti.ne[0];
        }
    }
    uint64_t total = 0;
    for (const auto& [t, u] : uses) total += u.bytes;
    std::vector<std::pair<GgmlType, TypeUse>> order(uses.begin(), uses.end());
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });

    const kernels::KernelTable& scalar = kernels::reference_table(flavor);
    std::vector<const kernels::KernelTable*> tables;
    for (auto isa : {kernels::Isa::Avx2, kernels::Isa::Avx512})
        if (const auto* t = kernels::table_for(isa, flavor)) tables.push_back(t);
    const kernels::KernelTable& active = kernels::active_table(flavor);

    nlohmann::json rows = nlohmann::json::array();
    for (const auto& [t, u] : order) {
        const int i = kernels::type_slot(t);
        nlohmann::json row = {{"type", std::string(type_info(t).name)},
                              {"bytes", u.bytes},
                              {"share", total ? static_cast<double>(u.bytes) / static_cast<double>(total) : 0.0},
                              {"row_length", u.row_len}};
        if (i < 0 || (!active.dot[i] && !active.dot_rows[i])) {
            row["note"] = "no kernel for this type";
            rows.push_back(row);
            continue;
        }
        const int64_t n = static_cast<int64_t>(u.row_len);
        const size_t rb = *row_bytes(t, u.row_len);
        // About 512 KiB of weights: in L2 on current x86 cores, so the loop measures arithmetic, not RAM. Whole
        // groups of eight rows, which the repacked orders need.
        const int64_t n_rows = std::max<int64_t>(8, static_cast<int64_t>((size_t{512} << 10) / rb) & ~int64_t{7});
        std::vector<uint8_t> weights;
        weights.reserve(rb * static_cast<size_t>(n_rows));
        for (int64_t r = 0; r < n_rows; ++r) {
            const auto one = kernels::random_weight_row(t, u.row_len, 1000 + static_cast<uint64_t>(r));
            weights.insert(weights.end(), one.begin(), one.end());
        }
        std::vector<float> x(u.row_len);
        std::mt19937 rng(7);
        std::normal_distribution<float> normal;
        for (auto& v : x) v = normal(rng);
        std::vector<uint8_t> act(kernels::activation_bytes(t, n));
        kernels::prepare_activations(t, x.data(), act.data(), n);

        const double base = weight_bytes_per_s(scalar, t, n, weights, rb, n_rows, act, seconds_per_kernel / 2);
        row["scalar_bytes_per_s"] = base;
        for (const auto* table : tables) {
            if (!table->dot[i]) continue;
            const double bps = weight_bytes_per_s(*table, t, n, weights, rb, n_rows, act, seconds_per_kernel);
            row[std::string(kernels::isa_name(table->isa)) + "_bytes_per_s"] = bps;
            if (table == &active) {
                row["active_bytes_per_s"] = bps;
                row["active_ratio_of_scalar"] = base > 0 ? bps / base : 0.0;
            }
        }
        const auto [tile, pairs] = prompt_tile_rates(active, t, n, weights, rb, n_rows, seconds_per_kernel / 2);
        if (tile > 0) {
            row["prompt_tile_bytes_per_s"] = tile;  // weight bytes x tokens
            row["prompt_tile_ratio_of_pairs"] = pairs > 0 ? tile / pairs : 0.0;
        }
        rows.push_back(row);
    }
    return rows;
}

void print_weight_kernels(const nlohmann::json& rows) {
    std::printf("weight kernels   single thread, weight GB/s from cache (share of the model's matmul bytes)\n");
    for (const auto& r : rows) {
        std::printf("  %-8s %5.1f%%  row %-6llu", r["type"].get<std::string>().c_str(), 100 * r["share"].get<double>(),
                    static_cast<unsigned long long>(r["row_length"].get<uint64_t>()));
        if (r.contains("note")) {
            std::printf("  %s\n", r["note"].get<std::string>().c_str());
            continue;
        }
        std::printf("  scalar %6.2f", r["scalar_bytes_per_s"].get<double>() / 1e9);
        for (const char* isa : {"avx2", "avx512"}) {
            const std::string key = std::string(isa) + "_bytes_per_s";
            if (r.contains(key)) std::printf("  %s %6.2f", isa, r[key].get<double>() / 1e9);
        }
        if (r.contains("active_ratio_of_scalar")) std::printf("  (%.1fx scalar)", r["active_ratio_of_scalar"].get<double>());
        if (r.contains("prompt_tile_ratio_of_pairs"))
            std::printf("  prompt x%d tile %.1f (%.1fx per-pair dots)", kPromptTokens, r["prompt_tile_bytes_per_s"].get<double>() / 1e9,
                        r["prompt_tile_ratio_of_pairs"].get<double>());
        std::printf("\n");
    }
}

}  // namespace moe::cli

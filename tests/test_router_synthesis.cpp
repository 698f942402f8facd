// mkmodel's realistic routing (synth/tensor_writer.cpp's skewed routers, synth/router_locality.cpp): what the
// written models' routers do when run, measured as cache-sim and bench measure it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "engine/runtime/cache_sim.h"
#include "engine/runtime/routing_trace.h"
#include "tests/test_support.h"

namespace moe {
namespace {

// mkmodel --router-skew: the same prompt and generation route more of their lookups to each layer's hottest
// experts than on the unskewed model, and the hot experts differ between layers.
TEST(RouterSynthesis, SkewConcentratesRouting) {
    test::TempDir dir;
    auto hot10 = [&](const std::string& skew) {
        const std::string model = dir / ("m" + skew + ".gguf"), trace = dir / ("t" + skew + ".trace");
        EXPECT_EQ(test::run_moestream("mkmodel --layers 4 --embd 128 --heads 4 --kv-heads 2 --experts 32 --experts-used 4 --ffn 64 "
                                      "--vocab-builtin --seed 3 --router-skew " +
                                          skew + " --out " + model,
                                      true)
                      .first,
                  0);
        auto [rc, out] = test::run_moestream("run --model " + model + " -p 'skewed routing, measured' -n 48 --routing-trace " + trace, true);
        EXPECT_EQ(rc, 0) << out;
        const auto j = nlohmann::json::parse(test::run_moestream("cache-sim --trace " + trace + " --json --budgets 50%", false).second);
        // The hottest expert of each MoE layer.
        std::set<int> hottest;
        const RoutingTrace t = read_routing_trace(trace);
        for (uint32_t l = 0; l < t.header.n_layer; ++l) {
            std::vector<int> counts(t.header.n_expert, 0);
            for (const auto& step : t.steps)
                for (const auto& ev : step.events)
                    if (ev.kind == 'R' && ev.layer == l)
                        for (uint16_t e : ev.experts) counts[e]++;
            hottest.insert(static_cast<int>(std::max_element(counts.begin(), counts.end()) - counts.begin()));
        }
        return std::make_pair(j["workload"]["hot10_share"].get<double>(), hottest.size());
    };
    const auto [flat, flat_layers] = hot10("0");
    const auto [skewed, skewed_layers] = hot10("2");
    std::cerr << "[  NOTE    ] hottest 10% of experts take " << flat << " of routings unskewed, " << skewed << " at --router-skew 2\n";
    EXPECT_GT(skewed, flat + 0.05);
    EXPECT_GT(skewed_layers, 1u);  // not one expert id hot in every layer
}

// --router-locality: neighbouring tokens route alike and distant ones no more than before (the locality is
// local, not a fixed hot set); 0 writes the very file the option's absence writes; architectures it has no
// construction for are refused in one line.
TEST(RouterSynthesis, LocalityRoutesNeighboursAlike) {
    test::TempDir dir;
    auto workload = [&](const std::string& arch_flags, const std::string& gain) {
        const std::string model = dir / ("m" + gain + ".gguf"), trace = dir / ("t" + gain + ".trace");
        std::filesystem::remove(trace);
        EXPECT_EQ(
            test::run_moestream("mkmodel " + arch_flags + " --experts 32 --experts-used 4 --ffn 64 --vocab-builtin --seed 3 --router-locality " +
                                    gain + " --out " + model,
                                true)
                .first,
            0);
        auto [rc, out] = test::run_moestream(
            "bench --model " + model + " --no-fio --tokens 2 --prompt-tokens 160 --parallel '' --routing-trace " + trace, true);
        EXPECT_EQ(rc, 0) << out;
        return measure_workload(read_routing_trace(trace));
    };
    for (const std::string arch : {"--layers 3 --embd 256 --heads 4 --kv-heads 2 --head-dim 64",
                                   "--arch glm-dsa --layers 3 --embd 256 --heads 4 --q-lora 128 --kv-lora 128 --qk-nope 32 --qk-rope 64 "
                                   "--v-head 32 --indexer-heads 2 --indexer-dim 64 --indexer-top-k 256"}) {
        const RoutingWorkload off = workload(arch, "0"), on = workload(arch, "32");
        std::cerr << "[  NOTE    ] " << arch.substr(0, 14) << ": consecutive overlap " << off.consecutive_overlap << " -> " << on.consecutive_overlap
                  << ", 16 apart " << off.distant_overlap << " -> " << on.distant_overlap << "\n";
        EXPECT_GT(on.consecutive_overlap, off.consecutive_overlap + 0.15) << arch;
        EXPECT_LT(on.distant_overlap, off.distant_overlap + 0.1) << arch;
        EXPECT_GT(on.consecutive_overlap, on.distant_overlap + 0.15) << arch;
    }
    const std::string plain = dir / "plain.gguf", zero = dir / "zero.gguf";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 2 --embd 64 --heads 2 --experts 8 --experts-used 2 --ffn 32 --vocab-builtin --out " + plain, true)
                  .first,
              0);
    ASSERT_EQ(
        test::run_moestream(
            "mkmodel --layers 2 --embd 64 --heads 2 --experts 8 --experts-used 2 --ffn 32 --vocab-builtin --router-locality 0 --out " + zero, true)
            .first,
        0);
    auto bytes = [](const std::string& path) {
        std::ifstream f(path, std::ios::binary);
        return std::string{std::istreambuf_iterator<char>(f), {}};
    };
    EXPECT_EQ(bytes(plain), bytes(zero));
    auto [bad, bad_out] = test::run_moestream(
        "mkmodel --arch qwen35moe --layers 4 --embd 64 --heads 2 --experts 8 --experts-used 2 --ffn 32 --vocab-builtin "
        "--router-locality 4 --out " +
            dir / "x.gguf",
        true);
    EXPECT_EQ(bad, 2) << bad_out;
    EXPECT_NE(bad_out.find("--router-locality is written for qwen3moe, glm4moe, deepseek2 and glm-dsa, not qwen35moe"), std::string::npos) << bad_out;
    EXPECT_FALSE(std::filesystem::exists(dir / "x.gguf"));
}

}  // namespace
}  // namespace moe

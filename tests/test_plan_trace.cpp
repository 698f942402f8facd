// plan --target llama-server --trace: llama.cpp maps the file, so the routed experts no GPU holds come through
// the page cache; the layers it would miss most on the user's routing go to the GPU, and plan.yaml says how many
// bytes per token each layout would read.
#include <filesystem>
#include <fstream>
#include <set>
#include <yaml-cpp/yaml.h>

#include "engine/runtime/cache_sim.h"
#include "engine/runtime/routing_trace.h"
#include "tests/test_support.h"

namespace moe {
namespace {

// A trace of the model's own header with hand-made routing: layers in `cycling` walk through every expert four
// at a time (no cache smaller than the layer keeps any under LRU), the others always take experts 0-3.
void write_routing(const std::string& recorded, const std::string& out, const std::set<uint32_t>& cycling, int steps) {
    const RoutingTrace t = read_routing_trace(recorded);
    RoutingTraceWriter w(out, t.header);
    const uint32_t k = t.header.n_expert_used, n = t.header.n_expert;
    for (int s = 0; s < steps; ++s) {
        w.begin_step(1);
        for (uint32_t l = 0; l < t.header.n_layer; ++l) {
            std::vector<int> ex(k);
            for (uint32_t i = 0; i < k; ++i) ex[i] = static_cast<int>(cycling.count(l) ? (static_cast<uint32_t>(s) * k + i) % n : i);
            const std::vector<float> wt(k, 1.0f / static_cast<float>(k));
            w.route(l, 1, static_cast<int>(k), ex.data(), wt.data());
        }
        w.end_step(1000, 0);
    }
}

TEST(PlanTrace, LlamaServerPutsTheLayersThePageCacheMissesOnTheGpu) {
    test::TempDir dir;
    const std::string model = dir / "m.gguf", recorded = dir / "r.trace", trace = dir / "t.trace", facts = dir / "host.json";
    ASSERT_EQ(test::run_moestream("mkmodel --layers 8 --embd 128 --heads 4 --kv-heads 2 --experts 32 --experts-used 4 --ffn 128 "
                                  "--vocab-builtin --seed 3 --out " +
                                      model,
                                  true)
                  .first,
              0);
    auto [rc, out] = test::run_moestream("run --model " + model + " -p 'placing experts' -n 4 --routing-trace " + recorded, true);
    ASSERT_EQ(rc, 0) << out;
    // Layers 0, 1, 6, 7 concentrated: the head- and tail-biased layout would give the GPU layers 0 and 1.
    write_routing(recorded, trace, {2, 3, 4, 5}, 120);
    ASSERT_EQ(test::run_moestream_cmd(std::string(MOESTREAM_BINARY) + " probe --root " + MOESTREAM_SOURCE_DIR +
                                      "/tests/fixtures/hosts/laptop-1node-smt --json > " + facts)
                  .first,
              0);
    // 800M of GPU: its fixed share (768M reserve, compute, KV, the layers) leaves room for two layers' experts
    // (6 MiB each); 20M of RAM holds the concentrated layers and two cycling ones, not four.
    const std::string common = "plan --model " + model + " --host " + facts + " --target llama-server --gpu-mem 0=800M --ram-budget 20M";
    auto [prc, pout] = test::run_moestream(common + " --out " + dir / "plain", true);
    ASSERT_EQ(prc, 0) << pout;
    auto [trc, tout] = test::run_moestream(common + " --trace " + trace + " --out " + dir / "traced", true);
    ASSERT_EQ(trc, 0) << tout;
    const YAML::Node plain = YAML::LoadFile(dir / "plain/plan.yaml"), traced = YAML::LoadFile(dir / "traced/plan.yaml");
    EXPECT_EQ(plain["reasons"]["gpu_layers"]["value"].as<std::string>(), "2");
    ASSERT_EQ(traced["reasons"]["gpu_layers"]["value"].as<std::string>(), "2");
    EXPECT_NE(traced["reasons"]["gpu_layers"]["reason"].as<std::string>().find("miss most on the routing trace " + trace), std::string::npos);

    // Replayed by hand: the GPU took two cycling layers, and the page cache then reads nothing past warm-up
    // where the head/tail layout reads a cycling layer's four experts per token.
    std::ifstream launch(dir / "traced/launch.sh");
    const std::string script{std::istreambuf_iterator<char>(launch), {}};
    const size_t ot = script.find("-ot 'blk\\.(");
    ASSERT_NE(ot, std::string::npos) << script;
    const std::string layers = script.substr(ot + 11, script.find(')', ot) - ot - 11);
    std::vector<bool> on_gpu(8, false);
    for (size_t at = 0; at < layers.size();) {
        const uint32_t l = static_cast<uint32_t>(std::stoul(layers.substr(at)));
        EXPECT_TRUE(l >= 2 && l <= 5) << "layer " << l << " is not a cycling layer: " << layers;
        if (l < on_gpu.size()) on_gpu[l] = true;
        at = layers.find('|', at);
        if (at == std::string::npos) break;
        ++at;
    }
    const RoutingTrace t = read_routing_trace(trace);
    const uint64_t room = traced["decisions"]["ram_budget_bytes"].as<uint64_t>();
    const std::string reads = traced["reasons"]["page_cache_reads"]["value"].as<std::string>();
    const std::string why = traced["reasons"]["page_cache_reads"]["reason"].as<std::string>();
    const double head_tail = std::stod(why.substr(why.find("layout would read ") + 18));
    std::cerr << "[  NOTE    ] page cache reads per token: " << reads << " with layers " << layers << " on the GPU, " << head_tail
              << " MiB with 0 and 1 (room " << room << ")\n";
    EXPECT_LT(std::stod(reads), head_tail);
    EXPECT_GT(head_tail, 0.5);  // about one cycling layer's 4 experts x 192 KiB per token
    std::vector<bool> head(8, false);
    head[0] = head[1] = true;
    EXPECT_GT(simulate_engine_cache(without_layers(t, head), EvictionPolicy::Lru, room, false).decode_bytes_per_token(),
              simulate_engine_cache(without_layers(t, on_gpu), EvictionPolicy::Lru, room, false).decode_bytes_per_token());
}

}  // namespace
}  // namespace moe

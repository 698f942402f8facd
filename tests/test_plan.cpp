// Planner decisions on fixture hosts, the llama-server GPU split, plan.yaml round trip and bad plans.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include <yaml-cpp/yaml.h>
#include "engine/model/loader.h"
#include "engine/forward/runner.h"
#include "launch/apply.h"
#include "launch/launch_script.h"
#include "engine/model/model_facts.h"
#include "probes/host_facts.h"
#include "probes/probes.h"
#include "systemd/unit.h"
#include "tests/plan_fixtures.h"
#include "tests/test_support.h"
#include "tune/plan_io.h"
#include "tune/gpu_plan.h"
#include "tune/check.h"
#include "tune/planner.h"

namespace fs = std::filesystem;

namespace moe {
namespace {

using namespace plan_fixtures;

TEST(Planner, LaptopUsesPhysicalCoresOnly) {
    Plan p = make_plan(fixture_host("laptop-1node-smt"), moe_model(48, 0, 512, 4ull << 30), opts());
    EXPECT_EQ(p.cpus, "0-3");
    EXPECT_EQ(p.threads, 4);
    EXPECT_FALSE(p.membind_node);
    EXPECT_EQ(p.read_size, 512u << 10);  // fastest of the sweep
    // swap exists on the laptop: swappiness is set, with its reason naming the swap.
    bool swappiness = false;
    for (const auto& s : p.sysctl) swappiness |= s.key == "vm.swappiness" && s.value == "1" && s.reason.find("8.0 GiB") != std::string::npos;
    EXPECT_TRUE(swappiness);
}

TEST(Planner, TwoSocketBindsToTheDisksNode) {
    Plan p = make_plan(fixture_host("server-2socket-nvme-node1", 1), moe_model(48, 0, 512, 4ull << 30), opts());
    EXPECT_EQ(p.membind_node, 1);
    EXPECT_EQ(p.cpus, "4-7");
    bool numa_balancing = false;
    for (const auto& s : p.sysctl) numa_balancing |= s.key == "kernel.numa_balancing" && s.value == "0";
    EXPECT_TRUE(numa_balancing);
    std::string unit = render_unit(p);
    EXPECT_NE(unit.find("NUMAMask=1"), std::string::npos);
    EXPECT_NE(unit.find("CPUAffinity=4-7"), std::string::npos);
    EXPECT_NE(render_launch_sh(p).find("--membind=1"), std::string::npos);
}

// A GLM-5.1 IQ3_KS file's header (the data a hole): 79 blocks (78 trunk + the NextN block), 3 dense, 256 experts
// of 2048 (gate/up IQ3_KS, down IQ4_KS: 1,225 + 1,225 + 1,638 MiB per MoE layer), MLA attention and shared
// experts in q8_0/q6_K, dense FFNs f16, token embeddings q4_K, output q6_K.
std::string glm51_iq3ks(const test::TempDir& dir) {
    const std::string path = dir / "GLM-5.1-IQ3_KS.gguf";
    const auto IQ3_KS = static_cast<GgmlType>(156), IQ4_KS = static_cast<GgmlType>(144);
    const uint64_t E = 6144, V = 154880, H = 64, F = 12288, FE = 2048, X = 256;
    std::vector<GgufTensorData> t;
    auto add = [&](const std::string& name, std::vector<uint64_t> ne, GgmlType type) { t.push_back({name, std::move(ne), type, {}}); };
    add("token_embd.weight", {E, V}, GgmlType::Q4_K);
    for (uint64_t l = 0; l < 79; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        add(b + "attn_norm.weight", {E}, GgmlType::F32);
        add(b + "attn_q_a.weight", {E, 2048}, GgmlType::Q8_0);
        add(b + "attn_q_a_norm.weight", {2048}, GgmlType::F32);
        add(b + "attn_q_b.weight", {2048, H * 256}, GgmlType::Q6_K);
        add(b + "attn_kv_a_mqa.weight", {E, 576}, GgmlType::Q8_0);
        add(b + "attn_kv_a_norm.weight", {512}, GgmlType::F32);
        add(b + "attn_kv_b.weight", {512, H * (192 + 256)}, GgmlType::Q8_0);
        add(b + "attn_output.weight", {H * 256, E}, GgmlType::Q6_K);
        add(b + "ffn_norm.weight", {E}, GgmlType::F32);
        if (l < 3) {
            add(b + "ffn_gate.weight", {E, F}, GgmlType::F16);
            add(b + "ffn_up.weight", {E, F}, GgmlType::F16);
            add(b + "ffn_down.weight", {F, E}, GgmlType::F16);
            continue;
        }
        add(b + "ffn_gate_inp.weight", {E, X}, GgmlType::F32);
        add(b + "exp_probs_b.bias", {X}, GgmlType::F32);
        add(b + "ffn_gate_exps.weight", {E, FE, X}, IQ3_KS);
        add(b + "ffn_up_exps.weight", {E, FE, X}, IQ3_KS);
        add(b + "ffn_down_exps.weight", {FE, E, X}, IQ4_KS);
        add(b + "ffn_gate_shexp.weight", {E, FE}, GgmlType::Q8_0);
        add(b + "ffn_up_shexp.weight", {E, FE}, GgmlType::Q8_0);
        add(b + "ffn_down_shexp.weight", {FE, E}, GgmlType::Q8_0);
    }
    add("output_norm.weight", {E}, GgmlType::F32);
    add("output.weight", {E, V}, GgmlType::Q6_K);
    const std::string a = "glm-dsa.";
    write_gguf(path,
               {{"general.architecture", GgufValue::string("glm-dsa")},
                {a + "block_count", GgufValue::u32(79)},
                {a + "nextn_predict_layers", GgufValue::u32(1)},
                {a + "embedding_length", GgufValue::u32(6144)},
                {a + "feed_forward_length", GgufValue::u32(12288)},
                {a + "expert_feed_forward_length", GgufValue::u32(2048)},
                {a + "attention.head_count", GgufValue::u32(64)},
                {a + "attention.head_count_kv", GgufValue::u32(1)},
                {a + "attention.key_length", GgufValue::u32(576)},
                {a + "attention.key_length_mla", GgufValue::u32(256)},
                {a + "attention.kv_lora_rank", GgufValue::u32(512)},
                {a + "rope.dimension_count", GgufValue::u32(64)},
                {a + "expert_count", GgufValue::u32(256)},
                {a + "expert_used_count", GgufValue::u32(8)},
                {a + "leading_dense_block_count", GgufValue::u32(3)},
                {a + "context_length", GgufValue::u32(202752)}},
               t, 32, true);
    return path;
}

// The published run this plan must predict (ik_llama.cpp log, GLM-5.1 IQ3_KS on 2 x 96 GB + 768 GB RAM):
// experts of layers 3-17 on CUDA0 and 74-77 on CUDA1, 64k context, -b/-ub 8192: model buffers CUDA0 68.7 GiB,
// CUDA1 23.5 GiB, CUDA_Host 229,438 MiB. Each predicted within 5%.
TEST(Planner, GpuPlanPredictsThePublishedGlm51Log) {
    test::TempDir dir;
    const ModelFacts m = read_model_facts(glm51_iq3ks(dir));
    ASSERT_EQ(m.n_layer, 78u);
    EXPECT_EQ(m.layer_expert_bytes[3] >> 20, 4088u);
    GpuPlanOptions o;
    o.gpu_mem = parse_gpu_mem("0=96G,1=96G");
    o.n_ctx = 65536;
    o.n_batch = o.n_ubatch = 8192;
    o.pinned = parse_gpu_layers("3-17:0,74-77:1");
    const auto gpus = plan_gpus(m, o);
    ASSERT_EQ(gpus.size(), 2u);
    auto model_buffer_gib = [](const GpuAssignment& g) {
        return static_cast<double>(g.expert_bytes + g.layer_bytes + g.output_bytes) / (1ull << 30);
    };
    EXPECT_NEAR(model_buffer_gib(gpus[0]), 68.7, 68.7 * 0.05);
    EXPECT_NEAR(model_buffer_gib(gpus[1]), 23.5, 23.5 * 0.05);
    EXPECT_EQ(gpus[0].first_layer, 0u);  // llama.cpp's layer split of 79 blocks + output over two equal GPUs
    EXPECT_EQ(gpus[0].n_layers, 40u);
    EXPECT_EQ(gpus[1].n_layers, 38u);  // 40..77: the NextN block is not loaded
    EXPECT_GT(gpus[1].output_bytes, 0u);
    EXPECT_EQ(gpus[0].output_bytes, 0u);
    for (const auto& g : gpus) EXPECT_LE(g.used_bytes, g.budget_bytes) << describe_gpu(g);
    uint64_t on_gpu = 0;
    for (const auto& g : gpus) on_gpu += g.expert_bytes;
    const double host_mib = static_cast<double>(m.token_embd_bytes + m.expert_bytes - on_gpu) / (1 << 20);
    EXPECT_NEAR(host_mib, 229438, 229438 * 0.05);
    std::printf("[ gpu plan ] model buffers CUDA0 %.2f GiB (log 68.7), CUDA1 %.2f GiB (log 23.5), host %.0f MiB (log 229438)\n",
                model_buffer_gib(gpus[0]), model_buffer_gib(gpus[1]), host_mib);

    // The whole plan writes the layout it modelled: the split, the pins, -b/-ub, then --cpu-moe.
    PlanOptions po = opts();
    po.target = "llama-server";  // mainline llama.cpp cannot load IQ3_KS: refused, naming the tensor
    try {
        make_plan(fixture_host("server-2socket-nvme-node1", 1), m, po);
        ADD_FAILURE() << "a llama-server plan for an ik_llama.cpp file";
    } catch (const PlanError& e) { EXPECT_NE(std::string(e.what()).find("blk.3.ffn_gate_exps.weight (iq3_ks)"), std::string::npos) << e.what(); }
    po.target = "ik-llama-server";
    po.gpu_mem = o.gpu_mem;
    po.gpu_layers = "3-17:0,74-77:1";
    po.n_ctx = 65536;
    po.n_batch = po.n_ubatch = 8192;
    HostFacts h = fixture_host("server-2socket-nvme-node1", 1);
    h.memory.total_bytes.value = 768ull << 30;
    const Plan p = make_plan(h, m, po);
    EXPECT_NEAR(static_cast<double>(p.host_model_bytes) / (1 << 20), 229438, 229438 * 0.05);
    std::string cmd;
    for (const auto& arg : launch_argv(p)) cmd += arg + " ";
    EXPECT_NE(cmd.find("--tensor-split 98304,98304"), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("-b 8192 -ub 8192"), std::string::npos) << cmd;
    // One -ot (current llama.cpp deprecates repeated ones), a rule per GPU naming its layers.
    EXPECT_NE(cmd.find("-ot blk\\.(3|4|5|6|7|8|9|10|11|12|13|14|15|16|17)\\.ffn_(gate|up|down)_exps\\.=CUDA0,"
                       "blk\\.(74|75|76|77)\\.ffn_(gate|up|down)_exps\\.=CUDA1 "),
              std::string::npos)
        << cmd;
    EXPECT_EQ(cmd.find("-ot"), cmd.rfind("-ot")) << cmd;
    EXPECT_EQ(cmd.find("|18|"), std::string::npos) << cmd;
    EXPECT_LT(cmd.find("-ot"), cmd.find("--cpu-moe"));  // first matching override wins in llama.cpp
}

// ik_llama.cpp's server: the same placement and files, with its own options for an MLA MoE on GPUs + CPU,
// kept in plan.yaml so `launch` and `regen` write the same command.
TEST(Planner, IkLlamaServerTargetWritesItsOptions) {
    test::TempDir dir;
    const ModelFacts m = read_model_facts(glm51_iq3ks(dir));
    PlanOptions po = opts();
    po.target = "ik-llama-server";
    po.gpu_mem = parse_gpu_mem("0=96G,1=96G");
    po.n_ctx = 65536;
    HostFacts h = fixture_host("server-2socket-nvme-node1", 1);
    h.memory.total_bytes.value = 768ull << 30;
    Plan p = make_plan(h, m, po);
    std::string cmd;
    for (const auto& arg : launch_argv(p)) cmd += arg + " ";
    for (const std::string& want : {"-tb " + std::to_string(p.threads) + " ", std::string("-fa on "), std::string("-mla 3 "),
                                    std::string("-amb 512 "), std::string("--tensor-split 98304,98304 "), std::string("--cpu-moe")})
        EXPECT_NE(cmd.find(want), std::string::npos) << want << " not in " << cmd;
    EXPECT_LT(cmd.find("-ot"), cmd.find("--cpu-moe"));  // ik applies -ot before --cpu-moe's own overrides too
    bool mla_reason = false;
    for (const auto& [k, v] : p.reasons) mla_reason |= k == "mla" && v.reason.find("latent") != std::string::npos;
    EXPECT_TRUE(mla_reason);
    p.out_dir = dir.path.string();
    std::ofstream(dir / "plan.yaml") << plan_to_yaml(p);
    const Plan back = load_plan(dir / "plan.yaml");
    EXPECT_EQ(back.target, "ik-llama-server");
    EXPECT_EQ(back.server_args, p.server_args);
    ASSERT_EQ(back.gpus.size(), 2u);
    EXPECT_EQ(back.gpus[1].layer_bytes, p.gpus[1].layer_bytes);
    EXPECT_EQ(back.gpus[0].layers, p.gpus[0].layers);
}

// Quantized KV caches (-ctk / -ctv): each GPU's KV figure in the asked types (q8_0: 34 bytes per 32 values), the
// flags written with their reasons (MLA has no V cache: -ctv not written; mainline quantizes V only with flash
// attention), kept through plan.yaml, and a type the server does not take refused with one line.
TEST(Planner, QuantizedKvCacheTypesInTheVramModel) {
    test::TempDir dir;
    const ModelFacts mla = read_model_facts(glm51_iq3ks(dir));
    EXPECT_EQ(mla.cache_k_elems_per_token, 78u * 576);
    EXPECT_EQ(mla.cache_v_elems_per_token, 0u);
    GpuPlanOptions o;
    o.gpu_mem = parse_gpu_mem("0=96G,1=96G");
    o.n_ctx = 65536;
    const auto f16 = plan_gpus(mla, o);
    o.cache_type_k = GgmlType::Q8_0;
    const auto q8 = plan_gpus(mla, o);
    for (size_t d = 0; d < 2; ++d) {
        EXPECT_EQ(q8[d].kv_bytes * 64, f16[d].kv_bytes * 34) << describe_gpu(q8[d]);
        EXPECT_LE(q8[d].used_bytes, q8[d].budget_bytes);
    }

    PlanOptions po = opts();
    po.target = "ik-llama-server";
    po.gpu_mem = o.gpu_mem;
    po.n_ctx = 65536;
    po.cache_type_k = po.cache_type_v = "q8_0";
    HostFacts h = fixture_host("server-2socket-nvme-node1", 1);
    h.memory.total_bytes.value = 768ull << 30;
    Plan p = make_plan(h, mla, po);
    std::string cmd;
    for (const auto& arg : launch_argv(p)) cmd += arg + " ";
    EXPECT_NE(cmd.find("-ctk q8_0 "), std::string::npos) << cmd;
    EXPECT_EQ(cmd.find("-ctv"), std::string::npos) << cmd;
    EXPECT_EQ(p.gpus[0].kv_bytes, q8[0].kv_bytes);
    p.out_dir = dir.path.string();
    std::ofstream(dir / "plan.yaml") << plan_to_yaml(p);
    const Plan back = load_plan(dir / "plan.yaml");
    EXPECT_EQ(back.cache_type_k, "q8_0");
    EXPECT_EQ(back.cache_type_v, "q8_0");
    po.cache_type_k = "q6_0";  // ik_llama.cpp's own cache type
    EXPECT_NO_THROW(make_plan(h, mla, po));

    // A GQA model on mainline llama-server: both caches, V quantized only with flash attention.
    ModelFacts gqa = moe_model(48, 0, 512, 4ull << 30);
    gqa.cache_k_elems_per_token = gqa.cache_v_elems_per_token = 48ull * 4 * 128;
    gqa.cache_bytes_per_token = 2 * 2 * gqa.cache_k_elems_per_token;
    PlanOptions pg = opts();
    pg.target = "llama-server";
    pg.gpu_mem = parse_gpu_mem("0=24G");
    pg.cache_type_v = "q4_0";
    const Plan pv = make_plan(fixture_host("laptop-1node-smt"), gqa, pg);
    std::string cmd_v;
    for (const auto& arg : launch_argv(pv)) cmd_v += arg + " ";
    EXPECT_NE(cmd_v.find("-ctv q4_0 -fa on "), std::string::npos) << cmd_v;
    EXPECT_EQ(cmd_v.find("-ctk"), std::string::npos) << cmd_v;
    GpuPlanOptions go;
    go.gpu_mem = pg.gpu_mem;
    go.cache_type_v = GgmlType::Q4_0;
    EXPECT_EQ(plan_gpus(gqa, go)[0].kv_bytes, 48ull * 4096 * (4 * 128 * 2 + 4 * 128 / 32 * 18));

    pg.cache_type_k = "q6_0";  // not mainline's
    try {
        make_plan(fixture_host("laptop-1node-smt"), gqa, pg);
        ADD_FAILURE() << "q6_0 accepted for llama-server";
    } catch (const PlanError& e) {
        EXPECT_NE(std::string(e.what()).find("--cache-type-k q6_0 is not a KV cache type llama-server takes (f32, f16"), std::string::npos)
            << e.what();
    }
}

// Unpinned, the plan fills each GPU to its --gpu-mem counting everything the command puts there (the old plan
// filled both with experts to 48 MiB and failed at load): head layers on the first GPU, tail on the last.
TEST(Planner, GpuPlanFitsEveryGpuWithHeadAndTailLayers) {
    test::TempDir dir;
    const ModelFacts m = read_model_facts(glm51_iq3ks(dir));
    GpuPlanOptions o;
    o.gpu_mem = parse_gpu_mem("0=96G,1=96G");
    o.n_ctx = 65536;
    const auto gpus = plan_gpus(m, o);
    ASSERT_EQ(gpus.size(), 2u);
    for (const auto& g : gpus) {
        EXPECT_LE(g.used_bytes, g.budget_bytes) << describe_gpu(g);
        EXPECT_LT(g.budget_bytes - g.used_bytes, m.layer_expert_bytes[3]) << "room for another layer left unused: " << describe_gpu(g);
        EXPECT_GT(g.layer_bytes, 6ull << 30) << describe_gpu(g);  // the non-expert share is counted
        EXPECT_GT(g.compute_bytes, 0u);
        EXPECT_GT(g.kv_bytes, 0u);
    }
    for (const auto& g : gpus) std::printf("[ gpu plan ] %s\n", describe_gpu(g).c_str());
    EXPECT_EQ(gpus[0].layers.front(), 3u);                          // the first MoE layer
    EXPECT_EQ(gpus[1].layers.back(), 77u);                          // the last trunk layer
    EXPECT_LT(gpus[0].layers.size() + gpus[1].layers.size(), 48u);  // fewer than the experts-only fill gave

    // Bad input: one line naming the flag and both values.
    auto error_of = [&](GpuPlanOptions bad) {
        try {
            plan_gpus(m, bad);
        } catch (const PlanError& e) { return std::string(e.what()); }
        return std::string("no error");
    };
    GpuPlanOptions small = o;
    small.gpu_mem = parse_gpu_mem("0=1G,1=96G");  // even its proportional share of the layers does not fit
    EXPECT_NE(error_of(small).find("--gpu-mem 0=1.0 GiB is smaller than GPU 0's share"), std::string::npos) << error_of(small);
    GpuPlanOptions overlap = o;
    overlap.pinned = parse_gpu_layers("3-17:0,17-20:1");
    EXPECT_NE(error_of(overlap).find("layer 17 is pinned twice"), std::string::npos) << error_of(overlap);
    GpuPlanOptions dense = o;
    dense.pinned = parse_gpu_layers("1-4:0");
    EXPECT_NE(error_of(dense).find("layer 1 is dense"), std::string::npos) << error_of(dense);
    GpuPlanOptions too_many = o;
    too_many.pinned = parse_gpu_layers("3-40:0");
    EXPECT_NE(error_of(too_many).find("on GPU 0, which has"), std::string::npos) << error_of(too_many);
    GpuPlanOptions unknown = o;
    unknown.pinned = parse_gpu_layers("3-4:2");
    EXPECT_NE(error_of(unknown).find("GPU 2 is not in --gpu-mem"), std::string::npos) << error_of(unknown);
    EXPECT_THROW(parse_gpu_layers("3-17"), PlanError);
    EXPECT_THROW(parse_gpu_layers("17-3:0"), PlanError);
    EXPECT_THROW(parse_gpu_layers("a-3:0"), PlanError);
}

TEST(Planner, RoutingProfilePutsTheHottestLayersOnGpus) {
    ModelFacts m = moe_model(10, 1, 1000, 1ull << 30);
    // Layers 7 and 4 are the most routed in the profile; room for two layers' experts besides the fixed share.
    GpuPlanOptions go;
    go.gpu_mem = {{0, (2000ull << 20) + go.reserve_bytes + compute_buffer_bytes(m, go.n_ubatch, true, true)}};
    go.layer_heat = {{7, 900}, {4, 800}, {1, 10}, {2, 5}};
    auto gpus = plan_gpus(m, go);
    ASSERT_EQ(gpus[0].layers.size(), 2u);
    EXPECT_EQ(gpus[0].layers[0], 4u);  // listed in layer order
    EXPECT_EQ(gpus[0].layers[1], 7u);
    PlanOptions o = opts();
    o.profile_path = "/plans/profile.yaml";
    Plan p = make_plan(fixture_host("laptop-1node-smt"), moe_model(48, 0, 512, 4ull << 30), o);
    auto argv = launch_argv(p);
    EXPECT_NE(std::find(argv.begin(), argv.end(), "/plans/profile.yaml"), argv.end());
}

TEST(Planner, BadRequestsNameTheValue) {
    ModelFacts m = moe_model(79, 3, 4088, 20ull << 30);
    PlanOptions o = opts();
    o.ram_budget = 1ull << 30;
    try {
        make_plan(fixture_host("laptop-1node-smt"), moe_model(48, 0, 512, 4ull << 30), o);
        FAIL();
    } catch (const PlanError& e) {
        EXPECT_NE(std::string(e.what()).find("--ram-budget 1.0 GiB is below the resident weights (4.0 GiB)"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_gpu_mem("0:96G"), PlanError);
    EXPECT_THROW(parse_gpu_mem("x=96G"), PlanError);
    o = opts();
    o.target = "vllm";
    EXPECT_THROW(make_plan(fixture_host("laptop-1node-smt"), moe_model(48, 0, 512, 4ull << 30), o), PlanError);
}

// serve --parallel N: every slot's KV cache comes out of the budget, and launch.sh passes the flag on.
TEST(Planner, ParallelSlotsCountEverySlotsCache) {
    PlanOptions o = opts();
    const Plan one = make_plan(fixture_host("laptop-1node-smt"), moe_model(48, 0, 512, 4ull << 30), o);
    o.parallel = 3;
    const Plan three = make_plan(fixture_host("laptop-1node-smt"), moe_model(48, 0, 512, 4ull << 30), o);
    EXPECT_EQ(three.kv_bytes, 3 * one.kv_bytes);
    EXPECT_EQ(three.expert_cache_bytes + 2 * one.kv_bytes, one.expert_cache_bytes);
    const auto argv = launch_argv(three);
    const auto it = std::find(argv.begin(), argv.end(), "--parallel");
    ASSERT_NE(it, argv.end());
    EXPECT_EQ(*(it + 1), "3");
    const auto argv_one = launch_argv(one);
    EXPECT_EQ(std::find(argv_one.begin(), argv_one.end(), "--parallel"), argv_one.end());
    test::TempDir dir;
    std::ofstream(dir / "plan.yaml") << plan_to_yaml(three);
    EXPECT_EQ(load_plan(dir / "plan.yaml").parallel, 3);
    o.parallel = 0;
    EXPECT_THROW(make_plan(fixture_host("laptop-1node-smt"), moe_model(48, 0, 512, 4ull << 30), o), PlanError);
}

// The engine target with a quantized cache: KV counted in the type's bytes, the flags in launch.sh, the request kept
// in plan.yaml for regen, and the MLA rule (V lives in K) refused with the engine's reason.
TEST(Planner, EngineCacheTypesShrinkTheKvAndReachLaunchSh) {
    PlanOptions o = opts();
    ModelFacts m = moe_model(48, 0, 4096, 4ull << 30);  // more experts than RAM: the cache takes what KV leaves
    m.cache_k_elems_per_token = m.cache_v_elems_per_token = 48ull * 4 * 128;
    m.cache_bytes_per_token = 2 * m.cache_k_elems_per_token * 2;
    const Plan f16 = make_plan(fixture_host("laptop-1node-smt"), m, o);
    o.cache_type_k = o.cache_type_v = "q8_0";
    const Plan q8 = make_plan(fixture_host("laptop-1node-smt"), m, o);
    EXPECT_EQ(q8.kv_bytes * 32, f16.kv_bytes * 17);                                         // 34 bytes per 32 values against 64
    EXPECT_EQ(q8.expert_cache_bytes - f16.expert_cache_bytes, f16.kv_bytes - q8.kv_bytes);  // what the cache saves goes to experts
    const auto argv = launch_argv(q8);
    const auto k = std::find(argv.begin(), argv.end(), "--cache-type-k");
    ASSERT_NE(k, argv.end());
    EXPECT_EQ(*(k + 1), "q8_0");
    const auto argv_f16 = launch_argv(f16);
    EXPECT_EQ(argv_f16.end(), std::find(argv_f16.begin(), argv_f16.end(), "--cache-type-k"));
    test::TempDir dir;
    std::ofstream(dir / "plan.yaml") << plan_to_yaml(q8);
    EXPECT_EQ(load_plan(dir / "plan.yaml").cache_type_v, "q8_0");
    o.cache_type_k = "q6_0";
    try {
        make_plan(fixture_host("laptop-1node-smt"), m, o);
        ADD_FAILURE() << "q6_0 is not a cache type the engine computes";
    } catch (const PlanError& e) {
        EXPECT_NE(std::string(e.what()).find("--cache-type-k q6_0 is not a cache type the engine computes"), std::string::npos) << e.what();
    }
    m.cache_v_elems_per_token = 0;  // MLA: the latent only
    o.cache_type_k = "q8_0";
    o.cache_type_v = "f16";
    EXPECT_THROW(make_plan(fixture_host("laptop-1node-smt"), m, o), PlanError);
}

// A plan whose GPU figures are maps instead of numbers (what the fuzzer found): a PlanError naming the file.
TEST(PlanFile, WrongKindOfFieldIsAPlanError) {
    test::TempDir dir;
    PlanOptions o = opts();
    o.target = "llama-server";
    o.gpu_mem = parse_gpu_mem("0=24G");
    Plan p = make_plan(fixture_host("server-2socket-nvme-node1", 1), moe_model(48, 0, 512, 4ull << 30), o);
    std::string yaml = plan_to_yaml(p);
    const size_t at = yaml.find("budget_bytes: ");
    ASSERT_NE(at, std::string::npos);
    yaml.replace(at, yaml.find('\n', at) - at, "budget_bytes: {a: 1}");
    std::ofstream(dir / "plan.yaml") << yaml;
    try {
        load_plan(dir / "plan.yaml");
        FAIL() << "accepted";
    } catch (const PlanError& e) {
        EXPECT_NE(std::string(e.what()).find(dir / "plan.yaml"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("wrong type"), std::string::npos) << e.what();
    }
}

TEST(PlanFile, RoundTripAndBadFiles) {
    test::TempDir dir;
    Plan p = make_plan(fixture_host("server-2socket-nvme-node1", 1), moe_model(48, 0, 512, 4ull << 30), opts());
    p.asked_threads = 3;
    const std::string path = dir / "plan.yaml";
    std::ofstream(path) << plan_to_yaml(p);
    Plan q = load_plan(path);
    EXPECT_EQ(q.cpus, p.cpus);
    EXPECT_EQ(q.membind_node, p.membind_node);
    EXPECT_EQ(q.expert_cache_bytes, p.expert_cache_bytes);
    EXPECT_EQ(q.fingerprint.numa_layout, p.fingerprint.numa_layout);
    EXPECT_EQ(q.asked_threads, 3);
    EXPECT_EQ(plan_to_yaml(q).substr(100), plan_to_yaml(p).substr(100));

    auto error_of = [&](const std::string& text) {
        std::ofstream(dir / "bad.yaml") << text;
        try {
            load_plan(dir / "bad.yaml");
        } catch (const PlanError& e) { return std::string(e.what()); }
        return std::string("accepted");
    };
    std::string newer = plan_to_yaml(p);
    newer.replace(newer.find("moestream_plan: 1"), 17, "moestream_plan: 7");
    EXPECT_NE(error_of(newer).find("schema 7 is newer"), std::string::npos);
    EXPECT_NE(error_of("moestream_plan: 1\ncreated_by: [unclosed\n").find("not valid YAML"), std::string::npos);
    std::string missing = plan_to_yaml(p);
    missing.replace(missing.find("  cpus:"), 7, "  cpux:");
    EXPECT_NE(error_of(missing).find("'decisions.cpus' is missing"), std::string::npos) << error_of(missing);
    std::string typed = plan_to_yaml(p);
    typed.replace(typed.find("threads: "), 10, "threads: many #");
    EXPECT_NE(error_of(typed).find("decisions.threads"), std::string::npos) << error_of(typed);
}

TEST(Planner, NextNDraftsTakeTheBlocksBytesFromTheExpertCache) {
    ModelFacts m = moe_model(48, 0, 512, 4ull << 30);
    m.arch = "glm4moe";
    m.n_layer_nextn = 1;
    PlanOptions o = opts();
    o.ram_budget = 16ull << 30;  // below resident + experts (28 GiB): the expert cache takes the rest
    const Plan plain = make_plan(fixture_host("server-2socket-nvme-node1", 1), m, o);
    o.draft = "mtp";
    o.draft_block_bytes = 700ull << 20;
    const Plan drafted = make_plan(fixture_host("server-2socket-nvme-node1", 1), m, o);
    EXPECT_EQ(plain.expert_cache_bytes - drafted.expert_cache_bytes, 700ull << 20);
    EXPECT_NE(render_launch_sh(drafted).find("--draft mtp"), std::string::npos);
    EXPECT_EQ(render_launch_sh(plain).find("--draft"), std::string::npos);
    test::TempDir dir;
    { std::ofstream(dir / "plan.yaml") << plan_to_yaml(drafted); }
    EXPECT_EQ(load_plan(dir / "plan.yaml").draft, "mtp");
    o.draft_block_bytes = 0;  // the file has no block the engine runs
    try {
        make_plan(fixture_host("server-2socket-nvme-node1", 1), m, o);
        ADD_FAILURE() << "planned mtp drafts without a block";
    } catch (const PlanError& e) { EXPECT_NE(std::string(e.what()).find("--draft mtp"), std::string::npos) << e.what(); }
    o.draft_block_bytes = 700ull << 20;
    o.target = "llama-server";
    o.gpu_mem = {{0, 96ull << 30}};
    try {
        make_plan(fixture_host("server-2socket-nvme-node1", 1), m, o);
        ADD_FAILURE() << "planned engine drafts for llama-server";
    } catch (const PlanError& e) { EXPECT_NE(std::string(e.what()).find("is the engine's"), std::string::npos) << e.what(); }
}

}  // namespace
}  // namespace moe

// `moestream bench`: prompt and generation tokens/s with all weights in RAM, next to the memory-bandwidth
// bound of ../shared/design.md section 4 (active bytes per token / measured read bandwidth), in one run.
#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/kernels/kernels.h"
#include "engine/model/model_facts.h"
#include "engine/model/qwen3moe_runner.h"
#include "probes/memory_bandwidth.h"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace moe::cli {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
    std::string model_path;
    int threads = 2, n_gen = 32, n_prompt = 64;
    bool as_json = false;
    po::options_description opts("moestream bench options");
    opts.add_options()("help,h", "show this help")("model,m", po::value(&model_path)->required(), "GGUF model")
        ("tokens", po::value(&n_gen)->default_value(32), "tokens to generate")
        ("prompt-tokens", po::value(&n_prompt)->default_value(64), "prompt tokens")
        ("threads,t", po::value(&threads)->default_value(2), "threads")("json", po::bool_switch(&as_json), "JSON output");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) { std::cout << opts; return 0; }
    po::notify(vm);
    if (n_gen < 2 || n_prompt < 1 || n_gen + n_prompt > 1 << 20) throw CliError("--tokens/--prompt-tokens out of range");

    GgufModel file = open_gguf_model(model_path);
    ModelFacts facts = model_facts(file);
    auto model = load_qwen3moe(file);
    Qwen3MoeRunner runner(*model, {.n_ctx = n_prompt + n_gen + 1, .n_threads = threads, .n_batch = 256});
    std::vector<int32_t> prompt(n_prompt);
    for (int i = 0; i < n_prompt; ++i) prompt[i] = (i * 7919 + 13) % static_cast<int>(model->hp.n_vocab);
    auto t0 = Clock::now();
    runner.eval(prompt);
    const double t_pp = std::chrono::duration<double>(Clock::now() - t0).count();
    int32_t next = 0;
    auto t1 = Clock::now();
    for (int i = 0; i < n_gen; ++i) {
        const float* l = runner.logits();
        next = static_cast<int32_t>(std::max_element(l, l + model->hp.n_vocab) - l);
        runner.eval(std::span<const int32_t>(&next, 1));
    }
    const double t_tg = std::chrono::duration<double>(Clock::now() - t1).count();
    const double pp = n_prompt / t_pp, tg = n_gen / t_tg;
    const double bw = measure_memory_read_bandwidth(threads, size_t{1} << 30);
    const double active = static_cast<double>(facts.active_bytes_per_token());
    const double bound = bw / active;
    if (as_json) {
        std::cout << json{{"model", model_path}, {"threads", threads}, {"kernels", kernels::isa_name(kernels::active_table().isa)},
                          {"prompt_tokens_per_s", pp}, {"gen_tokens_per_s", tg}, {"memory_read_bytes_per_s", bw},
                          {"active_bytes_per_token", active}, {"gen_bound_tokens_per_s", bound}, {"gen_ratio_of_bound", tg / bound}}
                         .dump()
                  << "\n";
    } else {
        std::printf("model            %s\nkernels          %s, %d threads\nprompt           %d tokens, %.1f tok/s\n"
                    "generation       %d tokens, %.1f tok/s\nmemory bandwidth %.2f GB/s (read, %d threads)\n"
                    "active bytes     %.2f MiB per token (resident %.2f MiB + %u experts x %u MoE layers)\n"
                    "bound            %.1f tok/s = bandwidth / active bytes\nratio            %.2f of the bound\n",
                    model_path.c_str(), kernels::isa_name(kernels::active_table().isa), threads, n_prompt, pp, n_gen, tg,
                    bw / 1e9, threads, active / 1048576.0, facts.resident_bytes / 1048576.0, facts.n_expert_used,
                    facts.moe_layers, bound, tg / bound);
    }
    return 0;
}

}  // namespace moe::cli

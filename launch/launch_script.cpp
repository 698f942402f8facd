#include "launch/launch_script.h"

namespace moe {

std::string shell_quote(const std::string& s) {
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == std::string::npos) return s;
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

std::vector<std::string> launch_argv(const Plan& p) {
    std::vector<std::string> a;
    // numactl pins threads to one CPU per physical core and memory to the disk's node; on a one-node
    // host only CPU pinning matters.
    a = {"numactl", "--physcpubind=" + p.cpus};
    if (p.membind_node) a.push_back("--membind=" + std::to_string(*p.membind_node));
    if (is_llama_target(p.target)) {
        a.insert(a.end(), {p.llama_server_binary, "--model", p.model_path, "--threads", std::to_string(p.threads), "--ctx-size",
                           std::to_string(p.n_ctx), "--host", p.host, "--port", std::to_string(p.port), "--alias", p.alias, "--n-gpu-layers", "999",
                           "-b", std::to_string(p.n_batch), "-ub", std::to_string(p.n_ubatch)});
        // The layer split the plan's VRAM model assumes (tune/gpu_plan.h), not llama.cpp's default from free memory.
        if (p.gpus.size() > 1) {
            std::string split;
            for (const auto& g : p.gpus) split += (split.empty() ? "" : ",") + std::to_string(g.budget_bytes >> 20);
            a.insert(a.end(), {"--tensor-split", split});
        }
        a.insert(a.end(), p.server_args.begin(), p.server_args.end());
        // One -ot, its rules comma-separated, one per GPU, not repeated -ot
        // options, deprecated in current llama.cpp ("only last value will be used"); every build and ik_llama.cpp read the comma form.
        std::string rules;
        for (const auto& g : p.gpus) {
            if (g.layers.empty()) continue;
            std::string layers;
            for (uint32_t l : g.layers) layers += (layers.empty() ? "" : "|") + std::to_string(l);
            rules += (rules.empty() ? "" : ",") + std::string("blk\\.(") + layers + ")\\.ffn_(gate|up|down)_exps\\.=CUDA" + std::to_string(g.gpu);
        }
        if (!rules.empty()) a.insert(a.end(), {"-ot", rules});
        a.push_back("--cpu-moe");  // after the -ot rules: llama.cpp takes the first matching override
        if (p.membind_node) a.insert(a.end(), {"--numa", "numactl"});
    } else {
        a.insert(a.end(),
                 {p.moestream_binary, "serve", "--model", p.model_path, "--threads", std::to_string(p.threads), "--ctx", std::to_string(p.n_ctx),
                  "--host", p.host, "--port", std::to_string(p.port), "--alias", p.alias, "--ram-budget", std::to_string(p.ram_budget_bytes)});
        if (p.parallel > 1) a.insert(a.end(), {"--parallel", std::to_string(p.parallel)});
        if (p.cache_type_k != "f16") a.insert(a.end(), {"--cache-type-k", p.cache_type_k});
        if (p.cache_type_v != "f16") a.insert(a.end(), {"--cache-type-v", p.cache_type_v});
        if (p.draft != "off") a.insert(a.end(), {"--draft", p.draft});
        if (!p.out_dir.empty()) a.insert(a.end(), {"--plan", p.out_dir + "/plan.yaml"});  // the web page shows its decisions
        if (!p.profile_path.empty()) a.insert(a.end(), {"--profile", p.profile_path});
        if (!p.prompt_cache_dir.empty())
            a.insert(a.end(), {"--prompt-cache", p.prompt_cache_dir, "--prompt-cache-size", std::to_string(p.prompt_cache_bytes)});
    }
    return a;
}

std::string render_launch_sh(const Plan& p) {
    const uint64_t kib = std::stoull(p.memlock_limit) * 1024;
    std::string cmd;
    for (const auto& s : launch_argv(p)) cmd += (cmd.empty() ? "" : " ") + shell_quote(s);
    std::string s =
        "#!/bin/sh\n"
        "# launch.sh: written by `moestream plan` (" +
        p.out_dir +
        "/plan.yaml). `moestream launch` execs the same command.\n"
        "set -eu\n"
        "# memlock: resident weights + KV cache (" +
        std::to_string(p.mlock_bytes) +
        " bytes) + 64 MiB, so they can be mlock'd;\n"
        "# where the hard limit is lower and cannot be raised, the engine runs unlocked and says so.\n"
        "ulimit -l " +
        std::to_string(kib) +
        " 2>/dev/null || echo \"launch.sh: memlock stays at $(ulimit -l) KiB\" >&2\n"
        "# one thread per physical core (" +
        std::to_string(p.threads) +
        "), for any OpenMP runtime in the process\n"
        "export OMP_NUM_THREADS=" +
        std::to_string(p.threads) + "\n";
    if (is_llama_target(p.target)) {
        s += "# experts of ";
        size_t on_gpu = 0;
        for (const auto& g : p.gpus) on_gpu += g.layers.size();
        s += std::to_string(on_gpu) + " MoE layers on GPUs, the rest on CPU; per GPU (plan.yaml has every figure):\n";
        for (const auto& g : p.gpus)
            s += "#   " + std::to_string(g.gpu) + ": " + std::to_string(g.used_bytes >> 20) + " MiB of " + std::to_string(g.budget_bytes >> 20) +
                 " MiB\n";
    }
    s += "exec " + cmd + "\n";
    return s;
}

}  // namespace moe

#include <boost/program_options/errors.hpp>
#include <functional>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "engine/gguf/gguf.h"
#include "engine/weights/weights.h"
#include "engine/tokenizer/tokenizer.h"

namespace moe::cli {

namespace {
const char* kUsage =
    "usage: moestream <command> [options]\n"
    "\n"
    "host readiness:\n"
    "  probe      host facts: CPU, NUMA, memory, limits, kernel settings, storage bandwidth (fio + io_uring)\n"
    "  check      PASS/WARN/FAIL per requirement with the fix for each (exit 0/1/2, 3 unknown)\n"
    "host setup:\n"
    "  plan       decide threads, NUMA, memory, I/O and kernel settings; write plan.yaml and the files\n"
    "  apply      put sysctl.d/limits.d files in place (diff, backup, --dry-run, --rollback, --root)\n"
    "  install    put the systemd unit in place (daemon-reload + enable where systemd runs)\n"
    "  launch     exec the plan's command (the same one launch.sh and the unit run)\n"
    "  regen      re-probe; when the hardware or model changed, re-plan and show the diff\n"
    "models:\n"
    "  mkmodel    write a synthetic MoE GGUF (qwen3moe, glm4moe, qwen35moe, deepseek2, glm-dsa, gpt-oss, minimax-m2, minimax-m3, kimi-k3) with seeded random weights\n"
    "  tokenize   print the token ids of a text\n"
    "  run        generate text (or --score a token sequence)\n"
    "  bench      tokens/s against the memory-bandwidth bound\n"
    "  profile    record how often each expert is routed to, for --profile (keep the hottest resident)\n"
    "  cache-sim  replay routing traces (--routing-trace) against the cache policies and the optimal bound, per budget\n"
    "  repack     write the expert-contiguous store beside a GGUF (one read per streamed expert), or --verify it\n"
    "  serve      OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics)\n"
    "\n"
    "Run `moestream <command> --help` for the options of a command.\n";
}

int dispatch(const std::vector<std::string>& argv) {
    static const std::map<std::string, std::function<int(const std::vector<std::string>&)>> commands = {
        {"mkmodel", cmd_mkmodel}, {"tokenize", cmd_tokenize}, {"run", cmd_run},         {"bench", cmd_bench},     {"probe", cmd_probe},
        {"check", cmd_check},     {"plan", cmd_plan},         {"apply", cmd_apply},     {"install", cmd_install}, {"launch", cmd_launch},
        {"regen", cmd_regen},     {"serve", cmd_serve},       {"profile", cmd_profile}, {"repack", cmd_repack},   {"cache-sim", cmd_cache_sim},
    };
    if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
        std::cout << kUsage;
        return argv.empty() ? 2 : 0;
    }
    auto it = commands.find(argv[0]);
    if (it == commands.end()) {
        std::cerr << "moestream: unknown command '" << argv[0] << "' (see moestream --help)\n";
        return 2;
    }
    std::vector<std::string> rest(argv.begin() + 1, argv.end());
    rewrite_llama_short_options(rest);
    try {
        return it->second(rest);
    } catch (const CliError& e) {
        std::cerr << "moestream " << argv[0] << ": " << e.what() << "\n";
        return e.code;
    } catch (const boost::program_options::error& e) {
        std::cerr << "moestream " << argv[0] << ": " << e.what() << "\n";
        return 2;
    } catch (const GgufError& e) {
        std::cerr << "moestream " << argv[0] << ": " << e.what() << "\n";
        return 2;
    } catch (const ModelError& e) {
        std::cerr << "moestream " << argv[0] << ": " << e.what() << "\n";
        return 2;
    } catch (const TokenizerError& e) {
        std::cerr << "moestream " << argv[0] << ": " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "moestream " << argv[0] << ": " << e.what() << "\n";
        return 1;
    }
}

}  // namespace moe::cli

// Subcommands of the single `moestream` binary. Each parses its own options and returns the exit code;
// errors are reported as one line on stderr by the dispatcher.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace moe::cli {

// A usage or input error: one line on stderr, exit code `code`.
struct CliError : std::runtime_error {
    int code;
    explicit CliError(const std::string& msg, int code = 2) : std::runtime_error(msg), code(code) {}
};

int cmd_mkmodel(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_probe(const std::vector<std::string>& args);
int cmd_check(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_apply(const std::vector<std::string>& args);
int cmd_install(const std::vector<std::string>& args);
int cmd_launch(const std::vector<std::string>& args);
int cmd_regen(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_profile(const std::vector<std::string>& args);
int cmd_repack(const std::vector<std::string>& args);
int cmd_cache_sim(const std::vector<std::string>& args);
// "8G", "512M", "1073741824" -> bytes; CliError naming the flag otherwise.
uint64_t parse_bytes(const std::string& flag, const std::string& text);

// Runs a subcommand by name with exception-to-exit-code mapping (used by main and by tests).
int dispatch(const std::vector<std::string>& argv);

}  // namespace moe::cli

#include "cli/commands.h"
namespace moe::cli {
int cmd_probe(const std::vector<std::string>&) { throw CliError("probe: not built yet"); }
int cmd_check(const std::vector<std::string>&) { throw CliError("check: not built yet"); }
}

// libFuzzer target for the plan.yaml reader (`apply`, `install`, `launch` and `regen` read a file anyone with
// write access to the plan directory may have edited): any bytes must load or raise PlanError naming the field.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tune/plan_io.h"
#include "tune/planner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = "/tmp/moestream-plan-fuzz-" + std::to_string(::getpid()) + ".yaml";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    try {
        const moe::Plan p = moe::load_plan(path);
        (void)moe::plan_to_yaml(p);  // what was read can be written back
    } catch (const moe::PlanError&) {}
    return 0;
}

// libFuzzer target for the host facts reader (`plan --host FILE`, cluster facts files from other machines):
// any bytes, JSON or YAML, must read into facts or raise std::runtime_error naming the field.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "probes/host_facts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const moe::HostFacts h = moe::host_facts_from_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
        (void)moe::to_json(h).dump();  // what was read can be written back
    } catch (const std::runtime_error&) {}
    return 0;
}

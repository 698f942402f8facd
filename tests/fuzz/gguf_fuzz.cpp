// libFuzzer entry point for the GGUF header parser: any input must either parse into tensors that lie
// inside the input or raise GgufError; sanitizers catch any out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        moe::GgufFile f = moe::parse_gguf(std::span<const uint8_t>(data, size), "fuzz");
        for (const auto& t : f.tensors)
            if (t.file_offset + t.nbytes > size) std::abort();
    } catch (const moe::GgufError&) {}
    return 0;
}

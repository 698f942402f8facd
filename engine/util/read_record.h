// One expert read as submitted, for replaying the same sequence with fio (bench's "fio replay"). Below both
// engine/weights (an ExpertSource can trace its reads) and engine/runtime (the block reader records them), so
// neither folder includes the other for it.
#pragma once
#include <cstdint>

namespace moe {

struct ReadRecord {
    uint32_t file;  // index into the source's files (the GGUF's splits, then the expert store)
    uint64_t offset;
    uint32_t len;
};

}  // namespace moe

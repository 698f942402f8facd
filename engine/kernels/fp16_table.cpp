// The fp16 -> float table of fp16.h, computed at compile time (in .rodata, nothing to initialise at start-up).
#include "engine/kernels/fp16.h"

namespace moe::detail {

constinit const Fp16Table kFp16Table{};

}  // namespace moe::detail

namespace moe {}

#include "synth/tensor_writer.h"

#include <algorithm>
#include <cctype>

namespace moe::synth {

TypePlan type_plan(const std::string& spelled, bool random_blocks) {
    std::string tn = spelled;
    for (char& c : tn) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (tn == "q4_k_m") return {TypePlan::Mix::Q4KM, GgmlType::Q4_K};
    if (tn == "dynamic") return {TypePlan::Mix::Dynamic, GgmlType::Q4_K};
    auto t = parse_type_name(tn);
    if (!t) throw SpecError("--type " + spelled + " is not a type the engine computes (" + computable_type_list() + ")");
    if (type_info(*t).origin == TypeOrigin::IkLlama && *t != GgmlType::Q8_KV && !random_blocks)  // (Q8_KV's is ik's own)
        throw SpecError("--type " + spelled +
                        ": mkmodel has no encoder for ik_llama.cpp's types but q8_KV; write them as random well-formed blocks "
                        "with --random-blocks, or quantize an f16 model with ik_llama.cpp's llama-quantize");
    switch (*t) {
        case GgmlType::IQ1_S:
        case GgmlType::IQ1_M:
        case GgmlType::IQ2_XXS:
        case GgmlType::IQ2_XS:
        case GgmlType::IQ2_S:
        case GgmlType::IQ3_XXS:
        case GgmlType::IQ3_S:
            if (random_blocks) return {TypePlan::Mix::Pure, *t};
            throw SpecError(
                "--type " + spelled +
                ": its lattice quantizer needs an importance matrix (llama-quantize --imatrix); "
                "mkmodel writes f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs mxfp4 tq1_0 tq2_0 q8_KV, q4_k_m and dynamic "
                "(or any type with --random-blocks, for speed benchmarks)");
        default: return {TypePlan::Mix::Pure, *t};
    }
}

void check_positive(std::initializer_list<std::pair<const char*, uint32_t>> values) {
    for (auto [name, v] : values)
        if (v == 0 || v > 65536) throw SpecError(std::string("--") + name + " " + std::to_string(v) + " is out of range (1..65536)");
}

bool is_mla(const std::string& arch) { return arch == "deepseek2" || arch == "glm-dsa"; }

Writer::RowEdit skewed_router(const SyntheticSpec& s, const std::string& prefix) {
    if (s.router_skew <= 0.f) return {};
    std::vector<uint32_t> rank(s.experts);
    for (uint32_t e = 0; e < s.experts; ++e) rank[e] = e;
    std::mt19937_64 rng(s.seed ^ std::hash<std::string>{}(prefix));  // its own stream: other tensors unchanged
    std::shuffle(rank.begin(), rank.end(), rng);
    return [rank, skew = s.router_skew](uint64_t expert, std::vector<float>& row) {
        const float g = std::pow(1.f + static_cast<float>(rank[expert]), -skew / 2);
        for (float& x : row) x *= g;
    };
}

}  // namespace moe::synth

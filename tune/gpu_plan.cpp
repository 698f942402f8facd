#include "tune/gpu_plan.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>

#include "tune/check.h"
#include "tune/planner.h"

namespace moe {
namespace {

std::string size_of(uint64_t b) { return human_bytes(static_cast<double>(b)); }

uint32_t parse_u32(const std::string& s, const std::string& part) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 6)
        throw PlanError("--gpu-layers '" + part + "': '" + s + "' is not a layer number");
    return static_cast<uint32_t>(std::stoul(s));
}

}  // namespace

std::vector<GpuPin> parse_gpu_layers(const std::string& text) {
    std::vector<GpuPin> pins;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = text.find(',', start);
        const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        const size_t colon = part.rfind(':');
        if (colon == std::string::npos) throw PlanError("--gpu-layers '" + part + "': expected FIRST-LAST:GPU, as 3-17:0");
        const std::string range = part.substr(0, colon), gpu = part.substr(colon + 1);
        const size_t dash = range.find('-');
        GpuPin p;
        p.first = parse_u32(range.substr(0, dash), part);
        p.last = dash == std::string::npos ? p.first : parse_u32(range.substr(dash + 1), part);
        if (gpu.empty() || gpu.find_first_not_of("0123456789") != std::string::npos || gpu.size() > 2)
            throw PlanError("--gpu-layers '" + part + "': '" + gpu + "' is not a GPU index");
        p.gpu = std::stoi(gpu);
        if (p.last < p.first) throw PlanError("--gpu-layers '" + part + "': the range ends before it starts");
        pins.push_back(p);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    if (pins.empty()) throw PlanError("--gpu-layers is empty");
    return pins;
}

// llama.cpp sizes the compute buffer for the worst-case batch of -ub tokens (every token an output): the
// largest tensors alive at once are one layer's feed-forward intermediates (gate, up and their product, f32)
// or its attention's Q/K/V (f32), the hidden state and residual copies, and on the output's device the logits.
// An estimate: llama.cpp's graph allocator reuses memory, so the real buffer is at or below the sum.
uint64_t compute_buffer_bytes(const ModelFacts& m, int n_ubatch, bool has_output, bool has_experts) {
    const uint64_t t = static_cast<uint64_t>(std::max(1, n_ubatch));
    const uint64_t ffn = 3ull * t * 4 * std::max<uint64_t>(has_experts ? uint64_t{m.n_expert_used} * m.n_ff_exp : 0, m.n_ff);
    const uint64_t attn = 3ull * t * 4 * m.n_head * std::max<uint32_t>(m.head_dim, 1);
    const uint64_t hidden = 4ull * t * 4 * m.n_embd;
    const uint64_t logits = has_output ? t * 4 * std::max(m.n_vocab, m.n_vocab_rows) : 0;
    return std::max(ffn, attn) + hidden + logits;
}

GgmlType parse_cache_type(const std::string& flag, const std::string& name, const std::string& target) {
    static const std::pair<const char*, GgmlType> kMainline[] = {{"f32", GgmlType::F32},       {"f16", GgmlType::F16},   {"bf16", GgmlType::BF16},
                                                                 {"q8_0", GgmlType::Q8_0},     {"q4_0", GgmlType::Q4_0}, {"q4_1", GgmlType::Q4_1},
                                                                 {"iq4_nl", GgmlType::IQ4_NL}, {"q5_0", GgmlType::Q5_0}, {"q5_1", GgmlType::Q5_1}};
    std::string choices;
    for (const auto& [n, t] : kMainline) {
        if (name == n) return t;
        choices += std::string(choices.empty() ? "" : ", ") + n;
    }
    const bool ik = target == "ik-llama-server";
    if (ik && name == "q6_0") return GgmlType::Q6_0;
    throw PlanError(flag + " " + name + " is not a KV cache type " + target + " takes (" + choices + (ik ? ", q6_0)" : ")"));
}

uint64_t cache_bytes_per_token(const ModelFacts& m, GgmlType k, GgmlType v) {
    auto bytes = [](uint64_t elems, GgmlType t) {
        const TypeInfo& ti = type_info(t);
        return (elems + ti.block_elems - 1) / ti.block_elems * ti.block_bytes;
    };
    return bytes(m.cache_k_elems_per_token, k) + bytes(m.cache_v_elems_per_token, v);
}

std::vector<GpuAssignment> plan_gpus(const ModelFacts& m, const GpuPlanOptions& o) {
    if (o.gpu_mem.empty()) throw PlanError("--gpu-mem is empty");
    // The layer split, as llama.cpp computes it from --tensor-split (written as the --gpu-mem budgets).
    const uint32_t blocks = m.n_layer + m.n_layer_nextn, slots = blocks + 1;
    std::vector<GpuAssignment> gpus;
    uint64_t total = 0;
    for (const auto& [gpu, budget] : o.gpu_mem) total += budget;
    double cum = 0;
    std::vector<double> bounds;
    for (const auto& [gpu, budget] : o.gpu_mem) {
        GpuAssignment g;
        g.gpu = gpu;
        g.budget_bytes = budget;
        g.split = static_cast<double>(budget) / static_cast<double>(total);
        cum += g.split;
        bounds.push_back(cum);
        gpus.push_back(g);
    }
    bounds.back() = 1.0;
    auto device_of = [&](uint32_t slot) {
        const float x = static_cast<float>(slot) / static_cast<float>(slots);  // llama.cpp compares floats
        return static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), x) - bounds.begin());
    };
    const uint64_t kv_per_layer_token = m.n_layer ? cache_bytes_per_token(m, o.cache_type_k, o.cache_type_v) / m.n_layer : 0;
    // What a sequence keeps whatever the context (recurrent states, deepseek4's windows and compressor state).
    const uint64_t kv_per_layer_fixed = m.n_layer ? m.kv_bytes(0, {o.cache_type_k, o.cache_type_v}, 0) / m.n_layer : 0;
    for (uint32_t l = 0; l < m.n_layer; ++l) {  // NextN blocks after the trunk are skipped by llama.cpp (TENSOR_SKIP)
        GpuAssignment& g = gpus[std::min(device_of(l), gpus.size() - 1)];
        if (g.n_layers == 0) g.first_layer = l;
        ++g.n_layers;
        g.layer_bytes += m.layer_resident_bytes.size() > l ? m.layer_resident_bytes[l] : 0;
        g.kv_bytes += kv_per_layer_token * o.n_ctx + kv_per_layer_fixed;
    }
    GpuAssignment& out = gpus[std::min(device_of(blocks), gpus.size() - 1)];
    out.output_bytes = m.output_bytes;

    // What is left for experts on each device once its fixed share is in.
    std::vector<int64_t> room(gpus.size());
    for (size_t d = 0; d < gpus.size(); ++d) {
        GpuAssignment& g = gpus[d];
        g.reserve_bytes = o.reserve_bytes;
        g.compute_bytes = compute_buffer_bytes(m, o.n_ubatch, &g == &out, true);
        const uint64_t fixed = g.layer_bytes + g.output_bytes + g.kv_bytes + g.compute_bytes + g.reserve_bytes;
        if (fixed > g.budget_bytes)
            throw PlanError("--gpu-mem " + std::to_string(g.gpu) + "=" + size_of(g.budget_bytes) + " is smaller than GPU " + std::to_string(g.gpu) +
                            "'s share of the offloaded layers (" + std::to_string(g.n_layers) + " layers' non-expert weights " +
                            size_of(g.layer_bytes) + (g.output_bytes ? " + output " + size_of(g.output_bytes) : "") + " + KV " + size_of(g.kv_bytes) +
                            " at " + std::to_string(o.n_ctx) + " tokens + compute " + size_of(g.compute_bytes) + " at -ub " +
                            std::to_string(o.n_ubatch) + " + reserve " + size_of(g.reserve_bytes) + " = " + size_of(fixed) + ")");
        room[d] = static_cast<int64_t>(g.budget_bytes - fixed);
    }
    auto index_of = [&](int gpu) -> size_t {
        for (size_t d = 0; d < gpus.size(); ++d)
            if (gpus[d].gpu == gpu) return d;
        return gpus.size();
    };
    std::vector<bool> placed(m.n_layer, false);
    auto place = [&](size_t d, uint32_t l) {
        gpus[d].layers.push_back(l);
        gpus[d].expert_bytes += m.layer_expert_bytes[l];
        room[d] -= static_cast<int64_t>(m.layer_expert_bytes[l]);
        placed[l] = true;
    };
    if (!o.pinned.empty()) {
        for (const GpuPin& p : o.pinned) {
            const std::string part = std::to_string(p.first) + "-" + std::to_string(p.last) + ":" + std::to_string(p.gpu);
            const size_t d = index_of(p.gpu);
            if (d == gpus.size()) throw PlanError("--gpu-layers " + part + ": GPU " + std::to_string(p.gpu) + " is not in --gpu-mem");
            for (uint32_t l = p.first; l <= p.last; ++l) {
                if (l >= m.n_layer)
                    throw PlanError("--gpu-layers " + part + ": layer " + std::to_string(l) + " is past the model's " + std::to_string(m.n_layer) +
                                    " layers");
                if (!m.layer_expert_bytes[l])
                    throw PlanError("--gpu-layers " + part + ": layer " + std::to_string(l) + " is dense (no routed experts)");
                if (placed[l]) throw PlanError("--gpu-layers " + part + ": layer " + std::to_string(l) + " is pinned twice");
                place(d, l);
            }
        }
        for (size_t d = 0; d < gpus.size(); ++d)
            if (room[d] < 0)
                throw PlanError("--gpu-layers puts " + size_of(gpus[d].expert_bytes) + " of experts on GPU " + std::to_string(gpus[d].gpu) +
                                ", which has " + size_of(gpus[d].expert_bytes + static_cast<uint64_t>(room[d])) + " left of --gpu-mem " +
                                std::to_string(gpus[d].gpu) + "=" + size_of(gpus[d].budget_bytes) + " after its share of the layers");
    } else if (!o.layer_heat.empty()) {
        // The most-routed layers first, each to the device with the most room left.
        std::vector<uint64_t> heat(m.n_layer, 0);
        for (const auto& [l, c] : o.layer_heat)
            if (l < m.n_layer) heat[l] += c;
        std::vector<uint32_t> order;
        for (uint32_t l = 0; l < m.n_layer; ++l)
            if (m.layer_expert_bytes[l]) order.push_back(l);
        std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return heat[a] > heat[b]; });
        for (uint32_t l : order) {
            const size_t d = static_cast<size_t>(std::max_element(room.begin(), room.end()) - room.begin());
            if (room[d] >= static_cast<int64_t>(m.layer_expert_bytes[l])) place(d, l);
        }
    } else {
        // Head- and tail-biased, as users measure best (one report: head 15 + tail 4 layers, 17-19 tok/s): the
        // first GPU takes MoE layers from the front, the last from the back, each within its own layer range
        // first so the experts sit beside their layer's attention; room left then takes the nearest others.
        for (size_t d = 0; d < gpus.size(); ++d) {
            const GpuAssignment& g = gpus[d];
            std::vector<uint32_t> mine;
            for (uint32_t l = g.first_layer; l < g.first_layer + g.n_layers; ++l)
                if (m.layer_expert_bytes[l]) mine.push_back(l);
            if (d + 1 == gpus.size() && gpus.size() > 1) std::reverse(mine.begin(), mine.end());
            for (uint32_t l : mine)
                if (!placed[l] && room[d] >= static_cast<int64_t>(m.layer_expert_bytes[l])) place(d, l);
        }
        for (size_t d = 0; d < gpus.size(); ++d) {
            const uint32_t centre = gpus[d].first_layer + gpus[d].n_layers / 2;
            std::vector<uint32_t> rest;
            for (uint32_t l = 0; l < m.n_layer; ++l)
                if (m.layer_expert_bytes[l] && !placed[l]) rest.push_back(l);
            std::stable_sort(rest.begin(), rest.end(),
                             [&](uint32_t a, uint32_t b) { return (a > centre ? a - centre : centre - a) < (b > centre ? b - centre : centre - b); });
            for (uint32_t l : rest)
                if (room[d] >= static_cast<int64_t>(m.layer_expert_bytes[l])) place(d, l);
        }
    }
    for (auto& g : gpus) {
        std::sort(g.layers.begin(), g.layers.end());
        g.used_bytes = g.expert_bytes + g.layer_bytes + g.output_bytes + g.kv_bytes + g.compute_bytes + g.reserve_bytes;
    }
    return gpus;
}

std::string describe_gpu(const GpuAssignment& g) {
    std::string layers;
    for (size_t i = 0; i < g.layers.size(); ++i) {  // runs of consecutive layers as FIRST-LAST
        size_t j = i;
        while (j + 1 < g.layers.size() && g.layers[j + 1] == g.layers[j] + 1) ++j;
        layers += (layers.empty() ? "" : ",") + std::to_string(g.layers[i]) + (j > i ? "-" + std::to_string(g.layers[j]) : "");
        i = j;
    }
    char split[16];
    std::snprintf(split, sizeof split, "%.3f", g.split);
    return "GPU " + std::to_string(g.gpu) + ": " + size_of(g.used_bytes) + " of " + size_of(g.budget_bytes) + " (" +
           size_of(g.budget_bytes - std::min(g.used_bytes, g.budget_bytes)) + " margin) = experts of " + std::to_string(g.layers.size()) +
           " layers [" + layers + "] " + size_of(g.expert_bytes) + " + " +
           (g.n_layers ? "layers " + std::to_string(g.first_layer) + "-" + std::to_string(g.first_layer + g.n_layers - 1)
                       : std::string("no layers")) +
           " (split " + split + ") " + size_of(g.layer_bytes) + (g.output_bytes ? " + output " + size_of(g.output_bytes) : "") + " + KV " +
           size_of(g.kv_bytes) + " + compute " + size_of(g.compute_bytes) + " + reserve " + size_of(g.reserve_bytes);
}

}  // namespace moe

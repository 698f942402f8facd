// Internal to synth/: the seeded tensor writer every block writer (blocks.h) draws from, and the weight-type
// plan it follows.
#pragma once
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/kernels.h"
#include "synth/synthetic_model.h"

namespace moe::synth {

// The weight type of each matrix: one type everywhere, or one of two mixes. q4_k_m: q4_K with q6_K for the
// "sensitive" tensors (attn_v, ffn_down, output). dynamic: like the per-tensor dynamic quants of big MoE uploads,
// q2_K expert gate/up, expert down projections alternating iq4_xs / q3_K by layer, q4_K elsewhere, q6_K attn_v
// and output.
struct TypePlan {
    enum class Mix { Pure, Q4KM, Dynamic } mix = Mix::Pure;
    GgmlType base = GgmlType::F32;

    GgmlType of(const std::string& name, bool sensitive) const {
        auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
        switch (mix) {
            case Mix::Pure: return base;
            case Mix::Q4KM: return sensitive ? GgmlType::Q6_K : GgmlType::Q4_K;
            case Mix::Dynamic:
                if (has("_exps.")) {
                    if (!has("ffn_down")) return GgmlType::Q2_K;
                    const int layer = std::atoi(name.c_str() + 4);  // "blk.N."
                    return layer % 2 == 0 ? GgmlType::IQ4_XS : GgmlType::Q3_K;
                }
                return has("attn_v.") || name == "output.weight" ? GgmlType::Q6_K : GgmlType::Q4_K;
        }
        return base;
    }
};

// --type as a plan: a type mkmodel can write, or a mix; the types whose quantizers need an importance matrix
// are refused with that reason.
TypePlan type_plan(const std::string& spelled, bool random_blocks);

// Weights are uniform with variance 1/fan_in, so activations stay healthy through the layers; norms are
// around 1 but not 1, so a forgotten norm weight shows.
class Writer {
public:
    // Changes row r's values after they are drawn (the draws, and so every other tensor, stay the same).
    using RowEdit = std::function<void(uint64_t, std::vector<float>&)>;
    Writer(const SyntheticSpec& s, TypePlan plan) : s_(s), rng_(s.seed), plan_(plan) {}

    // A matrix [fan_in, rows...] of the plan's type for it. Rows that are not whole blocks of it fall back to q8_0,
    // then f16, as llama-quantize falls back for such tensors.
    void matrix(const std::string& name, std::vector<uint64_t> ne, float gain = 1.f, bool sensitive = false,
                const std::function<bool(uint64_t)>& zero_row = {}, const std::function<void(uint64_t, std::vector<float>&)>& edit = {}) {
        GgmlType t = plan_.of(name, sensitive);
        // ik_llama.cpp never interleaves token_embd (it is looked up by row), nor a matrix whose rows do not fill
        // the groups: those keep the non-interleaved form (its IQ1_S_R4 mixes use Q2_K for them; IQ1_M_R4, which has no
        // base form, the same; both also where rows are not whole blocks of 128).
        const bool one_bit = t == GgmlType::IQ1_S_R4 || t == GgmlType::IQ1_M_R4;
        if (type_info(t).interleave > 1 &&
            (name == "token_embd.weight" || ne.size() < 2 || ne[1] % type_info(t).interleave || (one_bit && ne[0] % 128)))
            t = one_bit ? GgmlType::Q2_K : t == GgmlType::Q8_K_R8 ? GgmlType::Q8_0 : interleaved_base(t);  // (Q8_K is no weight type)
        if (!row_bytes(t, ne[0])) t = row_bytes(GgmlType::Q8_0, ne[0]) ? GgmlType::Q8_0 : GgmlType::F16;
        add(name, std::move(ne), t, gain * std::sqrt(3.f / static_cast<float>(ne[0])), 0.f, zero_row, edit);
    }
    // An f32 vector around `center`.
    void vec(const std::string& name, uint64_t n, float center = 1.f, float spread = 0.2f) { add(name, {n}, GgmlType::F32, spread, center); }
    void f32_matrix(const std::string& name, std::vector<uint64_t> ne, float gain, const RowEdit& edit = {}) {
        add(name, std::move(ne), GgmlType::F32, gain * std::sqrt(3.f / static_cast<float>(ne[0])), 0.f, {}, edit);
    }

    std::vector<GgufTensorData> tensors;
    // Consulted for every tensor by name: an edit applied after the tensor's own (--router-locality's).
    std::function<RowEdit(const std::string&)> edit_for;

private:
    void add(const std::string& name, std::vector<uint64_t> ne, GgmlType type, float scale, float offset,
             const std::function<bool(uint64_t)>& zero_row = {}, const std::function<void(uint64_t, std::vector<float>&)>& edit = {}) {
        auto rb = row_bytes(type, ne[0]);
        if (!rb)
            throw SpecError("tensor " + name + ": row length " + std::to_string(ne[0]) + " is not a multiple of the " +
                            std::string(type_info(type).name) + " block (" + std::to_string(type_info(type).block_elems) +
                            "); choose another --type or width");
        uint64_t rows = 1;
        for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
        GgufTensorData t{name, ne, type, std::vector<uint8_t>(*rb * rows)};
        std::vector<float> row(ne[0]);
        std::uniform_real_distribution<float> uni(-1.f, 1.f);
        // Random blocks for the quantized matrices only: norms, routers and other float tensors stay real.
        const bool random_blocks = s_.random_blocks && type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16;
        if (random_blocks && type_info(type).interleave > 1) {  // row-interleaved: whole groups of rows at once
            if (ne.size() < 2 || ne[1] % type_info(type).interleave)
                throw SpecError("tensor " + name + ": " + std::string(type_info(type).name) + " stores rows in groups of " +
                                std::to_string(type_info(type).interleave) + "; " + std::to_string(ne.size() < 2 ? 1 : ne[1]) + " rows per matrix");
            t.bytes = kernels::random_weight_rows(type, ne[0], rows, rng_());
            tensors.push_back(std::move(t));
            return;
        }
        const RowEdit extra = edit_for ? edit_for(name) : RowEdit{};
        for (uint64_t r = 0; r < rows; ++r) {
            if (random_blocks) {
                const auto blocks = kernels::random_weight_row(type, ne[0], rng_());
                std::copy(blocks.begin(), blocks.end(), t.bytes.begin() + static_cast<std::ptrdiff_t>(r * *rb));
                continue;
            }
            for (auto& x : row) x = offset + scale * uni(rng_);
            if (zero_row && zero_row(r)) std::fill(row.begin(), row.end(), 0.f);
            if (edit) edit(r, row);
            if (extra) extra(r, row);
            kernels::quantize_row(type, row.data(), t.bytes.data() + r * *rb, static_cast<int64_t>(ne[0]));
        }
        tensors.push_back(std::move(t));
    }

    const SyntheticSpec& s_;
    std::mt19937_64 rng_;
    TypePlan plan_;
};

// Each value in 1..65536, else a SpecError naming the option.
void check_positive(std::initializer_list<std::pair<const char*, uint32_t>> values);
bool is_mla(const std::string& arch);
// Skewed routing (--router-skew): router row e is scaled by (1 + rank_e)^(-skew / 2), the ranks a random
// permutation per layer. A row's logit then varies more across tokens the hotter the expert is, so it reaches
// the top-k more often: popularity falls with rank, with no component shared by all tokens (which would route
// consecutive tokens alike).
Writer::RowEdit skewed_router(const SyntheticSpec& s, const std::string& prefix);

}  // namespace moe::synth

#include "synth/router_locality.h"

#include <algorithm>
#include <cmath>

namespace moe::synth {
namespace {

// The rotary band head 0 attends through: frequencies whose period is 60-550 tokens. Their cosines agree near
// d = 0 and drift apart within about ten tokens; the lowest period is far beyond that window, and the band's
// sum has no revival inside a thousand tokens.
constexpr double kHighTheta = 0.1, kLowTheta = 0.0115;
// The score at d = 0: with the band's cosines falling apart this makes the weights ~0.12, 0.12, 0.115, ...
// (the mass of the last 8 tokens 0.78, of the last 32 all of it; a 128-dim head with 16 pairs in the band).
constexpr double kPeakScore = 11.3;
constexpr float kConstantChannel = 1.f;  // token embeddings' channel 0 (the others are uniform in [-1, 1])

// Dims of the band's pairs within a head whose rotated part starts at `offset`: NEOX pairs (i, i + n_rot/2),
// NORM pairs (2i, 2i + 1).
std::vector<uint32_t> band_dims(uint32_t n_rot, float base, bool neox, uint32_t offset) {
    std::vector<uint32_t> dims;
    for (uint32_t i = 0; i < n_rot / 2; ++i) {
        const double theta = std::pow(static_cast<double>(base), -2.0 * i / n_rot);
        if (theta > kHighTheta || theta < kLowTheta) continue;
        if (neox) dims.insert(dims.end(), {offset + i, offset + i + n_rot / 2});
        else dims.insert(dims.end(), {offset + 2 * i, offset + 2 * i + 1});
    }
    return dims;
}

bool gqa(const std::string& a) { return a == "qwen3moe" || a == "glm4moe"; }

// A projection row of head 0 reading only the constant channel (with `value`) or nothing.
Writer::RowEdit read_constant(std::vector<uint32_t> dims, uint32_t head_rows, uint32_t row_offset, float value) {
    return [dims = std::move(dims), head_rows, row_offset, value](uint64_t r, std::vector<float>& row) {
        if (r < row_offset || r >= row_offset + head_rows) return;
        const bool in_band = std::find(dims.begin(), dims.end(), static_cast<uint32_t>(r)) != dims.end();
        std::fill(row.begin(), row.end(), 0.f);
        if (in_band) row[0] = value;
    };
}

}  // namespace

void check_router_locality(const SyntheticSpec& s) {
    if (!(s.router_locality >= 0.f)) throw SpecError("--router-locality " + std::to_string(s.router_locality) + " must be 0 (off) or more");
    if (s.router_locality == 0.f) return;
    if (!gqa(s.arch) && s.arch != "deepseek2" && s.arch != "glm-dsa")
        throw SpecError("--router-locality is written for qwen3moe, glm4moe, deepseek2 and glm-dsa, not " + s.arch);
    if (s.random_blocks) throw SpecError("--router-locality needs computed weights, not --random-blocks");
    const bool mla = !gqa(s.arch);
    if (band_dims(mla ? s.qk_rope : s.rope_dims, s.rope_base, !mla, 0).empty())
        throw SpecError("--router-locality: no rotary frequency of this model lies in " + std::to_string(kLowTheta) + ".." +
                        std::to_string(kHighTheta) + " (--rope-base, --rope-dims / --qk-rope)");
}

Writer::RowEdit locality_edit(const SyntheticSpec& s, const std::string& name) {
    if (s.router_locality <= 0.f) return {};
    if (name == "token_embd.weight") return [](uint64_t, std::vector<float>& row) { row[0] = kConstantChannel; };
    const std::string p = "blk.0.";
    if (name.rfind(p, 0) != 0) return {};
    const std::string t = name.substr(p.size());
    const float gain = s.router_locality;
    if (gqa(s.arch)) {
        // After the q/k norm head 0's query and key are sqrt(hd / n) on the band's n dims (times the norm
        // weights, ~1): the score's peak is sqrt(hd) whatever the band's width.
        const std::vector<uint32_t> dims = band_dims(s.rope_dims, s.rope_base, true, 0);
        if (t == "attn_q.weight" || t == "attn_k.weight") return read_constant(dims, s.head_dim, 0, 1.f);
        if (t == "attn_q.bias" || t == "attn_k.bias")
            return [hd = s.head_dim](uint64_t, std::vector<float>& row) { std::fill(row.begin(), row.begin() + hd, 0.f); };
        if (t == "attn_output.weight")
            return [hd = s.head_dim, gain](uint64_t, std::vector<float>& row) {
                for (uint32_t i = 0; i < hd; ++i) row[i] *= gain;
            };
        return {};
    }
    // MLA: head 0's query is its rope part only; the shared rotated key reads the constant channel on the band.
    const uint32_t qk = s.qk_nope + s.qk_rope;
    const std::vector<uint32_t> dims = band_dims(s.qk_rope, s.rope_base, false, 0);
    // Head 0's query and the rotated key on the band are a times a channel of about 1.7 (the constant channel
    // after the norm, and the latent's channel reading it after its own): (1.7 a)^2 * 2 per pair over sqrt(qk)
    // sums to the peak.
    const double pairs = static_cast<double>(dims.size()) / 2;
    const float a = static_cast<float>(std::sqrt(kPeakScore * std::sqrt(static_cast<double>(qk)) / (2 * pairs)) / 1.7);
    std::vector<uint32_t> q_dims, k_dims;
    for (uint32_t d : dims) q_dims.push_back(s.qk_nope + d), k_dims.push_back(s.kv_lora + d);
    if (s.q_lora && t == "attn_q_a.weight") return read_constant({0}, 1, 0, 1.f);
    if (t == (s.q_lora ? "attn_q_b.weight" : "attn_q.weight"))
        return [q_dims, qk, a](uint64_t r, std::vector<float>& row) {
            if (r >= qk) return;
            std::fill(row.begin(), row.end(), 0.f);
            if (std::find(q_dims.begin(), q_dims.end(), static_cast<uint32_t>(r)) != q_dims.end()) row[0] = a;
        };
    if (t == "attn_kv_a_mqa.weight")
        return [k_dims, a](uint64_t r, std::vector<float>& row) {
            if (std::find(k_dims.begin(), k_dims.end(), static_cast<uint32_t>(r)) == k_dims.end()) return;
            std::fill(row.begin(), row.end(), 0.f);
            row[0] = a;
        };
    if (t == "attn_output.weight")
        return [v = s.v_head, gain](uint64_t, std::vector<float>& row) {
            for (uint32_t i = 0; i < v; ++i) row[i] *= gain;
        };
    return {};
}

}  // namespace moe::synth

// Weights are uniform with variance 1/fan_in, so activations stay healthy through the layers; norms are
// around 1 but not 1, so a forgotten norm weight shows.
#include "synth/synthetic_model.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <random>

#include "engine/kernels/kernels.h"

namespace moe::synth {

MetadataList builtin_vocab() {
    std::vector<std::string> tokens;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
        std::string s;
        if (cp < 0x80) s += static_cast<char>(cp);
        else {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        }
        tokens.push_back(s);
    }
    std::vector<int32_t> types(tokens.size(), 1);
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        tokens.push_back(special);
        types.push_back(3);
    }
    const int32_t eot = 256, im_end = 258;
    return {
        {"tokenizer.ggml.model", GgufValue::string("gpt2")},
        {"tokenizer.ggml.pre", GgufValue::string("qwen2")},
        {"tokenizer.ggml.tokens", GgufValue::string_array(tokens)},
        {"tokenizer.ggml.token_type", GgufValue::i32_array_of(types)},
        {"tokenizer.ggml.merges", GgufValue::string_array({})},
        {"tokenizer.ggml.eos_token_id", GgufValue::u32(im_end)},
        {"tokenizer.ggml.padding_token_id", GgufValue::u32(eot)},
        {"tokenizer.ggml.bos_token_id", GgufValue::u32(eot)},
        {"tokenizer.ggml.add_bos_token", GgufValue::boolean(false)},
        {"tokenizer.chat_template",
         GgufValue::string("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                           "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")},
    };
}

MetadataList vocab_from(const std::string& path) {
    GgufFile f = read_gguf_header(path);
    MetadataList out;
    for (const auto& [k, v] : f.kv)
        if (k.rfind("tokenizer.", 0) == 0) out.emplace_back(k, v);
    if (!f.find("tokenizer.ggml.tokens")) throw SpecError(path + ": no tokenizer.ggml.tokens to copy");
    return out;
}

namespace {

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
TypePlan type_plan(const std::string& spelled, bool random_blocks) {
    std::string tn = spelled;
    for (char& c : tn) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (tn == "q4_k_m") return {TypePlan::Mix::Q4KM, GgmlType::Q4_K};
    if (tn == "dynamic") return {TypePlan::Mix::Dynamic, GgmlType::Q4_K};
    auto t = parse_type_name(tn);
    if (!t) throw SpecError("--type " + spelled + " is not a type the engine computes (" + computable_type_list() + ")");
    if (type_info(*t).origin == TypeOrigin::IkLlama && !random_blocks)
        throw SpecError("--type " + spelled +
                        ": mkmodel has no encoder for ik_llama.cpp's types; write them as random well-formed blocks "
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
                "mkmodel writes f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs mxfp4 tq1_0 tq2_0, q4_k_m and dynamic "
                "(or any type with --random-blocks, for speed benchmarks)");
        default: return {TypePlan::Mix::Pure, *t};
    }
}

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
        // the groups: those keep the non-interleaved form (its IQ1_S_R4 mixes use Q2_K for them).
        if (type_info(t).interleave > 1 && (name == "token_embd.weight" || ne.size() < 2 || ne[1] % type_info(t).interleave))
            t = t == GgmlType::IQ4_KS_R4 ? GgmlType::IQ4_KS : GgmlType::Q2_K;
        if (!row_bytes(t, ne[0])) t = row_bytes(GgmlType::Q8_0, ne[0]) ? GgmlType::Q8_0 : GgmlType::F16;
        add(name, std::move(ne), t, gain * std::sqrt(3.f / static_cast<float>(ne[0])), 0.f, zero_row, edit);
    }
    // An f32 vector around `center`.
    void vec(const std::string& name, uint64_t n, float center = 1.f, float spread = 0.2f) { add(name, {n}, GgmlType::F32, spread, center); }
    void f32_matrix(const std::string& name, std::vector<uint64_t> ne, float gain, const RowEdit& edit = {}) {
        add(name, std::move(ne), GgmlType::F32, gain * std::sqrt(3.f / static_cast<float>(ne[0])), 0.f, {}, edit);
    }

    std::vector<GgufTensorData> tensors;

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
        for (uint64_t r = 0; r < rows; ++r) {
            if (random_blocks) {
                const auto blocks = kernels::random_weight_row(type, ne[0], rng_());
                std::copy(blocks.begin(), blocks.end(), t.bytes.begin() + static_cast<std::ptrdiff_t>(r * *rb));
                continue;
            }
            for (auto& x : row) x = offset + scale * uni(rng_);
            if (zero_row && zero_row(r)) std::fill(row.begin(), row.end(), 0.f);
            if (edit) edit(r, row);
            kernels::quantize_row(type, row.data(), t.bytes.data() + r * *rb, static_cast<int64_t>(ne[0]));
        }
        tensors.push_back(std::move(t));
    }

    const SyntheticSpec& s_;
    std::mt19937_64 rng_;
    TypePlan plan_;
};

void check_positive(std::initializer_list<std::pair<const char*, uint32_t>> values) {
    for (auto [name, v] : values)
        if (v == 0 || v > 65536) throw SpecError(std::string("--") + name + " " + std::to_string(v) + " is out of range (1..65536)");
}

bool is_mla(const std::string& arch) { return arch == "deepseek2" || arch == "glm-dsa"; }

// Skewed routing (--router-skew): router row e is scaled by (1 + rank_e)^(-skew / 2), the ranks a random
// permutation per layer. A row's logit then varies more across tokens the hotter the expert is, so it reaches
// the top-k more often: popularity falls with rank, with no component shared by all tokens (which would route
// consecutive tokens alike).
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

// Router, selection bias, routed experts and shared expert of one MoE block. `gain` scales gate and up up and
// down back (swiglu_oai's models use 4, as their reference files, so that its clamps at 7 are reached).
void moe_block(Writer& w, const SyntheticSpec& s, const std::string& p, float gain = 1.f) {
    w.f32_matrix(p + "ffn_gate_inp.weight", {s.embd, s.experts}, 2.f, skewed_router(s, p));
    if (s.probs_bias) w.vec(p + "exp_probs_b.bias", s.experts, 0.f, 0.05f);
    w.matrix(p + "ffn_gate_exps.weight", {s.embd, s.ffn, s.experts}, gain);
    w.matrix(p + "ffn_up_exps.weight", {s.embd, s.ffn, s.experts}, gain);
    if (s.fused_gate_up) {  // the same weights as one ffn_gate_up_exps: per expert its gate rows, then its up rows
        GgufTensorData up = std::move(w.tensors.back());
        w.tensors.pop_back();
        GgufTensorData gate = std::move(w.tensors.back());
        w.tensors.pop_back();
        const size_t per = gate.bytes.size() / s.experts;
        GgufTensorData fused{p + "ffn_gate_up_exps.weight", {s.embd, 2ull * s.ffn, s.experts}, gate.type, {}};
        for (uint32_t e = 0; e < s.experts; ++e) {
            fused.bytes.insert(fused.bytes.end(), gate.bytes.begin() + e * per, gate.bytes.begin() + (e + 1) * per);
            fused.bytes.insert(fused.bytes.end(), up.bytes.begin() + e * per, up.bytes.begin() + (e + 1) * per);
        }
        w.tensors.push_back(std::move(fused));
    }
    w.matrix(p + "ffn_down_exps.weight", {s.ffn, s.embd, s.experts}, 1.f / gain, true);
    if (s.shared) {
        const uint32_t f = s.ffn * s.shared;
        w.matrix(p + "ffn_gate_shexp.weight", {s.embd, f}, gain);
        w.matrix(p + "ffn_up_shexp.weight", {s.embd, f}, gain);
        w.matrix(p + "ffn_down_shexp.weight", {f, s.embd}, 1.f / gain, true);
    }
}

void dense_block(Writer& w, const SyntheticSpec& s, const std::string& p, float gain = 1.f) {
    w.matrix(p + "ffn_gate.weight", {s.embd, s.dense_ffn}, gain);
    w.matrix(p + "ffn_up.weight", {s.embd, s.dense_ffn}, gain);
    w.matrix(p + "ffn_down.weight", {s.dense_ffn, s.embd}, 1.f / gain, true);
}

// minimax-m3's MSA indexer (its MoE layers): one query head per kv group, one key; f32 as llama-quantize keeps them.
void msa_indexer(Writer& w, const SyntheticSpec& s, const std::string& p) {
    w.f32_matrix(p + "indexer.q_proj.weight", {s.embd, s.kv_heads * s.msa_dim}, 1.f);
    w.f32_matrix(p + "indexer.k_proj.weight", {s.embd, s.msa_dim}, 1.f);
    w.vec(p + "indexer.q_norm.weight", s.msa_dim);
    w.vec(p + "indexer.k_norm.weight", s.msa_dim);
}

// What a GQA block carries besides its projections: q/k/v biases (glm4moe, gpt-oss), per-head q/k norms
// (qwen3moe, glm4moe), an output bias and a sink logit per head (gpt-oss).
struct GqaExtras {
    bool qkv_bias = false, qk_norm = true, output_bias_and_sinks = false;
    bool qk_norm_whole = false;  // minimax-m2: one norm weight per element of the whole q and k rows
};

void gqa_block(Writer& w, const SyntheticSpec& s, const std::string& p, GqaExtras x) {
    const uint32_t Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim;
    w.matrix(p + "attn_q.weight", {s.embd, Q});
    w.matrix(p + "attn_k.weight", {s.embd, KV});
    w.matrix(p + "attn_v.weight", {s.embd, KV}, 1.f, true);
    if (x.qkv_bias) {
        w.vec(p + "attn_q.bias", Q, 0.f, 0.1f);
        w.vec(p + "attn_k.bias", KV, 0.f, 0.1f);
        w.vec(p + "attn_v.bias", KV, 0.f, 0.1f);
    }
    w.matrix(p + "attn_output.weight", {Q, s.embd});
    if (x.output_bias_and_sinks) {
        w.vec(p + "attn_output.bias", s.embd, 0.f, 0.1f);
        w.vec(p + "attn_sinks.weight", s.heads, 0.f, 1.f);
    }
    if (x.qk_norm) {
        w.vec(p + "attn_q_norm.weight", x.qk_norm_whole ? Q : s.head_dim);
        w.vec(p + "attn_k_norm.weight", x.qk_norm_whole ? KV : s.head_dim);
    }
}

// gpt-oss's experts: a biased router, biased experts; gate and up x4 and down /4 (as the reference files) so
// that swiglu_oai's clamps at 7 are reached.
void gpt_oss_moe(Writer& w, const SyntheticSpec& s, const std::string& p) {
    w.f32_matrix(p + "ffn_gate_inp.weight", {s.embd, s.experts}, 2.f, skewed_router(s, p));
    w.vec(p + "ffn_gate_inp.bias", s.experts, 0.f, 0.5f);
    w.matrix(p + "ffn_gate_exps.weight", {s.embd, s.ffn, s.experts}, 4.f);
    w.f32_matrix(p + "ffn_gate_exps.bias", {s.ffn, s.experts}, 0.5f);
    w.matrix(p + "ffn_up_exps.weight", {s.embd, s.ffn, s.experts}, 4.f);
    w.f32_matrix(p + "ffn_up_exps.bias", {s.ffn, s.experts}, 0.5f);
    w.matrix(p + "ffn_down_exps.weight", {s.ffn, s.embd, s.experts}, 0.25f, true);
    w.f32_matrix(p + "ffn_down_exps.bias", {s.embd, s.experts}, 0.5f);
}

// qwen35moe's gated DeltaNet block, with the value ranges of real checkpoints' initialisation: -exp(A_log)
// for A ~ U(0, 16), dt bias for dt in [1e-3, 1e-1].
void deltanet_block(Writer& w, const SyntheticSpec& s, const std::string& p) {
    const uint32_t S = s.ssm_state, V = S * s.ssm_v_heads, C = 2 * S * s.ssm_k_heads + V;
    w.matrix(p + "attn_qkv.weight", {s.embd, C});
    w.matrix(p + "attn_gate.weight", {s.embd, V});
    w.f32_matrix(p + "ssm_conv1d.weight", {s.ssm_conv, C}, 1.f);
    w.vec(p + "ssm_dt.bias", s.ssm_v_heads, -4.5f, 2.2f);
    w.vec(p + "ssm_a", s.ssm_v_heads, -8.f, 7.9f);
    w.matrix(p + "ssm_alpha.weight", {s.embd, s.ssm_v_heads});
    w.matrix(p + "ssm_beta.weight", {s.embd, s.ssm_v_heads});
    w.vec(p + "ssm_norm.weight", S);
    w.matrix(p + "ssm_out.weight", {V, s.embd}, 1.f, true);
}

// qwen35moe's gated full attention: attn_q yields per head the query then the output gate.
void gated_attention_block(Writer& w, const SyntheticSpec& s, const std::string& p) {
    const uint32_t Q = s.heads * s.head_dim, KV = s.kv_heads * s.head_dim;
    w.matrix(p + "attn_q.weight", {s.embd, 2 * Q});
    w.matrix(p + "attn_k.weight", {s.embd, KV});
    w.matrix(p + "attn_v.weight", {s.embd, KV}, 1.f, true);
    w.matrix(p + "attn_output.weight", {Q, s.embd});
    w.vec(p + "attn_q_norm.weight", s.head_dim);
    w.vec(p + "attn_k_norm.weight", s.head_dim);
}

void mla_block(Writer& w, const SyntheticSpec& s, const std::string& p, bool indexer) {
    const uint32_t qk = s.qk_nope + s.qk_rope;
    if (s.q_lora) {
        w.matrix(p + "attn_q_a.weight", {s.embd, s.q_lora});
        w.vec(p + "attn_q_a_norm.weight", s.q_lora);
        w.matrix(p + "attn_q_b.weight", {s.q_lora, s.heads * qk});
    } else {
        w.matrix(p + "attn_q.weight", {s.embd, s.heads * qk});
    }
    w.matrix(p + "attn_kv_a_mqa.weight", {s.embd, s.kv_lora + s.qk_rope});
    w.vec(p + "attn_kv_a_norm.weight", s.kv_lora);
    if (s.mla_kv_b) {
        w.matrix(p + "attn_kv_b.weight", {s.kv_lora, s.heads * (s.qk_nope + s.v_head)});
    } else {
        w.matrix(p + "attn_k_b.weight", {s.qk_nope, s.kv_lora, s.heads});
        w.matrix(p + "attn_v_b.weight", {s.kv_lora, s.v_head, s.heads}, 1.f, true);
    }
    w.matrix(p + "attn_output.weight", {s.heads * s.v_head, s.embd});
    if (indexer) {
        w.matrix(p + "indexer.attn_q_b.weight", {s.q_lora, s.ix_heads * s.ix_dim});
        w.matrix(p + "indexer.attn_k.weight", {s.embd, s.ix_dim});
        w.vec(p + "indexer.k_norm.weight", s.ix_dim);
        w.vec(p + "indexer.k_norm.bias", s.ix_dim, 0.f, 0.1f);
        w.matrix(p + "indexer.proj.weight", {s.embd, s.ix_heads});
    }
}

}  // namespace

uint64_t write_synthetic_model(const SyntheticSpec& s_in, const MetadataList& vocab, const std::string& out) {
    SyntheticSpec s = s_in;
    const std::string& A = s.arch;
    const bool hybrid = A == "qwen35moe";
    const bool oss = A == "gpt-oss", mm2 = A == "minimax-m2", mm3 = A == "minimax-m3";
    if (A != "qwen3moe" && A != "glm4moe" && !hybrid && !is_mla(A) && !oss && !mm2 && !mm3)
        throw SpecError("--arch " + A + " is not supported (qwen3moe, glm4moe, qwen35moe, deepseek2, glm-dsa, gpt-oss, minimax-m2, minimax-m3)");
    if (mm2) s.probs_bias = true;  // its router always has a selection bias
    check_positive({{"layers", s.layers}, {"embd", s.embd}, {"heads", s.heads}, {"experts", s.experts}, {"experts-used", s.used}, {"ffn", s.ffn}});
    if (s.used > s.experts) throw SpecError("--experts-used " + std::to_string(s.used) + " exceeds --experts " + std::to_string(s.experts));
    if (s.dense_layers >= s.layers && s.dense_layers) throw SpecError("--dense-layers " + std::to_string(s.dense_layers) + " leaves no MoE layer");
    if (s.dense_layers && !s.dense_ffn) s.dense_ffn = s.ffn * std::max(s.used, 1u);
    if ((A == "qwen3moe" || oss || mm2) && (s.dense_layers || s.shared)) throw SpecError(A + " has no dense layers or shared experts");
    if (oss && (s.rope_dims && s.rope_dims != (s.head_dim ? s.head_dim : s.embd / s.heads)))
        throw SpecError("gpt-oss rotates whole heads: --rope-dims must equal --head-dim");
    if (oss) check_positive({{"window", s.window}});
    if (hybrid) {
        if (s.dense_layers) throw SpecError("qwen35moe has no dense layers");
        check_positive({{"ssm-state", s.ssm_state},
                        {"ssm-k-heads", s.ssm_k_heads},
                        {"ssm-v-heads", s.ssm_v_heads},
                        {"full-attention-interval", s.full_interval}});
        if (s.ssm_v_heads % s.ssm_k_heads) throw SpecError("--ssm-v-heads must be a multiple of --ssm-k-heads");
        if (s.ssm_conv < 2 || s.ssm_conv > 64) throw SpecError("--ssm-conv must be in 2..64");
    }
    if (!is_mla(A)) {
        if (!s.kv_heads) s.kv_heads = s.heads;
        if (!s.head_dim) s.head_dim = s.embd / s.heads;
        check_positive({{"kv-heads", s.kv_heads}, {"head-dim", s.head_dim}});
        if (s.heads % s.kv_heads)
            throw SpecError("--heads " + std::to_string(s.heads) + " is not a multiple of --kv-heads " + std::to_string(s.kv_heads));
        if (!s.rope_dims) s.rope_dims = A == "glm4moe" || mm2 || mm3 ? s.head_dim / 2 : hybrid ? s.head_dim / 4 : s.head_dim;
        if (s.rope_dims % 2 || s.rope_dims > s.head_dim) throw SpecError("--rope-dims must be even and at most --head-dim");
        if (mm3) {
            if (!s.msa_dim) s.msa_dim = s.head_dim;
            check_positive({{"msa-block", s.msa_block}, {"msa-top-k", s.msa_top_k}});
            if (s.msa_dim < s.rope_dims) throw SpecError("--msa-dim must be at least --rope-dims (the indexer's heads are rotated)");
            if (s.msa_local > s.msa_top_k) throw SpecError("--msa-local must be at most --msa-top-k");
        }
    } else {
        check_positive({{"kv-lora", s.kv_lora}, {"qk-nope", s.qk_nope}, {"qk-rope", s.qk_rope}, {"v-head", s.v_head}});
        if (s.qk_rope % 2) throw SpecError("--qk-rope must be even (RoPE rotates pairs)");
        if (A == "glm-dsa") {
            if (!s.q_lora) throw SpecError("glm-dsa needs --q-lora (the indexer reads the q-LoRA latent)");
            check_positive({{"indexer-heads", s.ix_heads}, {"indexer-dim", s.ix_dim}, {"indexer-top-k", s.ix_top_k}});
            if (s.ix_dim < 64 || (s.ix_dim & (s.ix_dim - 1)) || s.ix_dim < s.qk_rope)
                throw SpecError("--indexer-dim must be a power of two of at least 64 and at least --qk-rope");
            if (!s.ix_full.empty() && (s.ix_full.size() != s.layers || !s.ix_full[0]))
                throw SpecError("--indexer-types needs one flag per layer, the first one full");
        }
    }
    if (s.groups && (s.experts % s.groups || !s.groups_used || s.groups_used > s.groups))
        throw SpecError("--groups must divide --experts and --groups-used must be in 1..--groups");

    const TypePlan plan = type_plan(s.type, s.random_blocks);

    uint32_t n_vocab = 0;
    for (const auto& [k, v] : vocab)
        if (k == "tokenizer.ggml.tokens") n_vocab = static_cast<uint32_t>(v.count);

    // Metadata
    MetadataList kv = {
        {"general.architecture", GgufValue::string(A)},
        {"general.name", GgufValue::string("moestream synthetic " + A)},
        {"general.description", GgufValue::string("synthetic random-weight MoE model (moestream mkmodel seed=" + std::to_string(s.seed) + ")")}};
    kv.insert(kv.end(), vocab.begin(), vocab.end());
    if (!s.chat_template.empty()) {
        std::erase_if(kv, [](const auto& e) { return e.first == "tokenizer.chat_template"; });
        kv.emplace_back("tokenizer.chat_template", GgufValue::string(s.chat_template));
    }
    auto key = [&](const std::string& k, GgufValue v) { kv.emplace_back(A + "." + k, std::move(v)); };
    auto u32 = [](uint32_t v) { return GgufValue::u32(v); };
    key("vocab_size", u32(n_vocab));
    key("context_length", u32(4096));
    key("embedding_length", u32(s.embd));
    key("block_count", u32(s.layers + s.nextn));
    key("attention.head_count", u32(s.heads));
    key("attention.layer_norm_rms_epsilon", GgufValue::f32(1e-6f));
    key("rope.freq_base", GgufValue::f32(s.rope_base));
    key("expert_count", u32(s.experts));
    key("expert_used_count", u32(s.used));
    key("expert_feed_forward_length", u32(s.ffn));
    if (hybrid) {
        key("attention.head_count_kv", u32(s.kv_heads));
        key("attention.key_length", u32(s.head_dim));
        key("attention.value_length", u32(s.head_dim));
        key("rope.dimension_count", u32(s.rope_dims));
        // Qwen3.5's interleaved sections, in proportion 11:11:10 of the rotated pairs
        const uint32_t pairs = s.rope_dims / 2, t = (pairs * 11 + 31) / 32, h = (pairs * 11 + 31) / 32;
        GgufValue sections = GgufValue::i32_array_of(
            {static_cast<int32_t>(t), static_cast<int32_t>(std::min(h, pairs - t)), static_cast<int32_t>(pairs - t - std::min(h, pairs - t)), 0});
        key("rope.dimension_sections", sections);
        key("ssm.conv_kernel", u32(s.ssm_conv));
        key("ssm.state_size", u32(s.ssm_state));
        key("ssm.group_count", u32(s.ssm_k_heads));
        key("ssm.time_step_rank", u32(s.ssm_v_heads));
        key("ssm.inner_size", u32(s.ssm_state * s.ssm_v_heads));
        key("full_attention_interval", u32(s.full_interval));
        if (s.shared) key("expert_shared_feed_forward_length", u32(s.ffn * s.shared));
        key("nextn_predict_layers", u32(s.nextn));
    } else if (!is_mla(A)) {
        // minimax-m2's experts are sized by feed_forward_length in llama.cpp (its converter writes the expert width).
        key("feed_forward_length", u32(s.dense_layers ? s.dense_ffn : mm2 ? s.ffn : s.ffn * s.used));
        key("attention.head_count_kv", u32(s.kv_heads));
        key("attention.key_length", u32(s.head_dim));
        key("attention.value_length", u32(s.head_dim));
        if (A != "qwen3moe" || s.rope_dims != s.head_dim) key("rope.dimension_count", u32(s.rope_dims));
        if (oss) key("attention.sliding_window", u32(s.window));
        if (mm3) {
            key("attention.indexer.head_count", u32(s.kv_heads));
            key("attention.indexer.key_length", u32(s.msa_dim));
            key("attention.indexer.top_k", u32(s.msa_top_k));
            key("attention.indexer.block_size", u32(s.msa_block));
            key("attention.indexer.local_blocks", u32(s.msa_local));
        }
        if ((mm2 || mm3) && s.gating.empty()) key("expert_gating_func", u32(2));  // sigmoid, as their converter writes
    } else {
        key("feed_forward_length", u32(s.dense_ffn ? s.dense_ffn : s.ffn * s.used));
        if (s.mla_kv_b) {  // the older keys: per-head key and value lengths, no *_mla keys
            key("attention.head_count_kv", u32(s.heads));
            key("attention.key_length", u32(s.qk_nope + s.qk_rope));
            key("attention.value_length", u32(s.v_head));
        } else {
            key("attention.head_count_kv", u32(1));
            key("attention.key_length", u32(s.kv_lora + s.qk_rope));
            key("attention.value_length", u32(s.kv_lora));
            key("attention.key_length_mla", u32(s.qk_nope + s.qk_rope));
            key("attention.value_length_mla", u32(s.v_head));
        }
        key("attention.q_lora_rank", u32(s.q_lora));
        key("attention.kv_lora_rank", u32(s.kv_lora));
        key("rope.dimension_count", u32(s.qk_rope));
        if (A == "glm-dsa") {
            key("attention.indexer.head_count", u32(s.ix_heads));
            key("attention.indexer.key_length", u32(s.ix_dim));
            key("attention.indexer.top_k", u32(s.ix_top_k));
            if (!s.ix_full.empty()) {
                GgufValue types;
                types.type = GgufValueType::ARRAY;
                types.elem_type = GgufValueType::BOOL;
                types.count = s.ix_full.size();
                for (bool f : s.ix_full) types.raw.push_back(f ? 1 : 0);
                key("attention.indexer.types", types);
            }
        }
    }
    if (A != "qwen3moe" && !hybrid && !oss) {
        key("leading_dense_block_count", u32(s.dense_layers));
        key("expert_shared_count", u32(s.shared));
        key("expert_weights_norm", GgufValue::boolean(s.norm_weights));
        key("expert_weights_scale", GgufValue::f32(s.weights_scale));
        key("nextn_predict_layers", u32(s.nextn));
        if (s.groups) {
            key("expert_group_count", u32(s.groups));
            key("expert_group_used_count", u32(s.groups_used));
        }
    }
    if (!s.gating.empty()) {
        if (s.gating != "softmax" && s.gating != "sigmoid") throw SpecError("--gating " + s.gating + " is not softmax or sigmoid");
        key("expert_gating_func", u32(s.gating == "softmax" ? 1 : 2));
    }
    if (s.yarn_factor > 1.f) {
        key("rope.scaling.type", GgufValue::string("yarn"));
        key("rope.scaling.factor", GgufValue::f32(s.yarn_factor));
        key("rope.scaling.original_context_length", u32(s.yarn_orig_ctx));
        if (s.yarn_log_mul != 0.f) key("rope.scaling.yarn_log_multiplier", GgufValue::f32(s.yarn_log_mul));
    }

    // Tensors
    Writer w(s, plan);
    w.matrix("token_embd.weight", {s.embd, n_vocab}, std::sqrt(static_cast<float>(s.embd) / 3.f));
    w.vec("output_norm.weight", s.embd);
    // With the built-in byte vocabulary the demo's output head has rows only for printable ASCII, newline and
    // <|im_end|> (258): its random text then prints as characters rather than stray bytes.
    std::function<bool(uint64_t)> unprintable;
    if (s.printable_head) unprintable = [](uint64_t id) { return !((id >= 32 && id <= 126) || id == 10 || id == 258); };
    if (!s.tie_output) w.matrix("output.weight", {s.embd, n_vocab}, 4.f, true, unprintable);
    const std::string ffn_norm = A == "glm4moe" || hybrid || oss ? "post_attention_norm.weight" : "ffn_norm.weight";
    for (uint32_t l = 0; l < s.layers + s.nextn; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        w.vec(p + "attn_norm.weight", s.embd);
        if (is_mla(A)) mla_block(w, s, p, A == "glm-dsa" && (s.ix_full.empty() || (l < s.layers && s.ix_full[l]) || l >= s.layers));
        else if (hybrid && l < s.layers && (l + 1) % s.full_interval != 0) deltanet_block(w, s, p);
        else if (hybrid) gated_attention_block(w, s, p);
        else if (oss) gqa_block(w, s, p, {.qkv_bias = true, .qk_norm = false, .output_bias_and_sinks = true, .qk_norm_whole = false});
        else gqa_block(w, s, p, {.qkv_bias = A == "glm4moe", .qk_norm = true, .output_bias_and_sinks = false, .qk_norm_whole = mm2});
        w.vec(p + ffn_norm, s.embd);
        if (l < s.dense_layers) dense_block(w, s, p, mm3 ? 4.f : 1.f);
        else if (oss) gpt_oss_moe(w, s, p);
        else moe_block(w, s, p, mm3 ? 4.f : 1.f);
        if (mm3 && l >= s.dense_layers) msa_indexer(w, s, p);
        if (hybrid && s.shared) w.vec(p + "ffn_gate_inp_shexp.weight", s.embd, 0.f, 0.3f);
        if (l >= s.layers) {  // a NextN/MTP block's own tensors
            w.matrix(p + "nextn.eh_proj.weight", {2ull * s.embd, s.embd});
            w.vec(p + "nextn.enorm.weight", s.embd);
            w.vec(p + "nextn.hnorm.weight", s.embd);
            w.vec(p + "nextn.shared_head_norm.weight", s.embd);
        }
    }
    write_gguf(out, kv, w.tensors);
    uint64_t bytes = 0;
    for (const auto& t : w.tensors) bytes += t.bytes.size();
    return bytes;
}

}  // namespace moe::synth

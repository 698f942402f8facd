// Loads a qwen3moe GGUF: checks metadata against every tensor's shape and type before reading a byte.
#include <set>

#include "engine/kernels/kernels.h"
#include "engine/model/model_facts.h"
#include "engine/model/qwen3moe.h"

namespace moe {
namespace {

std::string dims(const std::vector<uint64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

class Loader {
public:
    Loader(const GgufModel& file) : file_(file), meta_(file.meta()) {}

    uint32_t key_u32(const std::string& key, bool required, uint32_t fallback = 0) {
        auto v = meta_.get_int("qwen3moe." + key);
        if (!v) {
            if (required) throw ModelError(meta_.path + ": metadata qwen3moe." + key + " is missing");
            return fallback;
        }
        if (*v <= 0 || *v > (1 << 30))
            throw ModelError(meta_.path + ": metadata qwen3moe." + key + " = " + std::to_string(*v) + " is out of range");
        return static_cast<uint32_t>(*v);
    }

    const GgufTensorInfo* info(const std::string& name, bool required) {
        const GgufTensorInfo* t = file_.find_tensor(name);
        if (!t && required) throw ModelError(meta_.path + ": tensor '" + name + "' is missing");
        if (t) {
            auto ti = type_info(t->raw_type);
            if (!ti || !ti->computable)
                throw ModelError(meta_.path + ": tensor '" + name + "' has type " + type_name(t->raw_type) +
                                 ", which this engine has no kernel for (supported: f32 f16 bf16 q8_0 q4_0 q4_K q5_K q6_K)");
            used_.insert(name);
        }
        return t;
    }

    void expect_shape(const GgufTensorInfo* t, std::vector<uint64_t> want, const std::string& why) {
        std::vector<uint64_t> got = t->ne;
        while (got.size() > want.size() && got.back() == 1) got.pop_back();
        if (got != want)
            throw ModelError(meta_.path + ": tensor '" + t->name + "' has shape " + dims(t->ne) + " but metadata (" +
                             why + ") implies " + dims(want));
    }

    Tensor resident(const std::string& name, std::vector<uint64_t> shape, const std::string& why, bool required = true) {
        const GgufTensorInfo* t = info(name, required);
        Tensor out;
        out.name = name;
        if (!t) return out;
        expect_shape(t, shape, why);
        out.type = t->type();
        out.ne0 = static_cast<int64_t>(shape[0]);
        out.ne1 = shape.size() > 1 ? static_cast<int64_t>(shape[1]) : 1;
        out.row_bytes = *row_bytes(out.type, shape[0]);
        if (shape.size() == 1 && out.type != GgmlType::F32)
            throw ModelError(meta_.path + ": tensor '" + name + "' is a norm vector stored as " +
                             type_name(t->raw_type) + "; expected f32");
        resident_list_.push_back(t);
        return out;
    }

    ExpertTensor experts(const std::string& name, uint64_t n_in, uint64_t n_out, uint64_t n_expert, const std::string& why) {
        const GgufTensorInfo* t = info(name, true);
        expect_shape(t, {n_in, n_out, n_expert}, why);
        ExpertTensor e;
        e.name = name;
        e.type = t->type();
        e.n_in = static_cast<int64_t>(n_in);
        e.n_out = static_cast<int64_t>(n_out);
        e.n_expert = static_cast<int64_t>(n_expert);
        e.row_bytes = *row_bytes(e.type, n_in);
        e.expert_bytes = e.row_bytes * n_out;
        e.file_index = t->file_index;
        e.file_offset = t->file_offset;
        return e;
    }

    void bind(Tensor& t, const ResidentArena& arena) {
        if (!t.name.empty() && file_.find_tensor(t.name)) t.data = arena.data_of(t.name);
    }

    const GgufModel& file_;
    const GgufFile& meta_;
    std::set<std::string> used_;
    std::vector<const GgufTensorInfo*> resident_list_;
};

}  // namespace

std::unique_ptr<Qwen3MoeModel> load_qwen3moe(const GgufModel& file, const LoadOptions& opt) {
    const GgufFile& meta = file.meta();
    auto arch = meta.get_string("general.architecture").value_or("(missing)");
    if (arch != "qwen3moe")
        throw ModelError(meta.path + ": architecture '" + arch + "' is not supported (supported: qwen3moe)");
    Loader ld(file);
    auto m = std::make_unique<Qwen3MoeModel>();
    Qwen3MoeHparams& hp = m->hp;
    hp.n_layer = ld.key_u32("block_count", true);
    hp.n_embd = ld.key_u32("embedding_length", true);
    hp.n_head = ld.key_u32("attention.head_count", true);
    hp.n_head_kv = ld.key_u32("attention.head_count_kv", false, hp.n_head);
    hp.head_dim = ld.key_u32("attention.key_length", false, hp.n_embd / hp.n_head);
    uint32_t v_dim = ld.key_u32("attention.value_length", false, hp.head_dim);
    if (v_dim != hp.head_dim)
        throw ModelError(meta.path + ": attention.value_length " + std::to_string(v_dim) + " differs from key_length " +
                         std::to_string(hp.head_dim) + " (not a qwen3moe shape)");
    if (hp.n_head % hp.n_head_kv != 0)
        throw ModelError(meta.path + ": head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " +
                         std::to_string(hp.n_head_kv));
    if (hp.head_dim % 2 != 0) throw ModelError(meta.path + ": key_length " + std::to_string(hp.head_dim) + " is odd (RoPE needs pairs)");
    hp.n_expert = ld.key_u32("expert_count", true);
    hp.n_expert_used = ld.key_u32("expert_used_count", true);
    if (hp.n_expert_used > hp.n_expert)
        throw ModelError(meta.path + ": expert_used_count " + std::to_string(hp.n_expert_used) + " exceeds expert_count " +
                         std::to_string(hp.n_expert));
    hp.n_ctx_train = ld.key_u32("context_length", false, 4096);
    hp.rope_freq_base = static_cast<float>(meta.get_double("qwen3moe.rope.freq_base").value_or(10000.0));
    hp.rms_eps = static_cast<float>(meta.get_double("qwen3moe.attention.layer_norm_rms_epsilon").value_or(1e-6));

    const GgufTensorInfo* embd = ld.info("token_embd.weight", true);
    if (embd->ne.size() < 2) throw ModelError(meta.path + ": tensor 'token_embd.weight' has shape " + dims(embd->ne));
    hp.n_vocab = static_cast<uint32_t>(embd->ne[1]);
    if (const GgufValue* toks = meta.find("tokenizer.ggml.tokens"); toks && toks->count != hp.n_vocab)
        throw ModelError(meta.path + ": tokenizer.ggml.tokens has " + std::to_string(toks->count) +
                         " entries but token_embd.weight has " + std::to_string(hp.n_vocab) + " rows");
    const GgufTensorInfo* ffn_first = ld.info("blk.0.ffn_gate_exps.weight", true);
    hp.n_ff_exp = ld.key_u32("expert_feed_forward_length", false, static_cast<uint32_t>(ffn_first->ne.size() > 1 ? ffn_first->ne[1] : 0));

    const uint64_t E = hp.n_embd, Q = uint64_t{hp.n_head} * hp.head_dim, KV = uint64_t{hp.n_head_kv} * hp.head_dim;
    const std::string e_why = "embedding_length " + std::to_string(E);
    m->tok_embd = ld.resident("token_embd.weight", {E, hp.n_vocab}, e_why);
    m->output_norm = ld.resident("output_norm.weight", {E}, e_why);
    m->output = ld.resident("output.weight", {E, hp.n_vocab}, e_why, false);
    std::vector<InRamExpertSource::LayerTensors> expert_tensors(hp.n_layer);
    m->layers.resize(hp.n_layer);
    for (uint32_t l = 0; l < hp.n_layer; ++l) {
        std::string p = "blk." + std::to_string(l) + ".";
        Qwen3MoeLayer& L = m->layers[l];
        std::string qwhy = "head_count " + std::to_string(hp.n_head) + " x key_length " + std::to_string(hp.head_dim);
        std::string kvwhy = "head_count_kv " + std::to_string(hp.n_head_kv) + " x key_length " + std::to_string(hp.head_dim);
        L.attn_norm = ld.resident(p + "attn_norm.weight", {E}, e_why);
        L.wq = ld.resident(p + "attn_q.weight", {E, Q}, qwhy);
        L.wk = ld.resident(p + "attn_k.weight", {E, KV}, kvwhy);
        L.wv = ld.resident(p + "attn_v.weight", {E, KV}, kvwhy);
        L.wo = ld.resident(p + "attn_output.weight", {Q, E}, qwhy);
        L.q_norm = ld.resident(p + "attn_q_norm.weight", {hp.head_dim}, "key_length");
        L.k_norm = ld.resident(p + "attn_k_norm.weight", {hp.head_dim}, "key_length");
        L.ffn_norm = ld.resident(p + "ffn_norm.weight", {E}, e_why);
        L.gate_inp = ld.resident(p + "ffn_gate_inp.weight", {E, hp.n_expert}, "expert_count " + std::to_string(hp.n_expert));
        std::string xwhy = "expert_count " + std::to_string(hp.n_expert) + ", expert_feed_forward_length " + std::to_string(hp.n_ff_exp);
        L.gate_exps = ld.experts(p + "ffn_gate_exps.weight", E, hp.n_ff_exp, hp.n_expert, xwhy);
        L.up_exps = ld.experts(p + "ffn_up_exps.weight", E, hp.n_ff_exp, hp.n_expert, xwhy);
        L.down_exps = ld.experts(p + "ffn_down_exps.weight", hp.n_ff_exp, E, hp.n_expert, xwhy);
        expert_tensors[l] = {&L.gate_exps, &L.up_exps, &L.down_exps};
    }
    // Row lengths must be whole blocks of their type (checked by the reader) and activations need the
    // same block size, which holds for all supported types since row lengths divide by the block size.
    for (const auto& t : file.tensors)
        if (!ld.used_.count(t.name) && t.name.rfind("blk.", 0) == 0 && tensor_layer(t.name) >= static_cast<int>(hp.n_layer))
            throw ModelError(meta.path + ": tensor '" + t.name + "' is beyond block_count " + std::to_string(hp.n_layer));

    m->resident = std::make_unique<ResidentArena>(file, ld.resident_list_);
    ld.bind(m->tok_embd, *m->resident);
    ld.bind(m->output_norm, *m->resident);
    ld.bind(m->output, *m->resident);
    if (!m->output.present()) m->output = m->tok_embd;  // tied embeddings (small Qwen3 files)
    for (auto& L : m->layers)
        for (Tensor* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.q_norm, &L.k_norm, &L.ffn_norm, &L.gate_inp})
            ld.bind(*t, *m->resident);
    if (opt.streaming) {
        std::vector<StreamingExpertSource::LayerTensors> layers;
        for (const auto& t : expert_tensors) layers.push_back({t.gate, t.up, t.down});
        std::vector<std::string> paths;
        for (const auto& f : file.files) paths.push_back(f.path);
        m->experts = std::make_unique<StreamingExpertSource>(paths, layers, hp.n_expert, hp.n_expert_used, *opt.streaming);
    } else {
        m->experts = std::make_unique<InRamExpertSource>(file, expert_tensors);
    }
    return m;
}

}  // namespace moe

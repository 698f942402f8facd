#include "engine/model/model_facts.h"

#include <algorithm>
#include <regex>

namespace moe {

bool is_routed_expert_tensor(const std::string& name) {
    static const std::regex re(R"(blk\.\d+\.ffn_(gate|up|down|gate_up)_exps\.weight)");
    return std::regex_match(name, re);
}

int tensor_layer(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return -1;
    try {
        return std::stoi(name.substr(4, dot - 4));
    } catch (...) {
        return -1;
    }
}

uint64_t ModelFacts::bytes_per_expert(uint32_t layer) const {
    if (layer >= layer_expert_bytes.size() || n_expert == 0) return 0;
    return layer_expert_bytes[layer] / n_expert;
}

uint64_t ModelFacts::expert_bytes_per_token() const {
    uint64_t total = 0;
    for (uint32_t l = 0; l < layer_expert_bytes.size(); ++l) total += bytes_per_expert(l) * n_expert_used;
    return total;
}

uint64_t ModelFacts::active_bytes_per_token() const {
    // A token reads one row of token_embd, not the table (unless the head reuses it: then it is counted there).
    const uint64_t embd_unused = tied_output ? 0 : (token_embd_bytes - token_embd_bytes / std::max<uint32_t>(n_vocab_rows, 1));
    return resident_bytes - embd_unused + expert_bytes_per_token();
}

uint64_t ModelFacts::kv_bytes(uint32_t n_ctx) const {
    return 2ull * n_layer * n_ctx * n_head_kv * head_dim * 2;
}

ModelFacts model_facts(const GgufModel& model) {
    const GgufFile& meta = model.meta();
    ModelFacts f;
    for (const auto& file : model.files) {
        f.files.push_back(file.path);
        f.file_bytes += file.file_size;
    }
    f.arch = meta.get_string("general.architecture").value_or("");
    if (f.arch.empty()) throw GgufError(meta.path + ": metadata general.architecture is missing");
    f.name = meta.get_string("general.name").value_or("");
    auto u = [&](const std::string& key) { return static_cast<uint32_t>(meta.get_int(f.arch + "." + key).value_or(0)); };
    f.n_layer = u("block_count");
    f.n_embd = u("embedding_length");
    f.n_head = u("attention.head_count");
    f.n_head_kv = u("attention.head_count_kv");
    if (f.n_head_kv == 0) f.n_head_kv = f.n_head;
    f.head_dim = u("attention.key_length");
    if (f.head_dim == 0 && f.n_head) f.head_dim = f.n_embd / f.n_head;
    f.n_expert = u("expert_count");
    f.n_expert_used = u("expert_used_count");
    f.n_ctx_train = u("context_length");
    if (const GgufValue* tokens = meta.find("tokenizer.ggml.tokens")) f.n_vocab = static_cast<uint32_t>(tokens->count);
    if (f.n_layer == 0 || f.n_layer > 4096)
        throw GgufError(meta.path + ": metadata " + f.arch + ".block_count = " + std::to_string(f.n_layer) + " is not a layer count");
    f.layer_expert_bytes.assign(f.n_layer, 0);
    f.tensor_count = model.tensors.size();
    for (const auto& t : model.tensors) {
        if (is_routed_expert_tensor(t.name)) {
            int layer = tensor_layer(t.name);
            if (layer < 0 || static_cast<uint32_t>(layer) >= f.n_layer)
                throw GgufError(meta.path + ": tensor '" + t.name + "' names layer " + std::to_string(layer) +
                                " but block_count is " + std::to_string(f.n_layer));
            f.layer_expert_bytes[layer] += t.nbytes;
            f.expert_bytes += t.nbytes;
        } else {
            f.resident_bytes += t.nbytes;
            if (t.name == "token_embd.weight") {
                f.token_embd_bytes = t.nbytes;
                f.n_vocab_rows = static_cast<uint32_t>(t.ne.size() > 1 ? t.ne[1] : 1);
            }
        }
    }
    f.tied_output = model.find_tensor("output.weight") == nullptr;
    bool seen_moe = false;
    for (uint32_t l = 0; l < f.n_layer; ++l) {
        if (f.layer_expert_bytes[l]) {
            ++f.moe_layers;
            seen_moe = true;
        } else if (!seen_moe) {
            ++f.first_moe_layer;
        }
    }
    return f;
}

ModelFacts read_model_facts(const std::string& path) { return model_facts(open_gguf_model(path)); }

}  // namespace moe

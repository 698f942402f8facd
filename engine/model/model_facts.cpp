#include "engine/model/model_facts.h"

#include <filesystem>

#include <algorithm>
#include <regex>

#include "engine/model/cache_shape.h"
#include "engine/model/loader.h"

namespace moe {

bool is_routed_expert_tensor(const std::string& name) {
    static const std::regex re(R"(blk\.\d+\.ffn_(gate|up|down|gate_up)_exps\.weight)");
    return std::regex_match(name, re);
}

bool is_shared_expert_tensor(const std::string& name) {
    static const std::regex re(R"(blk\.\d+\.ffn_(gate|up|down)_shexp\.weight)");
    return std::regex_match(name, re);
}

int tensor_layer(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return -1;
    try {
        return std::stoi(name.substr(4, dot - 4));
    } catch (...) { return -1; }
}

uint32_t nextn_blocks(const GgufModel& model, const std::string& arch, uint32_t blocks, uint32_t declared) {
    if (arch != "deepseek4" || declared == 0 || declared >= blocks) return declared;
    const std::string probe = "blk." + std::to_string(blocks - declared) + ".nextn.eh_proj.weight";
    for (const auto& t : model.tensors)
        if (t.name == probe) return declared;
    return 0;
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

namespace {
uint64_t bytes_as(uint64_t elems, GgmlType t) {
    const TypeInfo ti = type_info(t);
    return (elems + ti.block_elems - 1) / ti.block_elems * ti.block_bytes;
}
}  // namespace

uint64_t ModelFacts::kv_bytes(uint32_t n_ctx, uint32_t checkpoints) const { return kv_bytes(n_ctx, kernels::KvCacheTypes{}, checkpoints); }

uint64_t ModelFacts::cache_bytes_per_token_as(kernels::KvCacheTypes types) const {
    if (types.f16()) return cache_bytes_per_token;
    // Rows are whole blocks (SequenceCache refuses widths the block does not divide), so elements scale exactly.
    return bytes_as(cache_k_elems_per_token, types.k) + bytes_as(cache_v_elems_per_token, types.v) + cache_f32_bytes_per_token;
}

uint64_t ModelFacts::ring_bytes(kernels::KvCacheTypes types) const {
    return bytes_as(uint64_t{ring_rows} * ring_k_elems, types.k) + bytes_as(uint64_t{ring_rows} * ring_v_elems, types.v);
}

uint64_t ModelFacts::window_snapshot_bytes(kernels::KvCacheTypes types) const {
    const uint64_t rows = sliding_window ? sliding_window - 1 : 0;
    return bytes_as(rows * ring_k_elems, types.k) + bytes_as(rows * ring_v_elems, types.v);
}

uint64_t ModelFacts::kv_bytes(uint32_t n_ctx, kernels::KvCacheTypes types, uint32_t checkpoints) const {
    uint64_t fixed = bytes_as(fixed_k_elems, types.k) + fixed_f32_bytes, snapshot = state_bytes;
    if (n_ctx > ring_rows && ring_rows) fixed += ring_bytes(types), snapshot += window_snapshot_bytes(types);
    else if (ring_rows)  // a context no longer than the ring keeps every position, and needs no window snapshots
        fixed += bytes_as(uint64_t{n_ctx} * ring_k_elems, types.k) + bytes_as(uint64_t{n_ctx} * ring_v_elems, types.v);
    return cache_bytes_per_token_as(types) * n_ctx + state_bytes + snapshot * checkpoints + fixed;
}

ModelFacts ModelFacts::keeping_every_position() const {
    ModelFacts f = *this;
    f.cache_k_elems_per_token += ring_k_elems;
    f.cache_v_elems_per_token += ring_v_elems;
    f.cache_bytes_per_token += 2 * (ring_k_elems + ring_v_elems);
    f.ring_rows = 0;
    f.ring_k_elems = f.ring_v_elems = 0;
    return f;
}

namespace {

// Per-sequence cache per token, from the loaded layout (cache_shape.h: what SequenceCache allocates) where this
// engine can describe the file; DSA and MSA keys, DeltaNet states and per-layer patterns come only from there.
bool cache_facts_from_layout(const GgufModel& model, ModelFacts& f) {
    std::unique_ptr<Model> m;
    try {
        m = load_model_layout(model, /*without_kernels=*/true);
    } catch (const std::exception&) {
        return false;  // an architecture or a file this engine cannot describe: the keys below
    }
    // Rings as the engine (and llama-server) keep them for its default batch.
    const std::vector<LayerCacheShape> shape = cache_shape(*m, kDefaultRingBatch);
    for (const LayerCacheShape& s : shape) {
        if (s.ring) {  // a ring of rows, and a window per checkpoint
            f.ring_rows = s.ring;
            f.sliding_window = m->hp.gqa.window;
            f.ring_k_elems += s.k_width;
            f.ring_v_elems += s.v_width;
            continue;
        }
        f.cache_k_elems_per_token += s.k_width;
        f.cache_v_elems_per_token += s.v_width;
        if (s.ix_f32) f.cache_f32_bytes_per_token += 4ull * s.ix_width;
        else f.cache_k_elems_per_token += s.ix_width;  // DSA keys take K's type
        f.state_bytes += 4ull * (s.conv_floats + s.state_floats);
        f.recurrent_layers += s.recurrent() ? 1 : 0;
    }
    f.cache_bytes_per_token = 2 * (f.cache_k_elems_per_token + f.cache_v_elems_per_token) + f.cache_f32_bytes_per_token;
    f.cache_layout = describe_cache_shape(*m, shape);
    return true;
}

// DeepSeek V4 as llama.cpp's dsv4 cache keeps it (llama_kv_cache_dsv4): one shared K=V head of W values, no V
// cache. Every layer keeps its last sliding_window raw rows plus a ubatch (llama-server's 512), in blocks of 256
// rows; a ratio-4 layer adds a compressed row and an indexer key per 4 positions, a ratio-128 layer a compressed
// row per 128; their compressors keep f32 score and value rows for the block in progress (ratio 4: 8 rows of 2W,
// and 8 of twice the indexer key for the indexer; ratio 128: 128 rows of W).
bool dsv4_cache_facts(const GgufFile& meta, ModelFacts& f) {
    const GgufValue* ratios = meta.find(f.arch + ".attention.compress_ratios");
    if (f.arch != "deepseek4" || !ratios || !ratios->is_array()) return false;
    auto u = [&](const std::string& key) { return static_cast<uint64_t>(meta.get_int(f.arch + "." + key).value_or(0)); };
    const uint64_t W = uint64_t{f.head_dim} * f.n_head_kv, window = u("attention.sliding_window"), idx = u("attention.indexer.key_length");
    const uint64_t window_rows = sliding_ring_rows(static_cast<uint32_t>(window), kDefaultRingBatch);
    const std::vector<int32_t> r = ratios->i32_array();
    uint32_t r4 = 0, r128 = 0;
    for (size_t l = 0; l < r.size() && l < f.n_layer + f.n_layer_nextn; ++l) {
        f.fixed_k_elems += window_rows * W;
        if (r[l] == 4) {
            ++r4;
            f.cache_k_elems_per_token += (W + idx + 3) / 4;
            f.fixed_f32_bytes += 4ull * 2 * 8 * (2 * W + 2 * idx);
        } else if (r[l] == 128) {
            ++r128;
            f.cache_k_elems_per_token += (W + 127) / 128;
            f.fixed_f32_bytes += 4ull * 2 * 128 * W;
        }
    }
    f.cache_bytes_per_token = 2 * f.cache_k_elems_per_token;
    auto n = [](uint64_t v) { return std::to_string(v); };
    f.cache_layout = "DeepSeek-V4 compressed (the K type; fp16 by default): " + n(r4) + " layers of ratio 4 ((" + n(W) + " + indexer " + n(idx) +
                     ") / 4 per token), " + n(r128) + " of ratio 128 (" + n(W) + " / 128); every layer's " + n(window_rows) + "-row window of " +
                     n(W) + " and the compressors' f32 state per sequence";
    return true;
}

// An architecture this engine does not run (a file planned for llama-server only): the generic reading of its
// keys, MLA's latent or GQA's K and V rows on every layer, fp16.
void cache_facts_from_keys(const GgufFile& meta, ModelFacts& f) {
    auto u = [&](const std::string& key) { return static_cast<uint64_t>(meta.get_int(f.arch + "." + key).value_or(0)); };
    const uint64_t L = f.n_layer;
    if (u("attention.kv_lora_rank") && u("attention.key_length_mla")) {
        const uint64_t lora = u("attention.kv_lora_rank"), rope = u("rope.dimension_count");
        f.cache_k_elems_per_token = L * (lora + rope);
        f.cache_bytes_per_token = L * (lora + rope) * 2;
        f.cache_layout = "MLA latent (" + std::to_string(lora) + " + " + std::to_string(rope) + ") fp16 x " + std::to_string(L) + " layers";
        return;
    }
    const uint64_t k = f.head_dim, v = u("attention.value_length") ? u("attention.value_length") : f.head_dim;
    f.cache_k_elems_per_token = L * f.n_head_kv * k;
    f.cache_v_elems_per_token = L * f.n_head_kv * v;
    f.cache_bytes_per_token = L * f.n_head_kv * (k + v) * 2;
    f.cache_layout = "fp16 K and V, " + std::to_string(f.n_head_kv) + " kv heads x " + std::to_string(k) + " x " + std::to_string(L) + " layers";
}

}  // namespace

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
    const uint32_t blocks = u("block_count");
    if (blocks == 0 || blocks > 4096)
        throw GgufError(meta.path + ": metadata " + f.arch + ".block_count = " + std::to_string(blocks) + " is not a layer count");
    f.n_layer_nextn = nextn_blocks(model, f.arch, blocks, std::min(u("nextn_predict_layers"), blocks - 1));
    f.n_layer = blocks - f.n_layer_nextn;
    f.n_embd = u("embedding_length");
    f.n_head = u("attention.head_count");
    f.n_head_kv = u("attention.head_count_kv");
    if (f.n_head_kv == 0) f.n_head_kv = f.n_head;
    f.head_dim = u("attention.key_length");
    if (f.head_dim == 0 && f.n_head) f.head_dim = f.n_embd / f.n_head;
    f.n_expert = u("expert_count");
    f.n_expert_used = u("expert_used_count");
    f.n_ctx_train = u("context_length");
    f.n_ff_exp = u("expert_feed_forward_length");
    f.n_ff = u("feed_forward_length");
    if (const GgufValue* tokens = meta.find("tokenizer.ggml.tokens")) f.n_vocab = static_cast<uint32_t>(tokens->count);
    f.layer_expert_bytes.assign(f.n_layer, 0);
    f.layer_resident_bytes.assign(f.n_layer, 0);
    f.tensor_count = model.tensors.size();
    for (const auto& t : model.tensors) {
        const int layer = tensor_layer(t.name);
        if (layer >= static_cast<int>(blocks))
            throw GgufError(meta.path + ": tensor '" + t.name + "' names layer " + std::to_string(layer) + " but block_count is " +
                            std::to_string(blocks));
        if (layer >= static_cast<int>(f.n_layer)) {
            f.nextn_bytes += t.nbytes;
        } else if (is_routed_expert_tensor(t.name)) {
            f.layer_expert_bytes[layer] += t.nbytes;
            f.expert_bytes += t.nbytes;
        } else {
            f.resident_bytes += t.nbytes;
            if (layer >= 0) f.layer_resident_bytes[layer] += t.nbytes;
            if (t.name == "output.weight" || t.name == "output_norm.weight") f.output_bytes += t.nbytes;
            if (is_shared_expert_tensor(t.name)) f.shared_expert_bytes += t.nbytes;
            if (t.name == "token_embd.weight") {
                f.token_embd_bytes = t.nbytes;
                f.n_vocab_rows = static_cast<uint32_t>(t.ne.size() > 1 ? t.ne[1] : 1);
            }
        }
        if (f.ik_tensor.empty())
            if (auto ti = type_info(t.raw_type); ti && ti->origin == TypeOrigin::IkLlama) f.ik_tensor = t.name + " (" + type_name(t.raw_type) + ")";
        if (f.supported) {
            auto ti = type_info(t.raw_type);
            if (!ti || (!ti->computable && t.raw_type != static_cast<uint32_t>(GgmlType::I32))) {
                f.supported = false;
                f.unsupported_reason = "tensor '" + t.name + "' has type " + type_name(t.raw_type) +
                                       (ti && ti->origin == TypeOrigin::IkLlama ? " (an ik_llama.cpp type)" : "") +
                                       ", which this engine has no kernel for";
            }
        }
    }
    const auto& archs = supported_architectures();
    if (std::find(archs.begin(), archs.end(), f.arch) == archs.end()) {
        std::string list;
        for (const auto& a : archs) list += (list.empty() ? "" : ", ") + a;
        f.supported = false;
        f.unsupported_reason = "architecture '" + f.arch + "' is not one this engine runs (" + list + ")";
    }
    f.tied_output = model.find_tensor("output.weight") == nullptr;
    if (f.tied_output) f.output_bytes += f.token_embd_bytes;  // llama.cpp places a copy of the embeddings as the output
    bool seen_moe = false;
    for (uint32_t l = 0; l < f.n_layer; ++l) {
        if (f.layer_expert_bytes[l]) {
            ++f.moe_layers;
            seen_moe = true;
        } else if (!seen_moe) {
            ++f.first_moe_layer;
        }
    }
    // deepseek4: llama.cpp's dsv4 cache (the engine's own holds less: a window without llama.cpp's ubatch rows).
    if (!dsv4_cache_facts(meta, f) && !cache_facts_from_layout(model, f)) cache_facts_from_keys(meta, f);
    return f;
}

ModelFacts read_model_facts(const std::string& path) {
    ModelFacts f = model_facts(open_gguf_model(path));
    find_nextn_file(path, f);
    return f;
}

void find_nextn_file(const std::string& path, ModelFacts& f) {
    if (f.arch != "deepseek4" || f.n_layer_nextn) return;
    const std::filesystem::path model(path), beside = model.parent_path() / ("mtp-" + model.filename().string());
    std::error_code ec;
    if (!std::filesystem::is_regular_file(beside, ec)) return;
    try {
        const ModelFacts block = model_facts(open_gguf_model(beside.string()));
        if (block.arch != f.arch || !block.n_layer_nextn) return;
        f.nextn_file = beside.string();
        f.nextn_file_bytes = block.nextn_bytes;
    } catch (const std::exception&) {}
}

}  // namespace moe

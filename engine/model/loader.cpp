#include "engine/model/loader.h"

#include "engine/model/arch/arch.h"

namespace moe {
namespace {

struct ArchEntry {
    const char* name;
    void (*load)(ArchLoader&, Model&);
    bool nextn_drafts = false;  // its description loads a NextN block for drafts (load_layer_count's runs_nextn)
};

constexpr ArchEntry kArchs[] = {
    {"qwen3moe", arch::load_qwen3moe},         {"glm4moe", arch::load_glm4moe, true},   {"qwen35moe", arch::load_qwen35moe, true},
    {"deepseek2", arch::load_deepseek2, true}, {"glm-dsa", arch::load_deepseek2, true}, {"gpt-oss", arch::load_gpt_oss},
    {"minimax-m2", arch::load_minimax_m2},     {"minimax-m3", arch::load_minimax_m3},   {"kimi-k3", arch::load_kimi_k3},
    {"deepseek4", arch::load_deepseek4, true},
};

}  // namespace

const std::vector<std::string>& supported_architectures() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const auto& a : kArchs) v.emplace_back(a.name);
        return v;
    }();
    return names;
}

const std::vector<std::string>& nextn_draft_architectures() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> v;
        for (const auto& a : kArchs)
            if (a.nextn_drafts) v.emplace_back(a.name);
        return v;
    }();
    return names;
}

namespace {
// The NextN block a description loaded after the trunk's layers, as a one-layer model of its own. Its tensors
// are bound already (finish), so the layer moves as plain data.
std::unique_ptr<Model> split_off_nextn(Model& m, const Model& trunk) {
    auto d = std::make_unique<Model>();
    d->hp = m.hp;
    d->hp.n_vocab = trunk.hp.n_vocab;
    d->hp.n_layer = 1;
    d->hp.n_layer_nextn = 0;
    d->hp.n_layer_dense_lead = 0;
    d->layers.push_back(std::move(m.layers.back()));
    m.layers.pop_back();
    if (d->layers[0].indexer_full) d->hp.indexer.full = {true};
    else d->hp.indexer = {};  // a glm-dsa NextN block without indexer tensors attends to every position
    d->nextn = m.nextn;
    m.nextn = {};
    d->tok_embd = d->nextn.embed.present() ? d->nextn.embed : trunk.tok_embd;
    d->output_norm = d->nextn.head_norm;
    d->output = d->nextn.head.present() ? d->nextn.head : trunk.output;
    // deepseek4: the block's streams go through the file's output hyper-connection head, as llama.cpp's MTP graph
    // does (in its converter's MTP file that head is the block's own)
    d->output_hc = m.output_hc;
    d->ik_numerics = m.ik_numerics;
    if (&m != &trunk) {  // a file of its own: its block's bytes move with it
        d->resident = std::move(m.resident);
        d->derived = std::move(m.derived);
    }
    return d;
}

std::unique_ptr<Model> describe(const GgufModel& file, bool read_resident, bool without_kernels = false, bool mtp = false,
                                const Model* trunk_of_block = nullptr) {
    ArchLoader ld(file);
    if (without_kernels) ld.accept_types_without_kernels();
    if (mtp) ld.want_nextn();
    if (trunk_of_block) ld.want_nextn_only();
    const ArchEntry* entry = nullptr;
    for (const auto& a : kArchs)
        if (ld.arch() == a.name) entry = &a;
    if (!entry) {
        std::string list;
        for (const auto& n : supported_architectures()) list += (list.empty() ? "" : ", ") + n;
        ld.fail("architecture '" + (ld.arch().empty() ? std::string("(missing)") : ld.arch()) + "' is not supported (supported: " + list + ")");
    }
    auto m = std::make_unique<Model>();
    m->hp.arch = ld.arch();
    m->ik_numerics = ld.ik_made();
    entry->load(ld, *m);
    ld.finish(*m, read_resident);
    if (!m->output.present() && read_resident) m->output = m->tok_embd;  // tied embeddings
    if (m->hp.n_nextn_loaded) m->mtp = split_off_nextn(*m, trunk_of_block ? *trunk_of_block : *m);
    m->hp.n_nextn_loaded = 0;
    return m;
}

// The NextN block of a file of its own (LoadOptions::mtp_file) for `trunk`.
std::unique_ptr<Model> describe_block_file(const GgufModel& file, const Model& trunk) {
    const std::string name = file.files.front().path;
    auto differ = [&](const std::string& what, const std::string& got, const std::string& want) {
        if (got != want) throw ModelError(name + ": " + what + " " + got + " differs from the model's " + want + " (not its NextN/MTP block)");
    };
    differ("architecture", ArchLoader(file).arch(), trunk.hp.arch);
    if (trunk.hp.arch != "deepseek4")
        throw ModelError(name + ": a NextN/MTP block in a file of its own is read for deepseek4 (llama.cpp's converter keeps " + trunk.hp.arch +
                         "'s in the model file)");
    auto side = describe(file, true, false, true, &trunk);
    differ("vocabulary", std::to_string(side->hp.n_vocab), std::to_string(trunk.hp.n_vocab));
    differ("embedding_length", std::to_string(side->hp.n_embd), std::to_string(trunk.hp.n_embd));
    differ("trunk layers (block_count - nextn_predict_layers)", std::to_string(side->hp.n_layer), std::to_string(trunk.hp.n_layer));
    if (!side->mtp) throw ModelError(name + ": holds no NextN/MTP block this engine runs (nextn_predict_layers, blk.N.nextn.eh_proj)");
    return std::move(side->mtp);
}
}  // namespace

std::vector<ExpertLayer> expert_layers(const Model& m) {
    std::vector<ExpertLayer> layers(m.layers.size());
    for (size_t l = 0; l < m.layers.size(); ++l)
        if (m.layers[l].moe) layers[l] = {&m.layers[l].experts.gate, &m.layers[l].experts.up, &m.layers[l].experts.down};
    return layers;
}

std::unique_ptr<Model> load_model_layout(const GgufModel& file, bool without_kernels) { return describe(file, false, without_kernels); }

std::unique_ptr<Model> load_model(const GgufModel& file, const LoadOptions& opt) {
    auto m = describe(file, true, false, opt.mtp);
    const std::vector<ExpertLayer> layers = expert_layers(*m);
    m->experts = opt.experts ? opt.experts(file, layers, m->hp) : std::make_unique<InRamExpertSource>(file, layers);
    const GgufModel* block_file = &file;
    if (opt.mtp && !m->mtp && opt.mtp_file) m->mtp = describe_block_file(*opt.mtp_file, *m), block_file = opt.mtp_file;
    if (m->mtp) m->mtp->experts = std::make_unique<InRamExpertSource>(*block_file, expert_layers(*m->mtp));
    return m;
}

}  // namespace moe

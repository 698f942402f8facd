// Loading a model: dispatch on general.architecture to its description (model/arch/), validate every key
// against every tensor shape before a byte of weights is read, then read the resident tensors and hand the
// routed experts to an expert source.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model.h"

namespace moe {

// Builds the model's expert source from its per-layer expert tensors (null entries: dense layers). The
// default reads every expert into RAM; the streaming cache (runtime/expert_cache.h) is the other one.
using ExpertSourceFactory =
    std::function<std::unique_ptr<ExpertSource>(const GgufModel& file, const std::vector<ExpertLayer>& layers, const Hparams& hp)>;

struct LoadOptions {
    ExpertSourceFactory experts;
    // Also load the first NextN/MTP block as Model::mtp (speculative drafts), where the architecture runs it;
    // its routed experts are read into RAM whatever `experts` does with the trunk's (a draft must be cheap).
    bool mtp = false;
    // With mtp: where the trunk's file holds no block, the file that holds it (llama.cpp's converter writes
    // deepseek4's as a separate mtp-<name>.gguf: the block's layer, its output head mixer, copies of the
    // trunk's embeddings and head). It must describe the same model (architecture, widths, layers, vocabulary).
    const GgufModel* mtp_file = nullptr;
};

// Throws ModelError naming the key or tensor and both values when the file contradicts itself, or naming the
// architecture and the supported ones when it is not one of them.
std::unique_ptr<Model> load_model(const GgufModel& file, const LoadOptions& opt = {});

// The model's tensors located and checked, no weights read and no expert source (resident tensors' data null):
// for tools that work on the file's layout (repack). `without_kernels`: also for tensors of known types the
// engine cannot compute (ModelFacts of a file planned for llama-server).
std::unique_ptr<Model> load_model_layout(const GgufModel& file, bool without_kernels = false);

// Per-layer routed-expert tensors of a loaded model (null entries: dense layers).
std::vector<ExpertLayer> expert_layers(const Model& m);

// Architectures load_model accepts, in GGUF's spelling.
const std::vector<std::string>& supported_architectures();
// Those whose NextN/MTP block LoadOptions::mtp loads for drafts.
const std::vector<std::string>& nextn_draft_architectures();

}  // namespace moe

// Internal to synth/: deepseek4's keys and tensors (its attention, hyper-connections and hash routing share no
// block with the other architectures).
#pragma once
#include <functional>
#include <string>

#include "synth/tensor_writer.h"

namespace moe::synth {

// Fills the defaults deepseek4 needs and throws SpecError naming the option when the spec cannot be written.
void check_deepseek4_spec(SyntheticSpec& s);
void deepseek4_keys(const SyntheticSpec& s, const std::function<void(const std::string&, GgufValue)>& key);
// Everything but token_embd, output_norm and output.
void deepseek4_tensors(Writer& w, const SyntheticSpec& s, uint32_t n_vocab);
// Writes a model whose NextN block (the last, blk.<layers>) goes to s.nextn_file as llama.cpp's converter
// splits deepseek4 (its trunk file drops the block and nextn_predict_layers, keeping the per-layer arrays whole).
void write_deepseek4_split(const SyntheticSpec& s, TypePlan plan, MetadataList kv, std::vector<GgufTensorData> tensors, const std::string& out);

}  // namespace moe::synth

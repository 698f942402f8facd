// What an architecture description uses to read a GGUF file: typed metadata keys under the architecture's
// prefix, and tensors checked against the shapes the metadata implies before anything is read. Every error
// is a ModelError that names the file, the key or tensor, and both values.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model.h"

namespace moe {

class ArchLoader {
public:
    explicit ArchLoader(const GgufModel& file);

    const std::string& arch() const { return arch_; }
    const GgufModel& file() const { return file_; }
    // The file holds one of ik_llama.cpp's types: it is computed as ik computes it (Model::ik_numerics), and its
    // llama.cpp Q8_0 matrices get the kernel type of ik's Q8_0 (GgmlType::IK_Q8_0).
    bool ik_made() const { return ik_made_; }
    // Accept tensors of known types the engine has no kernel for (a layout for facts, never for running).
    void accept_types_without_kernels() { any_known_type_ = true; }
    // Load the first NextN/MTP block too, where the architecture runs it (LoadOptions::mtp).
    void want_nextn() { want_nextn_ = true; }
    bool nextn_wanted() const { return want_nextn_; }
    // A file holding only the NextN/MTP block beside root copies of the trunk's embeddings and head (llama.cpp's
    // deepseek4 converter writes it as mtp-<name>.gguf): the block alone is described, the trunk's copies
    // left on disk (the trunk's own serve).
    void want_nextn_only() { want_nextn_ = nextn_only_ = true; }
    bool nextn_only() const { return nextn_only_; }
    // Accepts a tensor the description leaves on disk.
    void skip_tensor(const std::string& name) { claimed_.insert(name); }

    // "<arch>.<key>" as a positive integer (<= 2^30); required keys throw when missing.
    uint32_t u32(const std::string& key, std::optional<uint32_t> fallback = std::nullopt) const;
    // Like u32 but 0 is a valid value.
    uint32_t u32_or_zero(const std::string& key, uint32_t fallback = 0) const;
    float f32(const std::string& key, float fallback) const;
    bool flag(const std::string& key, bool fallback) const;
    std::optional<std::string> str(const std::string& key) const;
    bool has(const std::string& key) const;
    // A bool (or integer) array with exactly n entries; nullopt when the key is absent.
    std::optional<std::vector<bool>> bool_array(const std::string& key, size_t n) const;
    // An integer array with exactly n entries (each 0..2^30); nullopt when the key is absent.
    // (at_least: an array of n or more entries, the first n returned.)
    std::optional<std::vector<uint32_t>> u32_array(const std::string& key, size_t n, bool at_least = false) const;

    // A tensor the forward pass reads from RAM: checks name, shape and type and records it for the arena.
    // Optional tensors that are absent leave `dst` empty (not present()).
    void resident(Tensor& dst, const std::string& name, std::vector<uint64_t> shape, const std::string& why, bool required = true);
    // Rows [first, first + rows) of a resident tensor of `shape` (a 2-D matrix's rows, or a vector's elements):
    // a fused projection's part, as a tensor of its own named `part` over the same bytes.
    void resident_rows(Tensor& dst, const std::string& name, std::vector<uint64_t> shape, uint64_t first, uint64_t rows, const std::string& part,
                       const std::string& why, bool required = true);
    bool has_tensor(const std::string& name) const { return file_.find_tensor(name) != nullptr; }
    // A routed-expert tensor [n_in, n_out, n_expert]: located, never read here.
    ExpertTensor experts(const std::string& name, uint64_t n_in, uint64_t n_out, uint64_t n_expert, const std::string& why);
    // A tensor computed at load from a file tensor the forward pass does not read as stored (`source`, read once
    // into a temporary buffer, then dropped): `dst` gets `type` and `shape`, and `fill(source bytes, dst bytes)`
    // writes its bytes into memory the model owns. Layout-only loads record the shape and read nothing.
    using DeriveFn = std::function<void(const uint8_t* source, uint8_t* out)>;
    void derived(Tensor& dst, const std::string& name, GgmlType type, std::vector<uint64_t> shape, const std::string& source, DeriveFn fill);
    // Tensors of blocks [first, first + count): a NextN/MTP block the engine recognises but does not run.
    void skip_blocks(uint32_t first, uint32_t count);

    [[noreturn]] void fail(const std::string& what) const;
    std::string key_name(const std::string& key) const { return arch_ + "." + key; }

    // Rejects tensors no description claimed (a block beyond block_count, an unknown name in a known block),
    // then (when `read`) reads the resident tensors into one arena and points every recorded Tensor at its bytes.
    void finish(Model& m, bool read = true);

private:
    const GgufTensorInfo* info(const std::string& name, bool required);
    void expect_shape(const GgufTensorInfo* t, const std::vector<uint64_t>& want, const std::string& why) const;

    const GgufModel& file_;
    bool ik_made_ = false;
    bool want_nextn_ = false, nextn_only_ = false;
    bool any_known_type_ = false;
    const GgufFile& meta_;
    std::string arch_;
    std::set<std::string> claimed_;
    std::vector<const GgufTensorInfo*> resident_list_;
    struct Binding {
        Tensor* tensor;
        std::string name;  // the file tensor
        size_t offset;     // bytes into it
    };
    std::vector<Binding> bindings_;
    struct Derivation {
        Tensor* dst;
        const GgufTensorInfo* source;
        size_t bytes;
        DeriveFn fill;
    };
    std::vector<Derivation> derivations_;
};

// "[a, b, c]"
std::string shape_string(const std::vector<uint64_t>& ne);

}  // namespace moe

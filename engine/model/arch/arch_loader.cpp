#include "engine/model/arch/arch_loader.h"

#include <algorithm>

#include "engine/model/model_facts.h"

namespace moe {

std::string shape_string(const std::vector<uint64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

ArchLoader::ArchLoader(const GgufModel& file) : file_(file), meta_(file.meta()), arch_(meta_.get_string("general.architecture").value_or("")) {
    for (const auto& t : file_.tensors)
        if (auto ti = type_info(t.raw_type); ti && ti->origin == TypeOrigin::IkLlama) ik_made_ = true;
}

// The kernel type of a tensor: its file type, but ik's Q8_0 in a file made by ik_llama.cpp.
static GgmlType kernel_type(GgmlType t, bool ik_made) { return ik_made && t == GgmlType::Q8_0 ? GgmlType::IK_Q8_0 : t; }

void ArchLoader::fail(const std::string& what) const { throw ModelError(meta_.path + ": " + what); }

bool ArchLoader::has(const std::string& key) const { return meta_.find(key_name(key)) != nullptr; }

uint32_t ArchLoader::u32(const std::string& key, std::optional<uint32_t> fallback) const {
    const std::string k = key_name(key);
    auto v = meta_.get_int(k);
    if (!v) {
        if (meta_.find(k)) fail("metadata " + k + " is not an integer");
        if (!fallback) fail("metadata " + k + " is missing");
        return *fallback;
    }
    if (*v <= 0 || *v > (1 << 30)) fail("metadata " + k + " = " + std::to_string(*v) + " is out of range");
    return static_cast<uint32_t>(*v);
}

uint32_t ArchLoader::u32_or_zero(const std::string& key, uint32_t fallback) const {
    const std::string k = key_name(key);
    auto v = meta_.get_int(k);
    if (!v) {
        if (meta_.find(k)) fail("metadata " + k + " is not an integer");
        return fallback;
    }
    if (*v < 0 || *v > (1 << 30)) fail("metadata " + k + " = " + std::to_string(*v) + " is out of range");
    return static_cast<uint32_t>(*v);
}

float ArchLoader::f32(const std::string& key, float fallback) const {
    const std::string k = key_name(key);
    auto v = meta_.get_double(k);
    if (!v) {
        if (meta_.find(k)) fail("metadata " + k + " is not a number");
        return fallback;
    }
    if (!std::isfinite(*v)) fail("metadata " + k + " = " + std::to_string(*v) + " is not finite");
    return static_cast<float>(*v);
}

bool ArchLoader::flag(const std::string& key, bool fallback) const {
    auto v = meta_.get_int(key_name(key));
    return v ? *v != 0 : fallback;
}

std::optional<std::string> ArchLoader::str(const std::string& key) const { return meta_.get_string(key_name(key)); }

std::optional<std::vector<bool>> ArchLoader::bool_array(const std::string& key, size_t n) const {
    const std::string k = key_name(key);
    const GgufValue* v = meta_.find(k);
    if (!v) return std::nullopt;
    if (!v->is_array() || v->elem_type == GgufValueType::STRING) fail("metadata " + k + " is not an array of flags");
    if (v->count != n) fail("metadata " + k + " has " + std::to_string(v->count) + " entries but the model has " + std::to_string(n) + " layers");
    const size_t width = v->raw.size() / std::max<uint64_t>(v->count, 1);
    std::vector<bool> out(n);
    for (size_t i = 0; i < n; ++i) {
        bool any = false;
        for (size_t b = 0; b < width; ++b) any = any || v->raw[i * width + b] != 0;
        out[i] = any;
    }
    return out;
}

std::optional<std::vector<uint32_t>> ArchLoader::u32_array(const std::string& key, size_t n, bool at_least) const {
    const std::string k = key_name(key);
    const GgufValue* v = meta_.find(k);
    if (!v) return std::nullopt;
    const std::vector<int32_t> ints = v->is_array() ? v->i32_array() : std::vector<int32_t>{};
    if (at_least ? ints.size() < n || v->count < n : ints.size() != n || v->count != n)
        fail("metadata " + k + (v->is_array() && ints.size() == v->count ? " has " + std::to_string(v->count) + " integers where" : " is not") +
             " an array of " + (at_least ? "at least " : "") + std::to_string(n) + " integers" +
             (v->is_array() && ints.size() == v->count ? " is needed" : ""));
    std::vector<uint32_t> out(n);
    for (size_t i = 0; i < n; ++i) {
        if (ints[i] < 0 || ints[i] > (1 << 30))
            fail("metadata " + k + "[" + std::to_string(i) + "] = " + std::to_string(ints[i]) + " is out of range");
        out[i] = static_cast<uint32_t>(ints[i]);
    }
    return out;
}

const GgufTensorInfo* ArchLoader::info(const std::string& name, bool required) {
    const GgufTensorInfo* t = file_.find_tensor(name);
    if (!t && required) fail("tensor '" + name + "' is missing");
    if (t) {
        auto ti = type_info(t->raw_type);
        const bool integers = t->raw_type == static_cast<uint32_t>(GgmlType::I32);  // a table read as data, never multiplied
        if (!ti || (!ti->computable && !any_known_type_ && !integers)) {
            // ik_llama.cpp's own types run only in its fork's llama-server, which takes the same plan.
            const bool ik = ti && ti->origin == TypeOrigin::IkLlama;
            fail("tensor '" + name + "' has type " + type_name(t->raw_type) + (ik ? " (an ik_llama.cpp type)" : "") +
                 ", which this engine has no kernel for (it computes " + computable_type_list() +
                 "); use another quantization of the model, or plan for " + (ik ? "ik_llama.cpp's" : "llama.cpp's") +
                 " server: moestream plan --target llama-server");
        }
        claimed_.insert(name);
    }
    return t;
}

void ArchLoader::expect_shape(const GgufTensorInfo* t, const std::vector<uint64_t>& want, const std::string& why) const {
    std::vector<uint64_t> got = t->ne;
    while (got.size() > want.size() && got.back() == 1) got.pop_back();
    if (got != want) fail("tensor '" + t->name + "' has shape " + shape_string(t->ne) + " but metadata (" + why + ") implies " + shape_string(want));
}

void ArchLoader::resident(Tensor& dst, const std::string& name, std::vector<uint64_t> shape, const std::string& why, bool required) {
    uint64_t rows = shape.size() == 1 ? shape[0] : 1;
    for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
    resident_rows(dst, name, std::move(shape), 0, rows, name, why, required);
}

void ArchLoader::resident_rows(Tensor& dst, const std::string& name, std::vector<uint64_t> shape, uint64_t first, uint64_t rows,
                               const std::string& part, const std::string& why, bool required) {
    dst = Tensor{};
    dst.name = part;
    const GgufTensorInfo* t = info(name, required);
    if (!t) return;
    expect_shape(t, shape, why);
    dst.type = kernel_type(t->type(), ik_made_ && shape.size() > 1);
    uint64_t total = shape.size() == 1 ? shape[0] : 1;
    for (size_t i = 1; i < shape.size(); ++i) total *= shape[i];
    if (first + rows > total)
        fail("tensor '" + name + "': rows " + std::to_string(first) + "+" + std::to_string(rows) + " of " + shape_string(shape));
    size_t offset = 0;
    if (shape.size() == 1) {  // a vector: its elements
        if (dst.type != GgmlType::F32) fail("tensor '" + name + "' is a vector stored as " + type_name(t->raw_type) + "; expected f32");
        dst.ne0 = static_cast<int64_t>(rows);
        dst.row_bytes = rows * 4;
        offset = first * 4;
    } else {
        // A row-interleaved type keeps its rows in groups: a part must begin and end on a group.
        if (const uint32_t g = type_info(dst.type).interleave; first % g || rows % g)
            fail("tensor '" + name + "' of type " + type_name(t->raw_type) + " interleaves rows in groups of " + std::to_string(g) +
                 " but its part '" + part + "' is rows " + std::to_string(first) + "+" + std::to_string(rows));
        dst.ne0 = static_cast<int64_t>(shape[0]);
        dst.ne1 = static_cast<int64_t>(rows);
        dst.row_bytes = *row_bytes(dst.type, shape[0]);  // checked computable by info()
        offset = first * dst.row_bytes;
    }
    // A fused tensor is read once, whatever parts of it are bound.
    if (std::find(resident_list_.begin(), resident_list_.end(), t) == resident_list_.end()) resident_list_.push_back(t);
    bindings_.push_back({&dst, name, offset});
}

ExpertTensor ArchLoader::experts(const std::string& name, uint64_t n_in, uint64_t n_out, uint64_t n_expert, const std::string& why) {
    const GgufTensorInfo* t = info(name, true);
    expect_shape(t, {n_in, n_out, n_expert}, why);
    ExpertTensor e;
    e.name = name;
    e.type = kernel_type(t->type(), ik_made_);
    e.n_in = static_cast<int64_t>(n_in);
    e.n_out = static_cast<int64_t>(n_out);
    e.n_expert = static_cast<int64_t>(n_expert);
    e.row_bytes = *row_bytes(e.type, n_in);
    e.expert_bytes = e.expert_stride = e.row_bytes * n_out;
    e.file_index = t->file_index;
    e.file_offset = t->file_offset;
    return e;
}

void ArchLoader::derived(Tensor& dst, const std::string& name, GgmlType type, std::vector<uint64_t> shape, const std::string& source, DeriveFn fill) {
    const GgufTensorInfo* src = info(source, true);
    dst = Tensor{};
    dst.name = name;
    dst.type = type;
    dst.ne0 = static_cast<int64_t>(shape[0]);
    dst.ne1 = 1;
    for (size_t i = 1; i < shape.size(); ++i) dst.ne1 *= static_cast<int64_t>(shape[i]);
    const auto rb = row_bytes(type, shape[0]);
    if (!rb)
        fail("tensor '" + name + "' (derived from '" + source + "'): row length " + std::to_string(shape[0]) + " does not fit type " +
             type_name(static_cast<uint32_t>(type)));
    dst.row_bytes = *rb;
    derivations_.push_back({&dst, src, dst.row_bytes * static_cast<size_t>(dst.ne1), std::move(fill)});
}

void ArchLoader::skip_blocks(uint32_t first, uint32_t count) {
    for (const auto& t : file_.tensors) {
        const int l = tensor_layer(t.name);
        if (l >= static_cast<int>(first) && l < static_cast<int>(first + count)) claimed_.insert(t.name);
    }
}

void ArchLoader::finish(Model& m, bool read) {
    for (const auto& t : file_.tensors) {
        if (claimed_.count(t.name)) continue;
        const int l = tensor_layer(t.name);
        if (l >= static_cast<int>(m.hp.n_layer))
            fail("tensor '" + t.name + "' is beyond block_count " + std::to_string(m.hp.n_layer + m.hp.n_layer_nextn));
        fail("tensor '" + t.name + "' is not used by architecture " + arch_ + " (a newer or different layout?)");
    }
    if (!read) return;
    m.resident = std::make_unique<ResidentArena>(file_, resident_list_);
    for (const Binding& b : bindings_) b.tensor->data = m.resident->data_of(b.name) + b.offset;
    std::vector<uint8_t> source;
    for (Derivation& d : derivations_) {
        source.resize(d.source->nbytes);
        read_file_range(file_.files[d.source->file_index].path, d.source->file_offset, d.source->nbytes, source.data());
        m.derived.push_back(std::make_unique<uint8_t[]>(d.bytes));
        d.fill(source.data(), m.derived.back().get());
        d.dst->data = m.derived.back().get();
    }
}

}  // namespace moe

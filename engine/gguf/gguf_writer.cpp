// GGUF v3 writer and GgufValue constructors. Writes to a temporary file and renames it into place, so an
// interrupted write never leaves a truncated model under the final name.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/gguf/gguf.h"

namespace moe {
namespace {

class Out {
public:
    explicit Out(std::ofstream& os) : os_(os) {}
    void bytes(const void* p, size_t n) {
        os_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
        pos_ += n;
    }
    template <typename T>
    void put(T v) {
        bytes(&v, sizeof v);
    }
    void str(const std::string& s) {
        put<uint64_t>(s.size());
        bytes(s.data(), s.size());
    }
    void pad_to(uint64_t alignment) {
        static const char zeros[64] = {};
        while (pos_ % alignment) bytes(zeros, std::min<uint64_t>(alignment - pos_ % alignment, sizeof zeros));
    }
    uint64_t pos() const { return pos_; }

private:
    std::ofstream& os_;
    uint64_t pos_ = 0;
};

void write_value(Out& o, const GgufValue& v) {
    o.put<uint32_t>(static_cast<uint32_t>(v.type));
    switch (v.type) {
        case GgufValueType::STRING: o.str(v.str); break;
        case GgufValueType::ARRAY:
            o.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
            o.put<uint64_t>(v.count);
            if (v.elem_type == GgufValueType::STRING)
                for (const auto& s : v.strs) o.str(s);
            else o.bytes(v.raw.data(), v.raw.size());
            break;
        default: o.bytes(v.raw.data(), v.raw.size());
    }
}

template <typename T>
GgufValue scalar(GgufValueType t, T v) {
    GgufValue g;
    g.type = t;
    g.raw.resize(sizeof v);
    std::memcpy(g.raw.data(), &v, sizeof v);
    return g;
}

}  // namespace

GgufValue GgufValue::u32(uint32_t v) { return scalar(GgufValueType::UINT32, v); }
GgufValue GgufValue::i32(int32_t v) { return scalar(GgufValueType::INT32, v); }
GgufValue GgufValue::u64(uint64_t v) { return scalar(GgufValueType::UINT64, v); }
GgufValue GgufValue::f32(float v) { return scalar(GgufValueType::FLOAT32, v); }
GgufValue GgufValue::boolean(bool v) { return scalar(GgufValueType::BOOL, static_cast<uint8_t>(v)); }
GgufValue GgufValue::string(std::string v) {
    GgufValue g;
    g.type = GgufValueType::STRING;
    g.str = std::move(v);
    return g;
}
GgufValue GgufValue::string_array(std::vector<std::string> v) {
    GgufValue g;
    g.type = GgufValueType::ARRAY;
    g.elem_type = GgufValueType::STRING;
    g.count = v.size();
    g.strs = std::move(v);
    return g;
}
GgufValue GgufValue::f32_array_of(const std::vector<float>& v) {
    GgufValue g;
    g.type = GgufValueType::ARRAY;
    g.elem_type = GgufValueType::FLOAT32;
    g.count = v.size();
    g.raw.resize(v.size() * 4);
    std::memcpy(g.raw.data(), v.data(), g.raw.size());
    return g;
}
GgufValue GgufValue::i32_array_of(const std::vector<int32_t>& v) {
    GgufValue g = f32_array_of({});
    g.elem_type = GgufValueType::INT32;
    g.count = v.size();
    g.raw.resize(v.size() * 4);
    std::memcpy(g.raw.data(), v.data(), g.raw.size());
    return g;
}

void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& kv, const std::vector<GgufTensorData>& tensors,
                uint64_t alignment, bool data_holes) {
    uint64_t data_end = 0;
    std::string tmp = path + ".tmp";
    {
        std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
        if (!os) throw GgufError(path + ": cannot create " + tmp);
        Out o(os);
        o.put<uint32_t>(0x46554747);
        o.put<uint32_t>(3);
        o.put<uint64_t>(tensors.size());
        bool has_alignment = false;
        for (const auto& [k, v] : kv) has_alignment |= (k == "general.alignment");
        o.put<uint64_t>(kv.size() + (alignment != 32 && !has_alignment ? 1 : 0));
        for (const auto& [k, v] : kv) {
            o.str(k);
            write_value(o, v);
        }
        if (alignment != 32 && !has_alignment) {
            o.str("general.alignment");
            write_value(o, GgufValue::u32(static_cast<uint32_t>(alignment)));
        }
        uint64_t offset = 0;
        for (const auto& t : tensors) {
            uint64_t rows = 1;
            for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
            auto rb = row_bytes(t.type, t.ne.at(0));
            const uint64_t nbytes = data_holes && rb ? *rb * rows : t.bytes.size();
            if (!rb || *rb * rows != nbytes || (data_holes && !t.bytes.empty()))
                throw GgufError(path + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) + " bytes, its shape and type need " +
                                (rb ? std::to_string(*rb * rows) : "?"));
            o.str(t.name);
            o.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
            for (auto d : t.ne) o.put<uint64_t>(d);
            o.put<uint32_t>(static_cast<uint32_t>(t.type));
            o.put<uint64_t>(offset);
            offset += (nbytes + alignment - 1) / alignment * alignment;
        }
        o.pad_to(alignment);
        data_end = static_cast<uint64_t>(os.tellp()) + offset;
        for (const auto& t : tensors) {
            if (data_holes) break;
            o.bytes(t.bytes.data(), t.bytes.size());
            o.pad_to(alignment);
        }
        os.flush();
        if (!os) throw GgufError(path + ": write failed (disk full?)");
    }
    if (data_holes) {  // the tensors' bytes as a hole: the header of a model of any size, on no disk space
        std::error_code ec;
        std::filesystem::resize_file(tmp, data_end, ec);
        if (ec) throw GgufError(path + ": cannot size " + tmp + " to " + std::to_string(data_end) + " bytes: " + ec.message());
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw GgufError(path + ": cannot rename " + tmp + ": " + ec.message());
}

}  // namespace moe

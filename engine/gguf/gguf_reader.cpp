// Strict GGUF header parser: see gguf.h for the layout. Every read is bounds-checked against the file size.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <regex>
#include <unordered_set>

#include "engine/gguf/gguf.h"

namespace moe {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little endian
constexpr uint64_t kMaxDims = 4;         // ggml's GGML_MAX_DIMS
constexpr uint64_t kMaxStringBytes = 1ull << 30;

// Sequential byte source over either memory or a file descriptor, with absolute position tracking.
class Source {
public:
    Source(std::span<const uint8_t> mem, std::string label) : mem_(mem), size_(mem.size()), label_(std::move(label)) {}
    Source(int fd, uint64_t size, std::string label) : fd_(fd), size_(size), label_(std::move(label)) {}

    uint64_t pos() const { return pos_; }
    uint64_t size() const { return size_; }
    uint64_t remaining() const { return size_ - pos_; }
    const std::string& label() const { return label_; }

    [[noreturn]] void fail(const std::string& what) const { throw GgufError(label_ + ": " + what + " (at byte " + std::to_string(pos_) + ")"); }

    void read(void* dst, uint64_t n, const char* field) {
        if (n == 0) return;  // an empty string or array: nothing to copy (and dst may be null)
        if (n > remaining())
            fail(std::string("truncated while reading ") + field + ": need " + std::to_string(n) + " bytes, " + std::to_string(remaining()) +
                 " left");
        if (fd_ < 0) {
            std::memcpy(dst, mem_.data() + pos_, n);
        } else {
            uint8_t* out = static_cast<uint8_t*>(dst);
            uint64_t done = 0;
            while (done < n) {
                if (buf_pos_ == buf_len_) refill();
                uint64_t take = std::min<uint64_t>(n - done, buf_len_ - buf_pos_);
                std::memcpy(out + done, buf_.data() + buf_pos_, take);
                buf_pos_ += take;
                done += take;
            }
        }
        pos_ += n;
    }

    template <typename T>
    T get(const char* field) {
        T v;
        read(&v, sizeof v, field);
        return v;
    }

    std::string get_string(const std::string& field) {
        uint64_t len = get<uint64_t>(field.c_str());
        if (len > remaining() || len > kMaxStringBytes)
            fail(field + ": string length " + std::to_string(len) + " exceeds the " + std::to_string(remaining()) + " bytes left in the file");
        std::string s(len, '\0');
        read(s.data(), len, field.c_str());
        return s;
    }

private:
    void refill() {
        buf_.resize(1 << 20);
        ssize_t got;
        do { got = ::pread(fd_, buf_.data(), buf_.size(), static_cast<off_t>(buf_file_off_ + buf_len_)); } while (got < 0 && errno == EINTR);
        buf_file_off_ += buf_len_;
        if (got <= 0) fail(std::string("read failed: ") + (got < 0 ? std::strerror(errno) : "unexpected end of file"));
        buf_len_ = static_cast<uint64_t>(got);
        buf_pos_ = 0;
    }

    std::span<const uint8_t> mem_;
    int fd_ = -1;
    uint64_t size_;
    std::string label_;
    uint64_t pos_ = 0;
    std::vector<uint8_t> buf_;
    uint64_t buf_pos_ = 0, buf_len_ = 0;
    uint64_t buf_file_off_ = 0;  // file offset of buf_[0]
};

uint64_t scalar_size(GgufValueType t) {
    switch (t) {
        case GgufValueType::UINT8:
        case GgufValueType::INT8:
        case GgufValueType::BOOL: return 1;
        case GgufValueType::UINT16:
        case GgufValueType::INT16: return 2;
        case GgufValueType::UINT32:
        case GgufValueType::INT32:
        case GgufValueType::FLOAT32: return 4;
        case GgufValueType::UINT64:
        case GgufValueType::INT64:
        case GgufValueType::FLOAT64: return 8;
        default: return 0;
    }
}

GgufValue read_value(Source& src, uint32_t raw_type, const std::string& key) {
    GgufValue v;
    if (raw_type > static_cast<uint32_t>(GgufValueType::FLOAT64)) src.fail("metadata '" + key + "': unknown value type " + std::to_string(raw_type));
    v.type = static_cast<GgufValueType>(raw_type);
    if (v.type == GgufValueType::STRING) {
        v.str = src.get_string("metadata '" + key + "' string");
        return v;
    }
    if (v.type == GgufValueType::ARRAY) {
        uint32_t et = src.get<uint32_t>("array element type");
        if (et > static_cast<uint32_t>(GgufValueType::FLOAT64)) src.fail("metadata '" + key + "': unknown array element type " + std::to_string(et));
        v.elem_type = static_cast<GgufValueType>(et);
        if (v.elem_type == GgufValueType::ARRAY) src.fail("metadata '" + key + "': nested arrays are not supported");
        v.count = src.get<uint64_t>("array count");
        if (v.elem_type == GgufValueType::STRING) {
            // Each string needs at least its 8-byte length.
            if (v.count > src.remaining() / 8) src.fail("metadata '" + key + "': array count " + std::to_string(v.count) + " exceeds the file");
            v.strs.reserve(v.count);
            for (uint64_t i = 0; i < v.count; ++i) v.strs.push_back(src.get_string("metadata '" + key + "' element"));
        } else {
            uint64_t es = scalar_size(v.elem_type);
            if (v.count > src.remaining() / es) src.fail("metadata '" + key + "': array count " + std::to_string(v.count) + " exceeds the file");
            v.raw.resize(v.count * es);
            src.read(v.raw.data(), v.raw.size(), "array data");
        }
        return v;
    }
    v.raw.resize(scalar_size(v.type));
    src.read(v.raw.data(), v.raw.size(), ("metadata '" + key + "' value").c_str());
    if (v.type == GgufValueType::BOOL && v.raw[0] > 1) src.fail("metadata '" + key + "': bool value " + std::to_string(v.raw[0]) + " is not 0 or 1");
    return v;
}

GgufFile parse(Source& src) {
    GgufFile f;
    f.path = src.label();
    f.file_size = src.size();
    uint32_t magic = src.get<uint32_t>("magic");
    if (magic != kMagic) src.fail("not a GGUF file (bad magic)");
    f.version = src.get<uint32_t>("version");
    if (f.version != 2 && f.version != 3) src.fail("unsupported GGUF version " + std::to_string(f.version) + " (supported: 2, 3)");
    uint64_t n_tensors = src.get<uint64_t>("tensor count");
    uint64_t n_kv = src.get<uint64_t>("metadata count");
    // Smallest possible kv: 8-byte key length + 4-byte type + 1-byte value; tensor info: 8+4+4+8 bytes.
    if (n_kv > src.remaining() / 13) src.fail("metadata count " + std::to_string(n_kv) + " exceeds the file");
    if (n_tensors > src.remaining() / 24) src.fail("tensor count " + std::to_string(n_tensors) + " exceeds the file");

    std::unordered_set<std::string> keys;
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key = src.get_string("metadata key #" + std::to_string(i));
        if (!keys.insert(key).second) src.fail("duplicate metadata key '" + key + "'");
        uint32_t t = src.get<uint32_t>("metadata value type");
        f.kv.emplace_back(key, read_value(src, t, key));
    }
    if (const GgufValue* a = f.find("general.alignment")) {
        auto al = a->as_int();
        if (!al || *al <= 0 || (*al & (*al - 1)) != 0 || *al > (1 << 20)) src.fail("general.alignment must be a power of two up to 1 MiB");
        f.alignment = static_cast<uint64_t>(*al);
    }

    std::unordered_set<std::string> names;
    f.tensors.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t;
        t.name = src.get_string("tensor name #" + std::to_string(i));
        if (t.name.size() >= 64) src.fail("tensor '" + t.name + "': name longer than 63 bytes");
        if (!names.insert(t.name).second) src.fail("duplicate tensor name '" + t.name + "'");
        uint32_t n_dims = src.get<uint32_t>("tensor n_dims");
        if (n_dims == 0 || n_dims > kMaxDims) src.fail("tensor '" + t.name + "': n_dims " + std::to_string(n_dims) + " not in 1..4");
        t.ne.resize(n_dims);
        uint64_t elems = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            t.ne[d] = src.get<uint64_t>("tensor dimension");
            if (t.ne[d] == 0 || t.ne[d] > (1ull << 40))
                src.fail("tensor '" + t.name + "': dimension " + std::to_string(d) + " = " + std::to_string(t.ne[d]));
            if (elems > UINT64_MAX / t.ne[d]) src.fail("tensor '" + t.name + "': element count overflows");
            elems *= t.ne[d];
        }
        t.raw_type = src.get<uint32_t>("tensor type");
        auto info = type_info(t.raw_type);
        if (!info) src.fail("tensor '" + t.name + "': unknown ggml type " + std::to_string(t.raw_type));
        if (t.ne[0] % info->block_elems != 0)
            src.fail("tensor '" + t.name + "': row length " + std::to_string(t.ne[0]) + " is not a multiple of the " + std::string(info->name) +
                     " block size " + std::to_string(info->block_elems));
        // ik_llama.cpp computes its 1-bit interleaved forms against activations in blocks of 128 (Q8_K128).
        if ((t.raw_type == static_cast<uint32_t>(GgmlType::IQ1_M_R4) || t.raw_type == static_cast<uint32_t>(GgmlType::IQ1_S_R4)) &&
            t.ne[0] % 128 != 0)
            src.fail("tensor '" + t.name + "': row length " + std::to_string(t.ne[0]) + " is not a multiple of 128, which " +
                     std::string(info->name) + " needs");
        // BF16_R16 interleaves its rows' values in pairs.
        if (t.raw_type == static_cast<uint32_t>(GgmlType::BF16_R16) && t.ne[0] % 2 != 0)
            src.fail("tensor '" + t.name + "': row length " + std::to_string(t.ne[0]) + " is odd, and bf16_r16 stores values in pairs");
        // ik_llama.cpp's interleaved forms store each matrix's rows in whole groups.
        if (info->interleave > 1 && (n_dims < 2 || t.ne[1] % info->interleave != 0))
            src.fail("tensor '" + t.name + "': " + std::string(info->name) + " stores rows in groups of " + std::to_string(info->interleave) +
                     " but the tensor has " + std::to_string(n_dims < 2 ? 1 : t.ne[1]) + " rows per matrix");
        // Rows of ne[0] elements (with ik_llama.cpp's per-row scales where its type has them).
        const auto row = row_bytes_raw(t.raw_type, t.ne[0]);
        const uint64_t rows = elems / t.ne[0];
        if (!row || rows > UINT64_MAX / *row) src.fail("tensor '" + t.name + "': byte size overflows");
        t.nbytes = rows * *row;
        if (t.raw_type == 36) t.nbytes += 32;  // ik_llama.cpp's I2_S ends each tensor in a 32-byte scale trailer
        t.offset = src.get<uint64_t>("tensor offset");
        if (t.offset % f.alignment != 0)
            src.fail("tensor '" + t.name + "': offset " + std::to_string(t.offset) + " not aligned to " + std::to_string(f.alignment));
        f.tensors.push_back(std::move(t));
    }
    uint64_t header_end = src.pos();
    f.data_offset = (header_end + f.alignment - 1) / f.alignment * f.alignment;
    for (auto& t : f.tensors) {
        if (t.offset > UINT64_MAX - f.data_offset || t.nbytes > UINT64_MAX - (f.data_offset + t.offset) ||
            f.data_offset + t.offset + t.nbytes > f.file_size)
            throw GgufError(f.path + ": tensor '" + t.name + "' data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
                            ") runs past the end of the file (" + std::to_string(f.file_size) + " bytes; truncated?)");
        t.file_offset = f.data_offset + t.offset;
    }
    // Overlapping tensor data means a corrupt or hostile file.
    std::vector<const GgufTensorInfo*> sorted;
    for (auto& t : f.tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->offset < b->offset; });
    for (size_t i = 1; i < sorted.size(); ++i)
        if (sorted[i - 1]->offset + sorted[i - 1]->nbytes > sorted[i]->offset)
            throw GgufError(f.path + ": tensor '" + sorted[i]->name + "' overlaps tensor '" + sorted[i - 1]->name + "'");
    return f;
}

}  // namespace

const char* value_type_name(GgufValueType t) {
    static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    auto i = static_cast<uint32_t>(t);
    return i < 13 ? names[i] : "?";
}

uint64_t GgufTensorInfo::n_elements() const {
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    return n;
}

std::optional<int64_t> GgufValue::as_int() const {
    auto rd = [&](auto v) {
        std::memcpy(&v, raw.data(), sizeof v);
        return static_cast<int64_t>(v);
    };
    switch (type) {
        case GgufValueType::UINT8: return rd(uint8_t{});
        case GgufValueType::INT8: return rd(int8_t{});
        case GgufValueType::UINT16: return rd(uint16_t{});
        case GgufValueType::INT16: return rd(int16_t{});
        case GgufValueType::UINT32: return rd(uint32_t{});
        case GgufValueType::INT32: return rd(int32_t{});
        case GgufValueType::UINT64: {
            uint64_t v;
            std::memcpy(&v, raw.data(), 8);
            if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
            return static_cast<int64_t>(v);
        }
        case GgufValueType::INT64: return rd(int64_t{});
        case GgufValueType::BOOL: return raw[0];
        default: return std::nullopt;
    }
}

std::optional<double> GgufValue::as_double() const {
    if (type == GgufValueType::FLOAT32) {
        float v;
        std::memcpy(&v, raw.data(), 4);
        return v;
    }
    if (type == GgufValueType::FLOAT64) {
        double v;
        std::memcpy(&v, raw.data(), 8);
        return v;
    }
    auto i = as_int();
    return i ? std::optional<double>(static_cast<double>(*i)) : std::nullopt;
}

std::vector<float> GgufValue::f32_array() const {
    if (type != GgufValueType::ARRAY || elem_type != GgufValueType::FLOAT32) return {};
    std::vector<float> out(count);
    std::memcpy(out.data(), raw.data(), count * 4);
    return out;
}

std::vector<int32_t> GgufValue::i32_array() const {
    if (type != GgufValueType::ARRAY || (elem_type != GgufValueType::INT32 && elem_type != GgufValueType::UINT32)) return {};
    std::vector<int32_t> out(count);
    std::memcpy(out.data(), raw.data(), count * 4);
    return out;
}

const GgufValue* GgufFile::find(const std::string& key) const {
    for (const auto& [k, v] : kv)
        if (k == key) return &v;
    return nullptr;
}
std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
    const GgufValue* v = find(key);
    return v ? v->as_int() : std::nullopt;
}
std::optional<double> GgufFile::get_double(const std::string& key) const {
    const GgufValue* v = find(key);
    return v ? v->as_double() : std::nullopt;
}
std::optional<std::string> GgufFile::get_string(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v || v->type != GgufValueType::STRING) return std::nullopt;
    return v->str;
}

const GgufTensorInfo* GgufModel::find_tensor(const std::string& name) const {
    for (const auto& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

uint64_t GgufModel::total_bytes() const {
    uint64_t n = 0;
    for (const auto& f : files) n += f.file_size;
    return n;
}

GgufFile parse_gguf(std::span<const uint8_t> bytes, const std::string& label) {
    Source src(bytes, label);
    return parse(src);
}

GgufFile read_gguf_header(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw GgufError(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw GgufError(path + ": not a regular file");
    }
    try {
        Source src(fd, static_cast<uint64_t>(st.st_size), path);
        GgufFile f = parse(src);
        ::close(fd);
        return f;
    } catch (...) {
        ::close(fd);
        throw;
    }
}

GgufModel open_gguf_model(const std::string& path) {
    GgufModel m;
    m.files.push_back(read_gguf_header(path));
    auto count = m.files[0].get_int("split.count");
    static const std::regex split_re(R"((.*)-(\d{5})-of-(\d{5})\.gguf$)");
    std::smatch sm;
    if (count && *count > 1) {
        if (!std::regex_match(path, sm, split_re))
            throw GgufError(path + ": split.count is " + std::to_string(*count) + " but the name does not end in -0000N-of-0000M.gguf");
        auto no = m.files[0].get_int("split.no");
        if (!no || *no != 0)
            throw GgufError(path + ": not the first split (split.no = " + (no ? std::to_string(*no) : std::string("missing")) +
                            "); pass the -00001-of- file");
        if (*count > 9999) throw GgufError(path + ": split.count " + std::to_string(*count) + " is absurd");
        for (int64_t i = 1; i < *count; ++i) {
            char suffix[32];
            std::snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", static_cast<int>(i + 1), static_cast<int>(*count));
            std::string sibling = sm[1].str() + suffix;
            m.files.push_back(read_gguf_header(sibling));
            auto sno = m.files.back().get_int("split.no");
            if (!sno || *sno != i)
                throw GgufError(sibling + ": split.no is " + (sno ? std::to_string(*sno) : std::string("missing")) + ", expected " +
                                std::to_string(i));
        }
    }
    std::unordered_set<std::string> seen;
    for (uint32_t fi = 0; fi < m.files.size(); ++fi) {
        for (auto t : m.files[fi].tensors) {
            if (!seen.insert(t.name).second) throw GgufError(m.files[fi].path + ": tensor '" + t.name + "' appears in two split files");
            t.file_index = fi;
            m.tensors.push_back(std::move(t));
        }
    }
    return m;
}

}  // namespace moe

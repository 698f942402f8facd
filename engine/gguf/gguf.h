// GGUF v2/v3 reader and writer.
//
// Binary layout (little endian):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (each offset aligned, relative to data start)
//   string = u64 length | bytes (no terminator); array = u32 elem_type | u64 count | elems
//
// The reader trusts nothing: every count, length, dimension, type and offset is checked against the bytes
// that remain in the file before it is used; the first bad field is named in a GgufError. Only the header is
// read; tensor data is located (absolute file offsets) but not touched.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/gguf/ggml_types.h"

namespace moe {

// Thrown for any malformed, truncated or unsupported file; what() is one line naming file and field.
struct GgufError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class GgufValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};
const char* value_type_name(GgufValueType t);

// One metadata value. Scalars live in `num`/`str`; arrays of numbers keep their raw little-endian bytes
// (so a copy writes back the exact element type), arrays of strings live in `strs`.
struct GgufValue {
    GgufValueType type = GgufValueType::UINT32;
    GgufValueType elem_type = GgufValueType::UINT8;  // arrays only
    uint64_t count = 0;                              // arrays only
    std::string str;                                 // STRING
    std::vector<std::string> strs;                   // ARRAY of STRING
    std::vector<uint8_t> raw;                        // ARRAY of numbers/bools; scalar numbers (8 bytes max)

    bool is_array() const { return type == GgufValueType::ARRAY; }
    std::optional<int64_t> as_int() const;    // any integer or bool scalar
    std::optional<double> as_double() const;  // any numeric scalar
    std::vector<float> f32_array() const;     // FLOAT32 array (empty otherwise)
    std::vector<int32_t> i32_array() const;   // INT32/UINT32 array (empty otherwise)

    static GgufValue u32(uint32_t v);
    static GgufValue i32(int32_t v);
    static GgufValue u64(uint64_t v);
    static GgufValue f32(float v);
    static GgufValue boolean(bool v);
    static GgufValue string(std::string v);
    static GgufValue string_array(std::vector<std::string> v);
    static GgufValue f32_array_of(const std::vector<float>& v);
    static GgufValue i32_array_of(const std::vector<int32_t>& v);
};

struct GgufTensorInfo {
    std::string name;
    std::vector<uint64_t> ne;  // ne[0] is the fastest-varying (row length)
    uint32_t raw_type = 0;     // ggml type id as stored
    uint64_t offset = 0;       // relative to the data section of its file
    uint64_t nbytes = 0;       // computed from type and ne
    uint32_t file_index = 0;   // which split file holds the data
    uint64_t file_offset = 0;  // absolute offset in that file

    GgmlType type() const { return static_cast<GgmlType>(raw_type); }
    uint64_t n_elements() const;
};

struct GgufFile {
    std::string path;
    uint32_t version = 3;
    uint64_t alignment = 32;
    uint64_t data_offset = 0;  // absolute start of the tensor data section
    uint64_t file_size = 0;
    std::vector<std::pair<std::string, GgufValue>> kv;  // in file order
    std::vector<GgufTensorInfo> tensors;

    const GgufValue* find(const std::string& key) const;
    std::optional<int64_t> get_int(const std::string& key) const;
    std::optional<double> get_double(const std::string& key) const;
    std::optional<std::string> get_string(const std::string& key) const;
};

// A model as one or more split files (`-0000N-of-0000M.gguf`); tensors are merged in file order.
struct GgufModel {
    std::vector<GgufFile> files;
    std::vector<GgufTensorInfo> tensors;                    // from all files, file_index set
    const GgufFile& meta() const { return files.front(); }  // metadata lives in the first split
    const GgufTensorInfo* find_tensor(const std::string& name) const;
    uint64_t total_bytes() const;
};

// Parses a header held in memory (fuzzing, tests). `size_hint` is the file size offsets are checked against.
GgufFile parse_gguf(std::span<const uint8_t> bytes, const std::string& label);
// Reads the header of one file from disk without reading tensor data.
GgufFile read_gguf_header(const std::string& path);
// Reads a model: the given file, and when it is split, every sibling `-0000N-of-0000M.gguf` file.
GgufModel open_gguf_model(const std::string& path);

// Writer: metadata and tensors in the order given; data written with the alignment in `alignment`.
struct GgufTensorData {
    std::string name;
    std::vector<uint64_t> ne;
    GgmlType type;
    std::vector<uint8_t> bytes;  // exactly row_bytes(type, ne[0]) * rows
};
// `data_holes`: every tensor's `bytes` empty, the data region left a hole of the right size (a header-only
// model of any size for the planner's tests; reading its weights gives zeros).
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& kv, const std::vector<GgufTensorData>& tensors,
                uint64_t alignment = 32, bool data_holes = false);

}  // namespace moe

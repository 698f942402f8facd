// GGUF reader/writer: round trip, and hostile input (every truncation, random corruption, absurd counts)
// must give a GgufError naming the problem, never a crash or an out-of-bounds read.
#include <cstring>
#include <fstream>
#include <random>

#include <filesystem>

#include "engine/gguf/gguf.h"
#include "engine/model/model_facts.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::vector<uint8_t> small_file_bytes(const std::string& path) {
    std::vector<GgufTensorData> tensors;
    std::vector<uint8_t> a(64 * 4), b(32 * 2 * 34 / 32 * 2);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i);
    tensors.push_back({"a.weight", {64}, GgmlType::F32, a});
    tensors.push_back({"b.weight", {32, 2}, GgmlType::Q8_0, std::vector<uint8_t>(68)});
    write_gguf(path,
               {{"general.architecture", GgufValue::string("test")},
                {"test.count", GgufValue::u32(7)},
                {"test.list", GgufValue::string_array({"x", "yy", "zzz"})},
                {"test.floats", GgufValue::f32_array_of({1.f, 2.f})}},
               tensors, 64);
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}

TEST(Gguf, RoundTrip) {
    test::TempDir dir;
    auto bytes = small_file_bytes(dir / "m.gguf");
    GgufFile f = read_gguf_header(dir / "m.gguf");
    EXPECT_EQ(f.version, 3u);
    EXPECT_EQ(f.alignment, 64u);
    EXPECT_EQ(f.get_int("test.count"), 7);
    EXPECT_EQ(f.find("test.list")->strs, (std::vector<std::string>{"x", "yy", "zzz"}));
    EXPECT_EQ(f.find("test.floats")->f32_array(), (std::vector<float>{1.f, 2.f}));
    ASSERT_EQ(f.tensors.size(), 2u);
    EXPECT_EQ(f.tensors[1].nbytes, 68u);
    EXPECT_EQ(f.tensors[0].file_offset % 64, 0u);
    EXPECT_EQ(bytes[f.tensors[0].file_offset + 5], 5);
}

TEST(Gguf, EveryTruncationIsACleanError) {
    test::TempDir dir;
    auto bytes = small_file_bytes(dir / "m.gguf");
    // Cuts inside the trailing alignment padding leave every tensor whole; anything shorter must fail.
    GgufFile whole = parse_gguf(bytes, "whole");
    size_t needed = 0;
    for (const auto& t : whole.tensors) needed = std::max<size_t>(needed, t.file_offset + t.nbytes);
    for (size_t n = 0; n < needed; ++n) {
        try {
            parse_gguf(std::span(bytes.data(), n), "cut");
            ADD_FAILURE() << "truncation to " << n << " bytes was accepted";
        } catch (const GgufError& e) { EXPECT_NE(std::string(e.what()).find("cut:"), std::string::npos); }
    }
}

TEST(Gguf, RandomCorruptionNeverCrashes) {
    test::TempDir dir;
    auto good = small_file_bytes(dir / "m.gguf");
    std::mt19937 rng(42);
    int rejected = 0;
    for (int iter = 0; iter < 20000; ++iter) {
        auto bytes = good;
        int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) bytes[rng() % 400 % bytes.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        try {
            GgufFile f = parse_gguf(bytes, "fuzz");
            for (const auto& t : f.tensors) ASSERT_LE(t.file_offset + t.nbytes, bytes.size());
        } catch (const GgufError&) { ++rejected; }
    }
    EXPECT_GT(rejected, 1000);
}

TEST(Gguf, HostileHeadersNameTheField) {
    auto header = [](uint32_t magic, uint32_t version, uint64_t nt, uint64_t nkv) {
        std::vector<uint8_t> b(24);
        std::memcpy(b.data(), &magic, 4);
        std::memcpy(b.data() + 4, &version, 4);
        std::memcpy(b.data() + 8, &nt, 8);
        std::memcpy(b.data() + 16, &nkv, 8);
        return b;
    };
    auto message = [](const std::vector<uint8_t>& b) {
        try {
            parse_gguf(b, "h");
        } catch (const GgufError& e) { return std::string(e.what()); }
        return std::string("accepted");
    };
    EXPECT_NE(message(header(0x12345678, 3, 0, 0)).find("bad magic"), std::string::npos);
    EXPECT_NE(message(header(0x46554747, 9, 0, 0)).find("version 9"), std::string::npos);
    EXPECT_NE(message(header(0x46554747, 3, 1ull << 60, 0)).find("tensor count"), std::string::npos);
    EXPECT_NE(message(header(0x46554747, 3, 0, 1ull << 60)).find("metadata count"), std::string::npos);
}

// One tensor's header in ik_llama.cpp's types: an id no project defines, and a row-interleaved (_R4) matrix whose
// row count is not a whole number of its groups, each refused naming the tensor and both values.
TEST(Gguf, IkTypeIdsAndInterleavedRowCountsAreChecked) {
    auto one_tensor = [](uint32_t type, uint64_t rows, uint64_t cols = 256) {
        std::vector<uint8_t> b;
        auto put = [&](const void* p, size_t n) { b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); };
        const uint32_t magic = 0x46554747, version = 3, n_dims = 2;
        const uint64_t n_tensors = 1, n_kv = 0, name_len = 5, offset = 0;
        put(&magic, 4), put(&version, 4), put(&n_tensors, 8), put(&n_kv, 8);
        put(&name_len, 8), put("w.bin", 5), put(&n_dims, 4), put(&cols, 8), put(&rows, 8), put(&type, 4), put(&offset, 8);
        b.resize(b.size() + 65536);
        return b;
    };
    auto message = [](const std::vector<uint8_t>& b) {
        try {
            parse_gguf(b, "ik.gguf");
        } catch (const GgufError& e) { return std::string(e.what()); }
        return std::string("accepted");
    };
    EXPECT_NE(message(one_tensor(999, 4)).find("tensor 'w.bin': unknown ggml type 999"), std::string::npos) << message(one_tensor(999, 4));
    const std::string r4 = message(one_tensor(static_cast<uint32_t>(GgmlType::IQ4_KS_R4), 6));
    EXPECT_NE(r4.find("tensor 'w.bin': iq4_ks_r4 stores rows in groups of 4 but the tensor has 6 rows per matrix"), std::string::npos) << r4;
    EXPECT_EQ(r4.find('\n'), std::string::npos);
    EXPECT_EQ(message(one_tensor(static_cast<uint32_t>(GgmlType::IQ4_KS_R4), 8)).find("rows per matrix"), std::string::npos);
    // the 1-bit forms compute against activations in blocks of 128: whole 32-weight blocks are not enough
    for (GgmlType t : {GgmlType::IQ1_M_R4, GgmlType::IQ1_S_R4}) {
        const std::string odd = message(one_tensor(static_cast<uint32_t>(t), 4, 96)), name(type_info(t).name);
        EXPECT_NE(odd.find("tensor 'w.bin': row length 96 is not a multiple of 128, which " + name + " needs"), std::string::npos) << odd;
        EXPECT_EQ(message(one_tensor(static_cast<uint32_t>(t), 4, 384)).find("multiple of 128"), std::string::npos);
    }
}

TEST(Gguf, MissingAndNonRegularFiles) {
    EXPECT_THROW(read_gguf_header("/nonexistent/model.gguf"), GgufError);
    EXPECT_THROW(read_gguf_header("/tmp"), GgufError);
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

TEST(Gguf, SplitFilesAreReadTogether) {
    test::TempDir dir;
    auto meta = [](uint16_t no) {
        std::vector<std::pair<std::string, GgufValue>> kv = {{"general.architecture", GgufValue::string("qwen3moe")},
                                                             {"qwen3moe.block_count", GgufValue::u32(1)},
                                                             {"qwen3moe.expert_count", GgufValue::u32(2)},
                                                             {"qwen3moe.expert_used_count", GgufValue::u32(1)}};
        kv.emplace_back("split.count", test::gguf_u16(2));
        kv.emplace_back("split.no", test::gguf_u16(no));
        return kv;
    };
    write_gguf(dir / "m-00001-of-00002.gguf", meta(0), {{"output_norm.weight", {64}, GgmlType::F32, std::vector<uint8_t>(256)}});
    write_gguf(dir / "m-00002-of-00002.gguf", meta(1), {{"blk.0.ffn_up_exps.weight", {32, 4, 2}, GgmlType::Q8_0, std::vector<uint8_t>(34 * 8)}});
    ModelFacts f = read_model_facts(dir / "m-00001-of-00002.gguf");
    EXPECT_EQ(f.files.size(), 2u);
    EXPECT_EQ(f.resident_bytes, 256u);
    EXPECT_EQ(f.expert_bytes, 34u * 8);
    EXPECT_EQ(f.bytes_per_expert(0), 34u * 4);
    GgufModel m = open_gguf_model(dir / "m-00001-of-00002.gguf");
    EXPECT_EQ(m.find_tensor("blk.0.ffn_up_exps.weight")->file_index, 1u);
    // The second split alone is refused with the reason.
    try {
        open_gguf_model(dir / "m-00002-of-00002.gguf");
        FAIL() << "accepted a non-first split";
    } catch (const GgufError& e) { EXPECT_NE(std::string(e.what()).find("first split"), std::string::npos) << e.what(); }
    std::filesystem::remove(dir / "m-00002-of-00002.gguf");
    EXPECT_THROW(open_gguf_model(dir / "m-00001-of-00002.gguf"), GgufError);
}

}  // namespace
}  // namespace moe

// libFuzzer target for the expert store's header and records (a file beside the model that a copy, a full disk
// or another tool can leave damaged): any bytes in place of a valid store's header, and any truncation, must be
// refused with ExpertStoreError or open a store whose records then verify or are reported bad, never crash or
// read outside the file.
// Input: byte 0's bit 0 cuts the file to a fraction of its size (bits 2-7), its bit 1 signs the mutated header
// again (so the checks behind the header checksum see the mutations too); the rest overwrites the store from
// byte 0.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <cstring>
#include <xxhash.h>

#include "engine/gguf/ggml_types.h"
#include "engine/runtime/expert_store.h"

namespace {

// Where the header checksum sits for the fixture's 2 layers x 4 experts: the 64-byte fixed part, a 64-byte
// layout entry per layer, a record checksum per expert.
constexpr size_t kHashAt = 64 + 2 * 64 + 2 * 4 * 8;

struct Fixture {
    std::string dir, gguf, store;
    moe::GgufModel model;
    std::vector<moe::ExpertTensor> tensors;
    std::vector<moe::ExpertLayer> layers;
    std::string valid;  // a store written for the model

    Fixture() {
        char tmpl[] = "/tmp/expert-store-fuzz-XXXXXX";
        dir = ::mkdtemp(tmpl);
        gguf = dir + "/m.gguf";
        store = dir + "/m.gguf.experts";
        // Two MoE layers of four experts, gate/up/down of 64x32 Q8_0 (a layer shape the layout pads and aligns).
        const int64_t n_in = 64, n_out = 32, n_expert = 4;
        std::mt19937 rng(7);
        std::vector<moe::GgufTensorData> data;
        for (int l = 0; l < 2; ++l)
            for (const char* part : {"gate", "up", "down"}) {
                const bool down = std::string(part) == "down";
                moe::GgufTensorData t{"blk." + std::to_string(l) + ".ffn_" + part + "_exps",
                                      {static_cast<uint64_t>(down ? n_out : n_in), static_cast<uint64_t>(down ? n_in : n_out), n_expert},
                                      moe::GgmlType::Q8_0,
                                      {}};
                t.bytes.resize(*moe::row_bytes(t.type, static_cast<int64_t>(t.ne[0])) * t.ne[1] * t.ne[2]);
                for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
                for (size_t i = 0; i < t.bytes.size(); i += 34) t.bytes[i] = 0, t.bytes[i + 1] = 0x3c;  // finite scales
                data.push_back(std::move(t));
            }
        moe::GgufValue arch;
        arch.type = moe::GgufValueType::STRING;
        arch.str = "fuzz";
        moe::write_gguf(gguf, {{"general.architecture", arch}}, data);
        model = moe::open_gguf_model(gguf);
        tensors.reserve(6);
        for (const auto& info : model.tensors) {
            moe::ExpertTensor e;
            e.name = info.name;
            e.type = info.type();
            e.n_in = static_cast<int64_t>(info.ne[0]);
            e.n_out = static_cast<int64_t>(info.ne[1]);
            e.n_expert = static_cast<int64_t>(info.ne[2]);
            e.row_bytes = *moe::row_bytes(e.type, e.n_in);
            e.expert_bytes = e.expert_stride = e.row_bytes * static_cast<size_t>(e.n_out);
            e.file_index = info.file_index;
            e.file_offset = info.file_offset;
            tensors.push_back(e);
        }
        for (int l = 0; l < 2; ++l) layers.push_back({&tensors[l * 3], &tensors[l * 3 + 1], &tensors[l * 3 + 2]});
        moe::write_expert_store(model, layers, n_expert, store, true);
        std::ifstream in(store, std::ios::binary);
        valid.assign(std::istreambuf_iterator<char>(in), {});
        // The checked-in seed is this valid header (regenerate it with this variable set, after a format change).
        if (const char* seed = std::getenv("EXPERT_STORE_FUZZ_WRITE_SEED")) std::ofstream(seed, std::ios::binary) << '\0' << valid.substr(0, 271);
    }
    ~Fixture() { std::filesystem::remove_all(dir); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Fixture fx;
    if (size < 1) return 0;
    std::string bytes = fx.valid;
    const size_t n = std::min(size - 1, bytes.size());
    std::copy(data + 1, data + 1 + n, bytes.begin());
    const bool signed_again = data[0] & 2;
    if (signed_again && bytes.size() >= kHashAt + 8) {
        const uint64_t h = XXH3_64bits(bytes.data(), kHashAt);
        std::memcpy(bytes.data() + kHashAt, &h, 8);
    }
    if (data[0] & 1) bytes.resize(bytes.size() * (data[0] >> 2) / 64);
    {
        std::ofstream out(fx.store, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    try {
        const moe::ExpertStore s(fx.store, fx.model, fx.layers);
        if (s.file_bytes() != bytes.size()) std::abort();
        const moe::VerifyReport v = moe::verify_expert_store(s);
        // The input reaches only the header's 4 KiB: a store that opens has the GGUF's 8 records, and they all
        // verify unless a signed-again header carries other record checksums.
        if (v.records != 8 || (!signed_again && !v.bad.empty())) std::abort();
    } catch (const moe::ExpertStoreError&) {}
    return 0;
}

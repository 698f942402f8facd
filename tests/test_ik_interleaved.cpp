// ik_llama.cpp's row-interleaved forms (IQ2_K_R4 ... IQ5_K_R4, IQ4_KS_R4, IQ5_KS_R4, Q8_0_R8): the layout against
// the base types' decoders (which the ik oracle files check), and the kernels against ik's own matmuls where dumps
// from an ik_llama.cpp build are given (bench/ik-dumps.sh).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/gguf/ggml_types.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"
#include "tests/kernel_cases.h"

namespace moe {
namespace {
namespace fs = std::filesystem;

constexpr GgmlType kInterleaved[] = {GgmlType::IQ2_K_R4,  GgmlType::IQ3_K_R4,  GgmlType::IQ4_K_R4, GgmlType::IQ5_K_R4,
                                     GgmlType::IQ4_KS_R4, GgmlType::IQ5_KS_R4, GgmlType::Q8_0_R8};

// Rows of the base type, repacked as ik's quantize_<type>_r4 does, decode to the base rows' weights: every weight
// of every row, so each field's place in the interleaved block (and the table half, scale and sign bits) is checked
// against the base type's decoder rather than against itself.
TEST(IkInterleaved, RepackedBaseRowsDecodeToTheBaseWeights) {
    for (GgmlType t : kInterleaved) {
        const GgmlType base = interleaved_base(t);
        const int group = ik::row_group(t);
        const int64_t n = 512, rows = 2 * group;
        const size_t rb = *row_bytes(t, n);
        ASSERT_EQ(rb, *row_bytes(base, n)) << type_name(static_cast<uint32_t>(t));
        for (uint64_t seed : {1u, 2u, 3u}) {
            const std::vector<uint8_t> rows_base = kernels::random_weight_rows(base, n, rows, seed * 7919 + static_cast<uint64_t>(t));
            std::vector<uint8_t> packed(rb * rows);
            for (int64_t g = 0; g < rows / group; ++g) ik::repack_rows(t, rows_base.data() + g * group * rb, n, packed.data() + g * group * rb);
            std::vector<float> want(n * rows), got(n * rows);
            for (int64_t r = 0; r < rows; ++r) kernels::dequantize_row(base, rows_base.data() + r * rb, want.data() + r * n, n);
            ik::dequantize_r4_rows(t, packed.data(), got.data(), n, rows);
            int wrong = 0;
            for (size_t i = 0; i < want.size(); ++i) wrong += std::memcmp(&want[i], &got[i], 4) != 0;
            EXPECT_EQ(wrong, 0) << type_name(static_cast<uint32_t>(t)) << " seed " << seed << ": first at " << [&] {
                for (size_t i = 0; i < want.size(); ++i)
                    if (want[i] != got[i]) return std::to_string(i) + " (" + std::to_string(want[i]) + " vs " + std::to_string(got[i]) + ")";
                return std::string("-");
            }();
        }
    }
}

// Dumps of ik_llama.cpp's ggml_mul_mat (bench/ik_dump.c: its quantizer's bytes, the f32 activations and its
// result): the engine's reference and every SIMD table this CPU runs give ik's bits.
TEST(IkInterleaved, KernelsGiveIkBuildsBits) {
    const char* dir = std::getenv("MOESTREAM_IK_PEER_DUMPS");
    if (!dir || !fs::is_directory(dir))
        GTEST_SKIP() << "MOESTREAM_IK_PEER_DUMPS is not a directory of dumps from an ik_llama.cpp build (bench/ik-dumps.sh): not compared";
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().extension() != ".bin") continue;
        std::ifstream f(e.path(), std::ios::binary);
        char magic[8];
        uint32_t hdr[4];
        f.read(magic, 8);
        f.read(reinterpret_cast<char*>(hdr), sizeof hdr);
        ASSERT_TRUE(f && std::memcmp(magic, "IKPEER01", 8) == 0) << e.path();
        const auto t = static_cast<GgmlType>(hdr[0]);
        const int64_t n = hdr[1], rows = hdr[2];
        const int ntok = static_cast<int>(hdr[3]);
        const auto info = type_info(hdr[0]);
        ASSERT_TRUE(info && info->computable) << e.path() << ": type " << hdr[0];
        const size_t rb = *row_bytes(t, n);
        std::vector<uint8_t> w(rb * rows);
        std::vector<float> x(n * ntok), ik_out(rows * ntok);
        f.read(reinterpret_cast<char*>(w.data()), static_cast<std::streamsize>(w.size()));
        f.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(x.size() * 4));
        f.read(reinterpret_cast<char*>(ik_out.data()), static_cast<std::streamsize>(ik_out.size() * 4));
        ASSERT_TRUE(f) << e.path() << ": truncated";
        const size_t ab = kernels::activation_bytes(t, n);
        std::vector<uint8_t> act(ab * ntok);
        for (int k = 0; k < ntok; ++k) kernels::prepare_activations(t, x.data() + k * n, act.data() + k * ab, n);
        const int id = kernels::type_slot(t);
        std::vector<const kernels::KernelTable*> tables = {&kernels::reference_table()};
        for (const test::SimdCase& c : test::simd_cases()) tables.push_back(c.table);
        for (const kernels::KernelTable* table : tables) {
            std::vector<float> got(rows * ntok);
            if (table->tile[id]) table->tile[id](n, w.data(), rb, rows, act.data(), ab, ntok, got.data(), rows);
            else
                for (int k = 0; k < ntok; ++k) table->dot_rows[id](n, w.data(), rb, rows, act.data() + k * ab, got.data() + k * rows);
            int wrong = 0;
            for (size_t i = 0; i < got.size(); ++i) wrong += std::memcmp(&got[i], &ik_out[i], 4) != 0;
            EXPECT_EQ(wrong, 0) << e.path().filename() << " (" << info->name << ", " << ntok << " tokens) " << kernels::isa_name(table->isa)
                                << ": first " << got[0] << " vs ik " << ik_out[0];
        }
        ++files;
    }
    std::printf("[ ik peer  ] %d dumps compared bit for bit\n", files);
    EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace moe

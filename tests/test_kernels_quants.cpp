// The low-bit formats (Q4_1 ... MXFP4, the i-quants, the ternary types): the reference dot products against float
// math on dequantized weights, and every SIMD kernel slot against the reference, bit for bit, on random
// well-formed blocks and on edge blocks (zero and extreme scales, all-zero and all-ones bits, large and
// one-hot activations, odd block counts, row counts off the 8-row groups).
#include <cmath>
#include <cstring>
#include <random>

#include "engine/kernels/blocks.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_decode.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/kernels.h"
#include "tests/kernel_cases.h"
#include "tests/test_support.h"

namespace moe {
namespace {

std::vector<uint8_t> random_row(GgmlType t, size_t n, std::mt19937& rng) { return kernels::random_weight_row(t, n, rng()); }

// Byte offsets of a block's fp16 (or E8M0) scale fields, as laid out in blocks.h.
std::vector<size_t> scale_bytes(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_1:
        case GgmlType::Q5_1:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K: return {0, 1, 2, 3};
        case GgmlType::MXFP4: return {0};
        case GgmlType::Q2_K: return {80, 81, 82, 83};
        case GgmlType::Q3_K: return {108, 109};
        case GgmlType::TQ1_0: return {52, 53};
        case GgmlType::TQ2_0: return {64, 65};
        case GgmlType::IQ1_M: return {49, 51, 53, 55};
        case GgmlType::Q6_K: return {208, 209};
        default: return {0, 1};
    }
}

// Every computable block type (the float types have their own tests in test_kernels.cpp).
std::vector<GgmlType> block_types() {
    std::vector<GgmlType> out;
    for (int slot = 0; slot < kernels::kUsedSlots; ++slot) {
        const auto info = type_info(static_cast<uint32_t>(kernels::slot_type(slot)));
        if (info && info->computable && info->block_elems > 1) out.push_back(kernels::slot_type(slot));
    }
    return out;
}

enum class Edge { None, ZeroScales, HugeScales, AllZeroBits, AllOneBits };

// Overwrites a random row's scales or bits: a zero or a large fp16 super-block scale (MXFP4: the smallest and a
// large exponent), or every other byte 0x00 / 0xFF with the scale fields kept.
void apply_edge(GgmlType t, Edge e, std::vector<uint8_t>& row) {
    if (e == Edge::None) return;
    const TypeInfo info = type_info(t);
    if (info.origin == TypeOrigin::IkLlama) {  // the row scale, or the blocks' f16 d, and the bits around them
        const size_t meta = info.row_meta * info.interleave, d_bytes = ik::block_has_d(t) ? 2 : 0;
        auto each_d = [&](auto fn) {
            for (size_t off = meta; d_bytes && off < row.size(); off += info.block_bytes * info.interleave) fn(off);
        };
        if (e == Edge::AllZeroBits || e == Edge::AllOneBits) {
            std::vector<uint8_t> keep = row;
            std::memset(row.data() + meta, e == Edge::AllZeroBits ? 0x00 : 0xFF, row.size() - meta);
            each_d([&](size_t off) { std::memcpy(row.data() + off, keep.data() + off, 2); });
            return;
        }
        const float f = e == Edge::ZeroScales ? 0.f : 3e4f;
        const uint16_t h = fp32_to_fp16(f);
        for (uint32_t k = 0; k < info.interleave; ++k) {
            if (info.row_meta == 2) std::memcpy(row.data() + 2 * k, &h, 2);
            if (info.row_meta == 4) std::memcpy(row.data() + 4 * k, &f, 4);
            if (info.row_meta == 8) std::memcpy(row.data() + 8 * k, &f, 4);  // (Q8_KV: the f32 scale, then the stored sum)
        }
        each_d([&](size_t off) { std::memcpy(row.data() + off, &h, 2); });
        return;
    }
    if (e == Edge::AllZeroBits || e == Edge::AllOneBits) {
        std::vector<uint8_t> keep = row;
        std::memset(row.data(), e == Edge::AllZeroBits ? 0x00 : 0xFF, row.size());
        // The scale fields keep their random values (the bits of IQ1_M's scale nibbles included).
        for (size_t off = 0; off < row.size(); off += info.block_bytes)
            for (size_t i : scale_bytes(t)) row[off + i] = keep[off + i];
        return;
    }
    const uint16_t h = e == Edge::ZeroScales ? 0 : fp32_to_fp16(30000.f);
    for (size_t off = 0; off < row.size(); off += info.block_bytes) {
        if (t == GgmlType::MXFP4) {
            row[off] = e == Edge::ZeroScales ? 0 : 140;
            continue;
        }
        if (t == GgmlType::IQ1_M) {
            for (int k = 0; k < 4; ++k)
                row[off + 48 + 2 * k + 1] = static_cast<uint8_t>((row[off + 48 + 2 * k + 1] & 0x0F) | (((h >> (4 * k)) & 0xF) << 4));
            continue;
        }
        const size_t at = scale_bytes(t).front();
        std::memcpy(row.data() + off + at, &h, 2);
    }
}

std::vector<size_t> block_lengths(GgmlType t) {
    if (type_info(t).block_elems == 32) return {32, 96, 256, 544, 4096};  // odd block counts: IQ4_NL/MXFP4's tail
    if (type_info(t).block_elems == 64) return {64, 576, 1024, 4032};     // the ternary forms: odd counts of 64 as well
    return {256, 512, 1792, 4096};
}

enum class Act { Random, Large, Zeros, OneHot };
std::vector<float> activations(size_t n, Act f, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        switch (f) {
            case Act::Random: v[i] = nd(rng); break;
            case Act::Large: v[i] = 3e4f * nd(rng); break;
            case Act::Zeros: v[i] = 0.f; break;
            case Act::OneHot: v[i] = i == n / 3 ? -5.f : 0.f; break;
        }
    }
    return v;
}

TEST(QuantKernels, SimdMatchesScalarReference) {
    REQUIRE_SIMD_TABLE();
    std::mt19937 rng(4321);
    int compared = 0;
    for (const test::SimdCase& c : test::simd_cases()) {
        const kernels::KernelTable* t = c.table;
        const kernels::KernelTable& ref = *c.ref;
        for (GgmlType type : block_types()) {
            if (!test::simd_comparable(type)) continue;
            const int id = kernels::type_slot(type);
            const std::pair<const char*, const kernels::DotFn*> slots[] = {
                {"dot", t->dot}, {"batch", t->dot_batch}, {"repacked", t->dot_repacked}, {"repacked-gemm", t->dot_repacked_gemm}};
            const kernels::DotFn* ref_slots[] = {ref.dot, ref.dot_batch, ref.dot_repacked, ref.dot_repacked_gemm};
            for (size_t k = 0; k < 4; ++k) {
                const kernels::DotFn got_fn = slots[k].second[id], want_fn = ref_slots[k][id];
                ASSERT_EQ(got_fn == nullptr, want_fn == nullptr) << c.label << " " << type_name(static_cast<uint32_t>(type)) << " " << slots[k].first;
                if (!got_fn) continue;
                for (Edge e : {Edge::None, Edge::ZeroScales, Edge::HugeScales, Edge::AllZeroBits, Edge::AllOneBits})
                    for (Act act : {Act::Random, Act::Large, Act::Zeros, Act::OneHot})
                        for (size_t n : block_lengths(type)) {
                            std::vector<uint8_t> w = random_row(type, n, rng);
                            apply_edge(type, e, w);
                            const auto x = activations(n, act, rng);
                            std::vector<uint8_t> a(kernels::activation_bytes(type, static_cast<int64_t>(n)));
                            kernels::prepare_activations(type, x.data(), a.data(), static_cast<int64_t>(n));
                            const float want = want_fn(static_cast<int64_t>(n), w.data(), a.data());
                            const float got = got_fn(static_cast<int64_t>(n), w.data(), a.data());
                            EXPECT_TRUE(std::memcmp(&want, &got, 4) == 0 || (std::isnan(want) && std::isnan(got)))
                                << c.label << " " << type_name(static_cast<uint32_t>(type)) << " " << slots[k].first << " n=" << n << " edge "
                                << static_cast<int>(e) << " act " << static_cast<int>(act) << ": " << got << " vs " << want;
                            ++compared;
                        }
            }
        }
    }
    EXPECT_GT(compared, 0) << "no SIMD table on this CPU to compare";
}

// The multi-row entry points equal the per-row kernels for row counts on and off the 8-row groups.
TEST(QuantKernels, DotRowsEqualsDotPerRow) {
    REQUIRE_SIMD_TABLE();
    std::mt19937 rng(99);
    int compared = 0;
    for (const test::SimdCase& c : test::simd_cases()) {
        const kernels::KernelTable* t = c.table;
        for (GgmlType type : block_types()) {
            if (!test::simd_comparable(type) || type_info(type).interleave > 1) continue;  // (InterleavedRows below)
            const int id = kernels::type_slot(type);
            for (auto [rows_fn, dot_fn] : {std::pair{t->dot_rows[id], t->dot[id]}, std::pair{t->dot_rows_repacked[id], t->dot_repacked[id]},
                                           std::pair{t->dot_rows_repacked_gemm[id], t->dot_repacked_gemm[id]}}) {
                if (!rows_fn) continue;
                for (int64_t rows : {1, 3, 8, 13, 16, 23}) {
                    const size_t n = rows % 2 ? 512 : 1024, rb = *row_bytes(type, n);  // expert rows are a few blocks
                    std::vector<uint8_t> w;
                    for (int64_t r = 0; r < rows; ++r) {
                        auto row = random_row(type, n, rng);
                        apply_edge(type, static_cast<Edge>(r % 5), row);
                        w.insert(w.end(), row.begin(), row.end());
                    }
                    const auto x = activations(n, rows == 16 ? Act::Large : rows == 13 ? Act::OneHot : Act::Random, rng);
                    std::vector<uint8_t> a(kernels::activation_bytes(type, static_cast<int64_t>(n)));
                    kernels::prepare_activations(type, x.data(), a.data(), static_cast<int64_t>(n));
                    std::vector<float> out(static_cast<size_t>(rows));
                    rows_fn(static_cast<int64_t>(n), w.data(), rb, rows, a.data(), out.data());
                    for (int64_t r = 0; r < rows; ++r) {
                        const float want = dot_fn(static_cast<int64_t>(n), w.data() + r * rb, a.data());
                        EXPECT_TRUE(std::memcmp(&want, &out[r], 4) == 0 || (std::isnan(want) && std::isnan(out[r])))
                            << c.label << " " << type_name(static_cast<uint32_t>(type)) << " row " << r << " of " << rows << ": " << out[r] << " vs "
                            << want;
                    }
                    ++compared;
                }
            }
        }
    }
    EXPECT_GT(compared, 0);
}

// Tile kernels (rows x tokens) give every (row, token) the bits of the dot they tile, at tile edges too: rows and
// tokens that are not multiples of the tile, and token counts past one tile (from 8 tokens the i-quants run
// through decoded panels: iquant_panels.h).
TEST(QuantKernels, TileEqualsDotPerPair) {
    REQUIRE_SIMD_TABLE();
    std::mt19937 rng(31);
    int compared = 0;
    for (kernels::Flavor flavor : {kernels::Flavor::Avx2, kernels::Flavor::Avx512}) {
        for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
            const kernels::KernelTable* t = kernels::table_for(isa, flavor);
            if (!t) continue;
            for (int id = 0; id < kernels::kUsedSlots; ++id) {
                if (!test::simd_comparable(kernels::slot_type(id))) continue;
                const auto ti = type_info(static_cast<uint32_t>(kernels::slot_type(id)));
                if (ti && ti->interleave > 1) continue;  // no one-row dot (InterleavedRows below)
                for (auto [tile_fn, dot_fn] :
                     {std::pair{t->tile[id], t->dot[id]}, std::pair{t->tile_repacked[id], t->dot_repacked[id]},
                      std::pair{t->tile_repacked_gemm[id], t->dot_repacked_gemm[id]}, std::pair{t->tile_batch[id], t->dot_batch[id]},
                      std::pair{t->tile_converted[id], t->dot_converted[id]}}) {
                    if (!tile_fn) continue;
                    const GgmlType type = kernels::slot_type(id);
                    // Float weights also at a length with a tail past the orders' vector steps, 32-weight blocks at an
                    // odd count of them (past the 64-value steps).
                    const uint32_t block = type_info(type).block_elems;
                    for (size_t n : block == 1    ? std::vector<size_t>{512, 203}
                                    : block == 32 ? std::vector<size_t>{512, 96}
                                                  : std::vector<size_t>{512}) {
                        const size_t rb = *row_bytes(type, n), ab = kernels::activation_bytes(type, static_cast<int64_t>(n));
                        for (int64_t rows : {1, 7, 8, 19, 27}) {  // 27: a group of sixteen, one of eight, three single rows
                            std::vector<uint8_t> w;
                            for (int64_t r = 0; r < rows; ++r) {
                                auto row = random_row(type, n, rng);
                                apply_edge(type, static_cast<Edge>(r % 5), row);  // rows of the same panel with edge blocks
                                w.insert(w.end(), row.begin(), row.end());
                            }
                            for (int n_tok : {1, 2, 3, 4, 5, 9, 11, 14, 15, 18}) {  // 14, 15: passes of 8 + 6, 8 + 7
                                std::vector<uint8_t> a(ab * static_cast<size_t>(n_tok));
                                for (int k = 0; k < n_tok; ++k) {
                                    const auto x = activations(n, k == 2 ? Act::Zeros : Act::Random, rng);
                                    kernels::prepare_activations(type, x.data(), a.data() + k * ab, static_cast<int64_t>(n));
                                }
                                const int64_t stride = rows + 3;  // outputs of one token apart by more than `rows`
                                std::vector<float> out(static_cast<size_t>(stride * n_tok), -1.f);
                                tile_fn(static_cast<int64_t>(n), w.data(), rb, rows, a.data(), ab, n_tok, out.data(), stride);
                                for (int k = 0; k < n_tok; ++k) {
                                    for (int64_t r = 0; r < rows; ++r) {
                                        const float want = dot_fn(static_cast<int64_t>(n), w.data() + r * rb, a.data() + k * ab),
                                                    got = out[k * stride + r];
                                        ASSERT_TRUE(std::memcmp(&want, &got, 4) == 0 || (std::isnan(want) && std::isnan(got)))
                                            << kernels::isa_name(isa) << " " << type_name(static_cast<uint32_t>(type)) << " row " << r << " of "
                                            << rows << ", token " << k << " of " << n_tok << ": " << got << " vs " << want;
                                    }
                                    for (int64_t r = rows; r < stride; ++r) ASSERT_EQ(out[k * stride + r], -1.f) << "wrote past the rows";
                                }
                                ++compared;
                            }
                        }
                    }
                }
            }
        }
    }
    EXPECT_GT(compared, 0);
}

// IQ1_BN's trits come from a byte times a power of three modulo 256 (three 16-bit multiplies in the SIMD
// kernels): a row whose blocks put every byte value at every one of a block's 13 positions, through the one-row
// dot, the rows entry and a tile, equals the reference (a wrong digit moves the sum by an activation).
TEST(QuantKernels, Iq1BnEveryByteValueAtEveryPosition) {
    REQUIRE_SIMD_TABLE();
    constexpr int64_t kBlocks = 256, n = 64 * kBlocks;
    const size_t rb = *row_bytes(GgmlType::IQ1_BN, n), ab = kernels::activation_bytes(GgmlType::IQ1_BN, n);
    std::vector<uint8_t> w(rb);
    const uint16_t one = fp32_to_fp16(1.f);
    std::memcpy(w.data(), &one, 2);
    for (int64_t b = 0; b < kBlocks; ++b)
        for (int k = 0; k < 13; ++k) w[static_cast<size_t>(2 + 13 * b + k)] = static_cast<uint8_t>(b + 7 * k);
    std::mt19937 rng(17);
    constexpr int kTokens = 3;
    std::vector<uint8_t> a(ab * kTokens);
    for (int t = 0; t < kTokens; ++t) kernels::prepare_activations(GgmlType::IQ1_BN, activations(n, Act::Random, rng).data(), a.data() + t * ab, n);
    const int id = kernels::type_slot(GgmlType::IQ1_BN);
    for (const test::SimdCase& c : test::simd_cases()) {
        for (int t = 0; t < kTokens; ++t) {
            const float want = c.ref->dot[id](n, w.data(), a.data() + t * ab);
            float got = c.table->dot[id](n, w.data(), a.data() + t * ab), rows = 0.f;
            EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << c.label << " dot, token " << t << ": " << got << " vs " << want;
            c.table->dot_rows[id](n, w.data(), rb, 1, a.data() + t * ab, &rows);
            EXPECT_EQ(std::memcmp(&want, &rows, 4), 0) << c.label << " rows, token " << t << ": " << rows << " vs " << want;
        }
        std::vector<float> tile(kTokens);
        c.table->tile[id](n, w.data(), rb, 1, a.data(), ab, kTokens, tile.data(), 1);
        for (int t = 0; t < kTokens; ++t) {
            const float want = c.ref->dot[id](n, w.data(), a.data() + t * ab);
            EXPECT_EQ(std::memcmp(&want, &tile[t], 4), 0) << c.label << " tile, token " << t << ": " << tile[t] << " vs " << want;
        }
    }
}

// IQ4_NL's three llama.cpp orders (vec_dot's two accumulators, the repacked single float, llamafile's GEMM) are
// distinct, else the slots would be pointless.
TEST(QuantKernels, Iq4nlOrdersAreDistinct) {
    std::mt19937 rng(7);
    const kernels::KernelTable& ref = kernels::reference_table();
    const int id = static_cast<int>(GgmlType::IQ4_NL);
    int batch_differs = 0, repacked_differs = 0;
    for (int rep = 0; rep < 50; ++rep) {
        auto w = random_row(GgmlType::IQ4_NL, 4096, rng);
        const auto x = activations(4096, Act::Random, rng);
        std::vector<uint8_t> a(kernels::activation_bytes(GgmlType::IQ4_NL, 4096));
        kernels::prepare_activations(GgmlType::IQ4_NL, x.data(), a.data(), 4096);
        const float vec = ref.dot[id](4096, w.data(), a.data());
        batch_differs += ref.dot_batch[id](4096, w.data(), a.data()) != vec;
        repacked_differs += ref.dot_repacked[id](4096, w.data(), a.data()) != vec;
    }
    EXPECT_GT(batch_differs, 0);
    EXPECT_GT(repacked_differs, 0);
}
// Whether ik's kernel for a table type with unsigned values (IQ4_KSS, IQ5_KS, ...) saturates some pair sum
// (maddubs) of this row and these activations.
bool pairs_saturate(GgmlType t, const uint8_t* w, const uint8_t* act, size_t n) {
    if (!ik::is_table_type(t) || !ik::table_shape(t).unsigned_values) return false;
    const auto* y = reinterpret_cast<const ik::BlockQ8K*>(act);
    const uint8_t* blocks = w + ik::row_scale_bytes(t);
    ik::TableBlock b;
    for (size_t i = 0; i < n / QK_K; ++i) {
        ik::decode_table_block(t, blocks + i * type_info(t).block_bytes, b);
        for (int e = 0; e < QK_K; e += 2)
            if (std::abs(b.kernel[e] * y[i].qs[e] + b.kernel[e + 1] * y[i].qs[e + 1]) > 32767) return true;
    }
    return false;
}

// Every computable type's reference dot against the float sum of its dequantized weights times the dequantized
// activations: only float rounding may separate them (the integer products are exact), so a wrong element
// order, sign or scale in either shows at once.
TEST(Kernels, ReferenceDotEqualsDequantizedFloatSum) {
    std::mt19937 rng(2026);
    int saturated = 0;
    for (int id = 0; id < kernels::kUsedSlots; ++id) {
        const auto t = kernels::slot_type(id);
        const auto info = type_info(static_cast<uint32_t>(t));
        if (!info || !info->computable || info->interleave > 1) continue;
        const size_t n = 1024;
        int compared = 0;
        for (int rep = 0; rep < 8; ++rep) {
            std::vector<uint8_t> w = random_row(t, n, rng);
            std::vector<float> x(n), wd(n), ad(n);
            std::normal_distribution<float> nd;
            for (auto& v : x) v = nd(rng);
            std::vector<uint8_t> act(kernels::activation_bytes(t, n));
            kernels::prepare_activations(t, x.data(), act.data(), n);
            ik::dequantize_for_matmul(t, w.data(), wd.data(), n);  // llama.cpp's types: dequantize_row
            const GgmlType at = kernels::activation_type(t);
            if (at == GgmlType::Q8_1) {  // Q8_1 and Q8_K are activation-only: dequantized here
                for (size_t b = 0; b < n / 32; ++b) {
                    const auto& blk = reinterpret_cast<const BlockQ8_1*>(act.data())[b];
                    for (int j = 0; j < 32; ++j) ad[b * 32 + j] = fp16_to_fp32(blk.d) * blk.qs[j];
                }
            } else if (at == GgmlType::Q8_K) {
                for (size_t b = 0; b < n / QK_K; ++b) {
                    const auto& blk = reinterpret_cast<const BlockQ8_K*>(act.data())[b];
                    for (int j = 0; j < QK_K; ++j) ad[b * QK_K + j] = blk.d * blk.qs[j];
                }
            } else if (at == GgmlType::IK_Q8_2_X4) {  // groups of four 32-value blocks (bf16 scales), then single blocks
                for (size_t b = 0; b < n / 32; ++b) {
                    const bool grouped = b < 4 * (n / 128);
                    const uint8_t* p = act.data() + (grouped ? 144 * (b / 4) : 36 * b);
                    uint16_t d;
                    std::memcpy(&d, p + (grouped ? 2 * (b % 4) : 0), 2);
                    const int8_t* qs = reinterpret_cast<const int8_t*>(p + (grouped ? 16 + 32 * (b % 4) : 4));
                    for (int j = 0; j < 32; ++j) ad[b * 32 + j] = bf16_to_fp32(d) * qs[j];
                }
            } else if (at == GgmlType::IK_Q8_K) {
                for (size_t b = 0; b < n / QK_K; ++b) {
                    const auto& blk = reinterpret_cast<const ik::BlockQ8K*>(act.data())[b];
                    for (int j = 0; j < QK_K; ++j) ad[b * QK_K + j] = blk.d * blk.qs[j];
                }
            } else {
                kernels::dequantize_row(at, act.data(), ad.data(), n);
            }
            double want = 0, mag = 0;
            for (size_t i = 0; i < n; ++i) {
                want += static_cast<double>(wd[i]) * ad[i];
                mag += std::fabs(static_cast<double>(wd[i]) * ad[i]);
            }
            if (pairs_saturate(t, w.data(), act.data(), n)) {
                ++saturated;  // ik's kernel saturates a pair sum (as ik does): no longer the float sum
                continue;
            }
            const kernels::KernelTable& ref = kernels::reference_table();
            for (kernels::DotFn f : {ref.dot[id], ref.dot_batch[id], ref.dot_repacked[id], ref.dot_repacked_gemm[id]}) {
                if (!f) continue;
                const double got = f(static_cast<int64_t>(n), w.data(), act.data());
                EXPECT_NEAR(got, want, 1e-5 * mag + 1e-6) << type_name(static_cast<uint32_t>(t)) << " rep " << rep;
            }
            ++compared;
        }
        EXPECT_GT(compared, 0) << type_name(static_cast<uint32_t>(t)) << ": every row saturated";
    }
    std::printf("[ kernels  ] %d rows left out where ik's kernel saturates a pair sum\n", saturated);
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// ik's row-interleaved types (a row exists only in its group of four or eight): the reference rows kernel against the float
// sum of the dequantized rows; every SIMD rows and tile kernel against the reference, bit for bit, for row
// ranges starting mid-tensor and token counts on and off the tiles.
TEST(QuantKernels, InterleavedRowsMatchFloatSumAndReference) {
    std::mt19937 rng(404);
    int compared = 0;
    std::vector<GgmlType> types = block_types();
    types.push_back(GgmlType::BF16_R16);  // (a float form: blocks of one value)
    for (GgmlType t : types) {
        if (type_info(t).interleave == 1) continue;
        const int id = kernels::type_slot(t);
        // Against Q8_2_X4 activations (groups of four 32-blocks, then single ones) also at 160: a group and one block
        // after it, which the kernels take apart
        const std::vector<size_t> lengths = kernels::activation_type(t) == GgmlType::IK_Q8_2_X4 ? std::vector<size_t>{512, 160}
                                                                                                : std::vector<size_t>{512};
        for (size_t n : lengths) {
            // (BF16_R16: six groups, so that the native kernel's passes of four and two groups run beside single ones)
            const size_t group = type_info(t).interleave, rows = (t == GgmlType::BF16_R16 ? 6 : 3) * group, rb = *row_bytes(t, n);
            auto w = kernels::random_weight_rows(t, n, rows, rng());
            if (t == GgmlType::BF16_R16)  // subnormal weights, which VDPBF16PS reads as zero
                for (size_t i = 0; i < w.size(); i += 14) w[i] = 0x01, w[i + 1] = 0x00;
            std::vector<float> wd(n * rows);
            ik::dequantize_r4_rows(t, w.data(), wd.data(), static_cast<int64_t>(n), static_cast<int64_t>(rows));
            const size_t ab = kernels::activation_bytes(t, static_cast<int64_t>(n));
            const int n_tok = 21;  // a pass of sixteen tokens (or two of eight) and a narrower one
            std::vector<uint8_t> act(ab * n_tok);
            std::vector<std::vector<float>> x(n_tok, std::vector<float>(n));
            std::normal_distribution<float> nd;
            for (int k = 0; k < n_tok; ++k) {
                // token 1: for BF16_R16 products and sums near and below FLT_MIN, which VDPBF16PS rounds once and flushes;
                // for the 8-bit activations (Q8_K, Q8_K32, Q8_K128, Q8_2_X4, Q8_KV, Q8_K16) a row so small that its quantizer's
                // inverse scale overflows (zeros)
                const float tiny = k != 1 ? 1.f : t == GgmlType::BF16_R16 ? 3e-38f : 1e-38f;
                for (auto& v : x[k]) v = nd(rng) * tiny;
                kernels::prepare_activations(t, x[k].data(), act.data() + k * ab, static_cast<int64_t>(n));
            }
            const kernels::KernelTable& ref = kernels::reference_table();
            ASSERT_TRUE(ref.dot_rows[id]) << type_name(static_cast<uint32_t>(t));
            std::vector<float> want(rows * n_tok);
            for (int k = 0; k < n_tok; ++k)
                ref.dot_rows[id](static_cast<int64_t>(n), w.data(), rb, static_cast<int64_t>(rows), act.data() + k * ab, &want[k * rows]);
            for (int k = 0; k < n_tok; ++k)
                for (size_t r = 0; r < rows; ++r) {  // the activations as the kernel sees them: quantized, so compare loosely
                    double sum = 0, mag = 0;
                    for (size_t j = 0; j < n; ++j)
                        sum += static_cast<double>(wd[r * n + j]) * x[k][j], mag += std::fabs(static_cast<double>(wd[r * n + j]) * x[k][j]);
                    EXPECT_NEAR(want[k * rows + r], sum, 0.02 * mag + 1e-4) << type_name(static_cast<uint32_t>(t)) << " row " << r;
                }
            ++compared;  // the reference holds on every CPU; the SIMD tables below exist only where this CPU runs them
            for (const test::SimdCase& c : test::simd_cases()) {
                std::vector<float> got(rows * n_tok, -1.f);
                for (int k = 0; k < n_tok; ++k)  // all groups but the first on their own: a range starting at the second group
                    c.table->dot_rows[id](static_cast<int64_t>(n), w.data() + group * rb, rb, static_cast<int64_t>(rows - group), act.data() + k * ab,
                                          &got[k * rows + group]);
                for (int k = 0; k < n_tok; ++k)
                    for (size_t r = group; r < rows; ++r)
                        EXPECT_EQ(got[k * rows + r], want[k * rows + r]) << c.label << " " << type_name(static_cast<uint32_t>(t));
                if (ref.dot_rows_batch[id]) {  // the batch order (Q4_K_R4, Q6_K_R4): rows and tiles against the reference's
                    std::vector<float> want_b(rows * n_tok), got_b(rows * n_tok, -1.f), tiled_b(rows * n_tok, -1.f);
                    for (int k = 0; k < n_tok; ++k) {
                        ref.dot_rows_batch[id](static_cast<int64_t>(n), w.data(), rb, static_cast<int64_t>(rows), act.data() + k * ab,
                                               &want_b[k * rows]);
                        c.table->dot_rows_batch[id](static_cast<int64_t>(n), w.data(), rb, static_cast<int64_t>(rows), act.data() + k * ab,
                                                    &got_b[k * rows]);
                    }
                    ASSERT_TRUE(c.table->tile_batch[id]) << c.label << " " << type_name(static_cast<uint32_t>(t));
                    c.table->tile_batch[id](static_cast<int64_t>(n), w.data(), rb, static_cast<int64_t>(rows), act.data(), ab, n_tok, tiled_b.data(),
                                            static_cast<int64_t>(rows));
                    EXPECT_EQ(got_b, want_b) << c.label << " batch rows " << type_name(static_cast<uint32_t>(t));
                    EXPECT_EQ(tiled_b, want_b) << c.label << " batch tile " << type_name(static_cast<uint32_t>(t));
                    int differ = 0;  // the two orders must really differ somewhere, or the test compares one kernel twice
                    for (size_t i = 0; i < want_b.size(); ++i) differ += want_b[i] != want[i];
                    EXPECT_GT(differ, 0) << type_name(static_cast<uint32_t>(t));
                }
                if (c.table->tile[id])
                    for (int tok : {n_tok, 13, 3}) {
                        std::vector<float> tiled(rows * n_tok, -1.f);
                        c.table->tile[id](static_cast<int64_t>(n), w.data(), rb, static_cast<int64_t>(rows), act.data(), ab, tok, tiled.data(),
                                          static_cast<int64_t>(rows));
                        for (size_t i = 0; i < rows * n_tok; ++i)
                            EXPECT_EQ(tiled[i], i < rows * tok ? want[i] : -1.f)
                                << c.label << " tile of " << tok << " tokens " << type_name(static_cast<uint32_t>(t)) << " at " << i;
                    }
            }
        }
    }
    EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace moe

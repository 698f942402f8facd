// ik_llama.cpp's repack_<type> (iqk_quantize.cpp): a group of a base type's rows into its row-interleaved form, as
// ik's quantize_<type>_r4 writes it (quantize the rows as the base type, then repack). The engine reads the
// interleaved forms in their own layout; this direction is for the tests, which check the decoders against the
// base types' and run interleaved files made from base-type ones.
#include <cstring>
#include <stdexcept>

#include "engine/kernels/blocks.h"
#include "engine/kernels/ik/ik_blocks.h"
#include "engine/kernels/ik/ik_r4_layout.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/iq_tables.h"

namespace moe::ik {
namespace {

void put(uint8_t* bytes, r4::BitPos p, int value) { bytes[p.byte] = static_cast<uint8_t>(bytes[p.byte] | value << p.shift); }

// The base block's 4-bit (IQ4_K / IQ4_KS / IQ5_K / IQ5_KS) quant of weight t in sub-block ib, and the fifth bit.
int base_nibble(const uint8_t* qs, int ib, int t, bool five) {
    if (!five) return t < 16 ? qs[16 * ib + t] & 0xF : qs[16 * ib + t - 16] >> 4;
    return ib % 2 ? qs[32 * (ib / 2) + t] >> 4 : qs[32 * (ib / 2) + t] & 0xF;
}
int base_fifth(const uint8_t* qh, int ib, int t) { return (qh[t] >> (2 * (ib / 2) + ib % 2)) & 1; }

// IQ4_K / IQ5_K's 6-bit scale code of half h of sub-block ib.
int k6_scale(const uint8_t* scales_h, const uint8_t* scales_l, int ib, int h) {
    const int sh = scales_h[ib / 2] >> (4 * (ib % 2));
    return (h ? scales_l[ib] >> 4 : scales_l[ib] & 0xF) | ((sh >> (2 * h)) & 3) << 4;
}

}  // namespace

void repack_rows(GgmlType t, const uint8_t* base_rows, int64_t n, uint8_t* out) {
    using namespace r4;
    if (t == GgmlType::IQ2_BN_R4) return repack_iq2_bn_rows(base_rows, n, out);
    if (t == GgmlType::Q8_KV_R8 || t == GgmlType::MXFP4_R8 || t == GgmlType::BF16_R16) return repack_wide_rows(t, base_rows, n, out);
    const int rg = row_group(t);
    const size_t rb = *row_bytes(t, static_cast<uint64_t>(n));
    std::memset(out, 0, rb * rg);
    if (t == GgmlType::IQ4_XS_R8) {
        for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
            auto& o = reinterpret_cast<BlockIQ4_XS_R8*>(out)[ibl];
            for (int k = 0; k < 8; ++k) {
                const auto& x = reinterpret_cast<const BlockIQ4_XS*>(base_rows + k * rb)[ibl];
                o.d[k] = x.d;
                for (int ib = 0; ib < 8; ++ib) {
                    const int ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((x.scales_h >> (2 * ib)) & 3) << 4;
                    const int code = iq4_xs_r8_code(ib, k);
                    o.scales_l[code % 32] = static_cast<uint8_t>(o.scales_l[code % 32] | (ls & 0xF) << (4 * (code / 32)));
                    o.scales_h[code % 16] = static_cast<uint8_t>(o.scales_h[code % 16] | (ls >> 4) << (2 * (code / 16)));
                    for (int e = 0; e < 32; ++e) put(o.qs, iq4_xs_r8_nibble(ib, k, e), (x.qs[16 * ib + e % 16] >> (4 * (e / 16))) & 0xF);
                }
            }
        }
        return;
    }
    if (t == GgmlType::Q4_0_R8 || t == GgmlType::Q5_0_R4 || t == GgmlType::Q6_0_R4 || t == GgmlType::IQ4_NL_R4) {
        const size_t base_block = type_info(t).block_bytes, block = base_block * rg;
        for (int64_t b = 0; b < n / 32; ++b)
            for (int k = 0; k < rg; ++k) {
                const uint8_t* x = base_rows + k * rb + b * base_block;
                uint8_t* o = out + b * block;
                std::memcpy(o + 2 * k, x, 2);  // d
                int L[32];
                for (int j = 0; j < 16; ++j) {
                    const uint8_t* qs = x + (t == GgmlType::Q5_0_R4 ? 6 : t == GgmlType::Q6_0_R4 ? 10 : 2);
                    L[j] = qs[j] & 0xF, L[j + 16] = qs[j] >> 4;
                    if (t == GgmlType::Q5_0_R4) {
                        uint32_t qh;
                        std::memcpy(&qh, x + 2, 4);
                        L[j] |= ((qh >> j) & 1) << 4, L[j + 16] |= ((qh >> (j + 16)) & 1) << 4;
                    } else if (t == GgmlType::Q6_0_R4) {
                        const int h = x[2 + j % 8] >> (4 * (j / 8));
                        L[j] |= (h & 3) << 4, L[j + 16] |= ((h >> 2) & 3) << 4;
                    }
                }
                for (int e = 0; e < 32; ++e) {
                    if (t == GgmlType::Q4_0_R8) {
                        put(o + 16, q4_0_r8_nibble(k, e), L[e]);
                        continue;
                    }
                    uint8_t* qs = o + (t == GgmlType::Q5_0_R4 ? 24 : t == GgmlType::Q6_0_R4 ? 40 : 8);
                    put(qs, nibble(0, k, e), L[e] & 0xF);
                    if (t == GgmlType::Q5_0_R4) put(o + 8, q5_0_r4_high(k, e), L[e] >> 4);
                    if (t == GgmlType::Q6_0_R4) put(o + 8, q6_0_r4_high(k, e), L[e] >> 4);
                }
            }
        return;
    }
    if (t == GgmlType::Q8_0_R8) {
        for (int64_t b = 0; b < n / 32; ++b) {
            auto& o = reinterpret_cast<BlockQ8_0_R8*>(out)[b];
            for (int k = 0; k < 8; ++k) {
                const auto& x = reinterpret_cast<const BlockQ8_0*>(base_rows + k * rb)[b];
                o.d[k] = x.d;
                for (int e = 0; e < 32; ++e) o.qs[q8_0_r8_index(k, e)] = x.qs[e];
            }
        }
        return;
    }
    if (t == GgmlType::IQ2_XXS_R4 || t == GgmlType::IQ2_XS_R4 || t == GgmlType::IQ3_XXS_R4 || t == GgmlType::IQ2_S_R4 || t == GgmlType::IQ3_S_R4) {
        // The sign indices become the prefix XOR of their eight sign bits (seven stored), the scale bits go beside them.
        auto scrambled = [](int s) {
            const int bits = iq::kSignsIq2xs[s];
            int t7 = 0, x = 0;
            for (int j = 0; j < 7; ++j) x ^= bits >> j & 1, t7 |= x << j;
            return t7;
        };
        const size_t bb = type_info(t).block_bytes;
        for (int64_t ibl = 0; ibl < n / QK_K; ++ibl)
            for (int k = 0; k < 4; ++k) {
                const uint8_t* x = base_rows + k * rb + ibl * bb;
                uint8_t* o = out + ibl * interleaved_block_bytes(t);
                std::memcpy(o + 2 * k, x, 2);  // the row's d
                for (int ib = 0; ib < 8; ++ib) {
                    if (t == GgmlType::IQ2_XXS_R4 || t == GgmlType::IQ3_XXS_R4) {
                        uint32_t aux;
                        std::memcpy(&aux, t == GgmlType::IQ2_XXS_R4 ? x + 2 + 8 * ib + 4 : x + 66 + 4 * ib, 4);
                        for (int i = 0; i < 4; ++i)
                            o[8 + 16 * ib + 4 * k + i] = static_cast<uint8_t>(scrambled((aux >> (7 * i)) & 127) << 1 | ((aux >> (28 + i)) & 1));
                        if (t == GgmlType::IQ2_XXS_R4)
                            for (int i = 0; i < 4; ++i) o[136 + 16 * ib + 4 * k + i] = x[2 + 8 * ib + i];
                        else
                            for (int i = 0; i < 8; ++i) o[136 + 32 * ib + 8 * k + i] = x[2 + 8 * ib + i];
                    } else if (t == GgmlType::IQ2_XS_R4) {
                        for (int i = 0; i < 4; ++i) {
                            uint16_t v;
                            std::memcpy(&v, x + 2 + 2 * (4 * ib + i), 2);
                            v = static_cast<uint16_t>((v & 511) | scrambled(v >> 9) << 9);
                            std::memcpy(o + 8 + 2 * (16 * ib + 4 * k + i), &v, 2);
                        }
                        o[264 + 4 * ib + k] = x[66 + ib];
                    } else if (t == GgmlType::IQ2_S_R4) {
                        for (int i = 0; i < 4; ++i) o[8 + 16 * ib + 4 * k + i] = x[2 + 4 * ib + i], o[168 + 16 * ib + 4 * k + i] = x[34 + 4 * ib + i];
                        o[136 + 4 * ib + k] = x[66 + ib];
                        o[296 + 4 * ib + k] = x[74 + ib];
                    } else {  // IQ3_S_R4: 4-groups m reordered, each weight 4b + j's sign to bit b of byte j, nibble scales
                        for (int m = 0; m < 8; ++m) o[8 + 32 * ib + 8 * (m % 4) + 4 * (m / 4) + k] = x[2 + 8 * ib + m];
                        o[264 + 4 * ib + k] = x[66 + ib];
                        for (int e = 0; e < 32; ++e)
                            o[296 + 16 * ib + 4 * k + e % 4] |= static_cast<uint8_t>(((x[74 + 4 * ib + e / 8] >> (e % 8)) & 1) << (e / 4));
                        const int n_code = 4 * ib + k;
                        o[424 + n_code % 16] |= static_cast<uint8_t>(((x[106 + ib / 2] >> (4 * (ib % 2))) & 15) << (4 * (n_code / 16)));
                    }
                }
            }
        return;
    }
    if (t == GgmlType::Q2_K_R4 || t == GgmlType::Q3_K_R4) {
        for (int64_t ibl = 0; ibl < n / QK_K; ++ibl)
            for (int k = 0; k < 4; ++k) {
                const uint8_t* x = base_rows + k * rb + ibl * type_info(t).block_bytes;
                uint8_t* block = out + ibl * interleaved_block_bytes(t);
                if (t == GgmlType::Q2_K_R4) {
                    const auto& b = *reinterpret_cast<const BlockQ2_K*>(x);
                    auto& r = *reinterpret_cast<BlockQ2_K_R4*>(block);
                    r.d[k] = b.d, r.d[4 + k] = b.dmin;
                    for (int j = 0; j < 16; ++j) r.scales[4 * j + k] = b.scales[j];  // 16-weight block j = 2 ib + h
                    for (int ib = 0; ib < 8; ++ib)
                        for (int e = 0; e < 32; ++e) put(r.qs, two_bits(ib, k, e), (b.qs[32 * (ib / 4) + e] >> (2 * (ib % 4))) & 3);
                    continue;
                }
                const auto& b = *reinterpret_cast<const BlockQ3_K*>(x);
                auto& r = *reinterpret_cast<BlockQ3_K_R4*>(block);
                r.d[k] = b.d;
                for (int j = 0; j < 16; ++j) {  // Q3_K's 6-bit scale of 16-weight block j = 2 ib + h
                    const int lo = j < 8 ? b.scales[j] & 0xF : b.scales[j - 8] >> 4;
                    const int s = lo | ((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4, code = scale_code(j / 2, k, j % 2);
                    put(r.scales_l, scale_nibble(code), s & 0xF);
                    put(r.scales_h, scale_high(code), s >> 4);
                }
                for (int ib = 0; ib < 8; ++ib)
                    for (int e = 0; e < 32; ++e) {
                        put(r.qs, two_bits(ib, k, e), (b.qs[32 * (ib / 4) + e] >> (2 * (ib % 4))) & 3);
                        put(r.qh, third_bit(ib, k, e), (b.hmask[e] >> ib) & 1);
                    }
            }
        return;
    }
    if (t == GgmlType::Q4_K_R4 || t == GgmlType::Q5_K_R4 || t == GgmlType::Q6_K_R4) {
        for (int64_t ibl = 0; ibl < n / QK_K; ++ibl)
            for (int k = 0; k < 4; ++k) {
                const uint8_t* x = base_rows + k * rb + ibl * type_info(t).block_bytes;
                if (t != GgmlType::Q6_K_R4) {  // Q5_K / Q5_K_R4 share Q4_K / Q4_K_R4's d, dmin and scales
                    const bool five = t == GgmlType::Q5_K_R4;
                    const auto& b = *reinterpret_cast<const BlockQ4_K*>(x);
                    const uint8_t* qs = five ? reinterpret_cast<const BlockQ5_K*>(x)->qs : b.qs;
                    uint8_t* block = out + ibl * interleaved_block_bytes(t);
                    auto& r = *reinterpret_cast<BlockQ4_K_R4*>(block);
                    uint8_t* rqs = five ? reinterpret_cast<BlockQ5_K_R4*>(block)->qs : r.qs;
                    r.d[k] = b.d, r.d[4 + k] = b.dmin;
                    for (int ib = 0; ib < 8; ++ib) {
                        const uint8_t* q = b.scales;  // get_scale_min_k4
                        const int sc = ib < 4 ? q[ib] & 63 : (q[ib + 4] & 0xF) | (q[ib - 4] >> 6) << 4;
                        const int m = ib < 4 ? q[ib + 4] & 63 : (q[ib + 4] >> 4) | (q[ib] >> 6) << 4;
                        const int code = q4_k_code(ib, k);
                        r.scales_l[code] = static_cast<uint8_t>((sc & 0xF) | (m & 0xF) << 4);
                        r.scales_h[code % 16] = static_cast<uint8_t>(r.scales_h[code % 16] | ((sc >> 4) | (m >> 4) << 2) << (4 * (code / 16)));
                        for (int e = 0; e < 32; ++e) {
                            put(rqs, nibble(ib, k, e), (qs[32 * (ib / 2) + e] >> (4 * (ib % 2))) & 0xF);
                            if (five)
                                put(reinterpret_cast<BlockQ5_K_R4*>(block)->qh, q5_k_r4_fifth(ib, k, e),
                                    (reinterpret_cast<const BlockQ5_K*>(x)->qh[e] >> ib) & 1);
                        }
                    }
                } else {
                    const auto& b = *reinterpret_cast<const BlockQ6_K*>(x);
                    auto& r = reinterpret_cast<BlockQ6_K_R4*>(out)[ibl];
                    r.d[k] = b.d;
                    for (int ib = 0; ib < 8; ++ib) {
                        r.scales[8 * ib + k] = b.scales[2 * ib], r.scales[8 * ib + k + 4] = b.scales[2 * ib + 1];
                        const uint8_t* ql = b.ql + 64 * (ib / 4);
                        const uint8_t* qh = b.qh + 32 * (ib / 4);
                        const int quarter = ib % 4;
                        for (int e = 0; e < 32; ++e) {
                            const int lo = (ql[e + 32 * (quarter % 2)] >> (4 * (quarter / 2))) & 0xF;
                            put(r.ql, nibble(ib, k, e), lo);
                            put(r.qh, six_high(ib, k, e), (qh[e] >> (2 * quarter)) & 3);
                        }
                    }
                }
            }
        return;
    }
    const bool row_scales = t == GgmlType::IQ4_KS_R4 || t == GgmlType::IQ5_KS_R4;
    const size_t base_block = type_info(t).block_bytes, bb = interleaved_block_bytes(t);
    uint8_t* blocks = out + (row_scales ? 16 : 0);
    for (int k = 0; k < 4; ++k) {
        const uint8_t* row = base_rows + k * rb;
        if (row_scales) std::memcpy(out + 4 * k, row, 4), row += 4;
        for (int64_t ibl = 0; ibl < n / QK_K; ++ibl) {
            const uint8_t* x = row + ibl * base_block;
            uint8_t* o = blocks + ibl * bb;
            switch (t) {
                case GgmlType::IQ2_K_R4: {
                    const auto& b = *reinterpret_cast<const BlockIQ2_K*>(x);
                    auto& r = *reinterpret_cast<BlockIQ2_K_R4*>(o);
                    r.d[k] = b.d;
                    for (int ib = 0; ib < 8; ++ib)
                        for (int h = 0; h < 2; ++h) {
                            r.extra[k + 4 * h] = static_cast<uint8_t>(r.extra[k + 4 * h] | ((b.extra >> (2 * ib + h)) & 1) << ib);
                            put(r.scales, scale_nibble(scale_code(ib, k, h)), (b.scales[ib] >> (4 * h)) & 0xF);
                            for (int e = 16 * h; e < 16 * h + 16; ++e) put(r.qs, two_bits(ib, k, e), (b.qs[32 * (ib / 4) + e] >> (2 * (ib % 4))) & 3);
                        }
                    break;
                }
                case GgmlType::IQ3_K_R4: {
                    const auto& b = *reinterpret_cast<const BlockIQ3_K*>(x);
                    auto& r = *reinterpret_cast<BlockIQ3_K_R4*>(o);
                    r.d[k] = b.d;
                    for (int ib = 0; ib < 8; ++ib)
                        for (int h = 0; h < 2; ++h) {
                            const int n_code = scale_code(ib, k, h);
                            r.extra[k + 4 * h] = static_cast<uint8_t>(r.extra[k + 4 * h] | ((b.extra >> (2 * ib + h)) & 1) << ib);
                            put(r.scales_l, scale_nibble(n_code), (b.scales_l[ib] >> (4 * h)) & 0xF);
                            put(r.scales_h, scale_sign(n_code), (b.scales_h >> (2 * ib + h)) & 1);
                            for (int e = 16 * h; e < 16 * h + 16; ++e) {
                                put(r.qs, two_bits(ib, k, e), (b.qs[32 * (ib / 4) + e] >> (2 * (ib % 4))) & 3);
                                put(r.qh, third_bit(ib, k, e), (b.qh[e] >> ib) & 1);
                            }
                        }
                    break;
                }
                case GgmlType::IQ4_K_R4:
                case GgmlType::IQ5_K_R4: {
                    const bool five = t == GgmlType::IQ5_K_R4;
                    const auto& b = *reinterpret_cast<const BlockIQ4_K*>(x);  // IQ5_K: the same fields, then qh
                    const uint8_t* qh = x + sizeof(BlockIQ4_K);
                    auto& r = *reinterpret_cast<BlockIQ4_K_R4*>(o);
                    uint8_t* r_qh = o + sizeof(BlockIQ4_K_R4);
                    r.d[k] = b.d;
                    for (int ib = 0; ib < 8; ++ib) {
                        for (int h = 0; h < 2; ++h) {
                            const int n_code = scale_code(ib, k, h), s = k6_scale(b.scales_h, b.scales_l, ib, h);
                            r.extra[k + 4 * h] = static_cast<uint8_t>(r.extra[k + 4 * h] | ((b.extra >> (2 * ib + h)) & 1) << ib);
                            put(r.scales_l, scale_nibble(n_code), s & 0xF);
                            put(r.scales_h, scale_high(n_code), s >> 4);
                        }
                        for (int e = 0; e < 32; ++e) {
                            put(r.qs, nibble(ib, k, e), base_nibble(b.qs, ib, e, five));
                            if (five) put(r_qh, fifth_bit(ib, k, e), base_fifth(qh, ib, e));
                        }
                    }
                    break;
                }
                default: {  // IQ4_KS_R4, IQ5_KS_R4: scale bytes, quants, fifth bits
                    const bool five = t == GgmlType::IQ5_KS_R4;
                    for (int ib = 0; ib < 8; ++ib) {
                        o[4 * ib + k] = x[ib];
                        for (int e = 0; e < 32; ++e) {
                            put(o + 32, nibble(ib, k, e), base_nibble(x + 8, ib, e, five));
                            if (five) put(o + 32 + 512, fifth_bit(ib, k, e), base_fifth(x + 8 + 128, ib, e));
                        }
                    }
                }
            }
        }
    }
}

}  // namespace moe::ik

// ik_llama.cpp's flash attention for a group of rows (ik_attention_avx2.cpp's form) in 512-bit registers, with the
// same bits: only the lanes change meaning, never a value's operations. Scores: sixteen keys per register (lanes
// = keys, so each key's two FMA chains are the scalar form's), four rows at once so each block register is loaded
// once for them; values: sixteen dims per register (lanes = dims, one FMA per key in key order), the same four
// rows at once over 64 dims so each value register is loaded once for them; the exps are the AVX2 vector exp on each half, summed into the
// scalar form's eight lanes in the same order. ik's own AVX-512 build computes other bits (the oracle is its AVX2
// build's), so this is its arithmetic at the width the CPU has. Compiled with AVX-512 flags; entered only where
// kernels::table_for(Isa::Avx512) exists, and it allocates nothing (ik_attention.cpp sizes the scratch).
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/kernels/expf_simd.h"
#include "engine/kernels/ik/ik_ref.h"
#include "engine/kernels/simd_common.h"

namespace moe::ik {
namespace {

constexpr int kBlock = kAttentionBlock;
constexpr int kGroups = kBlock / 16;  // sixteen keys per register
constexpr int kScoreRows = 4;         // rows per pass over a block's keys
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int imin(int a, int b) { return a < b ? a : b; }
inline int imax(int a, int b) { return a > b ? a : b; }
inline __m256 half8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// Lanes 0..n-1 set (n clamped to 0..16).
inline __mmask16 first_lanes(int n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1); }

// The block's keys to f32, [group of 16 keys][dk][16 keys]; keys past nb repeat the group's first (masked later).
// Transposed as fp16 (exact, so the same floats): per eight dims, the sixteen keys' 128-bit pieces in four registers,
// then two rounds of VPERMT2W put each dim's sixteen keys side by side for one conversion.
void keys_to_lanes(const ops::KvView& kv, int b0, int nb, float* kt) {
    const int dk = kv.dk;
    alignas(64) static constexpr auto kIdx = [] {
        // [0], [1]: dims 0..3 / 4..7 of eight keys (four from each source): lane 8 dj + k
        // [2], [3]: dims 0, 1 / 2, 3 of sixteen keys from the first round's two results: lane 16 e + k
        std::array<std::array<uint16_t, 32>, 4> idx{};
        for (int half = 0; half < 2; ++half)
            for (int dj = 0; dj < 4; ++dj)
                for (int k = 0; k < 8; ++k) idx[half][8 * dj + k] = static_cast<uint16_t>((k < 4 ? 0 : 32) + 8 * (k % 4) + 4 * half + dj);
        for (int pair = 0; pair < 2; ++pair)
            for (int e = 0; e < 2; ++e)
                for (int k = 0; k < 16; ++k) idx[2 + pair][16 * e + k] = static_cast<uint16_t>((k < 8 ? 0 : 32) + 8 * (2 * pair + e) + k % 8);
        return idx;
    }();
    const __m512i first[2] = {_mm512_load_si512(kIdx[0].data()), _mm512_load_si512(kIdx[1].data())};
    const __m512i second[2] = {_mm512_load_si512(kIdx[2].data()), _mm512_load_si512(kIdx[3].data())};
    for (int c = 0; c < nb; c += 16) {
        const uint16_t* krow[16];
        for (int j = 0; j < 16; ++j) krow[j] = kv.k + static_cast<size_t>(b0 + (c + j < nb ? c + j : c)) * kv.k_stride;
        float* dst = kt + static_cast<size_t>(c / 16) * dk * 16;
        for (int d = 0; d < dk; d += 8) {
            __m512i z[4];  // keys 4q .. 4q + 3, one 128-bit lane each
            for (int q = 0; q < 4; ++q) {
                const auto piece = [&](int j) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(krow[4 * q + j] + d)); };
                z[q] = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(piece(0)), piece(1), 1), piece(2), 2),
                                          piece(3), 3);
            }
            for (int half = 0; half < 2; ++half) {  // dims d + 4 half .. + 3
                const __m512i lo = _mm512_permutex2var_epi16(z[0], first[half], z[1]), hi = _mm512_permutex2var_epi16(z[2], first[half], z[3]);
                for (int pair = 0; pair < 2; ++pair) {
                    const __m512i both = _mm512_permutex2var_epi16(lo, second[pair], hi);  // two dims' sixteen keys
                    const int dim = d + 4 * half + 2 * pair;
                    _mm512_storeu_ps(dst + static_cast<size_t>(dim) * 16, _mm512_cvtph_ps(_mm512_castsi512_si256(both)));
                    _mm512_storeu_ps(dst + static_cast<size_t>(dim + 1) * 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(both, 1)));
                }
            }
        }
    }
}

// The block's values to f32, [key][dv]; false where one of them is an inf or NaN.
bool values_to_f32(const ops::KvView& kv, int b0, int nb, float* vf) {
    const int dv = kv.dv;
    const __m256i exponent = _mm256_set1_epi16(0x7C00);
    __m256i special = _mm256_setzero_si256();
    bool finite = true;
    for (int c = 0; c < nb; ++c) {
        const uint16_t* v = kv.v + static_cast<size_t>(b0 + c) * kv.v_stride;
        float* dst = vf + static_cast<size_t>(c) * dv;
        int d = 0;
        for (; d + 16 <= dv; d += 16) {
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + d));
            special = _mm256_or_si256(special, _mm256_cmpeq_epi16(_mm256_and_si256(h, exponent), exponent));
            _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(h));
        }
        for (; d < dv; ++d) {
            finite = finite && (v[d] & 0x7C00) != 0x7C00;
            dst[d] = _cvtsh_ss(v[d]);
        }
    }
    return finite && _mm256_testz_si256(special, special);
}

// Whether the block's fp16 values are all finite (no exponent of all ones), without converting them.
bool values_finite(const ops::KvView& kv, int b0, int nb) {
    const int dv = kv.dv;
    const __m512i exponent = _mm512_set1_epi16(0x7C00);
    __mmask32 special = 0;
    for (int c = 0; c < nb; ++c) {
        const uint16_t* v = kv.v + static_cast<size_t>(b0 + c) * kv.v_stride;
        for (int d = 0; d < dv; d += 32) {
            const __m512i h = _mm512_maskz_loadu_epi16(dv - d >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << (dv - d)) - 1), v + d);
            special |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, exponent), exponent);
        }
    }
    return special == 0;
}

// NR rows' scores over NG groups of 16 keys starting at kg: per key the scalar form's two chains (dims d % 8 < 4
// and the others, ascending), then ((lo + hi) + 0) * scale.
template <int NR, int NG>
inline void score_groups(const float* const* q, const float* kg, int dk, float scale, __m512 out[kScoreRows][2]) {
    __m512 lo[NR][NG], hi[NR][NG];
    for (int r = 0; r < NR; ++r)
        for (int g = 0; g < NG; ++g) lo[r][g] = hi[r][g] = _mm512_setzero_ps();
    auto chain = [&](__m512(&sum)[NR][NG], int dim) {
        __m512 k[NG];
        for (int g = 0; g < NG; ++g) k[g] = _mm512_loadu_ps(kg + (static_cast<size_t>(g) * dk + dim) * 16);
        for (int r = 0; r < NR; ++r) {
            const __m512 qd = _mm512_set1_ps(q[r][dim]);
            for (int g = 0; g < NG; ++g) sum[r][g] = _mm512_fmadd_ps(k[g], qd, sum[r][g]);
        }
    };
    for (int d = 0; d < dk; d += 8) {
        for (int j = 0; j < 4; ++j) chain(lo, d + j);
        for (int j = 4; j < 8; ++j) chain(hi, d + j);
    }
    const __m512 sc = _mm512_set1_ps(scale);
    for (int r = 0; r < NR; ++r)
        for (int g = 0; g < NG; ++g) out[r][g] = _mm512_mul_ps(_mm512_add_ps(_mm512_add_ps(lo[r][g], hi[r][g]), _mm512_setzero_ps()), sc);
}

template <int NR>
inline void score_groups(int ng, const float* const* q, const float* kg, int dk, float scale, __m512 out[kScoreRows][2]) {
    if (ng == 2) score_groups<NR, 2>(q, kg, dk, scale, out);
    else score_groups<NR, 1>(q, kg, dk, scale, out);
}

// NR rows x NREG registers of accumulators as named members, not an array: GCC 12 at -O3 keeps an array of them
// in memory and stores every one back after each key.
template <int N>
struct Regs {
    __m512 head;
    Regs<N - 1> rest;
    template <int I>
    __m512& at() {
        if constexpr (I == 0) return head;
        else return rest.template at<I - 1>();
    }
};
template <>
struct Regs<0> {};

// Register I is row I / NREG's dims 16 (I % NREG) and on.
template <int NREG, int N, int I = 0>
inline void load_regs(Regs<N>& a, float* const* acc, const __mmask16* lanes) {
    if constexpr (I < N) {
        a.template at<I>() = _mm512_maskz_loadu_ps(lanes[I % NREG], acc[I / NREG] + 16 * (I % NREG));
        load_regs<NREG, N, I + 1>(a, acc, lanes);
    }
}
template <int NREG, int N, int I = 0>
inline void store_regs(Regs<N>& a, float* const* acc, const __mmask16* lanes) {
    if constexpr (I < N) {
        _mm512_mask_storeu_ps(acc[I / NREG] + 16 * (I % NREG), lanes[I % NREG], a.template at<I>());
        store_regs<NREG, N, I + 1>(a, acc, lanes);
    }
}
// a += x * p for the rows set in `use`.
template <int NREG, int N, int I = 0>
inline void fma_regs(Regs<N>& a, const __m512* x, const __m512* p, unsigned use) {
    if constexpr (I < N) {
        if (use >> (I / NREG) & 1u) a.template at<I>() = _mm512_fmadd_ps(x[I % NREG], p[I / NREG], a.template at<I>());
        fma_regs<NREG, N, I + 1>(a, x, p, use);
    }
}

// NR rows' accumulators over NREG registers of 16 dims (the last one masked to `tail`) += v * p for each key the
// row sees, in key order; each value register is loaded once for all the rows. A key a row does not see has p = 0
// (and was never added by the scalar form): with finite values v * 0 + acc is acc itself (acc, starting at +0, is
// never -0), so all rows take every key unless the block holds an inf or NaN value (kSkipUnseen: each row's keys
// tested as the scalar form tests them).
// Sixteen values of a key as f32: from the block's f32 copy, or straight from the fp16 cache (the same floats).
inline __m512 value16(__mmask16 lanes, const float* v) { return _mm512_maskz_loadu_ps(lanes, v); }
inline __m512 value16(__mmask16 lanes, const uint16_t* v) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes, v)); }

template <int NR, int NREG, bool kSkipUnseen, class V>
inline void accumulate_values(const V* vf, size_t dv, int n_keys, const float* const* score, const float* const* p, float* const* acc,
                              __mmask16 tail) {
    __mmask16 lanes[NREG];
    for (int k = 0; k < NREG; ++k) lanes[k] = k == NREG - 1 ? tail : __mmask16(0xFFFF);
    Regs<NR * NREG> a;
    load_regs<NREG>(a, acc, lanes);
    constexpr unsigned kAll = (1u << NR) - 1;
    for (int c = 0; c < n_keys; ++c) {
        unsigned use = kAll;
        if constexpr (kSkipUnseen) {
            use = 0;
            for (int r = 0; r < NR; ++r) use |= static_cast<unsigned>(score[r][c] != kNegInf) << r;
            if (!use) continue;
        }
        const V* v = vf + static_cast<size_t>(c) * dv;
        __m512 x[NREG], pr[NR];
        for (int k = 0; k < NREG; ++k) x[k] = value16(lanes[k], v + 16 * k);
        for (int r = 0; r < NR; ++r) pr[r] = _mm512_set1_ps(p[r][c]);
        fma_regs<NREG>(a, x, pr, use);
    }
    store_regs<NREG>(a, acc, lanes);
}

template <int NR, bool kSkipUnseen, class V>
inline void accumulate_values(int nreg, const V* vf, size_t stride, int n_keys, const float* const* score, const float* const* p, float* const* acc,
                              __mmask16 tail) {
    switch (nreg) {
        case 4: accumulate_values<NR, 4, kSkipUnseen>(vf, stride, n_keys, score, p, acc, tail); break;
        case 3: accumulate_values<NR, 3, kSkipUnseen>(vf, stride, n_keys, score, p, acc, tail); break;
        case 2: accumulate_values<NR, 2, kSkipUnseen>(vf, stride, n_keys, score, p, acc, tail); break;
        default: accumulate_values<NR, 1, kSkipUnseen>(vf, stride, n_keys, score, p, acc, tail); break;
    }
}

// Up to four rows over the whole value width, in passes of 64 dims (sixteen accumulators in registers); the values'
// rows `stride` elements apart.
template <bool kSkipUnseen, class V>
void accumulate_rows(int nr, const V* vf, size_t stride, int dv, int n_keys, const float* const* score, const float* const* p, float* const* acc) {
    for (int d = 0; d < dv; d += 64) {
        const int width = imin(64, dv - d), nreg = (width + 15) / 16;
        const __mmask16 tail = first_lanes(width - 16 * (nreg - 1));
        float* at[kScoreRows];
        for (int r = 0; r < nr; ++r) at[r] = acc[r] + d;
        switch (nr) {
            case 4: accumulate_values<4, kSkipUnseen>(nreg, vf + d, stride, n_keys, score, p, at, tail); break;
            case 3: accumulate_values<3, kSkipUnseen>(nreg, vf + d, stride, n_keys, score, p, at, tail); break;
            case 2: accumulate_values<2, kSkipUnseen>(nreg, vf + d, stride, n_keys, score, p, at, tail); break;
            default: accumulate_values<1, kSkipUnseen>(nreg, vf + d, stride, n_keys, score, p, at, tail); break;
        }
    }
}

void group_avx512(const float* q_rows, int64_t q_stride, int rows, const ops::KvView& kv, float scale, float* out_rows, int64_t out_stride,
                  ops::AttnScratch& s) {
    const int dk = kv.dk, dv = kv.dv;
    auto row_n_kv = [&](int r) { return kv.rows_per_position > 0 ? kv.n_kv + r / kv.rows_per_position : kv.n_kv; };
    const int max_kv = row_n_kv(rows - 1);
    const GroupBuffers buf = group_buffers(s, rows, dk, dv);
    alignas(64) float score[kScoreRows][kBlock], p[kScoreRows][kBlock];
    for (int b0 = 0; b0 < max_kv; b0 += kBlock) {
        const int nb = imin(kBlock, max_kv - b0);
        keys_to_lanes(kv, b0, nb, buf.keys);
        // One pass of at most four rows (a decoding step's heads of one kv head) reads each value once: straight from
        // the fp16 cache. More rows take the block's f32 copy, converted once for all their passes.
        const bool direct_values = rows <= kScoreRows;
        const bool finite_values = direct_values ? values_finite(kv, b0, nb) : values_to_f32(kv, b0, nb, buf.values);
        const uint16_t* block_values = kv.v + static_cast<size_t>(b0) * kv.v_stride;
        __mmask16 visible[kGroups];  // per group of 16 keys: inside the block and not masked by the view
        for (int g = 0; g < kGroups; ++g) {
            visible[g] = first_lanes(nb - 16 * g);
            if (kv.visible)
                for (int k = 0; k < 16 && 16 * g + k < nb; ++k)
                    if (!kv.visible[b0 + 16 * g + k]) visible[g] = static_cast<__mmask16>(visible[g] & ~(1u << k));
        }
        for (int r0 = 0; r0 < rows; r0 += kScoreRows) {
            const int nr = imin(kScoreRows, rows - r0);
            int valid[kScoreRows];
            const float* q[kScoreRows];
            for (int i = 0; i < nr; ++i) valid[i] = imax(0, imin(nb, row_n_kv(r0 + i) - b0)), q[i] = q_rows + (r0 + i) * q_stride;
            const int most = valid[nr - 1];  // prefixes grow with the row
            if (most == 0) continue;
            for (int c0 = 0; c0 < kBlock; c0 += 32) {
                const int ng = imin(2, imax(0, (most - c0 + 15) / 16));
                __m512 sc[kScoreRows][2];
                switch (nr) {
                    case 4: score_groups<4>(ng, q, buf.keys + static_cast<size_t>(c0) * dk, dk, scale, sc); break;
                    case 3: score_groups<3>(ng, q, buf.keys + static_cast<size_t>(c0) * dk, dk, scale, sc); break;
                    case 2: score_groups<2>(ng, q, buf.keys + static_cast<size_t>(c0) * dk, dk, scale, sc); break;
                    default: score_groups<1>(ng, q, buf.keys + static_cast<size_t>(c0) * dk, dk, scale, sc); break;
                }
                for (int i = 0; i < nr; ++i)
                    for (int g = 0; g < 2; ++g) {
                        const int c = c0 + 16 * g;
                        const __mmask16 keep = g < ng ? static_cast<__mmask16>(visible[c / 16] & first_lanes(valid[i] - c)) : __mmask16(0);
                        _mm512_storeu_ps(score[i] + c, _mm512_mask_blend_ps(keep, _mm512_set1_ps(kNegInf), g < ng ? sc[i][g] : _mm512_setzero_ps()));
                    }
            }
            // each row's softmax step on its block, as the AVX2 form
            bool active[kScoreRows] = {};
            for (int i = 0; i < nr; ++i) {
                if (valid[i] == 0) continue;
                __m512 mx = _mm512_set1_ps(kNegInf);
                for (int c = 0; c < kBlock; c += 16) mx = _mm512_max_ps(_mm512_loadu_ps(score[i] + c), mx);  // NaN scores passed over
                const float smax = _mm512_reduce_max_ps(mx);
                if (smax == kNegInf) continue;
                const int r = r0 + i;
                float& M = buf.max_sum[2 * static_cast<size_t>(r)];
                float& S = buf.max_sum[2 * static_cast<size_t>(r) + 1];
                float* acc = buf.acc + static_cast<size_t>(r) * dv;
                if (smax > M) {
                    if (M > kNegInf) {
                        const float m = std::exp(M - smax);
                        S *= m;
                        int d = 0;
                        for (; d + 16 <= dv; d += 16) _mm512_storeu_ps(acc + d, _mm512_mul_ps(_mm512_set1_ps(m), _mm512_loadu_ps(acc + d)));
                        for (; d < dv; ++d) acc[d] = m * acc[d];
                    }
                    M = smax;
                }
                __m256 lanes = _mm256_setzero_ps();
                const __m256 m8 = _mm256_set1_ps(M), ninf8 = _mm256_set1_ps(kNegInf);
                for (int c = 0; c < kBlock; c += 8) {
                    const __m256 x = _mm256_loadu_ps(score[i] + c);
                    const __m256 masked = _mm256_cmp_ps(x, ninf8, _CMP_EQ_OQ);
                    const __m256 e = _mm256_andnot_ps(masked, kernels::expf8<kernels::Flavor::Avx2>(_mm256_sub_ps(x, m8)));
                    _mm256_storeu_ps(p[i] + c, e);
                    lanes = _mm256_add_ps(lanes, e);
                }
                S += kernels::hsum_float_8(lanes);
                active[i] = true;
            }
            // the rows that take this block, together
            const float* row_score[kScoreRows];
            const float* row_p[kScoreRows];
            float* row_acc[kScoreRows];
            int taking = 0, n_keys = 0;
            for (int i = 0; i < nr; ++i) {
                if (!active[i]) continue;
                row_score[taking] = score[i], row_p[taking] = p[i], row_acc[taking] = buf.acc + static_cast<size_t>(r0 + i) * dv;
                n_keys = imax(n_keys, valid[i]);
                ++taking;
            }
            if (!taking) continue;
            if (direct_values && finite_values) accumulate_rows<false>(taking, block_values, kv.v_stride, dv, n_keys, row_score, row_p, row_acc);
            else if (direct_values) accumulate_rows<true>(taking, block_values, kv.v_stride, dv, n_keys, row_score, row_p, row_acc);
            else if (finite_values) accumulate_rows<false>(taking, buf.values, dv, dv, n_keys, row_score, row_p, row_acc);
            else accumulate_rows<true>(taking, buf.values, dv, dv, n_keys, row_score, row_p, row_acc);
        }
    }
    finish_group_rows(kv, buf, rows, out_rows, out_stride);
}

void one_row_avx512(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    ops::KvView one = kv;
    one.rows_per_position = 0;
    group_avx512(q, 0, 1, one, scale, out, 0, s);
}

}  // namespace

ops::AttendFn attend_ik_avx512() { return one_row_avx512; }
ops::AttendGroupFn attend_ik_group_avx512() { return group_avx512; }

}  // namespace moe::ik

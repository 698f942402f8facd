// Compiled with -mavx2 -mfma -mf16c (see attention_f16c.cpp). Attention over llama.cpp's other cache types
// (-ctk / -ctv: quantized, bf16, f32): one row, and the rows of a group in one pass.
#include "engine/kernels/attention_f16c_blocks.h"

namespace moe::kernels {
namespace {

// A V row to f32 as the type's to_float computes it (one rounding per value: d * q), eight values at a time for
// the common types; the others through dequantize_row.
inline void v_row_to_f32(GgmlType t, const uint8_t* row, float* out, int n) {
    if (t == GgmlType::Q8_0) {
        for (int b = 0; b < n / 32; ++b) {
            const uint8_t* blk = row + 34 * b;
            uint16_t dh;
            std::memcpy(&dh, blk, 2);
            const __m256 d = _mm256_set1_ps(h2f(dh));
            for (int k = 0; k < 4; ++k) {
                const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k)));
                _mm256_storeu_ps(out + 32 * b + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
    } else if (t == GgmlType::Q4_0) {
        for (int b = 0; b < n / 32; ++b) {
            const uint8_t* blk = row + 18 * b;
            uint16_t dh;
            std::memcpy(&dh, blk, 2);
            const __m256 d = _mm256_set1_ps(h2f(dh));
            const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
            const __m128i eight = _mm_set1_epi8(8);
            const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, _mm_set1_epi8(0x0F)), eight);                     // elements 0..15
            const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(0x0F)), eight);  // 16..31
            const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 32 * b + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])), d));
        }
    } else if (t == GgmlType::BF16) {
        const auto* h = reinterpret_cast<const uint16_t*>(row);
        for (int i = 0; i < n; i += 8) {
            const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
            _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)));
        }
    } else {
        dequantize_row(t, row, out, n);
    }
}

// One visible key's update of one row's accumulator over a typed cache, as the reference, given the online
// softmax's factors (raise: the max rose, rescale by ms): eight lanes at a time (an fp16 V: fp16 accumulator
// through F16C with round-to-nearest-even; any other V, already converted to f32 in vr: f32 with one FMA per
// value).
__attribute__((always_inline)) inline void typed_value_update(bool raise, float ms, float vs, float& S, bool f16_v, uint16_t* acc16, float* acc,
                                                              const uint16_t* vh, const float* vr, int dv) {
    if (f16_v) {  // ggml_vec_scale_f16 / ggml_vec_mad_f16, as the fp16 caches' kernels above
        if (raise) scale_f16_256(acc16, ms, dv);
        mad_f16_256(acc16, vh, vs, dv);
    } else {
        int d = 0;
        if (raise) {
            const __m256 msv = _mm256_set1_ps(ms);
            for (; d + 8 <= dv; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), msv));
            for (; d < dv; ++d) acc[d] *= ms;
        }
        const __m256 vsv = _mm256_set1_ps(vs);
        for (d = 0; d + 8 <= dv; d += 8) _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(_mm256_loadu_ps(vr + d), vsv, _mm256_loadu_ps(acc + d)));
        for (; d < dv; ++d) acc[d] = std::fma(vr[d], vs, acc[d]);
    }
    S = std::fma(S, ms, vs);
}
// The same with the online softmax's step for score sc first (libm's expf).
__attribute__((always_inline)) inline void typed_value_step(float sc, float& M, float& S, bool f16_v, uint16_t* acc16, float* acc, const uint16_t* vh,
                                                            const float* vr, int dv) {
    float ms, vs;
    const bool raise = ops::online_softmax_step(sc, M, ms, vs);
    typed_value_update(raise, ms, vs, S, f16_v, acc16, acc, vh, vr, dv);
}

// Value row j of a typed view: the fp16 row itself, or its values in f32 (an f32 row in place, else converted
// into buf).
struct TypedValueRow {
    const uint16_t* h = nullptr;
    const float* f = nullptr;
};
__attribute__((always_inline)) inline TypedValueRow typed_value_row(const ops::KvView& kv, int j, float* buf) {
    const uint8_t* vj = kv.v_raw + static_cast<size_t>(j) * kv.v_row;
    if (kv.v_type == GgmlType::F16) return {reinterpret_cast<const uint16_t*>(vj), nullptr};
    if (kv.v_type == GgmlType::F32) return {nullptr, reinterpret_cast<const float*>(vj)};
    v_row_to_f32(kv.v_type, vj, buf, kv.dv);
    return {nullptr, buf};
}

// A row's output from its accumulator: the sink joined, divided by the sum.
inline void typed_finish(const ops::KvView& kv, int row, float M, float S, bool f16_v, const uint16_t* acc16, const float* acc, float* out) {
    const float sink_scale = ops::apply_sink(kv, row, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    if (f16_v)
        for (int d = 0; d < kv.dv; ++d) out[d] = h2f(acc16[d]) * sink_scale * inv;
    else
        for (int d = 0; d < kv.dv; ++d) out[d] = acc[d] * sink_scale * inv;
}

// ops::attend_typed with the same operations per value: every score first, through the K type's row kernel (the
// same bits as its dot per row), then the online softmax and V's updates (typed_value_step).
void attend_typed_f16c_impl(const float* q, const ops::KvView& kv, float scale, float* out, ops::AttnScratch& s) {
    const KernelTable& kt = *kv.table;
    const int slot = type_slot(kv.k_type), dv = kv.dv;
    s.q_act.resize(activation_bytes(kv.k_type, kv.dk));
    prepare_activations(kv.k_type, q, s.q_act.data(), kv.dk);
    s.scores.resize(static_cast<size_t>(kv.n_kv));
    float* score = s.scores.data();
    if (kt.dot_rows[slot]) {
        kt.dot_rows[slot](kv.dk, kv.k_raw, kv.k_row, kv.n_kv, s.q_act.data(), score);
    } else {
        for (int j = 0; j < kv.n_kv; ++j) score[j] = kt.dot[slot](kv.dk, kv.k_raw + static_cast<size_t>(j) * kv.k_row, s.q_act.data());
    }
    const bool f16_v = kv.v_type == GgmlType::F16;
    s.acc16.assign(f16_v ? static_cast<size_t>(dv) : 0, 0);
    s.acc.assign(static_cast<size_t>(dv), 0.f);
    s.kv_block.resize(static_cast<size_t>(dv));
    float M = kNegInf, S = 0.f;
    for (int j = 0; j < kv.n_kv; ++j) {
        if (kv.visible && !kv.visible[j]) continue;
        float sc = score[j] * scale;
        sc += 0.0f;  // the mask's zero
        const TypedValueRow v = typed_value_row(kv, j, s.kv_block.data());
        typed_value_step(sc, M, S, f16_v, s.acc16.data(), s.acc.data(), v.h, v.f, dv);
    }
    typed_finish(kv, 0, M, S, f16_v, s.acc16.data(), s.acc.data(), out);
}

// attend_typed for the G rows that share a view (the query heads of one kv head; in a prompt's block of tokens,
// row r sees n_kv + r / rows_per_position positions): the visible keys in blocks of up to kKeyBlock, each
// block's scores for every row through the K type's row kernel and then its online-softmax factors (RowBlock:
// the running max key by key, the exps together, eight lanes at a time with libm's bits where Lanes), each value
// row converted once for all the rows, each row's accumulator updated as the one-row kernel updates it. Every
// row gets that kernel's bits, and the cache is read once per group instead of once per row (at 64k positions
// a kv head's q8_0 keys and values are 8.5 MiB).
// One row's f32 accumulator over the first m keys of a block whose values are in f32 (vr[i]): per value the
// operations of typed_value_update key after key (the rescale where the max rose, then one FMA), taken 64 values
// at a time with the keys inside so that the accumulator stays in registers; the same bits.
// The 512-bit form (AVX-512 CPUs, by function target): 128 values at a time, then values_f32_block's loops.
inline void values_f32_block(const RowBlock& b, int m, const float* const* vr, float& S, float* acc, int dv, int d = 0);
__attribute__((target("avx512f"))) void values_f32_block_512(const RowBlock& b, int m, const float* const* vr, float& S, float* acc, int dv) {
    int d = 0;
    for (; d + 128 <= dv; d += 128) {
        __m512 a[8];
        for (int k = 0; k < 8; ++k) a[k] = _mm512_loadu_ps(acc + d + 16 * k);
        for (int i = 0; i < m; ++i) {
            if (b.raise[i]) {
                const __m512 ms = _mm512_set1_ps(b.e[i]);
                for (int k = 0; k < 8; ++k) a[k] = _mm512_mul_ps(a[k], ms);
            }
            const __m512 vs = _mm512_set1_ps(b.raise[i] ? 1.f : b.e[i]);
            for (int k = 0; k < 8; ++k) a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(vr[i] + d + 16 * k), vs, a[k]);
        }
        for (int k = 0; k < 8; ++k) _mm512_storeu_ps(acc + d + 16 * k, a[k]);
    }
    values_f32_block(b, m, vr, S, acc, dv, d);
}
inline void values_f32_block(const RowBlock& b, int m, const float* const* vr, float& S, float* acc, int dv, int d) {
    for (; d + 64 <= dv; d += 64) {
        __m256 a[8];
        for (int k = 0; k < 8; ++k) a[k] = _mm256_loadu_ps(acc + d + 8 * k);
        for (int i = 0; i < m; ++i) {
            if (b.raise[i]) {
                const __m256 ms = _mm256_set1_ps(b.e[i]);
                for (int k = 0; k < 8; ++k) a[k] = _mm256_mul_ps(a[k], ms);
            }
            const __m256 vs = _mm256_set1_ps(b.raise[i] ? 1.f : b.e[i]);
            for (int k = 0; k < 8; ++k) a[k] = _mm256_fmadd_ps(_mm256_loadu_ps(vr[i] + d + 8 * k), vs, a[k]);
        }
        for (int k = 0; k < 8; ++k) _mm256_storeu_ps(acc + d + 8 * k, a[k]);
    }
    for (; d + 8 <= dv; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        for (int i = 0; i < m; ++i) {
            if (b.raise[i]) a = _mm256_mul_ps(a, _mm256_set1_ps(b.e[i]));
            a = _mm256_fmadd_ps(_mm256_loadu_ps(vr[i] + d), _mm256_set1_ps(b.raise[i] ? 1.f : b.e[i]), a);
        }
        _mm256_storeu_ps(acc + d, a);
    }
    for (; d < dv; ++d)
        for (int i = 0; i < m; ++i) {
            if (b.raise[i]) acc[d] *= b.e[i];
            acc[d] = std::fma(vr[i][d], b.raise[i] ? 1.f : b.e[i], acc[d]);
        }
    for (int i = 0; i < m; ++i) S = std::fma(S, b.raise[i] ? b.e[i] : 1.f, b.raise[i] ? 1.f : b.e[i]);
}

// H kv heads at once (decode steps; rows_per_position 0): their rows sit side by side in each position's row, so
// reading them together reads the row whole instead of each head's slice at the row's stride. Row r = h G + g
// is query head g of kv head h; the keys visible are the same for all.
template <bool Lanes>
void attend_typed_heads_f16c_impl(const float* q, int64_t q_stride, int G, int H, const ops::KvView& kv, float scale, float* out, int64_t out_stride,
                                  ops::AttnScratch& s) {
    const KernelTable& kt = *kv.table;
    const int slot = type_slot(kv.k_type), dk = kv.dk, dv = kv.dv, R = H * G;
    const size_t act = activation_bytes(kv.k_type, dk);
    const bool f16_v = kv.v_type == GgmlType::F16;
    thread_local std::vector<RowBlock> rows;
    if (rows.size() < static_cast<size_t>(R)) rows.resize(static_cast<size_t>(R));
    thread_local std::vector<ops::KvView> heads;  // kv head h's view
    heads.assign(static_cast<size_t>(H), kv);
    for (int h = 1; h < H; ++h) {
        heads[h].k_raw += static_cast<size_t>(h) * row_bytes(kv.k_type, static_cast<uint64_t>(dk)).value_or(0);
        heads[h].v_raw += static_cast<size_t>(h) * row_bytes(kv.v_type, static_cast<uint64_t>(dv)).value_or(0);
    }
    s.q_act.resize(static_cast<size_t>(R) * act);
    for (int r = 0; r < R; ++r) prepare_activations(kv.k_type, q + r * q_stride, s.q_act.data() + static_cast<size_t>(r) * act, dk);
    s.max_sum.assign(static_cast<size_t>(2) * R, 0.f);
    float *M = s.max_sum.data(), *S = M + R;
    std::fill_n(M, R, kNegInf);
    s.acc16.assign(f16_v ? static_cast<size_t>(R) * dv : 0, 0);
    s.acc.assign(static_cast<size_t>(R) * dv, 0.f);
    s.kv_block.resize(static_cast<size_t>(f16_v ? 1 : H * kKeyBlock) * dv);
    // Positions row r (query head r % G) sees; the rows' longest view bounds the pass.
    auto seen = [&](int r) { return kv.rows_per_position > 0 ? kv.n_kv + r % G / kv.rows_per_position : kv.n_kv; };
    const int last = seen(G - 1);
    int idx[kKeyBlock];
    thread_local std::vector<int> row_keys;  // per row: how many of the block's keys it sees (a prefix)
    row_keys.resize(static_cast<size_t>(R));
    thread_local std::vector<uint8_t> key_rows;
    for (int j = 0; j < last;) {
        int n = 0;
        for (; j < last && n < kKeyBlock; ++j)
            if (!kv.visible || kv.visible[j]) idx[n++] = j;
        if (n == 0) continue;
        const bool consecutive = idx[n - 1] - idx[0] == n - 1;
        for (int h = 0, r = 0; h < H; ++h) {
            const ops::KvView& hv = heads[h];
            // The block's key rows in one piece: consecutive positions as they lie, scattered ones (the DSA picks)
            // copied together, so that every row takes one call of the rows kernel.
            const uint8_t* keys = hv.k_raw + static_cast<size_t>(idx[0]) * kv.k_row;
            bool together = consecutive;
            if (!together && kt.dot_rows[slot]) {
                key_rows.resize(static_cast<size_t>(kKeyBlock) * kv.k_row);
                for (int i = 0; i < n; ++i)
                    std::memcpy(key_rows.data() + static_cast<size_t>(i) * kv.k_row, hv.k_raw + static_cast<size_t>(idx[i]) * kv.k_row,
                                row_bytes(kv.k_type, static_cast<uint64_t>(dk)).value_or(0));
                keys = key_rows.data();
                together = true;
            }
            for (int g = 0; g < G; ++g, ++r) {
                const int limit = seen(r);
                int m = n;
                while (m > 0 && idx[m - 1] >= limit) --m;
                row_keys[r] = m;
                if (m == 0) continue;
                RowBlock& b = rows[r];
                const uint8_t* qa = s.q_act.data() + static_cast<size_t>(r) * act;
                if (together && kt.dot_rows[slot]) kt.dot_rows[slot](dk, keys, kv.k_row, m, qa, b.sc);
                else
                    for (int i = 0; i < m; ++i) b.sc[i] = kt.dot[slot](dk, hv.k_raw + static_cast<size_t>(idx[i]) * kv.k_row, qa);
                for (int i = 0; i < m; ++i) {
                    b.sc[i] *= scale;
                    b.sc[i] += 0.0f;  // the mask's zero
                }
                b.exps<Lanes>(m, M[r]);
            }
        }
        if (!f16_v) {  // f32 accumulators: each head's block of values in f32 once, then each row's keys over them
            for (int h = 0, r = 0; h < H; ++h) {
                const float* vr[kKeyBlock];
                for (int i = 0; i < n; ++i)
                    vr[i] = typed_value_row(heads[h], idx[i], s.kv_block.data() + static_cast<size_t>(h * kKeyBlock + i) * dv).f;
                for (int g = 0; g < G; ++g, ++r) {
                    if constexpr (Lanes) values_f32_block_512(rows[r], row_keys[r], vr, S[r], s.acc.data() + static_cast<size_t>(r) * dv, dv);
                    else values_f32_block(rows[r], row_keys[r], vr, S[r], s.acc.data() + static_cast<size_t>(r) * dv, dv);
                }
            }
            continue;
        }
        for (int i = 0; i < n; ++i)
            for (int h = 0, r = 0; h < H; ++h) {
                const TypedValueRow v = typed_value_row(heads[h], idx[i], s.kv_block.data());
                for (int g = 0; g < G; ++g, ++r) {
                    if (i >= row_keys[r]) continue;
                    const RowBlock& b = rows[r];
                    const bool raise = b.raise[i];
                    typed_value_update(raise, raise ? b.e[i] : 1.f, raise ? 1.f : b.e[i], S[r], f16_v, s.acc16.data() + static_cast<size_t>(r) * dv,
                                       s.acc.data() + static_cast<size_t>(r) * dv, v.h, v.f, dv);
                }
            }
    }
    for (int r = 0; r < R; ++r)
        typed_finish(kv, r, M[r], S[r], f16_v, s.acc16.data() + static_cast<size_t>(r) * (f16_v ? dv : 0), s.acc.data() + static_cast<size_t>(r) * dv,
                     out + r * out_stride);
}

// attend_typed for the G rows of one kv head (the form AttendGroupFn takes; prompt blocks included).
template <bool Lanes>
void attend_typed_group_f16c_impl(const float* q, int64_t q_stride, int G, const ops::KvView& kv, float scale, float* out, int64_t out_stride,
                                  ops::AttnScratch& s) {
    attend_typed_heads_f16c_impl<Lanes>(q, q_stride, G, 1, kv, scale, out, out_stride, s);
}

}  // namespace

ops::AttendFn attend_typed_f16c() { return &attend_typed_f16c_impl; }
// (libm's exps in lanes on AVX-512 CPUs only, as the chunk kernels: qemu's AVX2-only CPU models round the lanes'
// packed FMA otherwise at times, and those are where the AVX2-only path is tested)
ops::AttendGroupFn attend_typed_group_f16c() {
    return __builtin_cpu_supports("avx512f") ? &attend_typed_group_f16c_impl<true> : &attend_typed_group_f16c_impl<false>;
}
AttendTypedHeadsFn attend_typed_heads_f16c() {
    return __builtin_cpu_supports("avx512f") ? &attend_typed_heads_f16c_impl<true> : &attend_typed_heads_f16c_impl<false>;
}

}  // namespace moe::kernels

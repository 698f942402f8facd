// Flash attention over caches stored in llama.cpp's other cache types (float_ops.h: attend_typed).
#include <cmath>
#include <limits>

#include "engine/kernels/float_ops.h"
#include "engine/kernels/kernels.h"

#define MOE_FMA_CLONES __attribute__((target_clones("fma", "default"), flatten))

namespace moe::ops {

MOE_FMA_CLONES void attend_typed(const float* q, const KvView& kv, float scale, float* out, AttnScratch& s) {
    const kernels::KernelTable& kt = *kv.table;
    const kernels::DotFn dot = kt.dot[kernels::type_slot(kv.k_type)];
    s.q_act.resize(kernels::activation_bytes(kv.k_type, kv.dk));
    kernels::prepare_activations(kv.k_type, q, s.q_act.data(), kv.dk);
    const bool f16_v = kv.v_type == GgmlType::F16;
    s.acc16.assign(f16_v ? static_cast<size_t>(kv.dv) : 0, 0);
    s.acc.assign(static_cast<size_t>(kv.dv), 0.f);
    s.kv_block.resize(static_cast<size_t>(kv.dv));
    uint16_t* acc16 = s.acc16.data();
    float* acc = s.acc.data();
    float* v32 = s.kv_block.data();
    float M = -std::numeric_limits<float>::infinity(), S = 0.f;
    for (int j = 0; j < kv.n_kv; ++j) {
        if (kv.visible && !kv.visible[j]) continue;
        float sc = dot(kv.dk, kv.k_raw + static_cast<size_t>(j) * kv.k_row, s.q_act.data()) * scale;
        sc += 0.0f;  // the mask's zero
        float ms, vs;
        if (online_softmax_step(sc, M, ms, vs)) {
            if (f16_v)
                for (int d = 0; d < kv.dv; ++d) acc16[d] = fp32_to_fp16(fp16_to_fp32_lut(acc16[d]) * ms);  // ggml_vec_scale_f16
            else
                for (int d = 0; d < kv.dv; ++d) acc[d] *= ms;  // ggml_vec_scale_f32
        }
        const uint8_t* vj = kv.v_raw + static_cast<size_t>(j) * kv.v_row;
        if (f16_v) {
            const auto* vh = reinterpret_cast<const uint16_t*>(vj);
            for (int d = 0; d < kv.dv; ++d) acc16[d] = fp32_to_fp16(std::fma(fp16_to_fp32_lut(vh[d]), vs, fp16_to_fp32_lut(acc16[d])));
        } else {
            const float* vr = v32;
            if (kv.v_type == GgmlType::F32) vr = reinterpret_cast<const float*>(vj);  // read in place
            else kernels::dequantize_row(kv.v_type, vj, v32, kv.dv);                  // the type's to_float
            for (int d = 0; d < kv.dv; ++d) acc[d] = std::fma(vr[d], vs, acc[d]);     // ggml_vec_mad_f32
        }
        S = std::fma(S, ms, vs);
    }
    const float sink_scale = apply_sink(kv, 0, M, S);
    const float inv = S == 0.f ? 0.f : 1.0f / S;
    if (f16_v)
        for (int d = 0; d < kv.dv; ++d) out[d] = fp16_to_fp32_lut(acc16[d]) * sink_scale * inv;
    else
        for (int d = 0; d < kv.dv; ++d) out[d] = acc[d] * sink_scale * inv;
}

}  // namespace moe::ops

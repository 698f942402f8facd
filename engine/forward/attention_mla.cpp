// Multi-head latent attention (deepseek2, glm-dsa) in llama.cpp's absorbed form, and the DSA lightning indexer.
//
//   q      = q_b(RMSNorm(q_a(x)))                      (or attn_q(x)), per head [nope | rope]
//   kv     = kv_a_mqa(x) = [c_raw (kv_lora) | k_pe (rope)],  c = RMSNorm(c_raw)
//   q_abs  = k_b[h] . q_nope[h]                        per head, kv_lora values
//   cache  = [c | rope(k_pe)] per token (fp16, or the K cache type): one key for all heads (MQA), values = its first kv_lora
//   out[h] = v_b[h] . attention([q_abs | rope(q_pe)], cache)
//   y      = attn_output(concat heads)             (kimi-k3: concat heads * sigmoid(attn_gate(x)) first; no RoPE)
#include <cmath>
#include <limits>

#include "engine/forward/runner.h"

namespace moe {

void Runner::attention_mla(uint32_t l, int n) {
    const Hparams& hp = m_.hp;
    const MlaConfig& c = hp.mla;
    const MlaWeights& w = m_.layers[l].mla;
    const int E = static_cast<int>(hp.n_embd), H = static_cast<int>(c.n_head);
    const int nope = static_cast<int>(c.qk_nope), rope = static_cast<int>(c.qk_rope), qk = nope + rope;
    const int lora = static_cast<int>(c.kv_lora_rank), dk = lora + rope, vh = static_cast<int>(c.v_head);
    const int ql = static_cast<int>(c.q_lora_rank);

    // Queries: through the normed q-LoRA latent (which the DSA indexer reads too), or directly.
    if (ql) {
        matmul_group({{&w.wq_a, qa_.data(), ql}, {&w.wkv_a, kva_.data(), dk}}, xn_.data(), E, n);
        for (int t = 0; t < n; ++t) ops::rms_norm(&qa_[t * ql], w.q_a_norm.f32(), &qa_[t * ql], ql, hp.rms_eps);
        matmul(w.wq_b, qa_.data(), ql, n, q_.data(), H * qk);
    } else {
        matmul_group({{&w.wq, q_.data(), H * qk}, {&w.wkv_a, kva_.data(), dk}}, xn_.data(), E, n);
    }

    pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
        std::vector<float> cs;
        for (int64_t t = t0; t < t1; ++t) {
            const int pos = n_past_ + static_cast<int>(t);
            ops::rope_cache(hp.rope, pos, cs);
            for (int h = 0; h < H; ++h) ops::rope(&q_[(t * H + h) * qk + nope], hp.rope, cs);
            float* kv = &kva_[t * dk];
            ops::rope(kv + lora, hp.rope, cs);
            ops::rms_norm(kv, w.kv_a_norm.f32(), kv, lora, hp.rms_eps);
            cache_->store_k(l, pos, kv);
            // The attention query: [absorbed nope part (filled below) | roped rope part].
            for (int h = 0; h < H; ++h) std::copy_n(&q_[(t * H + h) * qk + nope], rope, &qabs_[(t * H + h) * dk + lora]);
        }
    });
    matmul_heads(w.wk_b, H, lora, q_.data(), qk, static_cast<int64_t>(H) * qk, n, qabs_.data(), dk, static_cast<int64_t>(H) * dk);

    if (m_.has_indexer() && m_.layers[l].indexer_full) dsa_select(l, n, qa_.data(), ql);
    const KeySelection dsa{key_sel_.data() + dsa_selection_offset() * hp.indexer.top_k, key_sel_count_.data() + dsa_selection_offset(),
                           static_cast<int>(hp.indexer.top_k), 1, 1};
    attention_heads(cache_->view(l, dk, lora, &kv_kt_), qabs_.data(), static_cast<int64_t>(H) * dk, dk, H, 1, n, c.kq_scale, lat_.data(),
                    static_cast<int64_t>(H) * lora, lora, m_.has_indexer() ? &dsa : nullptr);
    matmul_heads(w.wv_b, H, vh, lat_.data(), lora, static_cast<int64_t>(H) * lora, n, att_.data(), vh, static_cast<int64_t>(H) * vh);
    if (w.gate.present()) {  // kimi-k3: the heads' output times sigmoid(gate . x)
        const int HV = H * vh;
        matmul(w.gate, xn_.data(), E, n, mla_gate_.data(), HV);
        for (int i = 0; i < n * HV; ++i) att_[i] *= ops::sigmoid(mla_gate_[i]);
    }
    matmul(w.wo, att_.data(), static_cast<int64_t>(H) * vh, n, tmp_.data(), E);
}

// The DSA lightning indexer of a full layer: per query, scores over the past positions
//   score[s] = sum_h w[h] * max(0, iq[h] . ik[s])
// with roped, Hadamard-rotated queries and keys (the keys cached in the K cache type), and the top_k positions kept. Shared
// layers that follow reuse this selection.
void Runner::dsa_select(uint32_t l, int n, const float* qr, int64_t qr_stride) {
    const Hparams& hp = m_.hp;
    const IndexerConfig& ic = hp.indexer;
    const MlaWeights& w = m_.layers[l].mla;
    const int E = static_cast<int>(hp.n_embd), IH = static_cast<int>(ic.n_head), ID = static_cast<int>(ic.head_dim);
    const int top_k = static_cast<int>(ic.top_k);
    matmul(w.ix_q_b, qr, qr_stride, n, ixq_.data(), static_cast<int64_t>(IH) * ID);
    matmul_group({{&w.ix_k, ixk_.data(), ID}, {&w.ix_proj, ixw_.data(), IH}}, xn_.data(), E, n);
    const float w_scale = 1.0f / std::sqrt(static_cast<float>(ID * IH));
    pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
        std::vector<float> cs, normed(static_cast<size_t>(ID));
        for (int64_t t = t0; t < t1; ++t) {
            const int pos = n_past_ + static_cast<int>(t);
            ops::rope_cache(hp.rope, pos, cs);
            for (int h = 0; h < IH; ++h) {
                float* q = &ixq_[(t * IH + h) * ID];
                ops::rope(q, hp.rope, cs);  // [rope | nope]: the first n_rot dims
                ops::hadamard(q, ID);
            }
            float* k = &ixk_[t * ID];
            ops::layer_norm(opt_.flavor, k, w.ix_k_norm.f32(), w.ix_k_norm_b.f32(), normed.data(), ID, 0.0f);
            ops::rope(normed.data(), hp.rope, cs);
            ops::hadamard(normed.data(), ID);
            cache_->store_ix(l, pos, normed.data());
            for (int h = 0; h < IH; ++h) ixw_[t * IH + h] *= w_scale;
        }
    });
    // Scores and top-k per query. llama.cpp sorts a row as long as its cache view (a multiple of 256 cells,
    // masked cells at -inf); the same row length keeps its choice among exact ties.
    const int used = n_past_ + n;
    const int view = std::max(256, (used + 255) / 256 * 256);
    if (ixkf_.size() < static_cast<size_t>(used) * ID) ixkf_.resize(static_cast<size_t>(used) * ID);
    cache_->load_ix(l, used, ixkf_.data());                               // the keys' to_float, as ggml's lightning indexer reads them
    const kernels::DotFn dot = kt_.dot[static_cast<int>(GgmlType::F32)];  // ggml_vec_dot_f32
    pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
        std::vector<float> score(static_cast<size_t>(view));
        std::vector<int> pick(static_cast<size_t>(top_k));
        for (int64_t t = t0; t < t1; ++t) {
            const int visible = n_past_ + static_cast<int>(t) + 1;
            std::fill(score.begin(), score.end(), -std::numeric_limits<float>::infinity());
            for (int s = 0; s < visible; ++s) {
                const float* kf = &ixkf_[static_cast<size_t>(s) * ID];
                float acc = 0.f;
                for (int h = 0; h < IH; ++h) acc = std::fma(std::max(dot(ID, &ixq_[(t * IH + h) * ID], kf), 0.0f), ixw_[t * IH + h], acc);
                score[s] = acc + 0.0f;  // the mask's zero
            }
            const int k = std::min(view, top_k);
            ops::top_k(score.data(), view, k, pick.data());
            int count = 0;
            int* sel = &key_sel_[(dsa_selection_offset() + static_cast<size_t>(t)) * top_k];
            for (int i = 0; i < k; ++i)
                if (pick[i] < visible) sel[count++] = pick[i];
            key_sel_count_[dsa_selection_offset() + static_cast<size_t>(t)] = count;
        }
    });
}

}  // namespace moe

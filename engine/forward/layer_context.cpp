// LayerContext: the runner's helpers a layer kind uses, forwarded (Runner keeps them private otherwise).
#include "engine/forward/layer_context.h"

#include "engine/forward/runner.h"

#include <algorithm>

namespace moe {

LayerContext::LayerContext(Runner& r)
    : r_(r), m_(r.m_), opt_(r.opt_), pool_(r.pool_), fops_(r.fops_), kt_(r.kt_), kv_kt_(r.kv_kt_), xn_(r.xn_.data()), out_(r.tmp_.data()),
      stream_(r.x_.data()) {}

std::span<const Segment> LayerContext::segments() const { return r_.segs_; }
void LayerContext::select_sequence(int seq) { r_.select_sequence(seq); }
int LayerContext::sequence() const { return r_.active_; }
int LayerContext::n_past() const { return r_.n_past_; }
SequenceCache& LayerContext::cache() { return *r_.cache_; }
int LayerContext::kernel_rows(int n) const { return r_.kernel_rows(n); }
ops::AttendFn LayerContext::attend_one_row() const { return r_.attend_; }
ops::AttendFn LayerContext::attend_tiled() const { return r_.attend_tiled_; }
ops::AttendFn LayerContext::attend_typed() const { return r_.attend_typed_; }

void LayerContext::matmul(const Tensor& w, const float* x, int64_t x_stride, int n_tok, float* out, int64_t out_stride) {
    r_.matmul(w, x, x_stride, n_tok, out, out_stride);
}
void LayerContext::matmul_group(std::initializer_list<MatmulOut> outs, const float* x, int64_t x_stride, int n_tok) {
    r_.matmul_group(outs, x, x_stride, n_tok);
}
void LayerContext::matmul_heads(const Tensor& w, int heads, int64_t rows, const float* x, int64_t x_head, int64_t x_stride, int n_tok, float* out,
                                int64_t out_head, int64_t out_stride) {
    r_.matmul_heads(w, heads, rows, x, x_head, x_stride, n_tok, out, out_head, out_stride);
}
void LayerContext::attention_heads(const ops::KvView& base, const float* q, int64_t q_tok_stride, int64_t q_head_stride, int heads, int kv_heads,
                                   int n, float scale, float* out, int64_t out_tok_stride, int64_t out_head_stride, const KeySelection* sel,
                                   int window, const float* sinks, int ring) {
    r_.attention_heads(base, q, q_tok_stride, q_head_stride, heads, kv_heads, n, scale, out, out_tok_stride, out_head_stride, sel, window, sinks,
                       ring);
}

void LayerContext::matmul_expert(const uint8_t* w, GgmlType type, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t x_stride,
                                 int n_tok, float* out, int64_t out_stride) {
    r_.matmul(w, type, row_bytes, rows, cols, x, x_stride, n_tok, out, out_stride, false);
}
void LayerContext::parallel_rows(int64_t rows, int group, const std::function<void(int64_t, int64_t)>& fn) { r_.parallel_rows(rows, group, fn); }
uint8_t* LayerContext::activations(size_t bytes) {
    if (r_.act_.size() < bytes) r_.act_.resize(bytes);
    return r_.act_.data();
}
const int32_t* LayerContext::row_tokens() const { return r_.row_tokens_.data(); }
RunnerStats& LayerContext::stats() { return r_.stats_; }
void LayerContext::count_routing(uint32_t l, int n, int used, const int* sel, const float* weights) {
    if (r_.hidden_pass_) return;
    if (r_.opt_.routing_trace) r_.opt_.routing_trace->route(l, n, used, sel, weights);
    const size_t X = r_.m_.hp.moe.n_expert;
    for (int i = 0; i < n * used; ++i) r_.selections_[l * X + static_cast<size_t>(sel[i])]++;
}
void LayerContext::prefetch_ahead(uint32_t l, int n) {
    int ahead = 0;
    for (uint32_t next = l + 1; next < r_.m_.hp.n_layer && ahead < r_.opt_.prefetch_layers; ++next)
        if (r_.m_.layers[next].moe) r_.predict_and_prefetch(next, n, ahead++ == 0);
}
void LayerContext::score_prefetch(uint32_t l, const std::vector<uint32_t>& needed) {
    if (r_.predicted_.empty() || r_.predicted_layer_ != static_cast<int>(l)) return;
    for (uint32_t e : needed) r_.stats_.prefetch_predicted_hits += std::count(r_.predicted_.begin(), r_.predicted_.end(), e) ? 1 : 0;
    r_.stats_.prefetch_predicted_total += needed.size();
}

}  // namespace moe

// LayerContext: the runner's helpers a layer kind uses, forwarded (Runner keeps them private otherwise).
#include "engine/forward/layer_context.h"

#include "engine/forward/runner.h"

namespace moe {

const Model& LayerContext::model() const { return r_.m_; }
const RunnerOptions& LayerContext::options() const { return r_.opt_; }
ThreadPool& LayerContext::pool() { return r_.pool_; }
const ops::FloatOps& LayerContext::fops() const { return r_.fops_; }
const kernels::KernelTable& LayerContext::kernels() const { return r_.kt_; }
const kernels::KernelTable& LayerContext::kv_kernels() const { return r_.kv_kt_; }
float* LayerContext::xn() { return r_.xn_.data(); }
float* LayerContext::out() { return r_.tmp_.data(); }
std::span<const Segment> LayerContext::segments() const { return r_.segs_; }
void LayerContext::select_sequence(int seq) { r_.select_sequence(seq); }
int LayerContext::sequence() const { return r_.active_; }
int LayerContext::n_past() const { return r_.n_past_; }
SequenceCache& LayerContext::cache() { return *r_.cache_; }
int LayerContext::kernel_rows(int n) const { return r_.kernel_rows(n); }
ops::AttendFn LayerContext::attend_one_row() const { return r_.attend_; }
ops::AttendFn LayerContext::attend_tiled() const { return r_.attend_tiled_; }

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

}  // namespace moe

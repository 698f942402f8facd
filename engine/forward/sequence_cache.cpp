#include "engine/forward/sequence_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "engine/kernels/kernels.h"
#include "engine/kernels/kv_cache_types.h"
#include "engine/model/cache_shape.h"
#include "engine/runtime/thread_pool.h"

namespace moe {

namespace {
size_t bytes_of(GgmlType t, int n) { return static_cast<size_t>(row_bytes(t, static_cast<uint64_t>(n)).value_or(0)); }
}  // namespace

std::string kv_cache_types_problem(const Model& m, kernels::KvCacheTypes types) {
    const Hparams& hp = m.hp;
    bool gqa = false, mla = false, compressed = false;
    for (const Layer& layer : m.layers) {
        gqa |= layer.attn == AttentionKind::Gqa;
        mla |= layer.attn == AttentionKind::Mla;
        compressed |= layer.attn == AttentionKind::Compressed;
    }
    auto name = [](GgmlType t) { return kernels::kv_cache_type_name(t); };
    if (compressed && types.k != types.v)
        return "this model (DeepSeek-V4 compressed attention) keeps V inside the K cache, so --cache-type-k " + name(types.k) +
               " and --cache-type-v " + name(types.v) + " must be the same type (as llama.cpp requires)";
    if (mla && types.k != types.v)
        return "this model (MLA) keeps V inside the K cache, so --cache-type-k " + name(types.k) + " and --cache-type-v " + name(types.v) +
               " must be the same type (as llama.cpp requires)";
    auto divides = [&](GgmlType t, const char* flag, uint32_t width, const std::string& what) -> std::string {
        const uint32_t block = type_info(t).block_elems;
        if (width % block == 0) return "";
        return std::string(flag) + " " + name(t) + " stores blocks of " + std::to_string(block) + " values, which do not divide " + what + " (" +
               std::to_string(width) + ")";
    };
    std::string why;
    if (gqa) {
        if (why.empty()) why = divides(types.k, "--cache-type-k", hp.gqa.head_dim, "the attention head size");
        if (why.empty()) why = divides(types.v, "--cache-type-v", hp.gqa.head_dim, "the attention head size");
    }
    if (mla) {
        if (why.empty()) why = divides(types.k, "--cache-type-k", hp.mla.kv_lora_rank + hp.mla.qk_rope, "the MLA latent row");
        if (why.empty()) why = divides(types.k, "--cache-type-k", hp.mla.kv_lora_rank, "the MLA value rows");
        if (why.empty() && m.has_indexer()) why = divides(types.k, "--cache-type-k", hp.indexer.head_dim, "the DSA indexer key");
    }
    if (compressed) {
        if (why.empty()) why = divides(types.k, "--cache-type-k", hp.csa.head_dim, "the attention head size");
        if (why.empty()) why = divides(types.k, "--cache-type-k", hp.csa.ix_dim, "the indexer key");
    }
    return why;
}

SequenceCache SequenceCache::make(const Model& m, int n_ctx, kernels::KvCacheTypes types, int ring_batch) {
    if (const std::string why = kv_cache_types_problem(m, types); !why.empty()) throw std::invalid_argument(why);
    SequenceCache c;
    c.n_ctx = n_ctx;
    c.types = types;
    const size_t L = m.layers.size();
    c.k.resize(L);
    c.v.resize(L);
    c.ix.resize(L);
    c.conv.resize(L);
    c.ssm.resize(L);
    c.k_width.assign(L, 0);
    c.v_width.assign(L, 0);
    c.k_row.assign(L, 0);
    c.v_row.assign(L, 0);
    c.ring.assign(L, 0);
    std::vector<LayerCacheShape> shape = cache_shape(m, static_cast<uint32_t>(std::max(ring_batch, 0)));
    for (size_t l = 0; l < L; ++l) {
        if (m.layers[l].sliding) c.window = static_cast<int>(m.hp.gqa.window);
        if (shape[l].ring && shape[l].ring < static_cast<uint32_t>(n_ctx)) c.ring[l] = static_cast<int>(shape[l].ring), c.ringed = true;
        else shape[l].ring = 0;
    }
    for (const LayerCacheShape& s : shape)
        if (s.ix_width) c.ix_width = static_cast<int>(s.ix_width), c.ix_type = s.ix_f32 ? GgmlType::F32 : types.k;
    c.ix_row = bytes_of(c.ix_type, c.ix_width);
    for (size_t l = 0; l < L; ++l) {
        const LayerCacheShape& s = shape[l];
        c.k_width[l] = static_cast<int>(s.k_width);
        c.v_width[l] = static_cast<int>(s.v_width);
        const size_t rows = s.rows(static_cast<uint64_t>(n_ctx));
        if (s.ix_width) c.ix[l].assign(rows * c.ix_row, 0);
        c.conv[l].assign(s.conv_floats, 0.f);
        c.ssm[l].assign(s.state_floats, 0.f);
        c.k_row[l] = bytes_of(types.k, c.k_width[l]);
        c.v_row[l] = bytes_of(types.v, c.v_width[l]);
        c.k[l].assign(rows * c.k_row[l], 0);
        c.v[l].assign(rows * c.v_row[l], 0);
    }
    return c;
}

uint64_t SequenceCache::bytes() const {
    uint64_t b = 0;
    for (size_t l = 0; l < k.size(); ++l) b += k[l].size() + v[l].size() + ix[l].size();
    return b + recurrent_bytes();
}

void SequenceCache::store_k(size_t l, int pos, const float* x) {
    kernels::store_kv_row(types.k, x, k[l].data() + row_of(l, pos) * k_row[l], k_width[l]);
}
void SequenceCache::store_v(size_t l, int pos, const float* x) {
    kernels::store_kv_row(types.v, x, v[l].data() + row_of(l, pos) * v_row[l], v_width[l]);
}

int SequenceCache::reach() const {
    int shortest = 0;
    for (int r : ring)
        if (r) shortest = std::max(shortest, high - (r - window));
    return shortest;
}

uint64_t SequenceCache::window_bytes() const {
    uint64_t b = 0;
    for (size_t l = 0; l < ring.size(); ++l)
        if (ring[l]) b += static_cast<uint64_t>(std::max(window - 1, 0)) * (k_row[l] + v_row[l]);
    return b;
}

void SequenceCache::save_window(int pos, std::vector<uint8_t>& out) const {
    out.clear();
    for (size_t l = 0; l < ring.size(); ++l)
        for (int p = std::max(0, pos - window + 1); ring[l] && p < pos; ++p) {
            const uint8_t* kr = k[l].data() + row_of(l, p) * k_row[l];
            const uint8_t* vr = v[l].data() + row_of(l, p) * v_row[l];
            out.insert(out.end(), kr, kr + k_row[l]);
            out.insert(out.end(), vr, vr + v_row[l]);
        }
}

void SequenceCache::restore_window(int pos, const std::vector<uint8_t>& in) {
    size_t off = 0;
    for (size_t l = 0; l < ring.size(); ++l)
        for (int p = std::max(0, pos - window + 1); ring[l] && p < pos; ++p) {
            if (off + k_row[l] + v_row[l] > in.size()) throw std::logic_error("window snapshot of another shape");
            std::copy_n(in.data() + off, k_row[l], k[l].data() + row_of(l, p) * k_row[l]);
            std::copy_n(in.data() + off + k_row[l], v_row[l], v[l].data() + row_of(l, p) * v_row[l]);
            off += k_row[l] + v_row[l];
        }
    if (off != in.size()) throw std::logic_error("window snapshot of another shape");
    high = pos;
}
void SequenceCache::store_ix(size_t l, int pos, const float* x) {
    kernels::store_kv_row(ix_type, x, ix[l].data() + static_cast<size_t>(pos) * ix_row, ix_width);
}
void SequenceCache::load_ix(size_t l, int n, float* out) const {
    // Rows are whole blocks and adjacent, so positions [0, n) are one run of n * ix_width values.
    kernels::dequantize_row(ix_type, ix[l].data(), out, static_cast<int64_t>(n) * ix_width);
}

ops::KvView SequenceCache::view(size_t l, int dk, int dv, const kernels::KernelTable* table) const {
    ops::KvView kv;
    kv.dk = dk;
    kv.dv = dv;
    const bool latent = v[l].empty();  // MLA: values are the leading part of each K row
    if (types.f16()) {
        kv.k = reinterpret_cast<const uint16_t*>(k[l].data());
        kv.v = latent ? kv.k : reinterpret_cast<const uint16_t*>(v[l].data());
        kv.k_stride = static_cast<size_t>(k_width[l]);
        kv.v_stride = latent ? kv.k_stride : static_cast<size_t>(v_width[l]);
        return kv;
    }
    kv.k_raw = k[l].data();
    kv.v_raw = latent ? kv.k_raw : v[l].data();
    kv.k_row = k_row[l];
    kv.v_row = latent ? k_row[l] : v_row[l];
    kv.k_type = types.k;
    kv.v_type = latent ? types.k : types.v;
    kv.table = table;
    return kv;
}

ops::KvView kv_view_head(const ops::KvView& base, int h) {
    ops::KvView kv = base;
    if (base.typed()) {
        kv.k_raw += bytes_of(base.k_type, h * base.dk);
        kv.v_raw += bytes_of(base.v_type, h * base.dv);
    } else {
        kv.k += static_cast<size_t>(h) * base.dk;
        kv.v += static_cast<size_t>(h) * base.dv;
    }
    return kv;
}

bool has_f32_part(const ops::KvView& view) { return view.typed() && (view.k_type == GgmlType::F32 || view.v_type == GgmlType::F32); }

ops::KvView cast_f32_parts_to_f16(const ops::KvView& view, int rows, int k_width, int v_width, std::vector<uint16_t>& buf, ThreadPool* pool) {
    if (!has_f32_part(view)) return view;
    const bool latent = view.v_raw == view.k_raw;  // MLA: values inside the K rows
    const bool cast_k = view.k_type == GgmlType::F32, cast_v = !latent && view.v_type == GgmlType::F32;
    const size_t k_len = cast_k ? static_cast<size_t>(rows) * k_width : 0, v_len = cast_v ? static_cast<size_t>(rows) * v_width : 0;
    if (buf.size() < k_len + v_len) buf.resize(k_len + v_len);
    uint16_t* k16 = buf.data();
    uint16_t* v16 = buf.data() + k_len;
    auto convert = [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            if (cast_k) kernels::store_kv_row(GgmlType::F16, reinterpret_cast<const float*>(view.k_raw + r * view.k_row), k16 + r * k_width, k_width);
            if (cast_v) kernels::store_kv_row(GgmlType::F16, reinterpret_cast<const float*>(view.v_raw + r * view.v_row), v16 + r * v_width, v_width);
        }
    };
    if (pool) pool->parallel_for(rows, convert);
    else convert(0, rows);
    ops::KvView out = view;
    if (cast_k) out.k_raw = reinterpret_cast<const uint8_t*>(k16), out.k_row = static_cast<size_t>(k_width) * 2, out.k_type = GgmlType::F16;
    if (latent) out.v_raw = out.k_raw, out.v_row = out.k_row, out.v_type = out.k_type;
    else if (cast_v) out.v_raw = reinterpret_cast<const uint8_t*>(v16), out.v_row = static_cast<size_t>(v_width) * 2, out.v_type = GgmlType::F16;
    if (out.k_type != GgmlType::F16 || out.v_type != GgmlType::F16) return out;  // the other part quantized: a typed view
    ops::KvView f16 = out;
    f16.k_raw = f16.v_raw = nullptr;
    f16.k = reinterpret_cast<const uint16_t*>(out.k_raw), f16.v = reinterpret_cast<const uint16_t*>(out.v_raw);
    f16.k_stride = out.k_row / 2, f16.v_stride = out.v_row / 2;
    return f16;
}

ops::KvView gather_positions(const ops::KvView& head, const int* items, int count, int span, std::vector<uint8_t>& buf) {
    const bool typed = head.typed();
    const size_t kb = typed ? bytes_of(head.k_type, head.dk) : head.dk * sizeof(uint16_t);
    const size_t vb = typed ? bytes_of(head.v_type, head.dv) : head.dv * sizeof(uint16_t);
    const auto* k0 = typed ? head.k_raw : reinterpret_cast<const uint8_t*>(head.k);
    const auto* v0 = typed ? head.v_raw : reinterpret_cast<const uint8_t*>(head.v);
    const size_t k_step = typed ? head.k_row : head.k_stride * sizeof(uint16_t), v_step = typed ? head.v_row : head.v_stride * sizeof(uint16_t);
    int rows = 0;
    for (int i = 0; i < count; ++i) rows += std::max(0, std::min(head.n_kv, (items[i] + 1) * span) - items[i] * span);
    buf.resize(static_cast<size_t>(rows) * (kb + vb));
    uint8_t* k = buf.data();
    uint8_t* v = buf.data() + static_cast<size_t>(rows) * kb;
    int r = 0;
    for (int i = 0; i < count; ++i)
        for (int j = items[i] * span; j < std::min(head.n_kv, (items[i] + 1) * span); ++j, ++r) {
            std::memcpy(k + r * kb, k0 + j * k_step, kb);
            std::memcpy(v + r * vb, v0 + j * v_step, vb);
        }
    ops::KvView out = head;
    out.n_kv = rows;
    out.visible = nullptr;
    out.k_tiles = out.v_f32 = nullptr;
    out.rows_per_position = 0;
    if (typed) {
        out.k_raw = k, out.v_raw = v, out.k_row = kb, out.v_row = vb;
    } else {
        out.k = reinterpret_cast<const uint16_t*>(k), out.v = reinterpret_cast<const uint16_t*>(v);
        out.k_stride = head.dk, out.v_stride = head.dv;
    }
    return out;
}

bool SequenceCache::has_recurrent() const {
    for (size_t l = 0; l < ssm.size(); ++l)
        if (!ssm[l].empty() || !conv[l].empty()) return true;
    return false;
}

uint64_t SequenceCache::recurrent_bytes() const {
    uint64_t b = 0;
    for (size_t l = 0; l < ssm.size(); ++l) b += (conv[l].size() + ssm[l].size()) * sizeof(float);
    return b;
}

void SequenceCache::save_recurrent(std::vector<float>& out) const {
    out.clear();
    out.reserve(recurrent_bytes() / sizeof(float));
    for (size_t l = 0; l < ssm.size(); ++l) {
        out.insert(out.end(), conv[l].begin(), conv[l].end());
        out.insert(out.end(), ssm[l].begin(), ssm[l].end());
    }
}

void SequenceCache::restore_recurrent(const std::vector<float>& in) {
    if (in.size() * sizeof(float) != recurrent_bytes()) throw std::logic_error("recurrent snapshot of another shape");
    size_t off = 0;
    for (size_t l = 0; l < ssm.size(); ++l) {
        std::copy_n(in.begin() + static_cast<ptrdiff_t>(off), conv[l].size(), conv[l].begin());
        off += conv[l].size();
        std::copy_n(in.begin() + static_cast<ptrdiff_t>(off), ssm[l].size(), ssm[l].begin());
        off += ssm[l].size();
    }
}

void SequenceCache::reset_recurrent() {
    for (size_t l = 0; l < ssm.size(); ++l) {
        std::fill(conv[l].begin(), conv[l].end(), 0.f);
        std::fill(ssm[l].begin(), ssm[l].end(), 0.f);
    }
}

}  // namespace moe

// llama.cpp's decode speed at a context depth without evaluating that many prompt tokens: the peer side of
// `bench/long_context.sh --fill synthetic` (the engine side is `moestream bench --depth-fill synthetic`).
//
// A decoding step's cost at depth D depends on how many positions each attention reads, not on what they hold,
// while filling D positions through the prompt path costs O(D^2) attention (llama-bench -d 131072 runs for hours
// on two cores). So: one real token is evaluated, its sequence state is read out through llama.cpp's public
// state API (llama_state_seq_get_data), every KV part of that state is rewritten with D cells (positions
// 0..D-1, random rows of the cache's own type; recurrent parts kept as they are, their position moved to D-1),
// the state is set back (llama_state_seq_set_data), and N tokens are decoded, as llama-bench's tg does after its
// -d fill: a one-token warm-up, then each repetition restores the state and times N decoded tokens.
//
// Built by bench/long_context.sh against a llama.cpp build outside the repository (its headers and libllama);
// it uses only llama.h. The state layout it rewrites is llama_kv_cache::state_write's (per stream: the cell
// count, each cell's position and sequence ids, then per layer the K rows, then per layer the V rows unless V is
// transposed or absent) and llama_memory_recurrent's (a cell count, positions, then its rows): the parts are
// found by trying the layouts below until one accounts for every byte (after llama_context's 8-byte header). A
// sliding-window cache (gpt-oss, gemma) keeps a second, window-sized part this does not rewrite: such a model stops
// with "fits none of the known layouts".
//
//   llama_depth MODEL DEPTH N_GEN REPS THREADS CACHE_TYPE_K CACHE_TYPE_V  -> one JSON line
// (linked with libllama and libggml-cpu)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "llama.h"

namespace {

struct TypeBlock {
    const char* name;
    ggml_type type;
    int bytes;   // per block
    int scales;  // leading f16 values kept in a sane range (scale, min); the rest of a block is random bits
};
// The cache types llama.cpp accepts for -ctk / -ctv (common/arg.cpp's kv_cache_types).
constexpr TypeBlock kTypes[] = {{"f32", GGML_TYPE_F32, 4, 0},    {"f16", GGML_TYPE_F16, 2, 0},    {"bf16", GGML_TYPE_BF16, 2, 0},
                                {"q8_0", GGML_TYPE_Q8_0, 34, 1}, {"q4_0", GGML_TYPE_Q4_0, 18, 1}, {"q4_1", GGML_TYPE_Q4_1, 20, 2},
                                {"q5_0", GGML_TYPE_Q5_0, 22, 1}, {"q5_1", GGML_TYPE_Q5_1, 24, 2}, {"iq4_nl", GGML_TYPE_IQ4_NL, 18, 1}};

const TypeBlock& by_name(const std::string& name) {
    for (const auto& t : kTypes)
        if (name == t.name) return t;
    throw std::runtime_error("unknown cache type " + name);
}
const TypeBlock* by_id(int32_t id) {
    for (const auto& t : kTypes)
        if (t.type == id) return &t;
    return nullptr;
}

uint16_t f16_bits(float f) {  // normal values only, truncated: these are random numbers
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000, exp = (u >> 23) & 0xff, man = (u >> 13) & 0x3ff;
    if (f == 0.f || exp < 127 - 14) return static_cast<uint16_t>(sign);
    return static_cast<uint16_t>(sign | ((exp - 127 + 15) << 10) | man);
}

// Random rows of one type: values in [-1, 1) for float types, a small scale and random quants for block types.
void random_rows(const TypeBlock& t, uint8_t* out, size_t bytes, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> unit(-1.f, 1.f), scale(0.002f, 0.02f);
    if (t.type == GGML_TYPE_F32) {
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            const float f = unit(rng);
            std::memcpy(out + i, &f, 4);
        }
    } else if (t.type == GGML_TYPE_F16 || t.type == GGML_TYPE_BF16) {
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            const float f = unit(rng);
            uint16_t h = f16_bits(f);
            if (t.type == GGML_TYPE_BF16) {
                uint32_t u;
                std::memcpy(&u, &f, 4);
                h = static_cast<uint16_t>(u >> 16);
            }
            std::memcpy(out + i, &h, 2);
        }
    } else {
        for (size_t i = 0; i < bytes; i += 8) {
            const uint64_t r = rng();
            std::memcpy(out + i, &r, std::min<size_t>(8, bytes - i));
        }
        for (size_t b = 0; b + t.bytes <= bytes; b += t.bytes)
            for (int s = 0; s < t.scales; ++s) {
                const uint16_t h = f16_bits(s == 0 ? scale(rng) : -scale(rng));
                std::memcpy(out + b + 2 * s, &h, 2);
            }
    }
}

struct Reader {
    const std::vector<uint8_t>& b;
    size_t at = 0;
    template <class T>
    T get() {
        if (at + sizeof(T) > b.size()) throw std::runtime_error("short");
        T v;
        std::memcpy(&v, b.data() + at, sizeof(T));
        at += sizeof(T);
        return v;
    }
    void skip(size_t n) {
        if (at + n > b.size()) throw std::runtime_error("short");
        at += n;
    }
};
template <class T>
void put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}

// One KV part of a one-cell state, rewritten with `depth` cells. ext: the cells carry M-RoPE's 2D position
// (8 bytes); with_v: V rows follow the K rows.
void rewrite_kv(Reader& r, std::vector<uint8_t>& out, int depth, bool ext, bool with_v, std::mt19937_64& rng) {
    const auto n_stream = r.get<uint32_t>();
    if (n_stream != 1) throw std::runtime_error("streams");
    put(out, n_stream);
    if (r.get<uint32_t>() != 1) throw std::runtime_error("cells");
    put(out, static_cast<uint32_t>(depth));
    r.get<int32_t>();  // the token's position
    const auto n_seq = r.get<uint32_t>();
    if (n_seq != 1) throw std::runtime_error("seq ids");
    std::vector<uint8_t> ext_bytes(ext ? 8 : 0);
    for (auto& e : ext_bytes) e = r.get<uint8_t>();
    const auto seq = r.get<int32_t>();
    for (int32_t p = 0; p < depth; ++p) {
        put(out, p);
        put(out, n_seq);
        out.insert(out.end(), ext_bytes.begin(), ext_bytes.end());
        put(out, seq);
    }
    const auto v_trans = r.get<uint32_t>(), n_layer = r.get<uint32_t>();
    if (v_trans > 1 || n_layer == 0 || n_layer > 4096) throw std::runtime_error("layers");
    if (v_trans && with_v) throw std::runtime_error("transposed V (run with flash attention)");
    put(out, v_trans);
    put(out, n_layer);
    for (int part = 0; part < (with_v ? 2 : 1); ++part)
        for (uint32_t l = 0; l < n_layer; ++l) {
            const TypeBlock* t = by_id(r.get<int32_t>());
            const auto row = r.get<uint64_t>();
            if (!t || row == 0 || row > (1u << 24) || row % t->bytes) throw std::runtime_error("row");
            r.skip(row);
            put(out, static_cast<int32_t>(t->type));
            put(out, row);
            const size_t at = out.size();
            out.resize(at + row * static_cast<size_t>(depth));
            random_rows(*t, out.data() + at, row * static_cast<size_t>(depth), rng);
        }
}

// The whole sequence state rewritten for `layout`: 'A' a KV part with V, 'K' one without (MLA, DSA's indexer
// keys), 'R' a recurrent part (kept, its cell's position moved to depth - 1). Empty where the layout does not fit.
std::optional<std::vector<uint8_t>> rewrite(const std::vector<uint8_t>& state, const std::string& layout, bool ext, int depth) {
    std::mt19937_64 rng(42);
    Reader r{state};
    std::vector<uint8_t> out;
    try {
        // llama_context's header: the state magic and the sequence id
        put(out, r.get<uint32_t>());
        put(out, r.get<int32_t>());
        for (char part : layout) {
            if (part == 'R') {
                const size_t at = r.at;
                if (r.get<uint32_t>() != 1) return std::nullopt;
                r.get<int32_t>();
                if (r.get<uint32_t>() != 0) return std::nullopt;
                out.insert(out.end(), state.begin() + static_cast<ptrdiff_t>(at), state.end());
                const int32_t last = depth - 1;
                std::memcpy(out.data() + (out.size() - (state.size() - at)) + 4, &last, 4);
                r.at = state.size();
            } else {
                rewrite_kv(r, out, depth, ext, part == 'A', rng);
            }
        }
    } catch (const std::runtime_error&) { return std::nullopt; }
    if (r.at != state.size()) return std::nullopt;
    return out;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
    if (argc != 8) {
        std::fprintf(stderr, "usage: %s MODEL DEPTH N_GEN REPS THREADS CACHE_TYPE_K CACHE_TYPE_V\n", argv[0]);
        return 2;
    }
    const int depth = std::atoi(argv[2]), n_gen = std::atoi(argv[3]), reps = std::atoi(argv[4]), threads = std::atoi(argv[5]);
    if (depth < 2 || n_gen < 1 || reps < 1 || threads < 1) {
        std::fprintf(stderr, "llama_depth: DEPTH >= 2, N_GEN, REPS and THREADS >= 1\n");
        return 2;
    }
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        std::fprintf(stderr, "llama_depth: cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<uint32_t>(depth + n_gen + 256);
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.type_k = by_name(argv[6]).type;
    cp.type_v = by_name(argv[7]).type;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "llama_depth: cannot create a context of %u cells\n", cp.n_ctx);
        return 1;
    }
    // A persistent pool, as llama-bench attaches (without one, ggml starts and joins its threads on every decode).
    ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    ggml_threadpool* pool = ggml_threadpool_new(&tpp);
    if (!pool) {
        std::fprintf(stderr, "llama_depth: cannot create a pool of %d threads\n", threads);
        return 1;
    }
    llama_attach_threadpool(ctx, pool, nullptr);
    const llama_vocab* vocab = llama_model_get_vocab(model);
    llama_token tok = 1 % llama_vocab_n_tokens(vocab);
    if (llama_decode(ctx, llama_batch_get_one(&tok, 1)) != 0) return 1;
    std::vector<uint8_t> one(llama_state_seq_get_size(ctx, 0));
    one.resize(llama_state_seq_get_data(ctx, one.data(), one.size(), 0));

    std::optional<std::vector<uint8_t>> deep;
    std::string found;
    for (const char* layout : {"A", "K", "AR", "KR", "KK", "KKR", "R"})
        for (bool ext : {false, true})
            if (!deep && (deep = rewrite(one, layout, ext, depth))) found = std::string(layout) + (ext ? "+ext" : "");
    if (!deep) {
        std::fprintf(stderr, "llama_depth: this model's sequence state (%zu bytes) fits none of the known layouts\n", one.size());
        return 1;
    }
    auto restore = [&] {
        llama_memory_clear(llama_get_memory(ctx), true);
        if (llama_state_seq_set_data(ctx, deep->data(), deep->size(), 0) == 0) throw std::runtime_error("llama_state_seq_set_data refused the state");
    };
    // Random tokens, as llama-bench's tg feeds (a repeated token would keep the same experts routed).
    std::mt19937 token_rng(7);
    auto decode = [&](int n) {
        for (int i = 0; i < n; ++i) {
            llama_token t = static_cast<llama_token>(token_rng() % static_cast<uint32_t>(llama_vocab_n_tokens(vocab)));
            if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) throw std::runtime_error("llama_decode failed");
        }
        llama_synchronize(ctx);
    };
    try {
        restore();
        decode(1);  // warm-up, as llama-bench's
        std::string each;
        double sum = 0;
        for (int i = 0; i < reps; ++i) {
            restore();
            const double t0 = now();
            decode(n_gen);
            const double ts = n_gen / (now() - t0);
            sum += ts;
            each += (i ? "," : "") + std::to_string(ts);
        }
        std::printf("{\"depth\": %d, \"n_gen\": %d, \"layout\": \"%s\", \"state_bytes\": %zu, \"avg_ts\": %.3f, \"each_ts\": [%s]}\n", depth, n_gen,
                    found.c_str(), deep->size(), sum / reps, each.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama_depth: %s\n", e.what());
        return 1;
    }
    llama_free(ctx);
    ggml_threadpool_free(pool);
    llama_model_free(model);
    return 0;
}

// `moestream mkmodel`: a synthetic qwen3moe GGUF with seeded random weights (variance 1/fan_in, so
// activations stay healthy through the layers) and tokenizer metadata copied from a vocab GGUF, or a
// built-in byte-level vocabulary when none is at hand (the demo model: nothing is downloaded).
#include <boost/program_options.hpp>
#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <random>

#include "cli/commands.h"
#include "engine/gguf/gguf.h"
#include "engine/kernels/kernels.h"

namespace po = boost::program_options;

namespace moe::cli {
namespace {

using KV = std::vector<std::pair<std::string, GgufValue>>;

// 256 byte tokens of GPT-2's byte-level alphabet plus the ChatML control tokens.
KV builtin_vocab() {
    std::vector<std::string> tokens;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
        std::string s;
        if (cp < 0x80) s += static_cast<char>(cp);
        else { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
        tokens.push_back(s);
    }
    std::vector<int32_t> types(tokens.size(), 1);
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        tokens.push_back(special);
        types.push_back(3);
    }
    const int32_t eot = 256, im_end = 258;
    return {
        {"tokenizer.ggml.model", GgufValue::string("gpt2")},
        {"tokenizer.ggml.pre", GgufValue::string("qwen2")},
        {"tokenizer.ggml.tokens", GgufValue::string_array(tokens)},
        {"tokenizer.ggml.token_type", GgufValue::i32_array_of(types)},
        {"tokenizer.ggml.merges", GgufValue::string_array({})},
        {"tokenizer.ggml.eos_token_id", GgufValue::u32(im_end)},
        {"tokenizer.ggml.padding_token_id", GgufValue::u32(eot)},
        {"tokenizer.ggml.bos_token_id", GgufValue::u32(eot)},
        {"tokenizer.ggml.add_bos_token", GgufValue::boolean(false)},
        {"tokenizer.chat_template",
         GgufValue::string("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                           "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")},
    };
}

KV vocab_from(const std::string& path) {
    GgufFile f = read_gguf_header(path);
    KV out;
    for (const auto& [k, v] : f.kv)
        if (k.rfind("tokenizer.", 0) == 0) out.emplace_back(k, v);
    if (!f.find("tokenizer.ggml.tokens")) throw CliError(path + ": no tokenizer.ggml.tokens to copy");
    return out;
}

struct Shape {
    uint32_t layers, embd, heads, kv_heads, head_dim, experts, used, ffn;
};

}  // namespace

int cmd_mkmodel(const std::vector<std::string>& args) {
    Shape s{};
    std::string arch, vocab, type_name_arg, out;
    uint64_t seed = 0;
    bool builtin = false, tie = false;
    float rope_base = 1e6f;
    po::options_description opts("moestream mkmodel options");
    opts.add_options()("help,h", "show this help")
        ("arch", po::value(&arch)->default_value("qwen3moe"), "architecture (qwen3moe)")
        ("layers", po::value(&s.layers)->required(), "transformer blocks")
        ("embd", po::value(&s.embd)->required(), "model width")
        ("heads", po::value(&s.heads)->required(), "query heads")
        ("kv-heads", po::value(&s.kv_heads)->required(), "key/value heads")
        ("head-dim", po::value(&s.head_dim)->required(), "width of one head")
        ("experts", po::value(&s.experts)->required(), "routed experts per layer")
        ("experts-used", po::value(&s.used)->required(), "experts chosen per token")
        ("ffn", po::value(&s.ffn)->required(), "expert hidden width")
        ("vocab-from", po::value(&vocab), "copy tokenizer metadata from this GGUF")
        ("vocab-builtin", po::bool_switch(&builtin), "use a built-in byte-level vocabulary (259 tokens)")
        ("type", po::value(&type_name_arg)->default_value("f32"), "f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k, or q4_k_m (q4_K with q6_K attn_v/ffn_down/output)")
        ("tie-output", po::bool_switch(&tie), "no output.weight: the head reuses token_embd (as small Qwen3 files)")
        ("rope-base", po::value(&rope_base)->default_value(1e6f), "rope.freq_base")
        ("seed", po::value(&seed)->default_value(1), "random seed")
        ("out", po::value(&out)->required(), "output .gguf");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) { std::cout << opts; return 0; }
    po::notify(vm);
    if (arch != "qwen3moe") throw CliError("--arch " + arch + " is not supported (qwen3moe)");
    if (builtin == !vocab.empty()) throw CliError("give exactly one of --vocab-from FILE and --vocab-builtin");
    for (auto [name, v] : {std::pair{"layers", s.layers}, {"embd", s.embd}, {"heads", s.heads}, {"kv-heads", s.kv_heads},
                           {"head-dim", s.head_dim}, {"experts", s.experts}, {"experts-used", s.used}, {"ffn", s.ffn}})
        if (v == 0 || v > 65536) throw CliError(std::string("--") + name + " " + std::to_string(v) + " is out of range (1..65536)");
    if (s.heads % s.kv_heads) throw CliError("--heads " + std::to_string(s.heads) + " is not a multiple of --kv-heads " + std::to_string(s.kv_heads));
    if (s.used > s.experts) throw CliError("--experts-used " + std::to_string(s.used) + " exceeds --experts " + std::to_string(s.experts));
    if (s.head_dim % 2) throw CliError("--head-dim must be even (RoPE rotates pairs)");

    bool mix = false;
    std::string tn = type_name_arg;
    for (char& c : tn) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (tn == "q4_k_m") { mix = true; tn = "q4_k"; }
    auto base_type = parse_type_name(tn);
    if (!base_type || !type_info(*base_type).computable) throw CliError("--type " + type_name_arg + " is not one the engine computes");

    KV kv = {{"general.architecture", GgufValue::string("qwen3moe")},
             {"general.name", GgufValue::string("moestream synthetic qwen3moe")},
             {"general.description", GgufValue::string("synthetic random-weight MoE model (moestream mkmodel seed=" + std::to_string(seed) + ")")}};
    KV vocab_kv = builtin ? builtin_vocab() : vocab_from(vocab);
    uint32_t n_vocab = 0;
    for (const auto& [k, v] : vocab_kv) if (k == "tokenizer.ggml.tokens") n_vocab = static_cast<uint32_t>(v.count);
    auto u32 = [](uint32_t v) { return GgufValue::u32(v); };
    KV hp = {{"qwen3moe.vocab_size", u32(n_vocab)},        {"qwen3moe.context_length", u32(4096)},
             {"qwen3moe.embedding_length", u32(s.embd)},     {"qwen3moe.feed_forward_length", u32(s.ffn * s.used)},
             {"qwen3moe.block_count", u32(s.layers)},        {"qwen3moe.attention.head_count", u32(s.heads)},
             {"qwen3moe.attention.head_count_kv", u32(s.kv_heads)}, {"qwen3moe.attention.key_length", u32(s.head_dim)},
             {"qwen3moe.attention.value_length", u32(s.head_dim)},  {"qwen3moe.rope.freq_base", GgufValue::f32(rope_base)},
             {"qwen3moe.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-6f)},
             {"qwen3moe.expert_count", u32(s.experts)},      {"qwen3moe.expert_used_count", u32(s.used)},
             {"qwen3moe.expert_feed_forward_length", u32(s.ffn)}};
    kv.insert(kv.end(), vocab_kv.begin(), vocab_kv.end());
    kv.insert(kv.end(), hp.begin(), hp.end());

    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    std::vector<GgufTensorData> tensors;
    // zero_row(r): write row r as zeros (used to keep the demo's output head off unprintable bytes).
    auto add = [&](const std::string& name, std::vector<uint64_t> ne, GgmlType type, float scale, float offset,
                   const std::function<bool(uint64_t)>& zero_row = {}) {
        auto rb = row_bytes(type, ne[0]);
        if (!rb)
            throw CliError("tensor " + name + ": row length " + std::to_string(ne[0]) + " is not a multiple of the " +
                           std::string(type_info(type).name) + " block (" + std::to_string(type_info(type).block_elems) +
                           "); choose another --type or width");
        uint64_t rows = 1;
        for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
        GgufTensorData t{name, ne, type, std::vector<uint8_t>(*rb * rows)};
        std::vector<float> row(ne[0]);
        for (uint64_t r = 0; r < rows; ++r) {
            for (auto& x : row) x = offset + scale * uni(rng);
            if (zero_row && zero_row(r)) std::fill(row.begin(), row.end(), 0.f);
            kernels::quantize_row(type, row.data(), t.bytes.data() + r * *rb, static_cast<int64_t>(ne[0]));
        }
        tensors.push_back(std::move(t));
    };
    const GgmlType T = *base_type, T6 = mix ? GgmlType::Q6_K : T, F = GgmlType::F32;
    // Uniform(-a, a) has variance a^2/3: a = sqrt(3/fan_in) gives variance 1/fan_in.
    auto w = [](uint32_t fan_in) { return std::sqrt(3.f / static_cast<float>(fan_in)); };
    const uint32_t Q = s.heads * s.head_dim, KVd = s.kv_heads * s.head_dim;
    add("token_embd.weight", {s.embd, n_vocab}, T, 1.f, 0.f);
    add("output_norm.weight", {s.embd}, F, 0.2f, 1.f);  // norms around 1, not exactly 1, so applying them matters
    // With the built-in byte vocabulary, only printable ASCII (and the end-of-turn token) get an output row:
    // the demo's random text then prints as characters rather than stray bytes.
    std::function<bool(uint64_t)> unprintable;
    if (builtin)
        unprintable = [](uint64_t id) {
            // Token id == byte value for the 256 byte tokens: keep space..'~', newline, and <|im_end|> (258).
            return !((id >= 32 && id <= 126) || id == 10 || id == 258);
        };
    if (!tie) add("output.weight", {s.embd, n_vocab}, T6, 4.f * w(s.embd), 0.f, unprintable);
    for (uint32_t l = 0; l < s.layers; ++l) {
        std::string p = "blk." + std::to_string(l) + ".";
        add(p + "attn_norm.weight", {s.embd}, F, 0.2f, 1.f);
        add(p + "attn_q.weight", {s.embd, Q}, T, w(s.embd), 0.f);
        add(p + "attn_k.weight", {s.embd, KVd}, T, w(s.embd), 0.f);
        add(p + "attn_v.weight", {s.embd, KVd}, T6, w(s.embd), 0.f);
        add(p + "attn_output.weight", {Q, s.embd}, T, w(Q), 0.f);
        add(p + "attn_q_norm.weight", {s.head_dim}, F, 0.2f, 1.f);
        add(p + "attn_k_norm.weight", {s.head_dim}, F, 0.2f, 1.f);
        add(p + "ffn_norm.weight", {s.embd}, F, 0.2f, 1.f);
        add(p + "ffn_gate_inp.weight", {s.embd, s.experts}, F, 2.f * w(s.embd), 0.f);
        add(p + "ffn_gate_exps.weight", {s.embd, s.ffn, s.experts}, T, w(s.embd), 0.f);
        add(p + "ffn_up_exps.weight", {s.embd, s.ffn, s.experts}, T, w(s.embd), 0.f);
        add(p + "ffn_down_exps.weight", {s.ffn, s.embd, s.experts}, T6, w(s.ffn), 0.f);
    }
    write_gguf(out, kv, tensors);
    uint64_t bytes = 0;
    for (const auto& t : tensors) bytes += t.bytes.size();
    std::cerr << "wrote " << out << ": " << tensors.size() << " tensors, " << bytes / (1024.0 * 1024.0) << " MiB of weights, "
              << n_vocab << " tokens\n";
    return 0;
}

}  // namespace moe::cli

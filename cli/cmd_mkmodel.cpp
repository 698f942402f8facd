// `moestream mkmodel`: a synthetic MoE GGUF of any supported architecture with seeded random weights, and
// tokenizer metadata copied from a vocab GGUF or a built-in byte-level vocabulary (the demo model: nothing is
// downloaded). See synth/synthetic_model.h.
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "synth/synthetic_model.h"

namespace po = boost::program_options;

namespace moe::cli {

int cmd_mkmodel(const std::vector<std::string>& args) {
    synth::SyntheticSpec s;
    std::string vocab, ix_types, template_file, ratios;
    bool builtin = false;
    po::options_description opts("moestream mkmodel options");
    opts.add_options()("help,h", "show this help")(
        "arch", po::value(&s.arch)->default_value("qwen3moe"),
        "architecture: qwen3moe glm4moe qwen35moe deepseek2 glm-dsa gpt-oss minimax-m2 minimax-m3 kimi-k3 deepseek4")(
        "layers", po::value(&s.layers)->required(), "transformer blocks (the trunk)")("embd", po::value(&s.embd)->required(), "model width")(
        "heads", po::value(&s.heads)->required(), "query heads")("kv-heads", po::value(&s.kv_heads), "key/value heads (GQA; default: --heads)")(
        "head-dim", po::value(&s.head_dim), "width of one head (GQA; default: embd/heads)")(
        "rope-dims", po::value(&s.rope_dims),
        "rotated dims per head (GQA; default: all for qwen3moe and gpt-oss, half for glm4moe and minimax-m2/m3)")(
        "window", po::value(&s.window)->default_value(128),
        "gpt-oss: sliding window of the even layers; deepseek4: every layer's (attention.sliding_window)")(
        "compress-ratios", po::value(&ratios),
        "deepseek4: compression ratio per layer, e.g. 0,4,128,4 (4: overlapping rows picked by the indexer; default 0 then 4 and 128 alternating)")(
        "hash-layers", po::value(&s.hash_layers)->default_value(2), "deepseek4: leading layers routed by token id")(
        "out-groups", po::value(&s.out_groups)->default_value(2), "deepseek4: groups of heads in the output LoRA")(
        "out-rank", po::value(&s.out_rank)->default_value(32), "deepseek4: the output LoRA's rank per group")(
        "swiglu-limit", po::value(&s.swiglu_limit)->default_value(2.f), "deepseek4: SwiGLU clamp of experts and shared expert (0: none)")(
        "msa-block", po::value(&s.msa_block)->default_value(16), "minimax-m3: MSA block size (attention.indexer.block_size)")(
        "msa-top-k", po::value(&s.msa_top_k)->default_value(4), "minimax-m3: blocks each query's kv group attends to")(
        "msa-local", po::value(&s.msa_local)->default_value(1), "minimax-m3: the query's own blocks always kept (local_blocks)")(
        "msa-dim", po::value(&s.msa_dim)->default_value(0), "minimax-m3: indexer key length (0: the head size)")(
        "experts", po::value(&s.experts)->required(), "routed experts per layer")(
        "experts-used", po::value(&s.used)->required(), "experts chosen per token")("ffn", po::value(&s.ffn)->required(), "expert hidden width")(
        "q-lora", po::value(&s.q_lora)->default_value(96), "MLA: q LoRA rank (0: plain attn_q)")(
        "kv-lora", po::value(&s.kv_lora)->default_value(64), "MLA: latent width")("qk-nope", po::value(&s.qk_nope)->default_value(32),
                                                                                  "MLA: per-head q/k dims without RoPE")(
        "qk-rope", po::value(&s.qk_rope)->default_value(16), "MLA: per-head RoPE dims")("v-head", po::value(&s.v_head)->default_value(32),
                                                                                        "MLA: per-head value width")(
        "indexer-heads", po::value(&s.ix_heads)->default_value(8), "glm-dsa: indexer heads")("indexer-dim", po::value(&s.ix_dim)->default_value(64),
                                                                                             "glm-dsa: indexer key width (power of two >= 64)")(
        "indexer-top-k", po::value(&s.ix_top_k)->default_value(16), "glm-dsa: positions each query attends to")(
        "indexer-types", po::value(&ix_types), "glm-dsa: per layer 1 (full) or 0 (shared), e.g. 1010 (default: no key, all full)")(
        "ssm-state", po::value(&s.ssm_state)->default_value(32), "qwen35moe, kimi-k3: DeltaNet / KDA head dim (state S x S per head)")(
        "ssm-k-heads", po::value(&s.ssm_k_heads)->default_value(2), "qwen35moe: DeltaNet q/k heads")(
        "ssm-v-heads", po::value(&s.ssm_v_heads)->default_value(4), "qwen35moe: DeltaNet v heads (a multiple of the k heads)")(
        "ssm-conv", po::value(&s.ssm_conv)->default_value(4), "qwen35moe, kimi-k3: causal conv taps")(
        "full-attention-interval", po::value(&s.full_interval)->default_value(4),
        "qwen35moe, kimi-k3: every n-th layer is full attention (GQA / MLA)")(
        "kda-lower-bound", po::value(&s.kda_lower_bound)->default_value(-5.f),
        "kimi-k3: the KDA decay gate's lower bound (0: no key, kimi-linear's softplus decay)")(
        "latent", po::value(&s.latent)->default_value(0), "kimi-k3: the routed experts' latent width (0: --embd, no latent MoE)")(
        "res-block", po::value(&s.res_block)->default_value(2), "kimi-k3: residual attention block size (0: plain residuals)")(
        "situ-beta", po::value(&s.situ_beta)->default_value(1.f), "kimi-k3: situ's gate beta")(
        "situ-linear-beta", po::value(&s.situ_linear_beta)->default_value(2.f), "kimi-k3: situ's up beta (<= 0: up unchanged)")(
        "dense-layers", po::value(&s.dense_layers)->default_value(0), "leading layers with a dense FFN")(
        "dense-ffn", po::value(&s.dense_ffn)->default_value(0), "their hidden width (default: ffn x experts-used)")(
        "shared-experts", po::value(&s.shared)->default_value(0), "shared experts (width ffn x count)")(
        "groups", po::value(&s.groups)->default_value(0), "expert groups for group-limited routing")(
        "groups-used", po::value(&s.groups_used)->default_value(0), "groups kept per token")(
        "gating", po::value(&s.gating), "softmax | sigmoid (default: no key, the architecture's default)")(
        "probs-bias", po::bool_switch(&s.probs_bias), "add an exp_probs_b selection bias")(
        "router-skew", po::value(&s.router_skew)->default_value(0.f),
        "Zipf exponent of expert popularity per layer (real routers are skewed; 0: the random router's, near uniform)")(
        "router-locality", po::value(&s.router_locality)->default_value(0.f),
        "consecutive tokens route alike: the gain of a first-layer head that averages the last ~10 tokens "
        "(qwen3moe, glm4moe, deepseek2, glm-dsa; 0: off; cache-sim and bench print the overlap reached)")(
        "norm-weights", po::bool_switch(&s.norm_weights), "renormalise the chosen experts' weights")(
        "weights-scale", po::value(&s.weights_scale)->default_value(0.f), "multiply the experts' weights (0: off)")(
        "nextn", po::value(&s.nextn)->default_value(0), "NextN/MTP blocks after the trunk (the first drafts tokens with --draft mtp)")(
        "nextn-file", po::value(&s.nextn_file),
        "deepseek4: write the NextN block to this file of its own, as llama.cpp's converter does (mtp-<name>.gguf)")(
        "yarn-factor", po::value(&s.yarn_factor)->default_value(0.f), "YaRN context extension factor (> 1 writes rope.scaling.*)")(
        "yarn-orig-ctx", po::value(&s.yarn_orig_ctx)->default_value(4096), "YaRN original context length")(
        "yarn-log-mul", po::value(&s.yarn_log_mul)->default_value(0.f), "deepseek2 rope.scaling.yarn_log_multiplier (0.1 x mscale_all_dim)")(
        "vocab-from", po::value(&vocab), "copy tokenizer metadata from this GGUF")("vocab-builtin", po::bool_switch(&builtin),
                                                                                   "use a built-in byte-level vocabulary (259 tokens)")(
        "random-blocks", po::bool_switch(&s.random_blocks),
        "quantized weights as random well-formed blocks (speed benchmarks; "
        "allows iq1_s iq1_m iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s)")(
        "type", po::value(&s.type)->default_value("f32"),
        "f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4 tq1_0 tq2_0; q4_k_m (q4_K, q6_K attn_v/ffn_down/output); dynamic (q2_K expert gate/up, iq4_xs/q3_K expert down by layer, q4_K elsewhere, q6_K attn_v/output)")(
        "fused-gate-up", po::bool_switch(&s.fused_gate_up), "write the experts' gate and up as one ffn_gate_up_exps tensor")(
        "fused-qkv", po::bool_switch(&s.fused_qkv), "write attention layers' q, k and v (and biases) as one attn_qkv tensor")(
        "mla-kv-b", po::bool_switch(&s.mla_kv_b), "MLA: one unsplit attn_kv_b per layer (older conversions) instead of attn_k_b / attn_v_b")(
        "chat-template-file", po::value(&template_file), "write this file as tokenizer.chat_template")(
        "tie-output", po::bool_switch(&s.tie_output), "no output.weight: the head reuses token_embd (as small Qwen3 files)")(
        "rope-base", po::value(&s.rope_base)->default_value(1e6f), "rope.freq_base")("seed", po::value(&s.seed)->default_value(1), "random seed")(
        "out", po::value<std::string>()->required(), "output .gguf");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    if (vm.count("help")) {
        std::cout << opts;
        return 0;
    }
    po::notify(vm);
    if (builtin == !vocab.empty()) throw CliError("give exactly one of --vocab-from FILE and --vocab-builtin");
    for (char c : ix_types) {
        if (c != '0' && c != '1') throw CliError("--indexer-types " + ix_types + " is not a string of 0 and 1");
        s.ix_full.push_back(c == '1');
    }
    for (size_t a = 0; a < ratios.size();) {
        size_t b = ratios.find(',', a);
        if (b == std::string::npos) b = ratios.size();
        const std::string one = ratios.substr(a, b - a);
        if (one.empty() || one.find_first_not_of("0123456789") != std::string::npos || one.size() > 6)
            throw CliError("--compress-ratios " + ratios + ": '" + one + "' is not a ratio");
        s.compress_ratios.push_back(static_cast<uint32_t>(std::stoul(one)));
        a = b + 1;
    }
    s.printable_head = builtin;
    if (!template_file.empty()) {
        std::ifstream f(template_file, std::ios::binary);
        if (!f) throw CliError("--chat-template-file " + template_file + ": cannot read it");
        s.chat_template.assign(std::istreambuf_iterator<char>(f), {});
        if (s.chat_template.empty()) throw CliError("--chat-template-file " + template_file + " is empty");
    }
    const std::string out = vm["out"].as<std::string>();
    uint64_t bytes = 0;
    try {
        const synth::MetadataList vocab_kv = builtin ? synth::builtin_vocab() : synth::vocab_from(vocab);
        bytes = synth::write_synthetic_model(s, vocab_kv, out);
    } catch (const synth::SpecError& e) { throw CliError(e.what()); }
    std::cerr << "wrote " << out << ": " << s.arch << ", " << bytes / (1024.0 * 1024.0) << " MiB of weights\n";
    return 0;
}

}  // namespace moe::cli

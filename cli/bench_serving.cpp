#include "cli/bench_serving.h"

#include <chrono>
#include <random>

#include "engine/forward/runner.h"
#include "engine/sampler/sampler.h"
#include "engine/sampler/token_constraint.h"
#include "engine/tokenizer/tokenizer.h"

namespace moe::cli {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

json bench_parallel_slots(const LoadedEngine& le, int threads, uint32_t n_ctx, int n_prompt, int n_gen, const std::vector<int>& slots) {
    json rows = json::array();
    const int V = static_cast<int>(le.model->hp.n_vocab);
    double one_slot_bytes = 0;
    for (int n : slots) {
        Runner r(*le.model, {.n_ctx = static_cast<int>(n_ctx),
                             .n_threads = threads,
                             .flavor = le.flavor,
                             .n_seq = n,
                             .cache_type_k = le.kv_types.k,
                             .cache_type_v = le.kv_types.v,
                             .swa_full = le.swa_full});
        std::vector<int32_t> next(static_cast<size_t>(n));
        std::vector<int> seqs(static_cast<size_t>(n));
        for (int s = 0; s < n; ++s) {
            std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
            for (int i = 0; i < n_prompt; ++i) prompt[static_cast<size_t>(i)] = ((i + 101 * s) * 7919 + 13) % V;  // a different prompt per slot
            r.select_sequence(s);
            r.eval(prompt);
            next[static_cast<size_t>(s)] = argmax({r.logits(), static_cast<size_t>(V)});
            seqs[static_cast<size_t>(s)] = s;
        }
        const ExpertSourceStats s0 = le.model->experts->stats();
        const uint64_t loads0 = r.stats().expert_loads;
        const auto t0 = Clock::now();
        for (int step = 0; step < n_gen; ++step) {
            if (n == 1) {
                r.select_sequence(0);
                r.eval(next);
            } else {
                r.eval_batch(seqs, next);
            }
            for (int s = 0; s < n; ++s) next[static_cast<size_t>(s)] = argmax({r.logits(n == 1 ? -1 : s), static_cast<size_t>(V)});
        }
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        const ExpertSourceStats s1 = le.model->experts->stats();
        const double tokens = static_cast<double>(n) * n_gen;
        const double bytes = static_cast<double>(s1.bytes_read - s0.bytes_read) / tokens;
        if (n == slots.front()) one_slot_bytes = bytes;
        rows.push_back({{"slots", n},
                        {"gen_tokens_per_s", tokens / secs},
                        {"expert_bytes_read_per_token", bytes},
                        {"expert_loads_per_token", static_cast<double>(r.stats().expert_loads - loads0) / tokens},
                        {"expert_bytes_ratio_of_first", one_slot_bytes > 0 ? bytes / one_slot_bytes : 0.0}});
    }
    return rows;
}

json bench_grammar_mask(const GgufFile& vocab_source, double decode_ms_per_token) {
    auto tok = Tokenizer::from_gguf(vocab_source);
    std::vector<std::string> pieces(static_cast<size_t>(tok->n_vocab()));
    for (int32_t id = 0; id < tok->n_vocab(); ++id)
        if (!tok->is_eog(id)) pieces[static_cast<size_t>(id)] = tok->piece(id, true);
    const auto t_trie = Clock::now();
    auto vocab = std::make_shared<VocabTrie>(std::move(pieces));
    const double trie_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_trie).count();
    // A typical tool-argument schema; states visited by a random walk through allowed tokens.
    auto g = std::make_shared<JsonGrammar>();
    g->set_root(g->from_schema(json::parse(R"({"type":"object","properties":{"path":{"type":"string"},"line":{"type":"integer"},
        "replace":{"type":"boolean"},"tags":{"type":"array","items":{"type":"string"}}},"required":["path","line"]})")));
    TokenConstraint tc(g, vocab);
    std::mt19937 rng(1);
    std::vector<uint8_t> mask;
    double total_ms = 0, worst_ms = 0;
    int masks = 0;
    for (int step = 0; step < 48; ++step) {
        const auto t0 = Clock::now();
        tc.mask(mask);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        total_ms += ms;
        worst_ms = std::max(worst_ms, ms);
        ++masks;
        std::vector<int32_t> allowed;
        for (size_t id = 0; id < mask.size(); ++id)
            if (mask[id]) allowed.push_back(static_cast<int32_t>(id));
        if (allowed.empty()) break;
        tc.accept(allowed[rng() % allowed.size()]);
    }
    const double mean = masks ? total_ms / masks : 0;
    return {{"vocab", tok->n_vocab()},
            {"trie_build_ms", trie_ms},
            {"masks", masks},
            {"mask_ms_mean", mean},
            {"mask_ms_worst", worst_ms},
            {"decode_ms_per_token", decode_ms_per_token},
            {"mask_ratio_of_decode", decode_ms_per_token > 0 ? mean / decode_ms_per_token : 0.0}};
}

}  // namespace moe::cli

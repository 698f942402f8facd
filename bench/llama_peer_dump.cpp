// llama.cpp (a throwaway build of its public source, outside this repository) on one GGUF with the KV cache in
// the given types: per prompt, greedy decoding with each step's top-5 logits and probabilities, printed in the
// oracle's JSON shape (runs[].prompt_tokens, generated_tokens, steps[].{id, top[]}) with the oracle's context
// (n_ctx 1024, n_batch 2048, n_ubatch 512, flash attention auto). tests/fixtures/llama_peer holds its output for
// cache types the oracle has no record of (README there).
//
//   g++ -O2 -std=c++17 bench/llama_peer_dump.cpp -I$LLAMA/include -I$LLAMA/ggml/include -L$LLAMA/build/bin \
//       -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin -o llama_peer_dump
//   llama_peer_dump MODEL CTK CTV THREADS N_GEN PROMPT [PROMPT ...]     (a prompt: comma-separated token ids)
#include "llama.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
static ggml_type ty(const std::string& n) {
    if (n == "f16") return GGML_TYPE_F16;
    if (n == "f32") return GGML_TYPE_F32;
    if (n == "bf16") return GGML_TYPE_BF16;
    if (n == "q8_0") return GGML_TYPE_Q8_0;
    if (n == "q4_0") return GGML_TYPE_Q4_0;
    if (n == "q4_1") return GGML_TYPE_Q4_1;
    if (n == "q5_0") return GGML_TYPE_Q5_0;
    if (n == "q5_1") return GGML_TYPE_Q5_1;
    if (n == "iq4_nl") return GGML_TYPE_IQ4_NL;
    fprintf(stderr, "type %s\n", n.c_str());
    exit(2);
}
int main(int argc, char** argv) {
    if (argc < 7) {
        fprintf(stderr, "usage\n");
        return 2;
    }
    llama_backend_init();
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    auto mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "load failed\n");
        return 1;
    }
    const int n_gen = atoi(argv[5]);
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    printf("{\"producer\":\"llama.cpp peer (throwaway build)\",\"runs\":[");
    for (int a = 6; a < argc; ++a) {
        std::vector<llama_token> toks;
        for (char* p = strtok(argv[a], ","); p; p = strtok(nullptr, ",")) toks.push_back(atoi(p));
        auto cp = llama_context_default_params();
        cp.n_ctx = 1024;
        cp.n_batch = 2048;
        cp.n_ubatch = 512;
        cp.n_threads = cp.n_threads_batch = atoi(argv[4]);
        cp.type_k = ty(argv[2]);
        cp.type_v = ty(argv[3]);
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
        llama_context* ctx = llama_init_from_model(model, cp);
        if (!ctx) {
            fprintf(stderr, "context failed\n");
            return 1;
        }
        printf("%s{\"prompt\":\"p%d\",\"prompt_tokens\":[", a > 6 ? "," : "", a - 6);
        for (size_t i = 0; i < toks.size(); ++i) printf("%s%d", i ? "," : "", toks[i]);
        printf("],\"context\":{\"kv_cache_type\":\"k=%s,v=%s\",\"n_ctx\":1024,\"n_ubatch\":512,\"n_threads\":%s},\"steps\":[", argv[2], argv[3],
               argv[4]);
        llama_batch b = llama_batch_get_one(toks.data(), toks.size());
        std::vector<int> gen;
        llama_token next = 0;
        for (int s = 0; s < n_gen; ++s) {
            if (llama_decode(ctx, b)) {
                fprintf(stderr, "decode failed\n");
                return 1;
            }
            const float* lg = llama_get_logits_ith(ctx, -1);
            std::vector<int> idx(nv);
            for (int i = 0; i < nv; ++i) idx[i] = i;
            std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](int x, int y) { return lg[x] > lg[y] || (lg[x] == lg[y] && x < y); });
            double mx = lg[idx[0]], sum = 0;
            for (int i = 0; i < nv; ++i) sum += std::exp((double)lg[i] - mx);
            auto prob = [&](int i) { return std::exp((double)lg[i] - mx) / sum; };
            printf("%s{\"id\":%d,\"logit\":%.9g,\"prob\":%.9g,\"top\":[", s ? "," : "", idx[0], lg[idx[0]], prob(idx[0]));
            for (int i = 0; i < 5; ++i) printf("%s{\"id\":%d,\"logit\":%.9g,\"prob\":%.9g}", i ? "," : "", idx[i], lg[idx[i]], prob(idx[i]));
            printf("]}");
            next = idx[0];
            gen.push_back(next);
            b = llama_batch_get_one(&next, 1);
        }
        printf("],\"generated_tokens\":[");
        for (size_t i = 0; i < gen.size(); ++i) printf("%s%d", i ? "," : "", gen[i]);
        printf("]}");
        llama_free(ctx);
    }
    printf("]}\n");
    llama_model_free(model);
    return 0;
}

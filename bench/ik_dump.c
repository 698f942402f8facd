// ik_llama.cpp's ggml_mul_mat on random weights of one type (quantized by ik's own quantizer) and random
// activations: the weights' bytes, the activations and ik's result written to one file, which the engine's test
// IkInterleaved.KernelsGiveIkBuildsBits compares bit for bit (bench/ik-dumps.sh makes a set).
//
//   ik_dump TYPE_ID ROW_LENGTH ROWS TOKENS OUT [THREADS=1]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#include "ggml.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (float)((rng >> 11) * (1.0 / 9007199254740992.0)); }
static float gauss(void) { float u = frand() + 1e-9f, v = frand(); return sqrtf(-2.f * logf(u)) * cosf(6.2831853f * v); }

int main(int argc, char** argv) {
    if (argc < 6) { fprintf(stderr, "usage: ik_dump TYPE_ID ROW_LENGTH ROWS TOKENS OUT [THREADS]\n"); return 2; }
    enum ggml_type type = (enum ggml_type)atoi(argv[1]);
    int64_t n = atoll(argv[2]), rows = atoll(argv[3]), ntok = atoll(argv[4]);
    int threads = argc > 6 ? atoi(argv[6]) : 1;
    rng ^= (uint64_t)type * 0x9E3779B97F4A7C15ull + (uint64_t)ntok;
    float* w = malloc(sizeof(float) * n * rows);
    float* a = malloc(sizeof(float) * n * ntok);
    for (int64_t i = 0; i < n * rows; ++i) w[i] = gauss();
    for (int64_t r = 0; r < rows; ++r) { float s = 0.5f + 2.f * frand(); for (int64_t i = 0; i < n; ++i) w[r * n + i] *= s; }
    for (int64_t i = 0; i < n * ntok; ++i) a[i] = gauss();
    size_t rs = ggml_row_size(type, n);
    struct ggml_init_params ip = { (size_t)(rs * rows + sizeof(float) * (n * ntok + rows * ntok)) * 2 + (64 << 20), NULL, false };
    struct ggml_context* ctx = ggml_init(ip);
    struct ggml_tensor* W = ggml_new_tensor_2d(ctx, type, n, rows);
    struct ggml_tensor* A = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, ntok);
    size_t qb = ggml_quantize_chunk(type, w, W->data, 0, rows, n, NULL, NULL);
    if (qb != rs * rows) { fprintf(stderr, "quantized %zu bytes, expected %zu\n", qb, rs * rows); return 1; }
    memcpy(A->data, a, sizeof(float) * n * ntok);
    struct ggml_tensor* Y = ggml_mul_mat(ctx, W, A);
    struct ggml_cgraph* g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, Y);
    ggml_graph_compute_with_ctx(ctx, g, threads);
    FILE* f = fopen(argv[5], "wb");
    uint32_t hdr[5] = { (uint32_t)type, (uint32_t)n, (uint32_t)rows, (uint32_t)ntok, (uint32_t)threads };
    fwrite("IKPEER02", 1, 8, f);
    fwrite(hdr, 4, 5, f);
    fwrite(W->data, 1, rs * rows, f);
    fwrite(a, sizeof(float), n * ntok, f);
    fwrite(Y->data, sizeof(float), rows * ntok, f);
    fclose(f);
    printf("%s n=%lld rows=%lld ntok=%lld: %zu weight bytes, y[0]=%g\n", ggml_type_name(type), (long long)n, (long long)rows, (long long)ntok, rs * rows, ((float*)Y->data)[0]);
    ggml_free(ctx);
    return 0;
}

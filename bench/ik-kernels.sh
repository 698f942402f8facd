#!/usr/bin/env bash
# Single-thread kernel throughput per ik_llama.cpp type against ik's own kernels (bench/ik_kernels.cpp), for
# one token (decode), eight (a small batch) and 64 (a prompt: ik's conversion to 8-bit rows).
#
#   IK_DIR=/path/to/ik_llama.cpp IK_BUILD=build bench/ik-kernels.sh [engine build dir=build]
#
# IK_DIR is a checkout of github.com/ikawrakow/ik_llama.cpp built outside this repository (IK_BUILD its build
# folder, holding libggml.a or libggml.so, ggml-only builds included); an AVX2 build (-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON
# -DGGML_F16C=ON) computes the same bits as the engine, an AVX-512 one (-DGGML_NATIVE=ON on such a CPU) its
# fastest kernels.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${1:-build}")
ik=${IK_DIR:?set IK_DIR to an ik_llama.cpp checkout}
ikb=$ik/${IK_BUILD:-build}
out=$(mktemp -d)/ik_kernels
lib=$(find "$ikb" \( -name libggml.a -o -name libggml.so \) | head -1)
# A build without ik's flash attention (-DGGML_IQK_FLASH_ATTENTION=OFF) leaves two symbols to define.
printf '#include <stddef.h>\nextern "C" size_t iqk_fa_work_buffer_size() { return 0; }\nextern "C" int iqk_flash_attn_noalibi() { return 0; }\n' > "$out.stubs.cpp"
g++ -O2 -std=c++20 -mavx2 -mfma -mf16c -I"$ik/ggml/include" -I"$here" "$here/bench/ik_kernels.cpp" "$out.stubs.cpp" "$lib" \
    "$build/engine/libmoestream_engine.a" -Wl,-rpath,"$(dirname "$lib")" -fopenmp -lpthread -lm -o "$out"
# ik's ids: Q8_0 8, Q6_0 133, IQ2_K..IQ6_K 137-141, IQ4_KS 144, IQ2_KS 145, IQ4_KSS 146, IQ5_KS 152, IQ2_KT 153,
# IQ3_KT 154, IQ4_KT 155, IQ3_KS 156, IQ2_KL 157, IQ1_KT 158, Q4_0_R8 202, Q5_0_R4 206, Q8_0_R8 208, Q4_K_R4 212,
# Q5_K_R4 213, Q6_K_R4 214, IQ1_S_R4 219, IQ4_NL_R4 220, IQ4_XS_R8 223, Q6_0_R4 233, IQ2_K_R4 .. IQ5_K_R4 337-340, IQ4_KS_R4 344,
# IQ5_KS_R4 352, Q2_K_R4 210, Q3_K_R4 211, IQ2_XXS_R4 216, IQ2_XS_R4 217, IQ3_XXS_R4 218, IQ3_S_R4 221, IQ2_S_R4 222, IQ1_M_R4 229
for t in ${IK_TYPES:-137 138 139 140 141 145 156 144 152 146 157 133 8 158 153 154 155 202 206 208 210 211 212 213 214 216 217 218 219 220 221 222 223 229 233 337 338 339 340 344 352}; do
  for ny in 1 8 64; do "$out" "$t" "$ny" 2>/dev/null | grep -v cluster_points || true; done
done

#!/usr/bin/env bash
# Dumps of ik_llama.cpp's matmuls for the engine's bit-for-bit test of ik's row-interleaved forms
# (tests/test_ik_interleaved.cpp): random weights per type quantized by ik's quantizer, for 1 to 40 tokens, row
# lengths with and without a partial group of Q8_2_X4 blocks, small matrices (ik's tile path) and two threads.
#
#   IK_DIR=/path/to/ik_llama.cpp IK_BUILD=build [IK_TYPES="210 211"] bench/ik-dumps.sh OUT_DIR
#   MOESTREAM_IK_PEER_DUMPS=OUT_DIR build/tests/moestream_tests --gtest_filter='IkInterleaved.*'
#
# With SMALL=1 it writes the few-KB set checked in as tests/fixtures/ik_peer (each form once or twice, one
# block of 256 (Q8_0_R8: 288, a partial group of Q8_2_X4 blocks), two row groups, one and two tokens), which
# the test always compares.
#
# IK_DIR is a checkout of github.com/ikawrakow/ik_llama.cpp built outside this repository, AVX2 only
# (-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON): the engine follows that build's arithmetic.
# IK_BUILD is its build folder holding ggml/src/libggml.so (or src/libggml.so for a ggml-only build).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?give an output directory}
ik=${IK_DIR:?set IK_DIR to an ik_llama.cpp checkout}
ikb=$ik/${IK_BUILD:-build}
lib=$(dirname "$(find "$ikb" -name 'libggml.so' | head -1)")
mkdir -p "$out"
bin=$(mktemp -d)/ik_dump
# A build without ik's flash attention (-DGGML_IQK_FLASH_ATTENTION=OFF) leaves two symbols to define.
printf '#include <stddef.h>\nsize_t iqk_fa_work_buffer_size(void) { return 0; }\nint iqk_flash_attn_noalibi(void) { return 0; }\n' > "$bin.stubs.c"
gcc -O2 -I"$ik/ggml/include" "$here/bench/ik_dump.c" "$bin.stubs.c" -L"$lib" -lggml -lm -Wl,-rpath,"$lib" -o "$bin"
# BF16_R16 has a kernel only in an AVX512-BF16 build (ik's AVX2 build calls a null vec_dot): IK_NATIVE_LIB names
# such a build's libggml.a or libggml.so, on a CPU with AVX512-BF16; without it BF16_R16 is left out.
native=
if [ -n "${IK_NATIVE_LIB:-}" ]; then
  native=$bin.native
  g++ -O2 -x c -I"$ik/ggml/include" "$here/bench/ik_dump.c" -x none "$IK_NATIVE_LIB" -lgomp -lm -lpthread -Wl,-rpath,"$(dirname "$IK_NATIVE_LIB")" -o "$native"
else
  echo "IK_NATIVE_LIB unset: no BF16_R16 dumps" >&2
fi
if [ -n "${SMALL:-}" ]; then
  for t in 219 337 338 339 340 344 352; do "$bin" "$t" 256 8 2 "$out/t${t}.bin" 1; done
  for t in 210 211 212 213 214; do for ny in 1 2; do "$bin" "$t" 256 8 "$ny" "$out/t${t}_ny${ny}.bin" 1; done; done
  "$bin" 208 288 16 2 "$out/t208.bin" 1
  # the legacy forms: a partial Q8_2_X4 group (288 = 2 groups + 1 block), Q4_0_R8 alone and in a batch
  for t in 206 220 233; do "$bin" "$t" 288 8 2 "$out/t${t}.bin" 1; done
  for ny in 1 2; do "$bin" 202 288 16 "$ny" "$out/t202_ny${ny}.bin" 1; done
  "$bin" 223 256 16 2 "$out/t223.bin" 1
  # the interleaved i-quants; IQ2_XS_R4 / IQ2_S_R4 also as one chunk of 16 tokens (ik's 16-column kernel)
  for t in 216 217 218 221 222 229; do "$bin" "$t" 256 8 2 "$out/t${t}.bin" 1; done
  for t in 217 222; do "$bin" "$t" 256 4 16 "$out/t${t}_ny16.bin" 1; done
  # the wide forms (ik computes Q8_KV / Q8_KV_R8 only for rows of whole 256s); MXFP4_R8's lone column and a call of
  # three, whose orders differ, over enough blocks to tell them apart
  for ny in 1 2; do "$bin" 151 512 8 "$ny" "$out/t151_ny${ny}.bin" 1; done
  "$bin" 398 512 16 2 "$out/t398.bin" 1
  "$bin" 399 256 16 2 "$out/t399.bin" 1
  "$bin" 353 288 16 1 "$out/t353_ny1.bin" 1
  "$bin" 353 1024 16 3 "$out/t353_ny3.bin" 1
  [ -n "$native" ] && "$native" 230 272 32 2 "$out/t230.bin" 1
  # the ternary forms (ik's Q8_K64 needs rows of 512 or more); IQ2_BN over an odd count of 64s from the AVX-512
  # build, whose last block the AVX2 build multiplies with the wrong activations
  for t in 134 135; do "$bin" "$t" 512 8 2 "$out/t${t}.bin" 1; done
  "$bin" 335 512 8 3 "$out/t335.bin" 1
  [ -n "$native" ] && "$native" 135 576 8 2 "$out/t135_n576_avx512.bin" 1
  exit 0
fi
# ik's ids: Q4_0_R8 202, Q5_0_R4 206, Q8_0_R8 208, Q2_K_R4 210, Q3_K_R4 211, Q4_K_R4 212, Q5_K_R4 213, Q6_K_R4 214, IQ1_S_R4 219, IQ4_NL_R4 220,
# IQ4_XS_R8 223, Q6_0_R4 233, IQ2_K_R4 .. IQ5_K_R4 337-340, IQ4_KS_R4 344, IQ5_KS_R4 352, IQ2_XXS_R4 216, IQ2_XS_R4 217,
# IQ3_XXS_R4 218, IQ3_S_R4 221, IQ2_S_R4 222, IQ1_M_R4 229, MXFP4_R8 353, Q8_KV_R8 398, Q8_K_R8 399 (Q8_KV 151 and BF16_R16 230 below)
for t in ${IK_TYPES:-202 206 208 210 211 212 213 214 216 217 218 219 220 221 222 223 229 233 337 338 339 340 344 352 353 398 399}; do
  for ny in 1 3 8 13 40; do "$bin" "$t" 512 32 "$ny" "$out/t${t}_ny${ny}.bin" 1; done
  for ny in 1 2 17 33; do
    "$bin" "$t" 768 16 "$ny" "$out/t${t}_small_ny${ny}.bin" 2
    "$bin" "$t" 256 64 "$ny" "$out/t${t}_th2_ny${ny}.bin" 2
  done
done
for t in 202 206 208 220 233; do for ny in 1 5 33; do "$bin" "$t" 608 16 "$ny" "$out/t${t}_n608_ny${ny}.bin" 1; done; done
for ny in 1 2 9 33; do "$bin" 151 1024 16 "$ny" "$out/t151_ny${ny}.bin" 2; done
for t in 134 135; do for ny in 1 3 8 13; do "$bin" "$t" 1024 16 "$ny" "$out/t${t}_ny${ny}.bin" 1; done; done
for ny in 1 2 4; do "$bin" 335 1024 16 "$ny" "$out/t335_ny${ny}.bin" 1; done  # (calls of 5 to 8 columns: another order)
if [ -n "$native" ]; then for ny in 1 3 17; do "$native" 230 512 48 "$ny" "$out/t230_ny${ny}.bin" 2; done; fi
echo "dumps in $out"

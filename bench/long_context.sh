#!/usr/bin/env bash
# Decode speed against context length, beside llama.cpp on the same file: for a GQA model (qwen3moe), an MLA
# model shaped like GLM-5 (glm-dsa: a 512 + 64 latent, the DSA indexer picking 2,048 keys) and a DeltaNet hybrid
# (qwen35moe: one full-attention layer in four), with f16 and q8_0 caches, 128 tokens decoded after a prompt of
# each context length. The question is how much speed a long session loses: each engine's tok/s at depth D over
# its own tok/s at the shortest depth, and the engine's over llama.cpp's at the same depth.
#
#   bench/long_context.sh LLAMA_BENCH [build dir=build] [depths="1024 16384 65536"] [cache types="f16 q8_0"]
#                         [models="gqa mla deltanet"; also gqa4: 4 kv heads of 128] [threads=2] [fill=real|synthetic]
#
# LLAMA_BENCH: a llama-bench binary built from llama.cpp's public source (outside this repository; the figures
# in docs/benchmarks.md name the commit). It runs `-p 0 -n 128 -d D -fa 1 -ctk T -ctv T -r 3` (the depth filled
# once, restored for the later repetitions); the engine runs `moestream bench --prompt-tokens D --tokens 128`.
#
# fill=synthetic skips the O(D^2) prompt (a 128k prompt runs most of an hour per engine on two cores): one token is
# evaluated, then D positions of random cache rows are written in the cache's type (the engine: `bench --depth-fill
# synthetic`; llama.cpp: bench/llama_depth.cpp, built here against LLAMA_DIR=the llama.cpp checkout, which rewrites
# its sequence state through llama.h's state API and decodes as llama-bench does: its own thread pool, random
# tokens, 3 repetitions). A step's cost
# depends on how many positions it reads, not on their values: docs/benchmarks.md compares both fills at 16k.
# The two engines alternate per cell, so host noise falls on both. Models are small (a few MB) so that a 64k
# prompt takes a minute or two on two cores: attention's share of a decoded token is what grows with depth.
set -euo pipefail
llama_bench=$(realpath "${1:?LLAMA_BENCH: a llama-bench binary}")
build=${2:-build}
depths=${3:-1024 16384 65536}
types=${4:-f16 q8_0}
models=${5:-gqa mla deltanet}
threads=${6:-2}
fill=${7:-real}
bin=$(realpath "$build/moestream")
work=/var/tmp/moestream-bench/long
mkdir -p "$work"

common=(--experts 8 --experts-used 2 --ffn 256 --embd 512 --type q8_0 --vocab-builtin --seed 5)
make_model() {
  local out=$work/$1.gguf
  [ -f "$out" ] && return
  case $1 in
    gqa) "$bin" mkmodel --arch qwen3moe --layers 4 --heads 8 --kv-heads 2 --head-dim 64 "${common[@]}" --out "$out" ;;
    mla) "$bin" mkmodel --arch glm-dsa --layers 3 --heads 4 --q-lora 128 --kv-lora 512 --qk-rope 64 --qk-nope 64 --v-head 64 \
           --indexer-heads 4 --indexer-dim 128 --indexer-top-k 2048 --shared-experts 1 --dense-layers 1 "${common[@]}" --out "$out" ;;
    deltanet) "$bin" mkmodel --arch qwen35moe --layers 8 --heads 8 --kv-heads 2 --head-dim 64 --shared-experts 1 "${common[@]}" --out "$out" ;;
    # Qwen3-30B-A3B's head layout: 16 query heads over 4 kv heads of 128 (each head's slice a quarter of a row)
    gqa4) "$bin" mkmodel --arch qwen3moe --layers 4 --heads 16 --kv-heads 4 --head-dim 128 "${common[@]}" --out "$out" ;;
    *) echo "long_context: unknown model $1 (gqa, gqa4, mla, deltanet)" >&2; exit 2 ;;
  esac > /dev/null
}

case $fill in
  real) ;;
  synthetic)
    llama_dir=${LLAMA_DIR:?fill=synthetic: set LLAMA_DIR to the llama.cpp checkout LLAMA_BENCH was built from}
    lib=$(find "$(dirname "$llama_bench")/.." -name 'libllama.so' -print -quit)
    cpu_lib=$(find "$(dirname "$llama_bench")/.." -name 'libggml-cpu.so' -print -quit)
    base_lib=$(find "$(dirname "$llama_bench")/.." -name 'libggml-base.so' -print -quit)
    [ -n "$lib" ] && [ -n "$cpu_lib" ] && [ -n "$base_lib" ] ||
      { echo "long_context: no libllama.so / libggml-cpu.so / libggml-base.so near $llama_bench (build llama.cpp with shared libraries)" >&2; exit 2; }
    depth_dir=$(mktemp -d)
    trap 'rm -rf "$depth_dir"' EXIT
    depth_bin=$depth_dir/llama_depth
    g++ -O2 -std=c++20 -I"$llama_dir/include" -I"$llama_dir/ggml/include" "$(dirname "$0")/llama_depth.cpp" "$lib" "$cpu_lib" "$base_lib" \
        -Wl,-rpath,"$(dirname "$lib")":"$(dirname "$cpu_lib")":"$(dirname "$base_lib")" -o "$depth_bin" ;;
  *) echo "long_context: fill $fill is not real or synthetic" >&2; exit 2 ;;
esac

echo "llama.cpp: $llama_bench (fill: $fill)"
printf '%-9s %-5s %7s %12s %12s %7s\n' model cache depth "moestream" "llama.cpp" ratio
for model in $models; do
  make_model "$model"
  path=$work/$model.gguf
  for type in $types; do
    for depth in $depths; do
      ours=$("$bin" bench --model "$path" --prompt-tokens "$depth" --tokens 128 -t "$threads" --no-fio --parallel "" --json \
               -ctk "$type" -ctv "$type" --depth-fill "$fill" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["gen_tokens_per_s"])')
      if [ "$fill" = synthetic ]; then
        theirs=$("$depth_bin" "$path" "$depth" 128 3 "$threads" "$type" "$type" | python3 -c 'import json,sys; print(json.load(sys.stdin)["avg_ts"])')
      else
        theirs=$("$llama_bench" -m "$path" -p 0 -n 128 -d "$depth" -t "$threads" -fa 1 -ctk "$type" -ctv "$type" -r 3 -o json 2>/dev/null |
                 python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')
      fi
      python3 -c 'import sys; m,c,d,a,b=sys.argv[1:]; a=float(a); b=float(b); print(f"{m:<9} {c:<5} {int(d):>7} {a:>12.2f} {b:>12.2f} {a/b:>7.2f}")' \
        "$model" "$type" "$depth" "$ours" "$theirs"
    done
  done
done

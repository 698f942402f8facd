#!/usr/bin/env bash
# KV cache types (--cache-type-k/-v): prompt and decode speed and the cache's bytes per token, f16 against the
# quantized types, at several context lengths, on one GQA model (head size 128, 4 kv heads, 8 layers) with its
# experts in RAM, so attention's share of a token is what changes. Runs are interleaved (f16, q8_0, q4_0, ... for
# each context) so host noise falls on all types alike; each figure is `moestream bench`'s own.
#
#   bench/kv_types.sh [build dir] [work dir] [contexts, default "1024 4096"]
set -euo pipefail
build=${1:-build}
work=${2:-/var/tmp/moestream-bench}
contexts=${3:-1024 4096}
bin=$(realpath "$build/moestream")
mkdir -p "$work"
model=$work/kv-types-gqa128.gguf
[ -f "$model" ] || "$bin" mkmodel --arch qwen3moe --layers 8 --embd 1024 --heads 16 --kv-heads 4 --head-dim 128 --experts 16 \
  --experts-used 4 --ffn 256 --vocab-builtin --seed 3 --out "$model" > /dev/null
printf '%-8s %-14s %14s %14s %16s\n' ctx "cache (K/V)" "prompt tok/s" "decode tok/s" "KV bytes/token"
for ctx in $contexts; do
  for types in "f16 f16" "q8_0 q8_0" "q8_0 f16" "q4_0 q4_0" "bf16 bf16"; do
    set -- $types
    json=$("$bin" bench --model "$model" --prompt-tokens "$ctx" --tokens 32 --no-fio --parallel "" --json -ctk "$1" -ctv "$2" 2>/dev/null)
    node -e '
      const j = JSON.parse(process.argv[1]);
      console.log([process.argv[2].padEnd(8), j.cache_types.padEnd(14), j.prompt_tokens_per_s.toFixed(1).padStart(14),
                   j.gen_tokens_per_s.toFixed(2).padStart(14), String(j.cache_bytes_per_token).padStart(16)].join(" "));' "$json" "$ctx" "$1" "$2"
  done
done

#!/usr/bin/env bash
# Streaming-bound benchmark: a synthetic MoE with a few GB of Q4_K experts, run with an expert cache of 15%
# of the expert bytes inside a cgroup v1 memory limit, so neither the cache nor the page cache can hide the
# disk. Prints `moestream bench` for each eviction policy; the engine's read GB/s is reported as a ratio of
# fio's on the same file, same read size and depth, in the same run.
#
#   bench/streaming.sh [--shape qwen3|glm5|dsv4] [--router-skew S] [--router-locality G] [build dir] [work dir]
#   (root; cgroup v1 memory controller writable)
#
# --router-skew S: the model's routers skewed as mkmodel --router-skew writes them (Zipf exponent S of expert
# popularity per layer; docs/streaming.md), a model file of its own; 0 (the default): the random router's own.
# --router-locality G: consecutive tokens routed alike as mkmodel --router-locality writes it (qwen3 and glm5
# shapes; docs/streaming.md gives the overlap each G reaches); 0 (the default): off.
#
# Shapes:
#   qwen3  qwen3moe, 24 layers x 64 experts (8 used), d=2048, expert ffn 1024: 5.1 GiB of experts
#   glm5   glm-dsa shaped like GLM-5.x scaled down: MLA (q_lora 512, kv_lora 512, rope 64), the DSA indexer
#          (16 heads x 128, top-k 256), 2 dense + 14 MoE layers x 128 experts (8 used, 1 shared), d=2048,
#          expert ffn 512, a NextN block: 2.8 GiB of experts
#   dsv4   deepseek4 shaped like DeepSeek-V4-Flash scaled down: 12 layers with Flash's compression pattern (two
#          window-only layers, then ratio 4 and 128 alternating), 3 hash-routed layers, 4 hyper-connected streams,
#          heads of 256 (64 rotated), q_lora 768, output LoRA 4 x 512, the indexer (16 heads x 128, top-k 128),
#          128 experts (6 used, 1 shared) of ffn 512, d=2048: 2.6 GiB of experts
set -euo pipefail
shape=qwen3
skew=0
locality=0
while [ $# -gt 0 ]; do
  case "$1" in
    --shape) shape=$2; shift 2 ;;
    --router-skew) skew=$2; shift 2 ;;
    --router-locality) locality=$2; shift 2 ;;
    *) break ;;
  esac
done
suffix=""
[ "$skew" = "0" ] || suffix="-skew$skew"
[ "$locality" = "0" ] || suffix="$suffix-loc$locality"
build=${1:-build}
work=${2:-/var/tmp/moestream-bench}
bin=$(realpath "$build/moestream")
mkdir -p "$work"
case "$shape" in
  qwen3)
    model=$work/stream-q4k$suffix.gguf
    make_model=("$bin" mkmodel --layers 24 --embd 2048 --heads 16 --kv-heads 4 --head-dim 128 --experts 64 --experts-used 8
                --ffn 1024 --vocab-builtin --type q4_k --seed 5 --router-skew "$skew" --router-locality "$locality" --out "$model") ;;
  glm5)
    model=$work/stream-glm5-q4k$suffix.gguf
    make_model=("$bin" mkmodel --arch glm-dsa --layers 16 --dense-layers 2 --dense-ffn 4096 --embd 2048 --heads 16
                --q-lora 512 --kv-lora 512 --qk-nope 128 --qk-rope 64 --v-head 128 --experts 128 --experts-used 8 --ffn 512
                --shared-experts 1 --probs-bias --norm-weights --weights-scale 2.5 --indexer-heads 16 --indexer-dim 128
                --indexer-top-k 256 --nextn 1 --vocab-builtin --type q4_k --seed 5 --router-skew "$skew" --router-locality "$locality" --out "$model") ;;
  dsv4)
    model=$work/stream-dsv4-q4k$suffix.gguf
    make_model=("$bin" mkmodel --arch deepseek4 --layers 12 --embd 2048 --heads 16 --head-dim 256 --rope-dims 64 --q-lora 768
                --window 128 --compress-ratios 0,0,4,128,4,128,4,128,4,128,4,128 --hash-layers 3 --indexer-heads 16
                --indexer-dim 128 --indexer-top-k 128 --experts 128 --experts-used 6 --ffn 512 --shared-experts 1
                --out-groups 4 --out-rank 512 --yarn-factor 4 --yarn-orig-ctx 4096 --rope-base 10000 --vocab-builtin
                --type q4_k --seed 5 --router-skew "$skew" --router-locality "$locality" --out "$model") ;;
  *) echo "--shape $shape is not qwen3, glm5 or dsv4" >&2; exit 2 ;;
esac
if [ ! -f "$model" ]; then
  echo "building $model (a few GB of experts; takes a few minutes)" >&2
  "${make_model[@]}"
fi
# The model's bytes from its header: the cgroup limit is the engine's budget plus room for the process itself.
read -r resident experts cache_per_token < <("$bin" check --model "$model" --no-fio --no-storage --json |
  python3 -c 'import json,sys; m=json.load(sys.stdin)["model"]; print(m["resident_bytes"], m["expert_bytes"], m["cache_bytes_per_token"])')
cache=$((experts * 15 / 100))
budget=$((resident + cache + 97 * cache_per_token))   # 97 positions: bench's context
limit=$((budget + 384 * 1024 * 1024))   # the process itself, libraries, fio's own small buffers

cg=/sys/fs/cgroup/memory/moestream-bench
if [ -w /sys/fs/cgroup/memory ]; then
  mkdir -p "$cg"
  echo "$limit" > "$cg/memory.limit_in_bytes"
  echo $$ > "$cg/cgroup.procs"
  echo "cgroup v1 memory limit: $((limit >> 20)) MiB (page cache counts against it)" >&2
else
  echo "cgroup v1 memory controller not writable: running without a limit" >&2
fi
sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true
echo "model: $model; experts $((experts >> 20)) MiB; cache $((cache >> 20)) MiB (15%); budget $((budget >> 20)) MiB"
for policy in lru lru-freq lru-freq-guard; do
  echo "== policy $policy"
  "$bin" bench --model "$model" --cache-fraction 0.15 --policy "$policy" --tokens 64 --prompt-tokens 32 --io-depth 32 --read-size 1M
done

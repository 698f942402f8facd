#!/usr/bin/env bash
# Streaming-bound benchmark: a synthetic qwen3moe with ~5 GB of Q4_K experts (64 per layer, 8 used), run
# with an expert cache of ~15% of the expert bytes inside a cgroup v1 memory limit, so neither the cache nor
# the page cache can hide the disk. Prints `moestream bench` for each eviction policy; the engine's read
# GB/s is reported as a ratio of fio's on the same file, same read size and depth, in the same run.
#
#   bench/streaming.sh [build dir] [work dir]      (root; cgroup v1 memory controller writable)
set -euo pipefail
build=${1:-build}
work=${2:-/var/tmp/moestream-bench}
bin=$(realpath "$build/moestream")
mkdir -p "$work"
model=$work/stream-q4k.gguf
if [ ! -f "$model" ]; then
  echo "building $model (about 5 GB of experts; takes a few minutes)" >&2
  "$bin" mkmodel --layers 24 --embd 2048 --heads 16 --kv-heads 4 --head-dim 128 --experts 64 --experts-used 8 \
    --ffn 1024 --vocab-builtin --type q4_k --seed 5 --out "$model"
fi
# Budget: resident weights + KV cache + 15% of the expert bytes. mkmodel's shape is known here:
# 24 layers x 64 experts x 3 matrices of 2048 x 1024 Q4_K (144 bytes per 256 weights).
expert_bytes=$((24 * 64 * 3 * 2048 * 1024 / 256 * 144))
resident_bytes=$(( $(stat -c %s "$model") - expert_bytes ))
cache=$((expert_bytes * 15 / 100))
kv=$((2 * 24 * 97 * 4 * 128 * 2))   # fp16 K and V, 4 KV heads x 128, 97 positions (bench's context)
budget=$((resident_bytes + kv + cache))
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
echo "model: $model; experts $((expert_bytes >> 20)) MiB; cache $((cache >> 20)) MiB (15%); budget $((budget >> 20)) MiB"
for policy in lru lru-freq; do
  echo "== policy $policy"
  "$bin" bench --model "$model" --ram-budget "$budget" --policy "$policy" --tokens 64 --prompt-tokens 32 --io-depth 32 --read-size 1M
done

#!/usr/bin/env bash
# An I/O-bound configuration for this kind of 2-core host: Q8_0 experts, 128 per layer (8 routed), a cache of
# 8% of the expert bytes, inside a cgroup v1 memory cap so the page cache cannot stand in for the disk.
# Prints the time blocked on I/O against the time computing (the run is I/O-bound when the first dominates),
# then tok/s, expert read GB/s, and the ratios to fio's uniform random reads and to fio replaying the
# generation's own reads (same run, same file).
#
#   [ROUTER_SKEW=S] [ROUTER_LOCALITY=G] bench/io_bound.sh [build dir] [work dir] [tokens=48] [extra bench flags...]
#   (root; cgroup v1 memory controller writable)
#   e.g. bench/io_bound.sh build /var/tmp/moestream-bench 48 --prefetch-layers 2
# ROUTER_SKEW / ROUTER_LOCALITY: the model written with mkmodel --router-skew / --router-locality (realistic
# routing, docs/streaming.md), a file of its own; both 0 by default.
set -euo pipefail
build=${1:-build}
work=${2:-/var/tmp/moestream-bench}
tokens=${3:-48}
extra=("${@:4}")
bin=$(realpath "$build/moestream")
mkdir -p "$work"
skew=${ROUTER_SKEW:-0}
locality=${ROUTER_LOCALITY:-0}
suffix=""
[ "$skew" = "0" ] || suffix="-skew$skew"
[ "$locality" = "0" ] || suffix="$suffix-loc$locality"
model=$work/io-bound-q8$suffix.gguf
# 12 layers x 128 experts x 3 x (1024 x 768) q8_0 weights: about 3.1 GB of experts.
[ -f "$model" ] || "$bin" mkmodel --layers 12 --embd 1024 --heads 8 --kv-heads 2 --head-dim 128 --experts 128 --experts-used 8 \
  --ffn 768 --vocab-builtin --type q8_0 --seed 21 --router-skew "$skew" --router-locality "$locality" --out "$model" >&2
# (check exits non-zero when a row warns or fails; only its model facts are wanted here)
facts=$({ "$bin" check --model "$model" --json 2>/dev/null || true; } | python3 -c 'import json,sys; m=json.load(sys.stdin)["model"]; print(m["resident_bytes"], m["expert_bytes"])')
read -r resident experts <<< "$facts"
cache=$((experts * 8 / 100))
budget=$((resident + (64 << 20) + cache))   # resident weights + KV at 4k (well under 64 MiB here) + 8% cache
cap=$((budget + (160 << 20)))                # the process itself and fio beside it
cg=/sys/fs/cgroup/memory/moestream-io-$$
mkdir "$cg"
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo "$cap" > "$cg/memory.limit_in_bytes"
[ -f "$cg/memory.memsw.limit_in_bytes" ] && echo "$cap" > "$cg/memory.memsw.limit_in_bytes"
python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$model"
echo "model $model: experts $experts bytes, cache $cache bytes (8%), cgroup cap $cap bytes"
bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$bin" bench --model "$model" --ram-budget "$budget" --tokens "$tokens" \
  --prompt-tokens 16 --threads 2 --fio-seconds 3 --parallel "" "${extra[@]}" --json > "$work/io-bound.json"
python3 - "$work/io-bound.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
io, cpu = d["seconds_blocked_on_io"], d["seconds_computing"]
print(f"time      {io:.2f} s blocked on I/O, {cpu:.2f} s computing: {'I/O-bound' if io > cpu else 'NOT I/O-bound'} ({io / (io + cpu):.0%} waiting)")
print(f"decode    {d['gen_tokens_per_s']:.2f} tok/s, {d['expert_bytes_read_per_token'] / 2**20:.1f} MiB of experts read per token, hit rate {d['cache_hit_rate']:.2f}")
print(f"reads     {d['read_bytes_per_s_wall'] / 1e9:.2f} GB/s over the generation")
if "routing" in d:
    r = d["routing"]
    print(f"routing   hottest 10% of experts take {r['hot10_share']:.1%}; consecutive tokens share {r['consecutive_overlap']:.1%}, "
          f"tokens 16 apart {r['distant_overlap']:.1%}")
if "fio_bytes_per_s" in d:
    print(f"fio       {d['fio_bytes_per_s'] / 1e9:.2f} GB/s uniform random reads -> engine/fio {d['engine_read_ratio_of_fio']:.2f}")
if "fio_replay_bytes_per_s" in d:
    print(f"replay    {d['fio_replay_bytes_per_s'] / 1e9:.2f} GB/s for the same {d['fio_replay_reads']} reads -> engine/replay {d['engine_read_ratio_of_replay']:.2f}")
PY

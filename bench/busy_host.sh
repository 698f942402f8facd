#!/usr/bin/env bash
# Decode and prompt speed with 1 and 2 threads while other processes keep every core busy: a thread the OS
# deschedules must not stall the others (the thread pool's chunked loops and bounded spinning).
#
#   bench/busy_host.sh MODEL.gguf [competing busy loops=2x cores] [rounds=2] [build dir]
#
# Prints prompt and generation tok/s per round, idle and busy, for --threads 1 and --threads 2.
set -euo pipefail
model=$(realpath "$1")
hogs=${2:-$(( 2 * $(nproc) ))}
rounds=${3:-2}
bin=$(realpath "${4:-build}/moestream")
measure() {
  "$bin" bench --model "$model" --tokens 16 --prompt-tokens 32 --threads "$1" --no-fio --json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("prompt %.1f tok/s, generation %.1f tok/s" % (d["prompt_tokens_per_s"], d["gen_tokens_per_s"]))'
}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for r in $(seq "$rounds"); do
  for t in 1 2; do echo "round $r idle  --threads $t: $(measure "$t")"; done
done
for i in $(seq "$hogs"); do (while :; do :; done) & pids+=($!); done
for r in $(seq "$rounds"); do
  for t in 1 2; do echo "round $r busy ($hogs loops) --threads $t: $(measure "$t")"; done
done

#!/usr/bin/env bash
# moestream against llama.cpp on the same GGUF file: prompt and generation tok/s, same thread count, same prompt
# ids, same number of tokens, runs interleaved so both see the same host. The peer is node-llama-cpp's
# prebuilt CPU llama.cpp (installed with npm into the work dir on first use).
#
#   bench/vs_llamacpp.sh MODEL.gguf [prompt tokens=128] [generated tokens=64] [rounds=3] [build dir] [work dir] [threads=nproc]
#
# Prints one line per round and engine, then the ratios moestream / llama.cpp of the medians.
set -euo pipefail
model=$(realpath "$1")
n_prompt=${2:-128}
n_gen=${3:-64}
rounds=${4:-3}
build=${5:-build}
work=${6:-/var/tmp/moestream-bench/peer}
threads=${7:-$(nproc)}
bin=$(realpath "$build/moestream")
here=$(dirname "$(realpath "$0")")
mkdir -p "$work"
if [ ! -d "$work/node_modules/node-llama-cpp" ]; then
  echo "installing node-llama-cpp into $work (npm)" >&2
  (cd "$work" && npm install --no-audit --no-fund node-llama-cpp > npm.log 2>&1) || { echo "npm install failed: $work/npm.log" >&2; exit 2; }
fi
cp "$here/llamacpp_peer.mjs" "$work/"
results=$(mktemp)
for r in $(seq "$rounds"); do
  node "$work/llamacpp_peer.mjs" "$model" "$n_prompt" "$n_gen" "$threads" 2>/dev/null | tail -1 |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("llama.cpp", d["prompt_tokens_per_s"], d["gen_tokens_per_s"])' | tee -a "$results"
  "$bin" bench --model "$model" --prompt-tokens "$n_prompt" --tokens "$n_gen" --threads "$threads" --json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("moestream", d["prompt_tokens_per_s"], d["gen_tokens_per_s"])' | tee -a "$results"
done
python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {e: (statistics.median(float(r[1]) for r in rows if r[0] == e), statistics.median(float(r[2]) for r in rows if r[0] == e))
       for e in ("llama.cpp", "moestream")}
(lp, lg), (mp, mg) = med["llama.cpp"], med["moestream"]
print(f"medians: llama.cpp prompt {lp:.1f} gen {lg:.1f} tok/s; moestream prompt {mp:.1f} gen {mg:.1f} tok/s")
print(f"moestream / llama.cpp: prompt {mp / lp:.2f}, generation {mg / lg:.2f}")
EOF
rm -f "$results"

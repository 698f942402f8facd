#!/usr/bin/env bash
# moestream against ik_llama.cpp on the same GGUF file (a file in ik's own types, which mainline llama.cpp cannot
# load), everything in RAM, same threads and token counts, interleaved rounds, medians and ratios.
#
#   IK_BENCH=/path/to/ik_llama.cpp/build/bin/llama-bench bench/vs-ik.sh MODEL.gguf [prompt tokens=128] [generated tokens=32] [rounds=3] [build dir] [threads=nproc]
#
# ik_llama.cpp is not a dependency: build it from its public source outside this repository (a CPU build:
# cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF; cmake --build build --target llama-bench) and point IK_BENCH
# at its llama-bench. Its prompt test (pp) feeds random token ids and its generation test (tg) decodes from an
# empty context; moestream bench feeds (i * 7919 + 13) mod n_vocab, and its generation is timed in a second run
# after a one-token prompt.
set -euo pipefail
model=$(realpath "$1")
n_prompt=${2:-128}
n_gen=${3:-32}
rounds=${4:-3}
build=${5:-build}
threads=${6:-$(nproc)}
bin=$(realpath "$build/moestream")
ik=${IK_BENCH:?set IK_BENCH to ik_llama.cpp\'s llama-bench}
[ -x "$ik" ] || { echo "vs-ik: $ik is not an executable" >&2; exit 2; }
echo "peer: $ik"
results=$(mktemp)
for r in $(seq "$rounds"); do
  # (ik's ggml prints some warnings to stdout, inside the JSON)
  "$ik" -m "$model" -p "$n_prompt" -n "$n_gen" -t "$threads" -r 1 -o json 2>/dev/null | grep -v '^WARNING' |
    python3 -c 'import json,sys; d=json.load(sys.stdin); pp=[x["avg_ts"] for x in d if x["n_prompt"]>0][0]; tg=[x["avg_ts"] for x in d if x["n_gen"]>0][0]; print("ik_llama.cpp", pp, tg)' |
    tee -a "$results"
  # generation from a one-token context, as ik's tg test decodes from an empty one
  pp=$("$bin" bench --model "$model" --prompt-tokens "$n_prompt" --tokens 2 --threads "$threads" --no-fio --parallel "" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt_tokens_per_s"])')
  tg=$("$bin" bench --model "$model" --prompt-tokens 1 --tokens "$n_gen" --threads "$threads" --no-fio --parallel "" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["gen_tokens_per_s"])')
  echo "moestream $pp $tg" | tee -a "$results"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {e: (statistics.median(float(r[1]) for r in rows if r[0] == e), statistics.median(float(r[2]) for r in rows if r[0] == e))
       for e in ("ik_llama.cpp", "moestream")}
(ip, ig), (mp, mg) = med["ik_llama.cpp"], med["moestream"]
print(f"medians: ik_llama.cpp prompt {ip:.2f} gen {ig:.2f} tok/s; moestream prompt {mp:.2f} gen {mg:.2f} tok/s")
print(f"moestream / ik_llama.cpp: prompt {mp / ip:.2f}, generation {mg / ig:.2f}")
PY
rm -f "$results"

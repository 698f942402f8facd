#!/usr/bin/env bash
# moestream against llama.cpp on the same GGUF under the same cgroup v1 memory cap, cold page cache for both,
# interleaved rounds: what users run today when the model does not fit in RAM (llama.cpp with mmap, the page
# cache holding what it can) against the engine streaming experts through its own cache.
#
#   [VS_ISA=avx2] bench/vs-llama.sh MODEL.gguf CAP [prompt tokens=32] [generated tokens=16] [rounds=3] [build dir] [threads=nproc]
#
# CAP: bytes or 384M / 2G; "none" runs both without a cap (everything in RAM). The engine gets
# --ram-budget CAP minus 96 MiB for its own process. llama.cpp is node-llama-cpp's prebuilt CPU build
# (installed with npm into /var/tmp/moestream-bench/peer on first use); the line "peer:" names its release.
# Needs root for the cgroup (v1 memory controller at /sys/fs/cgroup/memory). Prints one line per round and
# engine, then the ratios of the medians (moestream / llama.cpp).
set -euo pipefail
model=$(realpath "$1")
cap=${2:?CAP (bytes, 384M, 2G or none)}
n_prompt=${3:-32}
n_gen=${4:-16}
rounds=${5:-3}
build=${6:-build}
threads=${7:-$(nproc)}
bin=$(realpath "$build/moestream")
here=$(dirname "$(realpath "$0")")
work=/var/tmp/moestream-bench/peer
mkdir -p "$work"
if [ ! -d "$work/node_modules/node-llama-cpp" ]; then
  echo "installing node-llama-cpp into $work (npm)" >&2
  (cd "$work" && npm install --no-audit --no-fund node-llama-cpp > npm.log 2>&1) || { echo "npm install failed: $work/npm.log" >&2; exit 2; }
fi
# VS_ISA=avx2: both sides on their AVX2 code on an AVX-512 host: the engine through MOESTREAM_ISA/NUMERICS,
# llama.cpp from a copy of the peer that holds only its haswell (AVX2) CPU variant, so ggml cannot pick another.
engine_env=()
if [ "${VS_ISA:-}" = avx2 ]; then
  if [ ! -d "$work-avx2" ]; then
    mkdir -p "$work-avx2/node_modules/@node-llama-cpp"
    (cd "$work/node_modules" && for d in *; do [ "$d" = @node-llama-cpp ] || cp -a "$d" "$work-avx2/node_modules/"; done)
    cp -a "$work/node_modules/@node-llama-cpp/linux-x64" "$work-avx2/node_modules/@node-llama-cpp/"
    find "$work-avx2" -name 'libggml-cpu-*.so' ! -name 'libggml-cpu-haswell.so' -delete
  fi
  work="$work-avx2"
  engine_env=(env MOESTREAM_ISA=avx2 MOESTREAM_NUMERICS=avx2)
  echo "isa: avx2 (engine MOESTREAM_ISA=avx2; llama.cpp's haswell CPU variant only)"
fi
cp "$here/llamacpp_peer.mjs" "$work/"

bytes() { python3 -c 'import sys; s=sys.argv[1].upper(); m={"K":1<<10,"M":1<<20,"G":1<<30}; print(int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s))' "$1"; }
cg=""
budget_flag=()
if [ "$cap" != none ]; then
  cap_bytes=$(bytes "$cap")
  [ -d /sys/fs/cgroup/memory ] || { echo "vs-llama: no cgroup v1 memory controller at /sys/fs/cgroup/memory" >&2; exit 2; }
  cg=/sys/fs/cgroup/memory/moestream-vs-$$
  mkdir "$cg"
  trap 'rmdir "$cg" 2>/dev/null || true' EXIT
  echo "$cap_bytes" > "$cg/memory.limit_in_bytes"
  [ -f "$cg/memory.memsw.limit_in_bytes" ] && echo "$cap_bytes" > "$cg/memory.memsw.limit_in_bytes"  # no escape into swap
  budget_flag=(--ram-budget $((cap_bytes - (96 << 20))))
  model_bytes=$(stat -c %s "$model")
  echo "cap $cap_bytes bytes; model $model_bytes bytes ($(python3 -c "print(f'{$model_bytes/$cap_bytes:.2f}')")x the cap)"
fi
# Runs a command inside the cgroup (when there is one).
in_cap() { if [ -n "$cg" ]; then bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@"; else "$@"; fi; }
# Cold page cache for the model: its pages dropped (only this file's; nothing else on the host is touched).
cold() { python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$model"; }

results=$(mktemp)
for r in $(seq "$rounds"); do
  cold
  # llama.cpp may not survive the cap (e.g. repacked K-quant weights are anonymous memory): say so, count it 0.
  if in_cap node "$work/llamacpp_peer.mjs" "$model" "$n_prompt" "$n_gen" "$threads" > "$results.peer" 2>/dev/null && [ -s "$results.peer" ]; then
    [ "$r" = 1 ] && python3 -c 'import json,sys; print("peer:", json.loads(open(sys.argv[1]).read().splitlines()[-1])["llama_cpp"])' "$results.peer"
    python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print("llama.cpp", d["prompt_tokens_per_s"], d["gen_tokens_per_s"])' "$results.peer" | tee -a "$results"
  else
    echo "llama.cpp failed under the cap (killed by the memory cgroup's OOM killer: dmesg says so); counted as 0 tok/s"
    echo "llama.cpp 0 0" >> "$results"
  fi
  cold
  in_cap "${engine_env[@]}" "$bin" bench --model "$model" "${budget_flag[@]}" --prompt-tokens "$n_prompt" --tokens "$n_gen" --threads "$threads" --no-fio --parallel "" --json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("moestream", d["prompt_tokens_per_s"], d["gen_tokens_per_s"])' | tee -a "$results"
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {e: (statistics.median(float(r[1]) for r in rows if r[0] == e), statistics.median(float(r[2]) for r in rows if r[0] == e))
       for e in ("llama.cpp", "moestream")}
(lp, lg), (mp, mg) = med["llama.cpp"], med["moestream"]
print(f"medians: llama.cpp prompt {lp:.2f} gen {lg:.2f} tok/s; moestream prompt {mp:.2f} gen {mg:.2f} tok/s")
ratio = lambda a, b: f"{a / b:.2f}" if b > 0 else "inf (llama.cpp did not run)"
print(f"moestream / llama.cpp: prompt {ratio(mp, lp)}, generation {ratio(mg, lg)}")
PY
rm -f "$results" "$results.peer"

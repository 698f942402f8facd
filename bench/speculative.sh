#!/usr/bin/env bash
# Speculative decoding (run --draft), measured on one host in one run, in RAM and streaming experts through a
# cache of 15% of them (--ram-budget):
#  - the cost of a verification step against the number of drafted tokens: perfect drafts (the run's own greedy
#    output fed back with --draft-reference) at depth 1, 2, 4, 8; tok/s, the measured seconds of a one-row step
#    and the experts' share of it the planner fits from the multi-row steps;
#  - the upper bound with perfect drafts, and prompt lookup on a code-editing style prompt whose answer repeats
#    spans of it; auto against off for each. Greedy output is checked to be the same in every row.
# Random weights: the model's output rarely repeats the prompt, so lookup acceptance here is low (see the table).
#
#   bench/speculative.sh [build dir] [work dir]      (N: tokens per run, default 96; STREAM_BUDGET, default 15%)
set -euo pipefail
build=${1:-build}
work=${2:-/var/tmp/moestream-bench}
bin=$(realpath "$build/moestream")
n=${N:-96}
mkdir -p "$work"
model=$work/speculative.gguf
if [ ! -f "$model" ]; then
  "$bin" mkmodel --layers 8 --embd 1024 --heads 16 --kv-heads 4 --head-dim 64 --experts 64 --experts-used 6 --ffn 768 \
    --vocab-builtin --type q4_k --seed 21 --out "$model" >/dev/null
fi
# 15% of the routed experts' bytes as the expert cache: the budget is the rest of the engine plus that.
read -r resident experts cache_per_token < <("$bin" check --model "$model" --no-fio --no-storage --json |
  python3 -c 'import json,sys; m=json.load(sys.stdin)["model"]; print(m["resident_bytes"], m["expert_bytes"], m["cache_bytes_per_token"])')
budget=${STREAM_BUDGET:-$((resident + experts * 15 / 100 + 512 * cache_per_token + 96 * 1024 * 1024))}
prompt='def area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n# the same two functions again:\ndef area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n'
run() {  # run LABEL ARGS...: one JSON line of results
  local label=$1; shift
  "$bin" run -m "$model" -p "$prompt" -n "$n" --ctx 512 --json --threads 2 "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"label": sys.argv[1], "tokens": d["tokens"], "tok_s": d["timings"]["gen_tokens_per_s"], "draft": d["draft"]}))' "$label"
}
out=$work/speculative.jsonl
: > "$out"
for where in ram stream; do
  extra=()
  [ "$where" = stream ] && extra=(--ram-budget "$budget")
  # Warm the page cache / expert cache path once, then the reference output.
  run warm "${extra[@]}" > /dev/null
  ref=$(run off "${extra[@]}")
  echo "{\"where\": \"$where\", \"run\": $ref}" >> "$out"
  ids=$(echo "$ref" | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
  for k in 1 2 4 8; do
    echo "{\"where\": \"$where\", \"run\": $(run "perfect-$k" --draft lookup --draft-max "$k" --draft-reference "$ids" "${extra[@]}")}" >> "$out"
  done
  for mode in lookup auto off; do
    echo "{\"where\": \"$where\", \"run\": $(run "$mode" --draft "$mode" "${extra[@]}")}" >> "$out"
  done
done
python3 - "$out" "$budget" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = {}
print(f"expert cache when streaming: --ram-budget {int(sys.argv[2]) / 2**20:.0f} MiB (15% of the experts)")
print(f"{'where':7} {'run':11} {'tok/s':>8} {'vs off':>7} {'drafted':>8} {'kept':>6} {'accept':>7} {'1-row ms':>9} {'expert share':>13}  same tokens")
for r in rows:
    w, d = r["where"], r["run"]
    if d["label"] == "off" and w not in ref: ref[w] = d
    base = ref[w]
    dr = d["draft"]
    same = d["tokens"] == base["tokens"]
    print(f"{w:7} {d['label']:11} {d['tok_s']:8.1f} {d['tok_s'] / base['tok_s']:7.2f} {dr['drafted']:8d} {dr['accepted']:6d} {dr['acceptance']:7.2f} "
          f"{dr['one_row_s'] * 1e3:9.2f} {dr['expert_share']:13.2f}  {'yes' if same else 'NO'}")
PY

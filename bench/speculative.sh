#!/usr/bin/env bash
# Speculative decoding (run --draft), measured on one host in one run, in RAM and streaming experts through a
# cache of 15% of them (--ram-budget):
#  - the cost of a verification step against the number of drafted tokens: perfect drafts (the run's own greedy
#    output fed back with --draft-reference) at depth 1, 2, 4, 8; tok/s, the measured seconds of a one-row step
#    and the experts' share of it the planner fits from the multi-row steps; distinct experts fetched and bytes
#    read from disk per generated token (a verification batch reads its experts' union once);
#  - the upper bound with perfect drafts, prompt lookup on a code-editing style prompt whose answer repeats
#    spans of it, and the model's NextN/MTP block (mtp as the measured cost pays; mtp-3: three every step);
#    auto and mtp against off. Greedy output is checked to be the same in every row.
# Random weights: the model's output rarely repeats the prompt, and a random NextN block predicts nothing, so
# lookup acceptance is partial and MTP acceptance near zero here (see the table): mtp's rows measure what
# rejected drafts cost, perfect-k what right ones gain.
#
#   bench/speculative.sh [build dir] [work dir]      (N: tokens per run, default 96; STREAM_BUDGET, default 15%;
#                                                     ARCH=deepseek4: a DeepSeek-V4-like model, its block in mtp-<name>.gguf)
set -euo pipefail
build=${1:-build}
work=${2:-/var/tmp/moestream-bench}
bin=$(realpath "$build/moestream")
n=${N:-96}
mkdir -p "$work"
if [ "${ARCH:-glm4moe}" = deepseek4 ]; then
  # DeepSeek-V4-like: hyper-connections, window / ratio-4 (indexed) / ratio-128 layers, a hash-routed first layer,
  # the MTP block in a file of its own beside the model, as llama.cpp's converter writes it
  model=$work/speculative-ds4.gguf
  [ -f "$model" ] || "$bin" mkmodel --arch deepseek4 --layers 8 --embd 1024 --heads 8 --head-dim 128 --rope-dims 64 --q-lora 256 \
    --window 64 --compress-ratios 0,4,128,4,128,4,128,4 --indexer-heads 4 --indexer-dim 64 --indexer-top-k 16 --hash-layers 1 \
    --experts 64 --experts-used 6 --ffn 768 --shared-experts 1 --nextn 1 --nextn-file "$work/mtp-speculative-ds4.gguf" \
    --vocab-builtin --type q4_k --seed 22 --out "$model" >/dev/null
else
  model=$work/speculative-glm.gguf
  if [ ! -f "$model" ]; then  # GLM-4.5-like: a dense first layer, a shared expert, and a NextN block after the trunk
    "$bin" mkmodel --arch glm4moe --layers 8 --embd 1024 --heads 16 --kv-heads 4 --head-dim 64 --experts 64 --experts-used 6 --ffn 768 \
      --dense-layers 1 --shared-experts 1 --nextn 1 --vocab-builtin --type q4_k --seed 22 --out "$model" >/dev/null
  fi
fi
# 15% of the routed experts' bytes as the expert cache: the budget is the rest of the engine plus that.
read -r resident experts cache_per_token nextn < <("$bin" check --model "$model" --no-fio --no-storage --json |
  python3 -c 'import json,sys; m=json.load(sys.stdin)["model"]; print(m["resident_bytes"], m["expert_bytes"], m["cache_bytes_per_token"], m["nextn_bytes"] + m["nextn_file_bytes"])')
budget=${STREAM_BUDGET:-$((resident + experts * 15 / 100 + 512 * cache_per_token + 96 * 1024 * 1024))}
# mtp also holds the NextN block in RAM with a runner of its own: the same expert cache needs that much more.
budget_mtp=$((budget + nextn + 96 * 1024 * 1024))
prompt='def area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n# the same two functions again:\ndef area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n'
run() {  # run LABEL ARGS...: one JSON line of results
  local label=$1; shift
  "$bin" run -m "$model" -p "$prompt" -n "$n" --ctx 512 --json --threads 2 "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"label": sys.argv[1], "tokens": d["tokens"], "tok_s": d["timings"]["gen_tokens_per_s"], "draft": d["draft"], "io": d["generation_experts"]}))' "$label"
}
out=$work/speculative-${ARCH:-glm4moe}.jsonl
: > "$out"
reps=${REPS:-3}
for where in ram stream; do
  extra=()
  [ "$where" = stream ] && extra=(--ram-budget "$budget")
  run warm "${extra[@]}" > /dev/null   # the page cache and the expert cache path warmed once
  ref=$(run off "${extra[@]}")
  ids=$(echo "$ref" | python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["tokens"])))')
  # Every configuration once per round, rounds interleaved: drift on a shared host hits all of them alike.
  for rep in $(seq "$reps"); do
    for k in 1 2 4 8; do
      echo "{\"where\": \"$where\", \"run\": $(run "perfect-$k" --draft lookup --draft-max "$k" --draft-reference "$ids" "${extra[@]}")}" >> "$out"
    done
    for mode in off lookup auto mtp mtp-3; do  # mtp-3: 3 drafts from the block every step (--draft-min 3)
      case $mode in
        mtp-3) args=(--draft mtp --draft-min 3 --draft-max 3) ;;
        *) args=(--draft "$mode") ;;
      esac
      [ "$where" = stream ] && args+=(--ram-budget "$(case $mode in mtp*) echo "$budget_mtp" ;; *) echo "$budget" ;; esac)")
      echo "{\"where\": \"$where\", \"run\": $(run "$mode" "${args[@]}")}" >> "$out"
    done
  done
done
python3 - "$out" "$budget" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"expert cache when streaming: --ram-budget {int(sys.argv[2]) / 2**20:.0f} MiB (15% of the experts); median of each configuration's runs")
print(f"{'where':7} {'run':11} {'tok/s':>8} {'vs off':>7} {'drafted':>8} {'kept':>6} {'accept':>7} {'1-row ms':>9} {'expert share':>13} {'loads/tok':>9} {'MB read/tok':>11}  same tokens")
groups = {}
for r in rows: groups.setdefault((r["where"], r["run"]["label"]), []).append(r["run"])
for where in ("ram", "stream"):
    off = groups[(where, "off")]
    base_tok_s = statistics.median(d["tok_s"] for d in off)
    for label in ("off", "perfect-1", "perfect-2", "perfect-4", "perfect-8", "lookup", "auto", "mtp", "mtp-3"):
        runs = groups[(where, label)]
        d = sorted(runs, key=lambda x: x["tok_s"])[len(runs) // 2]  # the median run
        dr, io, n = d["draft"], d["io"], len(d["tokens"])
        same = all(x["tokens"] == off[0]["tokens"] for x in runs)
        print(f"{where:7} {label:11} {d['tok_s']:8.1f} {d['tok_s'] / base_tok_s:7.2f} {dr['drafted']:8d} {dr['accepted']:6d} {dr['acceptance']:7.2f} "
              f"{dr['one_row_s'] * 1e3:9.2f} {dr['expert_share']:13.2f} {io['expert_loads'] / n:9.1f} {io['bytes_read'] / n / 1e6:11.2f}  {'yes' if same else 'NO'}")
PY

#!/usr/bin/env bash
# serve --prompt-cache, measured two ways on one host in one run:
#  1. Restarts: the scripted agent conversation of bench/checkpoints.sh (a system prompt of a few thousand
#     tokens, 10 turns mixing questions and tool results, the client sending back what the server answered), with
#     the server restarted before every turn, as a plan change or a crash would. Per run: prompt tokens evaluated,
#     restored from disk, and time to first token summed over the turns; with the prompt cache and without.
#  2. Writes do not slow decode: experts stream from the same disk the cache writes to (--ram-budget below the
#     model); an agent's next turn decodes while the previous prompt's prefix (f32 cache, ~200 MiB) is being
#     written at the default rate, against the same turn with the writer idle, 3 times each.
#
#   bench/prompt_cache.sh [build dir] [work dir]      (part 2: RAM_BUDGET, default 560M, below the model; RATE, default 128M)
set -euo pipefail
build=${1:-build}
work=${2:-/var/tmp/moestream-bench}
bin=$(realpath "$build/moestream")
mkdir -p "$work"
model=$work/prompt-cache.gguf
if [ ! -f "$model" ]; then
  "$bin" mkmodel --layers 8 --embd 1024 --heads 16 --kv-heads 16 --head-dim 64 --experts 64 --experts-used 4 --ffn 512 \
    --vocab-builtin --type q8_0 --seed 12 --out "$model" >/dev/null
fi
serve() {  # serve PORTFILE LOG ARGS...: starts a server, waits until it answers /health, prints its pid
  local port_file=$1 log=$2; shift 2
  rm -f "$port_file"
  "$bin" serve --model "$model" --port 0 --port-file "$port_file" --threads 2 --alias m "$@" > /dev/null 2> "$log" &
  local pid=$!
  for _ in $(seq 600); do
    if [ -s "$port_file" ] && curl -sf "http://127.0.0.1:$(cat "$port_file")/health" >/dev/null; then break; fi
    sleep 0.1
  done
  echo "$pid"
}
stop() {  # the server is not this shell's child (it was started in $(...)): poll until it has exited
  kill "$1"
  while kill -0 "$1" 2>/dev/null; do sleep 0.05; done
}

rm -f "$work/writes.jsonl"
# 1. Restarts between turns (ONLY_WRITES=1 skips to 2).
for mode in $([ -n "${ONLY_WRITES:-}" ] || echo cache none); do
  rm -rf "${PROMPTS:-$work/prompts}"
  extra=(--ctx 8192)
  [ "$mode" = cache ] && extra+=(--prompt-cache "${PROMPTS:-$work/prompts}")
  : > "$work/turns.$mode.jsonl"
  for turn in $(seq 0 9); do
    pid=$(serve "$work/port" "$work/serve.$mode.log" "${extra[@]}")
    python3 - "$(cat "$work/port")" "$turn" "$work/conversation.$mode.json" >> "$work/turns.$mode.jsonl" <<'PY'
import json, sys, time, urllib.request
port, turn, state = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
system = "You are a coding agent. Tools: read_file(path), run(cmd), edit(path, old, new).\n" + \
         "".join(f"Rule {i}: keep changes small, test them, and explain what you measured.\n" for i in range(48))
turns = ["List the files.", {"tool": "src/a.c src/b.c Makefile"}, "Read src/a.c.", {"tool": "int main(void) { return 0; }"},
         "Add a test.", {"tool": "ok"}, "Run it.", {"tool": "1 passed"}, "Summarise.", "Thanks."]
messages = [{"role": "system", "content": system}] if turn == 0 else json.load(open(state))
t = turns[turn]
messages.append({"role": "tool", "content": t["tool"]} if isinstance(t, dict) else {"role": "user", "content": t})
body = json.dumps({"model": "m", "messages": messages, "max_tokens": 24, "temperature": 0, "stream": True}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json"})
t0 = time.time(); first = None; text = ""; timings = {}
with urllib.request.urlopen(req, timeout=600) as r:
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]": continue
        ev = json.loads(line[6:])
        for c in ev.get("choices", []):
            piece = c.get("delta", {}).get("content") or c.get("delta", {}).get("reasoning_content") or ""
            if piece and first is None: first = time.time() - t0  # the first generated text, not the role chunk
            text += c.get("delta", {}).get("content") or ""
        timings = ev.get("timings", timings)
messages.append({"role": "assistant", "content": text})
json.dump(messages, open(state, "w"))
metrics = dict(l.split()[:2] for l in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode().splitlines() if l and l[0] != "#")
restore_s = float(metrics.get("moestream_prompt_cache_restore_seconds_total", 0))
print(json.dumps({"turn": turn, "ttft_s": round(first, 3), "prompt_s": round(timings.get("prompt_ms", 0) / 1000, 3), "prompt_n": timings.get("prompt_n"),
                  "restored": timings.get("prompt_restored"), "reused": timings.get("prompt_reused"), "restore_s": round(restore_s, 3)}))
PY
    stop "$pid"  # SIGTERM: a save still being written finishes first (up to 10 s)
  done
done
[ -n "${ONLY_WRITES:-}" ] || python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
res = {}
for mode in ("cache", "none"):
    rows = [json.loads(l) for l in open(f"{work}/turns.{mode}.jsonl")]
    res[mode] = {"ttft_s": round(sum(r["ttft_s"] for r in rows), 2), "prompt_s": round(sum(r["prompt_s"] for r in rows), 2),
                 "evaluated": sum(r["prompt_n"] for r in rows), "restore_s": round(sum(r["restore_s"] for r in rows), 2),
                 "restored": sum(r["restored"] or 0 for r in rows), "ttft_per_turn": [r["ttft_s"] for r in rows]}
res["ttft_ratio_without_over_with"] = round(res["none"]["ttft_s"] / max(res["cache"]["ttft_s"], 1e-9), 2)
print(json.dumps({"restarts": res}))
PY

# 2. Decode while a large prefix is written: the same requests (same seeds, so the same routing and expert
# reads) against a server with the prompt cache and one without.
for mode in cache none; do
  rm -rf "${PROMPTS:-$work/prompts}"
  extra=(--ctx 4096 --ram-budget "${RAM_BUDGET:-560M}" --cache-type-k f32 --cache-type-v f32)
  [ "$mode" = cache ] && extra+=(--prompt-cache "${PROMPTS:-$work/prompts}" --prompt-cache-rate "${RATE:-128M}")
  pid=$(serve "$work/port" "$work/serve.write.$mode.log" "${extra[@]}")
  grep -q "experts streamed" "$work/serve.write.$mode.log" || echo "warning: experts are not streamed (lower RAM_BUDGET)" >&2
  python3 - "$(cat "$work/port")" "$mode" >> "$work/writes.jsonl" <<'PY'
import json, sys, time, urllib.request
port, mode = int(sys.argv[1]), sys.argv[2]
def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=900))
def metric(name):
    for line in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode().splitlines():
        if line.startswith(name + " "): return float(line.split()[1])
    return 0.0
for i in range(4):
    # A new long prefix: its save starts once its prompt is evaluated. The next turn of that conversation (what
    # an agent sends next) extends the slot's rows, so the save goes on while that turn decodes.
    long = [{"role": "user", "content": f"Variant {i}. " + "Read every line of the log and report. " * 80}]
    first = post({"messages": long, "max_tokens": 1, "temperature": 0})
    turn = long + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]}, {"role": "user", "content": "Count."}]
    before = metric("moestream_prompt_cache_saved_total")
    # Sampled, so that routing moves around the experts (greedy decoding of a synthetic model loops on a few).
    r = post({"messages": turn, "max_tokens": 32, "ignore_eos": True, "temperature": 1.0, "seed": 100 + i})
    busy = mode == "cache" and metric("moestream_prompt_cache_saved_total") == before
    while mode == "cache" and metric("moestream_prompt_cache_saved_total") < before + 1:
        time.sleep(0.1)
    print(json.dumps({"mode": mode, "round": i, "tok_s": r["timings"]["predicted_per_second"], "writer_busy_at_end": busy,
                      "expert_mib": round(r["usage"]["moestream"]["expert_bytes_read"] / 2**20),
                      "record_mib": round(metric("moestream_prompt_cache_bytes") / max(metric("moestream_prompt_cache_records"), 1) / 2**20, 1)}))
PY
  stop "$pid"
done
python3 - "$work" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/writes.jsonl")]
by = {m: [r for r in rows if r["mode"] == m and r["round"] > 0] for m in ("cache", "none")}  # round 0 warms the expert cache
w, n = sum(r["tok_s"] for r in by["cache"]), sum(r["tok_s"] for r in by["none"])
print(json.dumps({"decode_while_writing": {"writing_tok_s": [r["tok_s"] for r in by["cache"]], "no_cache_tok_s": [r["tok_s"] for r in by["none"]],
                  "writer_busy_at_decode_end": [r["writer_busy_at_end"] for r in by["cache"]],
                  "expert_mib_read": {m: [r["expert_mib"] for r in by[m]] for m in by}, "record_mib": by["cache"][-1]["record_mib"],
                  "ratio_writing_over_no_cache": round(w / n, 3)}}))
PY

#!/usr/bin/env bash
# Prefix reuse on a recurrent model (qwen35moe): the same scripted agent conversation (a system prompt of a few
# thousand tokens, 10 turns mixing user questions and tool results, the client sending back what the server
# answered) against `moestream serve` with recurrent-state checkpoints (the default) and without
# (--ctx-checkpoints 0). Reports, per run, the prompt tokens the server had to evaluate and the time it took.
#
#   bench/checkpoints.sh [build dir] [work dir]
#
# The model uses Qwen3.5's chat rules (reasoning shown only after the last user query), which is what makes a
# new turn diverge from the cached one inside the previous answer: without a snapshot to go back to, the
# whole conversation is evaluated again.
set -euo pipefail
build=${1:-build}
work=${2:-/var/tmp/moestream-bench}
bin=$(realpath "$build/moestream")
mkdir -p "$work"
model=$work/checkpoints-q35.gguf
if [ ! -f "$model" ]; then
  # A stand-in template naming Qwen3.5's markers; the engine renders the family natively.
  printf '%s' "{# Qwen3.5-style: <|im_start|> <tool_call><function=...> and a '<think>' generation prompt #}" > "$work/qwen35.jinja"
  "$bin" mkmodel --arch qwen35moe --layers 8 --embd 512 --heads 8 --kv-heads 2 --head-dim 64 --experts 16 --experts-used 4 \
    --ffn 256 --shared-experts 1 --ssm-state 64 --ssm-k-heads 2 --ssm-v-heads 4 --vocab-builtin \
    --chat-template-file "$work/qwen35.jinja" --type q8_0 --seed 11 --out "$model"
fi
for checkpoints in 8 0; do
  port_file=$work/port.$checkpoints
  rm -f "$port_file"
  "$bin" serve --model "$model" --port 0 --port-file "$port_file" --threads 2 --ctx 8192 --ctx-checkpoints "$checkpoints" \
    --alias m 2> "$work/serve.$checkpoints.log" &
  pid=$!
  for _ in $(seq 200); do [ -s "$port_file" ] && break; sleep 0.1; done
  python3 - "$(cat "$port_file")" "$checkpoints" <<'EOF'
import json, sys, time, urllib.request
port, checkpoints = int(sys.argv[1]), sys.argv[2]
def post(body):
    for _ in range(100):
        try:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            return json.load(urllib.request.urlopen(req, timeout=600))
        except urllib.error.URLError:
            time.sleep(0.1)
    raise SystemExit("server did not answer")
# A system prompt of a few thousand tokens (the byte vocabulary: one token per byte).
system = "You are a coding agent. Tools: read_file(path), run(cmd), edit(path, old, new).\n" + \
         "".join(f"Rule {i}: keep changes small, test them, and explain what you measured.\n" for i in range(48))
turns = ["List the files.", {"tool": "src/a.c src/b.c Makefile"}, "Read src/a.c.", {"tool": "int main(void) { return 0; }"},
         "Add a test.", {"tool": "ok"}, "Run it.", {"tool": "1 passed"}, "Summarise.", "Thanks."]
messages = [{"role": "system", "content": system}]
evaluated = reused = total = 0
prompt_ms = 0.0
for turn in turns:
    if isinstance(turn, dict):
        messages.append({"role": "tool", "content": turn["tool"]})
    else:
        messages.append({"role": "user", "content": turn})
    r = post({"model": "m", "messages": messages, "max_tokens": 24, "temperature": 0})
    t = r["timings"]
    evaluated += t["prompt_n"]; reused += t["prompt_reused"]; total += r["usage"]["prompt_tokens"]; prompt_ms += t["prompt_ms"]
    messages.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
print(json.dumps({"ctx_checkpoints": int(checkpoints), "turns": len(turns), "prompt_tokens": total, "evaluated": evaluated,
                  "reused": reused, "prompt_seconds": round(prompt_ms / 1000, 2)}))
EOF
  kill "$pid"; wait "$pid" || true
done

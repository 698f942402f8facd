#!/usr/bin/env bash
# The main job on the bundled demo model, end to end: readiness check, plan, launch the server as the
# plan says, one chat request through the OpenAI API, the answer and tokens/s, clean shutdown.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./build/moestream
model=build/demo/demo-qwen3moe-q4_k.gguf
plan_dir=build/demo/plan
port=${MOESTREAM_DEMO_PORT:-$((18000 + RANDOM % 2000))}

echo "== moestream check"
"$bin" check --model "$model" --seconds 2 || true   # exit 1 = warnings: the table says what to fix

echo "== moestream plan"
"$bin" plan --model "$model" --out "$plan_dir" --port "$port" --alias demo --seconds 1 --ram-budget 2G

echo "== moestream launch (background)"
"$bin" launch --plan "$plan_dir/plan.yaml" > build/demo/serve.log 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do
  curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
  kill -0 $server 2>/dev/null || { cat build/demo/serve.log; exit 1; }
  sleep 0.1
done

echo "== POST /v1/chat/completions"
reply=$(curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"demo","messages":[{"role":"system","content":"You are a demo."},{"role":"user","content":"Say hello."}],"max_tokens":48,"temperature":0.7,"seed":1}')
echo "answer: $(jq -r '.choices[0].message.content' <<< "$reply")"
jq -r '"tokens: \(.usage.prompt_tokens) prompt, \(.usage.completion_tokens) generated; \(.timings.predicted_per_second | floor) tok/s generation (finish: \(.choices[0].finish_reason))"' <<< "$reply"
echo "(the demo model has random weights: the text is noise, the pipeline and the numbers are real)"

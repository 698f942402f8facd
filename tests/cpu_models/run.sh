#!/usr/bin/env bash
# Runs the kernel and llama.cpp-oracle tests on CPUs the test host is not, under QEMU user-mode emulation
# (Debian's qemu-user): the code an AVX2-only or a pre-AVX2 CPU dispatches to, which an AVX-512 host never
# executes by itself. QEMU's TCG has no AVX-512, so the AVX-512 tables stay covered by the native run only.
#   run.sh MODEL GTEST_FILTER EXPECT_ISA TESTS_BINARY [MOESTREAM_BINARY MODEL_GGUF]
# EXPECT_ISA is the kernel table the engine must choose on MODEL (scalar, avx2); with a moestream binary and a
# model it also runs `moestream run` there and checks the table it names at start.
set -uo pipefail
model=$1 filter=$2 expect=$3 tests=$4 moestream=${5:-} gguf=${6:-}
qemu=$(command -v qemu-x86_64 || true)
if [ -z "$qemu" ]; then
  echo "cpu-models: qemu-x86_64 not found (apt-get install qemu-user; scripts/setup.sh does): not run on $model"
  exit 77  # ctest's SKIP_RETURN_CODE: reported as skipped, never as passed
fi
# TCG lacks a few of the named models' system features (pcid, x2apic, TSX); they do not matter to user code.
cpu="$model"
for f in pcid x2apic tsc-deadline hle rtm invpcid; do cpu+=",-$f"; done
# One prompt per oracle reference: emulated AVX2 runs one at 30-120 s on some hosts (Intel Xeon, QEMU 7.2).
export MOESTREAM_ORACLE_PROMPTS=${MOESTREAM_ORACLE_PROMPTS:-1}
# ... and the slowest kernel comparisons take fewer shapes (the test says which; the native run takes them all).
export MOESTREAM_EMULATED_CPU=$model
# ctest runs its tests one at a time, and one emulated process keeps one core busy: the tests go to one shard per
# core (gtest's own sharding), run side by side, each shard's output printed when it ends.
shards=${MOESTREAM_CPU_MODEL_SHARDS:-$(nproc)}
[ "$shards" -ge 1 ] 2>/dev/null || shards=1
[ "$shards" -le 4 ] || shards=4
echo "cpu-models: $($qemu --version | head -1) -cpu $model, tests: $filter (oracle prompts: $MOESTREAM_ORACLE_PROMPTS per reference; $shards shards)"
logs=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$logs"' INT TERM  # interrupted: the shards go with it
for ((i = 0; i < shards; ++i)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$qemu" -cpu "$cpu" "$tests" --gtest_filter="$filter" --gtest_brief=1 > "$logs/$i" 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < shards; ++i)); do
  wait "${pids[$i]}"
  rc=$?
  grep -v "^qemu-x86_64: warning" "$logs/$i"
  [ "$rc" -eq 0 ] || { echo "cpu-models: shard $i of $shards failed under -cpu $model (exit $rc)"; failed=1; }
done
trap - INT TERM
rm -rf "$logs"
[ "$failed" -eq 0 ] || { echo "cpu-models: tests failed under -cpu $model"; exit 1; }
if [ -n "$moestream" ]; then
  out=$("$qemu" -cpu "$cpu" "$moestream" run --model "$gguf" --prompt "hello" -n 2 --json 2>&1)
  rc=$?
  why=$(printf '%s\n' "$out" | grep -o '"kernels_why": *"[^"]*"' | head -1)
  [ "$rc" -eq 0 ] || { echo "cpu-models: moestream run failed under -cpu $model (exit $rc): $out"; exit 1; }
  echo "cpu-models: moestream run under -cpu $model: ${why:-no kernels line}"
  case "$why" in
    *"\"$expect kernels:"*) ;;
    *) echo "cpu-models: expected the $expect table on $model; output: $out"; exit 1 ;;
  esac
fi
echo "cpu-models: $model passed"

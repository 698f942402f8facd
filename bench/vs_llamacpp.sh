#!/usr/bin/env bash
# moestream against llama.cpp on the same GGUF with everything in RAM (no memory cap): prompt and generation
# tok/s, same threads, prompt ids and token counts, interleaved rounds, medians and ratios. The same run as
# bench/vs-llama.sh with CAP "none"; kept for the arguments earlier figures were recorded with.
#
#   bench/vs_llamacpp.sh MODEL.gguf [prompt tokens=128] [generated tokens=64] [rounds=3] [build dir] [work dir: ignored] [threads=nproc]
set -euo pipefail
exec "$(dirname "$(realpath "$0")")/vs-llama.sh" "$1" none "${2:-128}" "${3:-64}" "${4:-3}" "${5:-build}" "${7:-$(nproc)}"

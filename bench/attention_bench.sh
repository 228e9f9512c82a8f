#!/usr/bin/env bash
# Fused vs composite causal attention (forward + backward) at T = 256, 1024, 4096, one process per
# configuration so each reports its own peak RSS. Usage: bench/attention_bench.sh [extra flags]
# (after scripts/setup.sh; threads: FLOW_NUM_THREADS, default 2 here).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${FLOW_BUILD_DIR:-build}"
cmake --build "$build" --target attention_bench -j2 >/dev/null
export FLOW_NUM_THREADS="${FLOW_NUM_THREADS:-2}"
for length in 256 1024 4096; do
  for dtype in float32 bfloat16; do
    for impl in composite fused; do
      "$build/bench/attention_bench" --impl "$impl" --dtype "$dtype" --length "$length" --batch 1 --heads 4 --head-dim 64 "$@"
    done
  done
done

#!/usr/bin/env bash
# nn::Graph training of the quickstart MLP in every parallel mode, in one invocation: one process,
# then 2 ranks (flow_run) data parallel, Megatron model parallel, ZeRO-1, ZeRO-2 and two pipeline
# stages with 4 micro-batches (GPipe and 1F1B; each stage reports its own line); one thread per rank, the same global batch. Prints steps/s and each
# mode's per-rank memory and collectives.
# Usage: bench/graph_parallel_bench.sh [--global-batch B] [--steps S]   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${FLOW_BUILD_DIR:-build}"
cmake --build "$build" --target graph_parallel_bench flow_run -j2 >/dev/null
"$build/bench/graph_parallel_bench" --mode none "$@"
for mode in dp mp zero1 zero2 pp pp1f1b; do
  "$build/launcher/flow_run" --nproc-per-node 2 --timeout 600 -- "$build/bench/graph_parallel_bench" --mode "$mode" "$@" | sed 's/^\[rank0\]: //'
done

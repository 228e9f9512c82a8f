#!/usr/bin/env bash
# Data-parallel training of the quickstart MLP in one invocation: 1 process x 1 thread,
# 1 process x 2 threads, 2 processes x 1 thread (flow_run), same global batch; the 2-rank run
# adds the gradients' all_reduce against a memcpy floor and the communication share of a step.
# Usage: bench/ddp_bench.sh [--global-batch B] [--steps S]   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${FLOW_BUILD_DIR:-build}"
cmake --build "$build" --target ddp_bench flow_run -j2 >/dev/null
echo "# 1 process x 1 thread"
"$build/bench/ddp_bench" --threads 1 "$@"
echo "# 1 process x 2 threads"
"$build/bench/ddp_bench" --threads 2 "$@"
echo "# 2 processes x 1 thread"
"$build/launcher/flow_run" --nproc-per-node 2 --timeout 600 -- "$build/bench/ddp_bench" --threads 1 "$@"

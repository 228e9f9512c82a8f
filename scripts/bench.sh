#!/usr/bin/env bash
# Op benchmarks, flow and libtorch side by side in one run at the same thread count, printed as
# one table of ratios. Installs libtorch-dev (for the comparison only) when missing.
# Usage: [FLOW_BENCH_SUITE=ops|train|graph|deploy] scripts/bench.sh [--benchmark_filter=REGEX]   (env FLOW_BENCH_THREADS, default 2)
# The graph suite is eager vs Graph vs libtorch training steps (bench/graph_bench.cpp); the deploy suite is
# oneflow_lite vs Graph vs eager vs libtorch inference latency (bench/deploy_bench.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dpkg-query -W -f='${Status}' libtorch-dev 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libtorch-dev
fi
bash scripts/setup.sh
build="${FLOW_BUILD_DIR:-build}"
cmake -S . -B "$build" -DFLOW_BUILD_TORCH_BENCH=ON >/dev/null
cmake --build "$build" --target flow_ops_bench torch_ops_bench flow_train_bench torch_train_bench flow_graph_bench torch_graph_bench \
  flow_deploy_bench torch_deploy_bench
suite="${FLOW_BENCH_SUITE:-ops}"  # ops, train, graph or deploy
out=$(mktemp -d)
export FLOW_BENCH_THREADS="${FLOW_BENCH_THREADS:-2}"
# Interleaved twice, so drifting machine load touches both frameworks alike; the best run counts.
for round in 1 2; do
  "$build/bench/flow_${suite}_bench" --benchmark_min_time=0.3 --benchmark_format=json "$@" > "$out/flow_$round.json"
  "$build/bench/torch_${suite}_bench" --benchmark_min_time=0.3 --benchmark_format=json "$@" > "$out/torch_$round.json"
done
mode=()
[ "$suite" = graph ] && mode=(--graph)
[ "$suite" = deploy ] && mode=(--deploy)
python3 scripts/compare_bench.py "${mode[@]}" "$out"/flow_*.json -- "$out"/torch_*.json

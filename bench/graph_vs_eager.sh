#!/usr/bin/env bash
# Eager vs nn::Graph training steps (bench/graph_bench.cpp), repeated with Google Benchmark's random
# interleaving so that drifting machine load touches both alike, reported as min / median / max
# steps/s of each, and the Graph/eager ratio of the medians with its full spread (slowest Graph
# repetition over fastest eager one, to fastest over slowest); then the same for the Graph with bfloat16
# AMP (config().enable_amp()) and for the Graph with a grad scaler (set_grad_scaler), each against
# the float32 Graph.
# Usage: bench/graph_vs_eager.sh [--repetitions N] [Google Benchmark flags]   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${FLOW_BUILD_DIR:-build}"
repetitions=7
if [ "${1:-}" = "--repetitions" ]; then
  repetitions="$2"
  shift 2
fi
cmake --build "$build" --target flow_graph_bench -j2 >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$build/bench/flow_graph_bench" --benchmark_min_time=0.2 --benchmark_repetitions="$repetitions" \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=false --benchmark_format=json "$@" > "$out"
python3 - "$out" <<'PY'
import json, statistics, sys
runs = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") != "iteration":
        continue
    model, mode, threads = b["run_name"].split("/")[:3]
    runs.setdefault((model, threads), {}).setdefault(mode, []).append(b["steps/s"])
fmt = lambda v: f"{min(v):.0f} / {statistics.median(v):.0f} / {max(v):.0f}"
for base, other, label in (("eager", "graph", "Graph"), ("graph", "graph_amp", "Graph AMP"), ("graph", "graph_scaler", "Graph + GradScaler")):
    base_label = "eager" if base == "eager" else "Graph"
    print(f"| case | threads | {base_label} steps/s min / median / max | {label} steps/s min / median / max | {label}/{base_label} (medians) | spread |")
    print("|---|---|---|---|---|---|")
    for (model, threads), modes in runs.items():
        a, b = modes.get(base, []), modes.get(other, [])
        if a and b:
            print(f"| {model} | {threads} | {fmt(a)} | {fmt(b)} | {statistics.median(b) / statistics.median(a):.2f} | {min(b) / max(a):.2f}-{max(b) / min(a):.2f} |")
    print()
PY

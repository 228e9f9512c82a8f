#!/usr/bin/env bash
# Eager vs nn::Graph training steps (bench/graph_bench.cpp), repeated with Google Benchmark's random
# interleaving so that drifting machine load touches both alike, reported as min / median / max
# steps/s of each, and the Graph/eager ratio of the medians with its full spread (slowest Graph
# repetition over fastest eager one, to fastest over slowest).
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
print("| case | threads | eager steps/s min / median / max | Graph steps/s min / median / max | Graph/eager (medians) | spread |")
print("|---|---|---|---|---|---|")
for (model, threads), modes in runs.items():
    eager, graph = modes.get("eager", []), modes.get("graph", [])
    if not eager or not graph:
        continue
    fmt = lambda v: f"{min(v):.0f} / {statistics.median(v):.0f} / {max(v):.0f}"
    print(f"| {model} | {threads} | {fmt(eager)} | {fmt(graph)} | {statistics.median(graph) / statistics.median(eager):.2f} | {min(graph) / max(eager):.2f}-{max(graph) / min(eager):.2f} |")
PY

#!/usr/bin/env bash
# A GPT-2 training step side by side with PyTorch on the identical architecture and sizes
# (bench/gpt_step, bench/torch_gpt_step.py): flow eager and Graph against PyTorch eager, float32
# and bfloat16 autocast, at each thread count, in interleaved rounds; prints one line per run and
# a table of medians over the rounds (tokens/s, flow Graph over PyTorch, peak RSS).
# Usage: bench/gpt_vs_torch.sh [gpt_step options such as --tokens 1024 --batch 2]
# Environment: THREADS (default "1 2"), ROUNDS (default 2), PYTHON (a python3 with torch; default
# python3, else /usr/bin/python3, where Debian's python3-torch lives).
set -uo pipefail
cd "$(dirname "$0")/.."
build="${FLOW_BUILD_DIR:-build}"
python="${PYTHON:-python3}"
"$python" -c "import torch" 2>/dev/null || python=/usr/bin/python3
"$python" -c "import torch" 2>/dev/null || { echo "gpt_vs_torch.sh: no python3 with torch (apt-get install python3-torch)" >&2; exit 1; }
[ -x "$build/bench/gpt_step" ] || { echo "gpt_vs_torch.sh: build $build/bench/gpt_step first" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "PyTorch $("$python" -c 'import torch; print(torch.__version__)'), $(nproc) CPUs, options: $*"
for round in $(seq "${ROUNDS:-2}"); do
  for threads in ${THREADS:-1 2}; do
    for amp in "" --amp; do
      for mode in eager graph; do
        FLOW_NUM_THREADS=$threads "$build/bench/gpt_step" --mode "$mode" $amp "$@" 2>&1 | tail -n 1 | tee -a "$log"
      done
      "$python" bench/torch_gpt_step.py --threads "$threads" $amp "$@" 2>&1 | tail -n 1 | tee -a "$log"
    done
  done
done
"$python" - "$log" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 12 or f[1] != "threads":
        continue
    runs.setdefault((int(f[2]), f[0]), []).append((float(f[6]), float(f[-1])))
print("| threads | run | tokens/s | peak RSS (MB) | flow Graph / PyTorch |")
print("| --- | --- | --- | --- | --- |")
for (threads, name), values in sorted(runs.items()):
    rate = statistics.median(v[0] for v in values)
    rss = max(v[1] for v in values)
    amp = "-amp" if name.endswith("-amp") else ""
    torch = runs.get((threads, "torch-eager" + amp))
    ratio = ""
    if name.startswith("flow-graph") and torch:
        ratio = f"{rate / statistics.median(v[0] for v in torch):.2f}x"
    print(f"| {threads} | {name} | {rate:.0f} | {rss:.0f} | {ratio} |")
PY

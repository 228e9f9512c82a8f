#!/usr/bin/env bash
# flow on a many-core CPU at 1, 2, 4, 8 and 16 threads against PyTorch on the same CPU: the
# FashionMNIST quickstart (flow eager and Graph; bench/torch_quickstart.py) and a GPT-2 training
# step (bench/gpt_step, eager and Graph; bench/torch_gpt_step.py), each also at flow's default
# thread count and, at the largest count, with libgomp's own spin (GOMP_SPINCOUNT=300000, what flow
# ran with before it set 1000) and OpenMP's passive wait policy. Runs on the GPU machine the device
# tool lends (its 16 CPU cores); prepare here:
#   bash scripts/gpu_package.sh build/examples/quickstart_eager build/examples/quickstart_graph build/bench/gpt_step
#   mkdir -p .gpu/fashion-mnist && cp /usr/share/datasets/fashion-mnist/*.gz .gpu/fashion-mnist/
# then run there (carry .gpu): bash bench/cpu_threads.sh
# Quickstart cases run with --epochs 1 and --epochs 2; the difference of the wall times is one
# epoch without start-up. GPT cases print the median of 5 steps after 2 warm-up steps. THREADS
# (default "1 2 4 8 16") picks the counts.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh  # also when unpacked before: a caller's LD_LIBRARY_PATH may lack it
data="${FASHION_MNIST:-.gpu/fashion-mnist}"
bin=/tmp/flow-gpu/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "cpus: nproc $(nproc), $(lscpu | grep -E '^Model name' | sed 's/  */ /g')"
for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us; do
  [ -r "$f" ] && echo "$f: $(cat "$f")"
done
echo "libgomp read: $(OMP_DISPLAY_ENV=VERBOSE "$bin/quickstart_eager" --help 2>&1 | grep -E 'GOMP_SPINCOUNT|OMP_WAIT_POLICY' | tr -s ' ' | tr '\n' ' ')"
has_torch=0
python3 -c "import torch; print('PyTorch', torch.__version__)" && has_torch=1 || echo "no PyTorch: its rows are skipped"

run_case() {  # name, epochs, env assignments..., -- command...
  local name=$1 epochs=$2
  shift 2
  local start end
  start=$(date +%s%N)
  if ! timeout 300 env "$@" > "$work/log" 2>&1; then
    echo "$name failed:"; tail -n 5 "$work/log"; return 1
  fi
  end=$(date +%s%N)
  # Printed as it goes too, so that a run cut short by its time limit still reports its cases.
  echo "$name $epochs $(( (end - start) / 1000000 ))" | tee -a "$work/times"
}

quickstart() {  # label, env assignments...
  local label=$1
  shift
  for epochs in 1 2; do
    local common=(--data "$data" --epochs "$epochs" --device cpu)
    run_case "flow-eager-$label" "$epochs" "$@" "$bin/quickstart_eager" "${common[@]}" --out "$work/m.safetensors"
    run_case "flow-graph-$label" "$epochs" "$@" "$bin/quickstart_graph" "${common[@]}" --out "$work/g.safetensors" --export "$work/export"
  done
}

gpt() {  # label, env assignments... (flow's line, with the label in front)
  local label=$1
  shift
  for mode in eager graph; do
    echo "$label $(timeout 300 env "$@" "$bin/gpt_step" --mode "$mode" 2>&1 | tail -n 1)"
  done
}

threads="${THREADS:-1 2 4 8 16}"
largest=${threads##* }
echo "== GPT-2 step (4 layers, 256 wide, 4 heads, 128 tokens, batch 8, vocabulary 50257, AdamW)"
for t in $threads; do
  gpt "$t" FLOW_NUM_THREADS="$t"
  ((has_torch)) && echo "$t $(timeout 300 python3 bench/torch_gpt_step.py --threads "$t" 2>&1 | tail -n 1)"
done
gpt default
((has_torch)) && echo "default $(timeout 300 python3 bench/torch_gpt_step.py 2>&1 | tail -n 1)"
gpt "$largest-GOMP_SPINCOUNT=300000" FLOW_NUM_THREADS="$largest" GOMP_SPINCOUNT=300000
gpt "$largest-OMP_WAIT_POLICY=PASSIVE" FLOW_NUM_THREADS="$largest" OMP_WAIT_POLICY=PASSIVE

echo "== quickstart"
for t in $threads; do
  quickstart "$t" FLOW_NUM_THREADS="$t"
  if ((has_torch)); then
    for epochs in 1 2; do
      run_case "torch-$t" "$epochs" OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" python3 bench/torch_quickstart.py --data "$data" --epochs "$epochs" --device cpu
    done
  fi
done
quickstart default
quickstart "$largest-GOMP_SPINCOUNT=300000" FLOW_NUM_THREADS="$largest" GOMP_SPINCOUNT=300000
quickstart "$largest-OMP_WAIT_POLICY=PASSIVE" FLOW_NUM_THREADS="$largest" OMP_WAIT_POLICY=PASSIVE
python3 - "$work/times" <<'PY'
import sys
runs = {}
for line in open(sys.argv[1]):
    name, epochs, ms = line.split()
    runs.setdefault(name, {})[int(epochs)] = int(ms)
print("| case | seconds per epoch | seconds for 1 epoch with start-up |")
print("| --- | --- | --- |")
for name, by_epochs in runs.items():
    if 1 in by_epochs and 2 in by_epochs:
        print(f"| {name} | {(by_epochs[2] - by_epochs[1]) / 1000:.2f} | {by_epochs[1] / 1000:.2f} |")
PY

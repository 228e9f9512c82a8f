#!/usr/bin/env bash
# The FashionMNIST quickstart on a many-core CPU at 1, 2, 4, 8 and 16 threads: flow eager and Graph
# against PyTorch (bench/torch_quickstart.py, torch.set_num_threads through OMP_NUM_THREADS), and
# flow at the largest count with OpenMP's passive wait policy and a short spin, to see where the
# thread count collapses. Runs on the GPU machine the device tool lends (its 16 CPU cores); prepare
# here:
#   bash scripts/gpu_package.sh build/examples/quickstart_eager build/examples/quickstart_graph
#   mkdir -p .gpu/fashion-mnist && cp /usr/share/datasets/fashion-mnist/*.gz .gpu/fashion-mnist/
# then run there (carry .gpu): bash bench/cpu_threads.sh
# Every case runs with --epochs 1 and --epochs 2; the difference of the wall times is one epoch
# without start-up. THREADS (default "1 2 4 8 16") picks the counts.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
data="${FASHION_MNIST:-.gpu/fashion-mnist}"
bin=/tmp/flow-gpu/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "cpus: nproc $(nproc), $(lscpu | grep -E '^Model name' | sed 's/  */ /g')"
for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us; do
  [ -r "$f" ] && echo "$f: $(cat "$f")"
done
python3 -c "import torch; print('PyTorch', torch.__version__)" || echo "no PyTorch: its rows are skipped"

run_case() {  # name, epochs, env assignments..., -- command...
  local name=$1 epochs=$2
  shift 2
  local start end
  start=$(date +%s%N)
  if ! timeout 300 env "$@" > "$work/log" 2>&1; then
    echo "$name failed:"; tail -n 5 "$work/log"; return 1
  fi
  end=$(date +%s%N)
  echo "$name $epochs $(( (end - start) / 1000000 ))" >> "$work/times"
}

threads="${THREADS:-1 2 4 8 16}"
largest=${threads##* }
for t in $threads; do
  for epochs in 1 2; do
    common=(--data "$data" --epochs "$epochs" --device cpu)
    run_case "flow-eager-$t" "$epochs" FLOW_NUM_THREADS="$t" "$bin/quickstart_eager" "${common[@]}" --out "$work/m.safetensors"
    run_case "flow-graph-$t" "$epochs" FLOW_NUM_THREADS="$t" "$bin/quickstart_graph" "${common[@]}" --out "$work/g.safetensors" --export "$work/export"
    run_case "torch-$t" "$epochs" OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" python3 bench/torch_quickstart.py "${common[@]}"
  done
done
for epochs in 1 2; do
  common=(--data "$data" --epochs "$epochs" --device cpu)
  for variant in OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000; do
    run_case "flow-eager-$largest-$variant" "$epochs" FLOW_NUM_THREADS="$largest" "$variant" "$bin/quickstart_eager" "${common[@]}" --out "$work/m.safetensors"
    run_case "flow-graph-$largest-$variant" "$epochs" FLOW_NUM_THREADS="$largest" "$variant" "$bin/quickstart_graph" "${common[@]}" --out "$work/g.safetensors" --export "$work/export"
  done
done
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

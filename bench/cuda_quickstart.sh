#!/usr/bin/env bash
# The FashionMNIST quickstart trained on a GPU: flow eager and Graph against PyTorch, each also on
# the CPU, on the GPU machine the device tool lends. Prepare here:
#   bash scripts/gpu_package.sh build/examples/quickstart_eager build/examples/quickstart_graph
#   mkdir -p .gpu/fashion-mnist && cp /usr/share/datasets/fashion-mnist/*.gz .gpu/fashion-mnist/
# then run there (carry .gpu): bash bench/cuda_quickstart.sh
# Every case runs with --epochs 1 and --epochs 2, interleaved, ROUNDS times (default 2); the
# difference of the two wall times is one epoch (937 training steps of batch 64 and a test pass)
# without start-up, data loading or export. Prints seconds per epoch and each run's last accuracy.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu_env.sh
data="${FASHION_MNIST:-.gpu/fashion-mnist}"
rounds="${ROUNDS:-2}"
bin=/tmp/flow-gpu/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c "import torch; print('PyTorch', torch.__version__)" || echo "no PyTorch: its rows are skipped"

run_case() {  # name, epochs, command...
  local name=$1 epochs=$2
  shift 2
  local start end
  start=$(date +%s%N)
  if ! "$@" > "$work/log" 2>&1; then
    echo "$name failed:"; tail -n 5 "$work/log"; return 1
  fi
  end=$(date +%s%N)
  echo "$name $epochs $(( (end - start) / 1000000 )) $(grep -o 'Accuracy: [0-9.]*%' "$work/log" | tail -n 1 | cut -d' ' -f2)" >> "$work/times"
}

for round in $(seq 1 "$rounds"); do
  for epochs in 1 2; do
    common=(--data "$data" --epochs "$epochs")
    run_case "flow-eager-cuda" "$epochs" "$bin/quickstart_eager" "${common[@]}" --device cuda --out "$work/m.safetensors"
    run_case "flow-graph-cuda" "$epochs" "$bin/quickstart_graph" "${common[@]}" --device cuda --out "$work/g.safetensors" --export "$work/export"
    run_case "torch-cuda" "$epochs" python3 bench/torch_quickstart.py "${common[@]}" --device cuda
    run_case "flow-eager-cpu" "$epochs" "$bin/quickstart_eager" "${common[@]}" --out "$work/m.safetensors"
    run_case "flow-graph-cpu" "$epochs" "$bin/quickstart_graph" "${common[@]}" --out "$work/g.safetensors" --export "$work/export"
    run_case "torch-cpu" "$epochs" python3 bench/torch_quickstart.py "${common[@]}" --device cpu
  done
done
python3 - "$work/times" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, epochs, ms, *accuracy = line.split()
    runs.setdefault(name, {}).setdefault(int(epochs), []).append((int(ms), accuracy[0] if accuracy else "?"))
print("| case | seconds per epoch (each round) | median | accuracy after 2 epochs |")
print("| --- | --- | --- | --- |")
for name, by_epochs in runs.items():
    per_epoch = [(two[0] - one[0]) / 1000 for one, two in zip(by_epochs.get(1, []), by_epochs.get(2, []))]
    if not per_epoch:
        continue
    print(f"| {name} | {', '.join(f'{s:.2f}' for s in per_epoch)} | {statistics.median(per_epoch):.2f} | {by_epochs[2][-1][1]} |")
PY

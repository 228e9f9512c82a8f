#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), over .gpu/flow-gpu.tar.xz from scripts/gpu_package.sh:
# unpacks it, finds the CUDA, cuDNN and NCCL libraries that machine has, and runs the CUDA tests
# and the NCCL tests as a 1-rank job (NCCL takes one GPU per rank), then bench/cuda_bench beside its
# PyTorch twin when the machine has PyTorch. Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/flow-gpu-out}"
mkdir -p "$out"
source scripts/gpu_env.sh
status=0
for test in /tmp/flow-gpu/bin/*_tests; do
  name=$(basename "$test")
  case "$name" in
    flow_distributed_tests) args=(--ranks=1 --launch-timeout=120 --gtest_filter='Nccl.*') ;;
    *) args=() ;;
  esac
  echo "== $name ${args[*]}"
  timeout 300 "$test" "${args[@]}" > "$out/$name.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|tests ran|Failure|error" "$out/$name.log" | head -n 40
  echo "== $name exit $rc"
  [ $rc -eq 0 ] || status=1
done
# flow's CUDA kernels and PyTorch's on the same cases, twice each, interleaved.
if [ -x /tmp/flow-gpu/bin/cuda_bench ]; then
  for round in 1 2; do
    echo "== cuda_bench (flow), round $round"
    /tmp/flow-gpu/bin/cuda_bench --reps 30 || status=1
    if python3 -c "import torch" 2>/dev/null; then
      echo "== torch_cuda_bench.py (PyTorch $(python3 -c 'import torch; print(torch.__version__)')), round $round"
      python3 bench/torch_cuda_bench.py --reps 30 || status=1
    fi
  done
fi
exit $status

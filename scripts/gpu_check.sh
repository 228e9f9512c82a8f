#!/usr/bin/env bash
# Runs on the GPU machine (the device tool), over .gpu/flow-gpu.tar.xz from scripts/gpu_package.sh:
# unpacks it, finds the CUDA, cuDNN and NCCL libraries that machine has, and runs the CUDA tests
# and the NCCL tests as a 1-rank job (NCCL takes one GPU per rank), then bench/cuda_bench beside its
# PyTorch twin when the machine has PyTorch, then GPT-2 small training steps (bench/gpt_step)
# beside PyTorch's. Logs go to $OUT when set.
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
# GPT-2 small (12 layers, 768 wide, 12 heads, batch 8 x 1024 tokens, GPT-2's vocabulary, random
# weights) training steps on the GPU: flow eager and Graph, float32 and bfloat16 AMP, beside
# PyTorch eager and torch.compile when the machine has PyTorch (bench/torch_gpt_step.py).
# GPT2_STEPS (default 5) timed steps after 2 warm-up steps; each run stops after GPT2_TIMEOUT s (150).
if [ -x /tmp/flow-gpu/bin/gpt_step ]; then
  gpt2=(--layers 12 --width 768 --heads 12 --tokens 1024 --batch 8 --warmup 2 --steps "${GPT2_STEPS:-5}" --device cuda)
  for amp in "" --amp; do
    for mode in eager graph; do
      echo "== gpt_step --mode $mode $amp (GPT-2 small, cuda)"
      timeout "${GPT2_TIMEOUT:-150}" /tmp/flow-gpu/bin/gpt_step --mode "$mode" $amp "${gpt2[@]}" || status=1
    done
    if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
      for compile in "" --compile; do
        echo "== torch_gpt_step.py $compile $amp (GPT-2 small, cuda)"
        timeout "${GPT2_TIMEOUT:-150}" python3 bench/torch_gpt_step.py $compile $amp "${gpt2[@]}" || status=1
      done
    fi
  done
fi
exit $status

#!/usr/bin/env bash
# Greedy text generation side by side (issue 39): time to first token and decode tokens/s of a
# GPT-2 with random weights, flow eager and Graph (KV cache, build/bench/generate_bench), flow's
# oneflow_lite over the decoder export (--mode lite, the cache written in place), ONNX Runtime
# over the same model's functional export (caches as outputs) converted to ONNX by flow_onnx_export (bench/ort/ort_generate.js, which also checks its logits after the
# prompt against lite's) and PyTorch 1.13 (bench/torch_generate.py, past_key_values as Hugging
# Face's GPT-2 keeps them), each a fresh process, one after the other, ROUNDS times. Prompts of 32
# tokens. Models: gpt_train (examples/gpt_train's size) and gpt2 (GPT-2 small shapes; its decode
# runs are shorter). Installs what is missing as bench/ort_setup.sh does.
# Usage: bash bench/generate_vs.sh
# env: GENERATE_MODELS ("gpt_train gpt2"), GENERATE_BATCHES ("1 8"), GENERATE_THREADS ("1 2"),
#      GENERATE_ROUNDS (2), FLOW_BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/ort_setup.sh
cmake --build "$build" -j "$(nproc)" --target generate_bench flow_onnx_export
rounds="${GENERATE_ROUNDS:-2}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for model in ${GENERATE_MODELS:-gpt_train gpt2}; do
  case "$model" in
    gpt_train) cache=4,64 new=64 ;;
    gpt2) cache=12,64 new=16 ;;
  esac
  for threads in ${GENERATE_THREADS:-1 2}; do
    for batch in ${GENERATE_BATCHES:-1 8}; do
      echo "== $model threads $threads batch $batch"
      for ((round = 0; round < rounds; ++round)); do
        rm -rf "$work/export"
        FLOW_NUM_THREADS=$threads "$build/bench/generate_bench" --model "$model" --mode lite --batch "$batch" --new "$new" --export-dir "$work/export"
        for step in prefill decode; do
          "$build/graph/onnx/flow_onnx_export" "$work/export/functional/$step" "$work/export/$step.onnx" >/dev/null
        done
        for mode in eager graph; do
          FLOW_NUM_THREADS=$threads "$build/bench/generate_bench" --model "$model" --mode "$mode" --batch "$batch" --new "$new"
        done
        (cd bench/ort && node ort_generate.js "$work/export" --batch "$batch" --prompt 32 --new "$new" --cache "$cache" --threads "$threads" \
          --name "$model")
        /usr/bin/python3 bench/torch_generate.py --model "$model" --batch "$batch" --prompt 32 --new "$new" --threads "$threads"
      done
    done
  done
done

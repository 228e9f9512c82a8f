#!/usr/bin/env bash
# oneflow_lite vs ONNX Runtime (CPU) inference latency, one command (issue 15). Installs what is
# missing (flow's build packages through scripts/setup.sh's list, Node.js and npm with apt-get,
# onnxruntime-node 1.30.0 with npm into bench/ort/node_modules), builds the two flow targets it
# needs, exports the models (bench/ort_export_models.cpp: "relu" = one ReLU, the per-call floor;
# the quickstart MLP and the LeNet-style CNN of bench/bench_models.h; the ResNet-style net of
# tests/common/models.h) once as a oneflow_lite export and once as ONNX through flow's exporter,
# then for every model, batch and thread count runs oneflow_lite (build/bench/lite_latency) and
# ONNX Runtime (bench/ort/ort_bench.js: intraOpNumThreads = threads, interOpNumThreads 1,
# sequential, all graph optimizations) one after the other, ROUNDS times (lite, ORT, lite, ORT,
# ...), each run a fresh process timing single inferences on the same random input file. Prints a
# markdown table: the median over rounds of each run's median latency, and lite/ORT (time ratio:
# below 1, lite is faster) as the median of the per-round ratios with their min-max. ORT's times
# include the Node binding's per-call cost (promise, tensor wrapping); the relu row shows each
# runtime's floor. The outputs of lite and ORT are compared (max abs difference) for every case.
# Rows "<model>_bf16" (unless ORT_BENCH_BF16=0) run lite on the bfloat16 AMP export of the model,
# timed right after the float32 one, against the same ORT float32 run. The rows also time the
# inference nn::Graph the exports come from (unless ORT_BENCH_GRAPH=0; lite_latency
# --graph-model builds the model in-process with the same weights, with --amp for the bfloat16
# rows), between lite and ORT.
#
# With ORT_BENCH_VISION=1 the vision models of flow::vision::models (resnet18, resnet50,
# mobilenet_v2: random weights, 1000 classes, inputs (B, 3, 224, 224)) add their rows at the
# batches ORT_BENCH_VISION_BATCHES; they are off by default because they take several minutes
# (ORT_BENCH_MODELS= with ORT_BENCH_VISION=1 runs them alone).
#
# Usage: bash bench/ort_bench.sh
# env: ORT_BENCH_ROUNDS (5), ORT_BENCH_MIN_TIME (seconds timed per run, 0.5), ORT_BENCH_MODELS
#      ("relu mlp cnn resnet"), ORT_BENCH_BATCHES ("1 64"), ORT_BENCH_THREADS ("1 2"),
#      ORT_BENCH_VISION (0), ORT_BENCH_VISION_MODELS ("resnet18 resnet50 mobilenet_v2"),
#      ORT_BENCH_VISION_BATCHES ("1 8"), ORT_BENCH_BF16 (1), ORT_BENCH_GRAPH (1), FLOW_BUILD_DIR (build).
#
# onnxruntime-node is installed with --ignore-scripts: its postinstall (script/install.js) only
# fetches the CUDA/TensorRT execution-provider binaries from NuGet; the CPU library and the N-API
# binding ship in the npm package (bin/napi-v6/linux/x64/{onnxruntime_binding.node,
# libonnxruntime.so.1}) and load as they are, which this script checks with require().
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source bench/ort_setup.sh
cmake --build "$build" -j "$(nproc)" --target lite_latency ort_export_models

work="$build/ort_bench"
rm -rf "$work"
mkdir -p "$work/out"
batches=(${ORT_BENCH_BATCHES:-1 64})
models=(${ORT_BENCH_MODELS-relu mlp cnn resnet})
vision_batches=(${ORT_BENCH_VISION_BATCHES:-1 8})
vision_models=()
[ "${ORT_BENCH_VISION:-0}" != 0 ] && vision_models=(${ORT_BENCH_VISION_MODELS:-resnet18 resnet50 mobilenet_v2})
threads_list=(${ORT_BENCH_THREADS:-1 2})
rounds="${ORT_BENCH_ROUNDS:-5}"
min_time="${ORT_BENCH_MIN_TIME:-0.5}"
bf16_flag=(); [ "${ORT_BENCH_BF16:-1}" = 0 ] && bf16_flag=(--no-bf16)
# Each case: model, batch, image shape C,H,W.
cases=()
if ((${#models[@]})); then
  "$build/bench/ort_export_models" "$work" --models "$(IFS=,; echo "${models[*]}")" --batches "$(IFS=,; echo "${batches[*]}")" \
    "${bf16_flag[@]}" >/dev/null
  for model in "${models[@]}"; do for batch in "${batches[@]}"; do cases+=("$model $batch 1,28,28"); done; done
fi
if ((${#vision_models[@]})); then
  "$build/bench/ort_export_models" "$work" --models "$(IFS=,; echo "${vision_models[*]}")" \
    --batches "$(IFS=,; echo "${vision_batches[*]}")" "${bf16_flag[@]}" >/dev/null
  for model in "${vision_models[@]}"; do for batch in "${vision_batches[@]}"; do cases+=("$model $batch 3,224,224"); done; done
fi

results="$work/results.tsv"
: > "$results"
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds" >&2
  for case in "${cases[@]}"; do
    read -r model batch image <<<"$case"
    input="$work/input_${image//,/x}_b$batch.bin"
    for threads in "${threads_list[@]}"; do
      common=(--batch "$batch" --image "$image" --threads "$threads" --min-time "$min_time")
      tag="${model}_b${batch}_t${threads}"
      lite=$("$build/bench/lite_latency" "$work/$model" "$input" "${common[@]}" --output "$work/out/lite_$tag.bin" | field median_ms)
      graph=-
      if [ "${ORT_BENCH_GRAPH:-1}" != 0 ]; then
        graph=$("$build/bench/lite_latency" "$work/$model" "$input" "${common[@]}" --graph-model "$model" \
                --output "$work/out/graph_$tag.bin" | field median_ms)
      fi
      ort=$(node bench/ort/ort_bench.js "$work/$model.onnx" "$input" "${common[@]}" --output "$work/out/ort_$tag.bin" | field median_ms)
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$batch" "$threads" "$round" "$lite" "$ort" "$graph" >> "$results"
      if [ "${ORT_BENCH_BF16:-1}" != 0 ] && [ -d "$work/${model}_bf16" ]; then
        lite_bf16=$("$build/bench/lite_latency" "$work/${model}_bf16" "$input" "${common[@]}" \
                    --output "$work/out/lite_${model}_bf16_b${batch}_t${threads}.bin" | field median_ms)
        graph_bf16=-
        if [ "${ORT_BENCH_GRAPH:-1}" != 0 ]; then
          graph_bf16=$("$build/bench/lite_latency" "$work/${model}_bf16" "$input" "${common[@]}" --graph-model "$model" --amp \
                       --output "$work/out/graph_${model}_bf16_b${batch}_t${threads}.bin" | field median_ms)
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${model}_bf16" "$batch" "$threads" "$round" "$lite_bf16" "$ort" "$graph_bf16" >> "$results"
      fi
    done
  done
done

python3 - "$results" "$work/out" "$rounds" <<'PY'
import os, statistics, struct, sys
results, out_dir, rounds = sys.argv[1], sys.argv[2], sys.argv[3]
cases = {}
for line in open(results):
    model, batch, threads, _, lite, ort, graph = line.split()
    cases.setdefault((model, int(batch), int(threads)), []).append((float(lite), float(ort), None if graph == '-' else float(graph)))
def floats(path):
    data = open(path, 'rb').read()
    return struct.unpack(f'{len(data) // 4}f', data)
def max_diff(path, ort_path):
    if not os.path.exists(path):
        return '-'
    a, b = floats(path), floats(ort_path)
    return f'{max(abs(x - y) for x, y in zip(a, b)):.1e}' if len(a) == len(b) else 'nan'
def ratio(values):
    return f'{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})'
print(f'| model | batch | threads | lite median ms | Graph median ms | ORT median ms | lite/ORT (min-max over {rounds} rounds) '
      '| Graph/ORT (min-max) | max abs diff of outputs, lite / Graph vs ORT |')
print('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
for (model, batch, threads), runs in cases.items():
    lite = statistics.median(r[0] for r in runs)
    ort = statistics.median(r[1] for r in runs)
    graphs = [r[2] for r in runs if r[2] is not None]
    tag = f'{model}_b{batch}_t{threads}'
    ort_path = os.path.join(out_dir, f'ort_{model.removesuffix("_bf16")}_b{batch}_t{threads}.bin')
    diffs = f'{max_diff(os.path.join(out_dir, f"lite_{tag}.bin"), ort_path)} / {max_diff(os.path.join(out_dir, f"graph_{tag}.bin"), ort_path)}'
    graph_ms = f'{statistics.median(graphs):.3f}' if graphs else '-'
    graph_ratio = ratio([r[2] / r[1] for r in runs if r[2] is not None]) if graphs else '-'
    print(f'| {model} | {batch} | {threads} | {lite:.3f} | {graph_ms} | {ort:.3f} | {ratio([r[0] / r[1] for r in runs])} | '
          f'{graph_ratio} | {diffs} |')
PY

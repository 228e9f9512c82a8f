#!/usr/bin/env bash
# Serving benchmark, one run: the floors (a raw TCP round trip, an empty gRPC round trip), then
# for the quickstart MLP and the LeNet-style CNN oneflow_lite's own batch-1 latency and
# flow_serve's throughput and latency at concurrency 1, 8 and 32 (one-row requests, 5 s each)
# without and with dynamic batching. Server and client share this machine; 127.0.0.1 only.
# Usage: scripts/bench_serving.sh   (env BENCH_SECONDS, default 5; FLOW_SERVE_ARGS, extra flow_serve flags)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build="${FLOW_BUILD_DIR:-build}"
seconds="${BENCH_SECONDS:-5}"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

"$build/bench/export_bench_models" "$work/plain" > /dev/null
for model in mlp cnn; do
  mkdir -p "$work/batched/$model"
  cp -r "$work/plain/$model/1" "$work/batched/$model/1"
  cat > "$work/batched/$model/config.pbtxt" <<CONFIG
max_batch_size: 64
dynamic_batching { max_queue_delay_microseconds: 500 }
CONFIG
done

serve() {  # repository, grpc port
  # shellcheck disable=SC2086
  "$build/serving/flow_serve" --model-repository "$1" --address 127.0.0.1 --grpc-port "$2" --metrics-port "$(($2 + 1))" --http-port -1 \
    --repository-poll-secs 0 ${FLOW_SERVE_ARGS:-} > "$work/serve_$2.log" 2>&1 &
  for _ in $(seq 100); do
    "$build/serving/flow_client" --url "127.0.0.1:$2" ready > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "flow_serve did not become ready" >&2
  cat "$work/serve_$2.log" >&2
  exit 1
}

echo "== floor: raw TCP"
"$build/bench/tcp_pingpong" 5000
port=18101
for model in mlp cnn; do
  echo "== $model: oneflow_lite, batch 1"
  "$build/oneflow_lite/oneflow_lite_run" "$work/plain/$model/1" --batch 1 --bench 2000 --warmup 100 | tail -1
  for mode in plain batched; do
    serve "$work/$mode" "$port"
    if [ "$model" = mlp ] && [ "$mode" = plain ]; then
      echo "== floor: gRPC"
      "$build/serving/flow_loadgen" --url "127.0.0.1:$port" --empty-rpcs 2000
    fi
    for concurrency in 1 8 32; do
      echo "== $model, $mode, concurrency $concurrency"
      "$build/serving/flow_loadgen" --url "127.0.0.1:$port" --metrics-url "127.0.0.1:$((port + 1))" --model "$model" \
        --concurrency "$concurrency" --seconds "$seconds"
    done
    kill -TERM %1
    wait %1 || true
    port=$((port + 10))
  done
done

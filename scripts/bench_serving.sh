#!/usr/bin/env bash
# Serving benchmark, one run: oneflow_lite's own latency for the quickstart MLP at batch 1, the
# floor (an empty gRPC round trip), and flow_serve's throughput and latency at concurrency 1, 8
# and 32 (one-row requests, 5 s each) without and with dynamic batching. Listens on 127.0.0.1.
# Usage: scripts/bench_serving.sh   (env BENCH_SECONDS, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build="${FLOW_BUILD_DIR:-build}"
seconds="${BENCH_SECONDS:-5}"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# The quickstart MLP's prediction graph, exported untrained (the weights do not change the cost).
"$build/examples/quickstart_graph" --epochs 0 --out "$work/state.safetensors" --export "$work/plain/mlp/1" > /dev/null
mkdir -p "$work/batched/mlp"
cp -r "$work/plain/mlp/1" "$work/batched/mlp/1"
cat > "$work/batched/mlp/config.pbtxt" <<EOF
max_batch_size: 64
dynamic_batching { max_queue_delay_microseconds: 500 }
EOF

echo "== oneflow_lite, batch 1"
"$build/oneflow_lite/oneflow_lite_run" "$work/plain/mlp/1" --batch 1 --bench 2000 --warmup 100 | tail -1

serve() {  # repository, grpc port, metrics port
  "$build/serving/flow_serve" --model-repository "$1" --address 127.0.0.1 --grpc-port "$2" --metrics-port "$3" \
    --repository-poll-secs 0 > "$work/serve_$2.log" 2>&1 &
  for _ in $(seq 100); do
    "$build/serving/flow_client" --url "127.0.0.1:$2" ready > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "flow_serve did not become ready" >&2
  cat "$work/serve_$2.log" >&2
  exit 1
}

port=18101
for mode in plain batched; do
  serve "$work/$mode" "$port" "$((port + 1))"
  if [ "$mode" = plain ]; then
    echo "== floor"
    "$build/serving/flow_loadgen" --url "127.0.0.1:$port" --empty-rpcs 2000
  fi
  for concurrency in 1 8 32; do
    echo "== $mode, concurrency $concurrency"
    "$build/serving/flow_loadgen" --url "127.0.0.1:$port" --metrics-url "127.0.0.1:$((port + 1))" --model mlp \
      --concurrency "$concurrency" --seconds "$seconds"
  done
  kill -TERM %1
  wait %1 || true
  port=$((port + 10))
done

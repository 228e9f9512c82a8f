#!/usr/bin/env bash
# flow's default threads when the cores are shared: one epoch of the FashionMNIST quickstart (Graph
# and eager) and a GPT-2 training step (bench/gpt_step, Graph: 1 warm-up and 3 timed steps, with
# start-up), alone and beside a CPU-bound competitor (one busy process per core, pinned to the same
# cores); then the DDP quickstart as 2 and 4 ranks under flow_run. Each at the default settings,
# with libgomp's own spin (GOMP_SPINCOUNT=300000, what flow ran with before it set 1000 itself) and
# with FLOW_NUM_THREADS=1. Prints wall seconds and the slowdown against the run alone; the fair
# share beside the competitor is 2x. Usage: bash bench/threads_contention.sh (EPOCHS, default 1;
# FLOW_BUILD_DIR, default build).
set -uo pipefail
cd "$(dirname "$0")/.."
build="${FLOW_BUILD_DIR:-build}"
data=/usr/share/datasets/fashion-mnist
epochs="${EPOCHS:-1}"
cores=$(nproc)
work=$(mktemp -d)
competitors=()
stop_competitors() {
  ((${#competitors[@]})) && kill "${competitors[@]}" 2>/dev/null
  wait "${competitors[@]}" 2>/dev/null
  competitors=()
}
trap 'stop_competitors; rm -rf "$work"' EXIT

seconds() {  # command...: wall seconds, or "failed"
  local start end
  start=$(date +%s%N)
  if ! "$@" > "$work/log" 2>&1; then echo failed; return; fi
  end=$(date +%s%N)
  awk -v ns=$((end - start)) 'BEGIN { printf "%.2f", ns / 1e9 }'
}

graph=("$build/examples/quickstart_graph" --data "$data" --epochs "$epochs" --out "$work/g.safetensors" --export "$work/export")
eager=("$build/examples/quickstart_eager" --data "$data" --epochs "$epochs" --out "$work/e.safetensors")
gpt=("$build/bench/gpt_step" --mode graph --warmup 1 --steps 3)
ddp=("$build/examples/ddp_quickstart" --data "$data" --epochs "$epochs" --out "$work/d.safetensors")

echo "| case | setting | alone (s) | beside the competitor (s) | slowdown |"
echo "| --- | --- | --- | --- | --- |"
for name in graph eager gpt; do
  declare -n command="$name"
  for setting in default GOMP_SPINCOUNT=300000 FLOW_NUM_THREADS=1; do
    env_args=()
    [ "$setting" = default ] || env_args=("$setting")
    alone=$(seconds env "${env_args[@]}" "${command[@]}")
    for core in $(seq 0 $((cores - 1))); do
      timeout 600 taskset -c "0-$((cores - 1))" sh -c 'while :; do :; done' &
      competitors+=($!)
    done
    shared=$(seconds env "${env_args[@]}" "${command[@]}")
    stop_competitors
    label="quickstart $name"
    [ "$name" = gpt ] && label="GPT-2 step (Graph)"
    echo "| $label | $setting | $alone | $shared | $(awk -v a="$alone" -v b="$shared" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", b / a; else print "-" }') |"
  done
done
for ranks in 2 4; do
  for setting in default FLOW_NUM_THREADS=1; do
    env_args=()
    [ "$setting" = default ] || env_args=("$setting")
    echo "| ddp_quickstart, $ranks ranks under flow_run | $setting | $(seconds env "${env_args[@]}" "$build/launcher/flow_run" --nproc-per-node "$ranks" -- "${ddp[@]}") | | |"
  done
done

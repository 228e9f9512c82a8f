#!/bin/sh
# The benchmark tools' command lines: --help, usage errors (exit status 2, the message naming the
# argument), and a run; oneflow_lite_run then benchmarks a model export_bench_models wrote, and
# flow_step_profile profiles two Graph steps of the small MLP, and flow_lite_kernels_bench times one
# round of one call per side (its tables have every case, outputs within float rounding of the
# libraries').
# Usage: command_line_test.sh EXPORT_BENCH_MODELS TCP_PINGPONG ONEFLOW_LITE_RUN FLOW_STEP_PROFILE
#        FLOW_LITE_KERNELS_BENCH
set -eu
export_models=$1 pingpong=$2 lite_run=$3 step_profile=$4 kernels_bench=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

usage_error() {  # NAMED COMMAND...: exits 2 and names NAMED on stderr
  named=$1; shift
  status=0
  "$@" 2> "$work/err" || status=$?
  [ "$status" -eq 2 ] || { echo "FAIL: $* exited $status, not 2" >&2; exit 1; }
  grep -q -- "$named" "$work/err" || { echo "FAIL: $* did not name $named:" >&2; cat "$work/err" >&2; exit 1; }
}

"$export_models" --help | grep -q repository
"$pingpong" --help | grep -q round_trips
usage_error "repository is required" "$export_models"
usage_error --bogus "$export_models" "$work/repository" --bogus
usage_error round_trips "$pingpong" 0
usage_error round_trips "$pingpong" abc
usage_error --bogus "$pingpong" 10 --bogus
"$pingpong" 20 | grep -q "over 20 round trips"
"$export_models" "$work/repository" | grep -q "cnn/1"
"$lite_run" "$work/repository/cnn/1" --batch 2 --bench 2 --warmup 0 | grep -q "latency over 2 runs"
usage_error "--case: nope not in" "$step_profile" --case nope
usage_error "--mode: fast not in" "$step_profile" --mode fast
"$step_profile" --case mlp_b8 --mode graph --steps 2 --warmup 1 --rows -1 --trace "$work/trace.json" > "$work/profile"
grep -q "mlp_b8 graph, 1 thread(s)" "$work/profile"
grep -q "fused_elementwise_inplace" "$work/profile"  # the Graph's fused optimizer updates, by node type
grep -q "traceEvents" "$work/trace.json"
usage_error "--rounds" "$kernels_bench" --rounds 0
if grep -qw avx2 /proc/cpuinfo; then
  "$kernels_bench" --rounds 1 --reps 1 > "$work/kernels"
  [ "$(grep -c '^| batch' "$work/kernels")" -eq 6 ] && [ "$(grep -c '^| [0-9]* x ' "$work/kernels")" -eq 8 ] ||
    { echo "FAIL: flow_lite_kernels_bench rows:" >&2; cat "$work/kernels" >&2; exit 1; }
  # The last column, the largest difference from the libraries' outputs, stays at float rounding.
  awk -F'|' '/^\| batch/ { if ($(NF - 1) + 0 > 1e-4) { print "FAIL: " $0; bad = 1 } }
             /^\| [0-9]+ x / { if ($(NF - 1) + 0 > 1e-3) { print "FAIL: " $0; bad = 1 } } END { exit bad }' "$work/kernels"
fi
echo "bench command lines: ok"

#!/bin/sh
# The benchmark tools' command lines: --help, usage errors (exit status 2, the message naming the
# argument), and a run; oneflow_lite_run then benchmarks a model export_bench_models wrote.
# Usage: command_line_test.sh EXPORT_BENCH_MODELS TCP_PINGPONG ONEFLOW_LITE_RUN
set -eu
export_models=$1 pingpong=$2 lite_run=$3
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
echo "bench command lines: ok"

#!/bin/sh
# One bounded libFuzzer run for CTest: run_bounded.sh FUZZER SCRATCH CORPUS REGRESSIONS [flags...]
# Replays every seed and every saved reproducer (REGRESSIONS, when it exists), then mutates. New
# inputs (libFuzzer writes them to its first corpus directory) and crash reproducers go to the
# fresh SCRATCH directory, never into the source tree.
set -eu
fuzzer=$1 scratch=$2 corpus=$3 regressions=$4
shift 4
rm -rf "$scratch"
mkdir -p "$scratch/new"
set -- "$@" "$scratch/new" "$corpus"
if [ -d "$regressions" ]; then set -- "$@" "$regressions"; fi
exec "$fuzzer" -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$scratch/" "$@"

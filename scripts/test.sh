#!/usr/bin/env bash
# The whole test suite, twice: the Release build, then the sanitizer build (clang-14, ASan + UBSan,
# with the fuzz targets' bounded runs). Each part sets up, builds and runs every GoogleTest suite
# through CTest. FLOW_TEST_SUITES="release" or "sanitize" runs one part only.
set -euo pipefail
cd "$(dirname "$0")/.."
suites="${FLOW_TEST_SUITES:-release sanitize}"
for suite in $suites; do
  start=$SECONDS
  case "$suite" in
    release)
      FLOW_SANITIZE=OFF bash scripts/setup.sh
      build="${FLOW_BUILD_DIR:-build}" ;;
    sanitize)
      FLOW_SANITIZE=ON bash scripts/setup.sh
      build="${FLOW_BUILD_DIR:-build-sanitize}"
      # Any report fails the test that caused it; leaks are reported too.
      export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
      export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" ;;
    *) echo "test.sh: unknown suite '$suite' (release, sanitize)" >&2; exit 2 ;;
  esac
  echo "== test suite: $suite ($build)"
  (cd "$build" && ctest --output-on-failure -j "$(nproc)" --timeout 600)
  echo "== test suite: $suite took $((SECONDS - start)) s"
done

#!/usr/bin/env bash
# The whole test suite: sets up, builds, and runs every GoogleTest suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd "${FLOW_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 600

#!/usr/bin/env bash
# The main job: sets up, builds, and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${FLOW_BUILD_DIR:-build}/examples/tensor_demo" "$@"

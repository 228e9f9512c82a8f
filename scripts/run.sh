#!/usr/bin/env bash
# The main job: sets up, builds, and trains the FashionMNIST quickstart (eager) for 5 epochs,
# saving the weights to model.safetensors. Extra arguments go to the program
# (--epochs N, --data DIR, --out FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${FLOW_BUILD_DIR:-build}/examples/quickstart_eager" "$@"

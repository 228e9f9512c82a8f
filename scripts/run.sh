#!/usr/bin/env bash
# The main job: sets up, builds, and trains the FashionMNIST quickstart in Graph mode for 5
# epochs (examples/quickstart_graph: each step one call of a compiled nn::Graph), saving the
# graph state to model_graph.safetensors. Extra arguments go to the program
# (--epochs N, --data DIR, --out FILE). The eager twin is build/examples/quickstart_eager.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${FLOW_BUILD_DIR:-build}/examples/quickstart_graph" "$@"

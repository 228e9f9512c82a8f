# Sourced by bench/ort_bench.sh and bench/generate_vs.sh from the repository root: installs what
# is missing for a side-by-side run with ONNX Runtime (Node.js and npm with apt-get,
# onnxruntime-node 1.30.0 with npm into bench/ort/node_modules, checked with require()), and
# configures the Release build in $FLOW_BUILD_DIR (build) with scripts/setup.sh's packages when it
# is not configured yet. Sets $build and $SUDO.
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi
if ! (cd bench/ort && node -e "require('onnxruntime-node')" 2>/dev/null); then
  (cd bench/ort && npm install --ignore-scripts --no-audit --no-fund)
fi
(cd bench/ort && node -e "
  const ort = require('onnxruntime-node');
  if (ort.env.versions.node !== '1.30.0') throw new Error('onnxruntime-node ' + ort.env.versions.node + ', want 1.30.0');")

build="${FLOW_BUILD_DIR:-build}"
if [ ! -f "$build/build.ninja" ]; then
  # The packages and configuration of scripts/setup.sh, without building everything.
  grep -q '^packages=' scripts/setup.sh
  eval "$(sed -n '/^packages=(/,/)$/p' scripts/setup.sh)"
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLOW_SANITIZE=OFF >/dev/null
fi

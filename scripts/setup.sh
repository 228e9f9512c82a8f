#!/usr/bin/env bash
# Installs what the build needs (Debian packages) and builds flow into build/.
# Usage: scripts/setup.sh [Release|Debug]   (env: FLOW_BUILD_DIR, FLOW_SANITIZE=ON)
# FLOW_SANITIZE=ON builds the sanitizer configuration instead: clang-14, ASan + UBSan, the libFuzzer
# targets (FLOW_FUZZ), no CUDA, into build-sanitize/ unless FLOW_BUILD_DIR says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build ccache pkg-config libgoogle-glog-dev libgtest-dev libgmock-dev
          libbenchmark-dev libopenblas-dev libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev libprotobuf-dev protobuf-compiler dataset-fashion-mnist fortunes nlohmann-json3-dev zlib1g-dev
          libonnx-dev python3-onnx python3-numpy
          libgrpc++-dev libgrpc-dev protobuf-compiler-grpc prometheus-cpp-dev
          clang-14 libclang-rt-14-dev libcli11-dev libcpp-httplib-dev libboost-dev libssl-dev openssl curl libgloo-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Paths inside the checkout are hashed relative to it, so another clone (CI's) reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
build_type="${1:-Release}"
build_dir="${FLOW_BUILD_DIR:-build}"
config=(-DCMAKE_BUILD_TYPE="$build_type" -DFLOW_SANITIZE=OFF)
if [ "${FLOW_SANITIZE:-OFF}" = ON ]; then
  build_dir="${FLOW_BUILD_DIR:-build-sanitize}"
  export CC=clang-14 CXX=clang++-14
  config=(-DCMAKE_BUILD_TYPE="${1:-Debug}" -DFLOW_SANITIZE=ON -DFLOW_FUZZ=ON -DFLOW_WITH_CUDA=OFF -DFLOW_BUILD_BENCH=OFF)
fi
cmake -S . -B "$build_dir" -G Ninja "${config[@]}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"

#!/usr/bin/env bash
# Packs what the CUDA checks need to run on a GPU machine that has the CUDA runtime, cuBLAS, cuDNN
# and NCCL but none of flow's other dependencies (no apt there): the test binaries built in
# build/ (a CUDA build: nvcc present), flow's shared libraries, and every other library they load
# except the C runtime and CUDA's own, into .gpu/flow-gpu.tar.xz. scripts/gpu_check.sh runs it.
# Usage: scripts/gpu_package.sh [binary ...]   (default: the cuda and distributed tests, cuda_bench, gpt_step)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${FLOW_BUILD_DIR:-build}"
binaries=("$@")
((${#binaries[@]})) || binaries=("$build/tests/flow_cuda_tests" "$build/tests/flow_distributed_tests" "$build/bench/cuda_bench" "$build/bench/gpt_step")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" .gpu
cp "${binaries[@]}" "$stage/bin/"
# The GPU machine brings its own C runtime, driver and CUDA libraries (versions matching its driver).
provided='^(libc|libstdc\+\+|libgcc_s|libm|libdl|librt|libpthread|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|linux-vdso)\.so'
ldd "${binaries[@]}" | awk '/=> \//{print $1, $3}' | sort -u | while read -r name path; do
  [[ "$name" =~ $provided ]] || cp -L "$path" "$stage/lib/$name"
done
tar -C "$stage" -cJf .gpu/flow-gpu.tar.xz bin lib
ls -la .gpu/flow-gpu.tar.xz

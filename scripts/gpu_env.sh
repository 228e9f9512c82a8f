# Sourced on the GPU machine (the device tool) by scripts/gpu_check.sh and bench/cuda_quickstart.sh:
# unpacks .gpu/flow-gpu.tar.xz (scripts/gpu_package.sh) into /tmp/flow-gpu and puts that
# machine's own CUDA, cuBLAS, cuDNN and NCCL libraries beside the packed ones on LD_LIBRARY_PATH.
mkdir -p /tmp/flow-gpu
tar -C /tmp/flow-gpu -xJf .gpu/flow-gpu.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
libdirs=/tmp/flow-gpu/lib
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  found=$(find /usr/local/cuda/ /usr/local/cuda/lib64/ /opt /usr/lib -name "$lib" 2>/dev/null | head -n 1)
  echo "$lib: ${found:-not found}"
  [ -n "$found" ] && libdirs="$libdirs:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

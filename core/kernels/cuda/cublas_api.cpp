#include "core/kernels/cuda/cublas_api.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <filesystem>
#include <string>

#include "core/error.h"

namespace flow::cuda {
namespace {

struct Opened {
  CublasApi api{};
  std::string error;  // empty when every function was found
};

Opened open_cublas() {
  Opened opened;
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  Dl_info runtime{};
  // The toolkit keeps cuBLAS beside the CUDA runtime, whose directory may be on no search path
  // (found through flow's RUNPATH).
  if (!library && dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &runtime) && runtime.dli_fname) {
    const std::string beside = (std::filesystem::path(runtime.dli_fname).parent_path() / name).string();
    library = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!library) {
    opened.error = "cannot load " + name + ": " + dlerror();
    return opened;
  }
  auto find = [&](auto& function, const char* symbol) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, symbol));
    if (!function && opened.error.empty()) opened.error = name + " has no " + symbol;
  };
  find(opened.api.create, "cublasCreate_v2");
  find(opened.api.sgemm, "cublasSgemm_v2");
  find(opened.api.dgemm, "cublasDgemm_v2");
  find(opened.api.gemm_ex, "cublasGemmEx");
  return opened;
}

}  // namespace

const CublasApi& cublas_api(const char* op) {
  static const Opened opened = open_cublas();
  if (!opened.error.empty()) fail(op, opened.error);
  return opened.api;
}

}  // namespace flow::cuda

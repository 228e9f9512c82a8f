// The CUDA device backend: a caching allocator per device, copies and synchronisation.
// Registered at load time; on a machine without a driver or GPU it reports 0 devices.
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"

namespace flow::cuda {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(what, "CUDA error: ", cudaGetErrorString(status));
}

// Freed blocks are kept per rounded size and handed out again without cudaFree/cudaMalloc,
// which synchronise the device and cost far more than the kernels they feed.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  void* allocate(size_t nbytes) override {
    const size_t size = round_up(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& blocks = free_[size];
      if (!blocks.empty()) {
        void* ptr = blocks.back();
        blocks.pop_back();
        return ptr;
      }
    }
    check(cudaSetDevice(device_), "allocate");
    void* ptr = nullptr;
    if (cudaMalloc(&ptr, size) != cudaSuccess) {
      cudaGetLastError();  // clear the error, release the cache and try once more
      empty_cache();
      check(cudaMalloc(&ptr, size), "allocate");
    }
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[round_up(nbytes)].push_back(ptr);
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    cudaSetDevice(device_);
    for (auto& [size, blocks] : free_) {
      for (void* ptr : blocks) cudaFree(ptr);
      blocks.clear();
    }
  }

 private:
  static size_t round_up(size_t nbytes) {
    const size_t unit = nbytes < (size_t{1} << 20) ? 512 : (size_t{2} << 20);
    return std::max(unit, (nbytes + unit - 1) / unit * unit);
  }
  int device_;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
};

class CudaBackend final : public DeviceBackend {
 public:
  Allocator& allocator(int index) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (allocators_.empty()) {
      for (int i = 0; i < device_count(); ++i) allocators_.push_back(std::make_unique<CachingAllocator>(i));
    }
    return *allocators_.at(static_cast<size_t>(index));
  }
  int device_count() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return count;
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) override {
    if (nbytes == 0) return;
    const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                                : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                      : cudaMemcpyDeviceToDevice;
    check(cudaMemcpy(dst, src, nbytes, kind), "copy");
  }
  void synchronize(int index) override {
    check(cudaSetDevice(index), "synchronize");
    check(cudaDeviceSynchronize(), "synchronize");
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
};

struct Registration {
  Registration() { register_backend(DeviceType::kCUDA, new CudaBackend()); }  // lives for the process
};
Registration registration;

}  // namespace
}  // namespace flow::cuda

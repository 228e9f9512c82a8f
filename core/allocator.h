#pragma once
#include <cstddef>

#include "core/device.h"

namespace flow {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Returns cached blocks to the system.
  virtual void empty_cache() {}
};

// Everything device-specific the core needs besides kernels. The CPU backend is always present;
// the CUDA backend registers itself when flow is built with CUDA.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Allocator& allocator(int index) = 0;
  virtual int device_count() = 0;
  // Copies nbytes between any two devices of which at least one is of this backend's type.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) = 0;
  // Waits for all queued work on the device.
  virtual void synchronize(int index) = 0;
};

void register_backend(DeviceType type, DeviceBackend* backend);
// The backend for device; throws flow::Error (naming op) if it is not built or not present.
DeviceBackend& backend_for(Device device, const char* op = "device");
bool cuda_is_available();
int cuda_device_count();

}  // namespace flow

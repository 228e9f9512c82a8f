#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/device.h"

namespace flow {

class Allocator;

// A block of device memory shared by a tensor and all of its views. The version counter is
// bumped by every in-place write so autograd can detect saved values that were overwritten.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Memory the caller allocated (from_blob): never freed by flow; deleter(data), when given, runs
  // as the storage is destroyed.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for external memory
  std::function<void(void*)> deleter_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace flow

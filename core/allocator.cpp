#include "core/allocator.h"

#include <glog/logging.h>

#include <array>
#include <cstdlib>
#include <list>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/storage.h"

namespace flow {
namespace {

constexpr size_t kAlignment = 64;
// Blocks below this go straight to malloc, which serves them from its heap's free lists: at and
// above it glibc maps them, or trims the heap's top after they are freed, so their pages are new
// again on the next step (an eager GPT training step allocated 600 blocks of 128-768 KiB and took
// 5600 page faults a step).
constexpr size_t kCacheMinBytes = size_t{128} << 10;
constexpr size_t kLargeBlockBytes = size_t{1} << 20;
constexpr size_t kCacheLimitBytes = size_t{2} << 30;

// Large CPU blocks are kept for reuse: a freshly mapped block pays a page fault per 4 KiB on
// first touch, which would cost element-wise ops on big tensors about half their bandwidth (and
// far more in VMs whose page faults are slow).
class CachingCpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    const size_t rounded = round_up(nbytes);
    if (rounded >= kCacheMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_blocks_.find(rounded);
      if (it != free_blocks_.end() && !it->second.empty()) {
        void* ptr = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        lru_.remove_if([&](const auto& entry) { return entry.first == ptr; });
        return ptr;
      }
    }
    void* ptr = std::aligned_alloc(kAlignment, std::max(rounded, kAlignment));
    if (ptr == nullptr) fail("allocate", "out of CPU memory allocating ", nbytes, " bytes");
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    const size_t rounded = round_up(nbytes);
    if (rounded < kCacheMinBytes) {
      std::free(ptr);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    free_blocks_[rounded].push_back(ptr);
    lru_.emplace_back(ptr, rounded);
    cached_bytes_ += rounded;
    while (cached_bytes_ > kCacheLimitBytes) evict_oldest();
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!lru_.empty()) evict_oldest();
  }

  ~CachingCpuAllocator() override { empty_cache(); }

 private:
  // Sizes are rounded to 1 MiB from 1 MiB on, to 64 KiB between kCacheMinBytes and 1 MiB, so that
  // near sizes share cached blocks.
  static size_t round_up(size_t nbytes) {
    const size_t unit = nbytes >= kLargeBlockBytes ? kLargeBlockBytes : nbytes >= kCacheMinBytes ? size_t{64} << 10 : kAlignment;
    return (nbytes + unit - 1) / unit * unit;
  }

  void evict_oldest() {
    auto [ptr, size] = lru_.front();
    lru_.pop_front();
    auto& blocks = free_blocks_[size];
    std::erase(blocks, ptr);
    cached_bytes_ -= size;
    std::free(ptr);
  }

  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;
  std::list<std::pair<void*, size_t>> lru_;
  size_t cached_bytes_ = 0;
};

class CpuBackend final : public DeviceBackend {
 public:
  Allocator& allocator(int) override { return allocator_; }
  int device_count() override { return 1; }
  void copy(void* dst, Device, const void* src, Device, size_t nbytes) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  void synchronize(int) override {}

 private:
  CachingCpuAllocator allocator_;
};

// Meta tensors have storages of a size but no memory behind them.
class NoMemoryAllocator final : public Allocator {
 public:
  void* allocate(size_t) override { return nullptr; }
  void deallocate(void*, size_t) override {}
};

class MetaBackend final : public DeviceBackend {
 public:
  Allocator& allocator(int) override { return allocator_; }
  int device_count() override { return 1; }
  void copy(void*, Device, const void*, Device, size_t) override { fail("to", "meta tensors have no data to copy"); }
  void synchronize(int) override {}

 private:
  NoMemoryAllocator allocator_;
};

std::array<DeviceBackend*, 3>& backends() {
  static CpuBackend* cpu = new CpuBackend();  // intentionally leaked: outlives static tensors
  static MetaBackend* meta = new MetaBackend();
  static std::array<DeviceBackend*, 3> table{cpu, nullptr, meta};
  return table;
}

}  // namespace

void register_backend(DeviceType type, DeviceBackend* backend) {
  backends()[static_cast<size_t>(type)] = backend;
}

DeviceBackend& backend_for(Device device, const char* op) {
  DeviceBackend* backend = backends()[static_cast<size_t>(device.type)];
  if (device.is_cuda()) {
    if (backend == nullptr) fail(op, "CUDA is not available: flow was built without CUDA");
    const int count = backend->device_count();
    if (count == 0) fail(op, "CUDA is not available: no CUDA device is present");
    if (device.index < 0 || device.index >= count) {
      fail(op, "invalid device ", device, ": ", count, " CUDA device", count == 1 ? " is" : "s are", " present");
    }
  }
  return *backend;
}

bool cuda_is_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
  DeviceBackend* backend = backends()[static_cast<size_t>(DeviceType::kCUDA)];
  return backend ? backend->device_count() : 0;
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  allocator_ = &backend_for(device, "allocate").allocator(device.index);
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (allocator_ != nullptr) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace flow

#pragma once
#include <ostream>
#include <string>

namespace flow {

// kMeta: tensors with shape, dtype and strides but no data (PyTorch's meta device). Ops on them
// run meta inference only, so a model of any size can be traced, compiled and measured.
enum class DeviceType : uint8_t { kCPU, kCUDA, kMeta };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  Device() = default;
  Device(DeviceType type_, int index_ = 0) : type(type_), index(index_) {}  // NOLINT: implicit
  // Parses "cpu", "cuda", "cuda:1", "meta"; throws flow::Error otherwise.
  Device(const std::string& spec);  // NOLINT: implicit, like torch::Device("cuda:0")
  Device(const char* spec) : Device(std::string(spec)) {}  // NOLINT

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool is_meta() const { return type == DeviceType::kMeta; }
  bool operator==(const Device& other) const = default;
  std::string str() const;  // "cpu", "cuda:0" or "meta"
};

inline const Device kCPU{DeviceType::kCPU, 0};
inline const Device kMeta{DeviceType::kMeta, 0};

// "cpu", "cuda" or "meta".
const char* device_type_name(DeviceType type);

// The device creation functions (and so modules' parameters) use when TensorOptions name none:
// the CPU unless a DefaultDeviceGuard on this thread says otherwise, like PyTorch's
// `with torch.device("meta"):`. Build a model of any size under DefaultDeviceGuard(kMeta) and
// it takes no memory.
Device default_device();
class DefaultDeviceGuard {
 public:
  explicit DefaultDeviceGuard(Device device);
  ~DefaultDeviceGuard();
  DefaultDeviceGuard(const DefaultDeviceGuard&) = delete;
  DefaultDeviceGuard& operator=(const DefaultDeviceGuard&) = delete;

 private:
  Device previous_;
};

std::ostream& operator<<(std::ostream& out, const Device& device);

}  // namespace flow

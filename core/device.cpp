#include "core/device.h"

#include "core/error.h"

namespace flow {

Device::Device(const std::string& spec) {
  if (spec == "cpu") return;
  if (spec == "meta") {
    type = DeviceType::kMeta;
    return;
  }
  const std::string prefix = "cuda";
  if (spec.rfind(prefix, 0) == 0) {
    type = DeviceType::kCUDA;
    if (spec.size() == prefix.size()) return;
    if (spec[prefix.size()] == ':' && spec.size() > prefix.size() + 1) {
      const std::string number = spec.substr(prefix.size() + 1);
      if (number.find_first_not_of("0123456789") == std::string::npos && number.size() < 6) {
        index = std::stoi(number);
        return;
      }
    }
  }
  fail("device", "invalid device string '", spec, "' (expected 'cpu', 'cuda', 'cuda:N' or 'meta')");
}

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::kCPU: return "cpu";
    case DeviceType::kCUDA: return "cuda";
    case DeviceType::kMeta: return "meta";
  }
  return "?";
}

std::string Device::str() const { return is_cuda() ? "cuda:" + std::to_string(index) : device_type_name(type); }

namespace {
Device& thread_default_device() {
  thread_local Device device = kCPU;
  return device;
}
}  // namespace

Device default_device() { return thread_default_device(); }

DefaultDeviceGuard::DefaultDeviceGuard(Device device) : previous_(thread_default_device()) { thread_default_device() = device; }
DefaultDeviceGuard::~DefaultDeviceGuard() { thread_default_device() = previous_; }

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

}  // namespace flow

#pragma once
#include <ostream>
#include <string>

namespace flow {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  Device() = default;
  Device(DeviceType type_, int index_ = 0) : type(type_), index(index_) {}  // NOLINT: implicit
  // Parses "cpu", "cuda", "cuda:1"; throws flow::Error otherwise.
  Device(const std::string& spec);  // NOLINT: implicit, like torch::Device("cuda:0")
  Device(const char* spec) : Device(std::string(spec)) {}  // NOLINT

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& other) const = default;
  std::string str() const;  // "cpu" or "cuda:0"
};

inline const Device kCPU{DeviceType::kCPU, 0};

std::ostream& operator<<(std::ostream& out, const Device& device);

}  // namespace flow

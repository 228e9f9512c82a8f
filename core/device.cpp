#include "core/device.h"

#include "core/error.h"

namespace flow {

Device::Device(const std::string& spec) {
  if (spec == "cpu") return;
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
  fail("device", "invalid device string '", spec, "' (expected 'cpu', 'cuda' or 'cuda:N')");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

}  // namespace flow

#pragma once
// flow::Error is what every user mistake raises; glog CHECK guards internal invariants only.
#include <sstream>
#include <stdexcept>
#include <string>

namespace flow {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// Throws flow::Error("[op] message...") built from the remaining arguments.
template <typename... Args>
[[noreturn]] void fail(const std::string& op, const Args&... args) {
  throw Error(detail::concat("[", op, "] ", args...));
}

}  // namespace flow

// FLOW_ARG_CHECK(cond, "op", message parts...): argument check at an op's call site.
#define FLOW_ARG_CHECK(cond, op, ...) \
  do {                                \
    if (!(cond)) ::flow::fail(op, __VA_ARGS__); \
  } while (0)

#pragma once
// Errors that answer a call with a specific gRPC status (NOT_FOUND, INVALID_ARGUMENT, ...).
// They are flow::Errors, so the message reads like every other user error in flow.
#include <grpcpp/support/status.h>

#include <string>

#include "core/error.h"

namespace flow::serving {

class ServingError : public Error {
 public:
  ServingError(grpc::StatusCode code, const std::string& message) : Error(message), code_(code) {}
  grpc::StatusCode code() const { return code_; }

 private:
  grpc::StatusCode code_;
};

// Throws ServingError(code, "[serving] " + the remaining arguments).
template <typename... Args>
[[noreturn]] void fail_status(grpc::StatusCode code, const Args&... args) {
  throw ServingError(code, detail::concat("[serving] ", args...));
}

// The status a caught exception answers with: a ServingError's own code, INVALID_ARGUMENT for
// any other flow::Error (a user mistake), INTERNAL for anything else.
inline grpc::Status status_of(const std::exception& error) {
  if (const auto* serving = dynamic_cast<const ServingError*>(&error)) return {serving->code(), serving->what()};
  if (dynamic_cast<const Error*>(&error)) return {grpc::StatusCode::INVALID_ARGUMENT, error.what()};
  return {grpc::StatusCode::INTERNAL, error.what()};
}

}  // namespace flow::serving

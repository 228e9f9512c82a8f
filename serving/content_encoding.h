#pragma once
// Request bodies sent with a Content-Encoding: gzip and deflate are inflated here, under a limit
// on the inflated bytes, so that a small compressed body cannot expand into more memory than an
// uncompressed one may take.
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace flow::serving {

// An HTTP status and why: the request cannot be served as sent.
struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

// `body` decoded per its Content-Encoding field (none or "identity": as it is; "gzip", "x-gzip"
// or "deflate": inflated). Throws HttpError 413 as soon as the inflated bytes exceed max_bytes,
// 415 for any other encoding (or a list of them), 400 for a stream that does not inflate.
std::string decode_content(std::string body, const std::optional<std::string>& encoding, size_t max_bytes);

}  // namespace flow::serving

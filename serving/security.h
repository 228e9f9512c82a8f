#pragma once
// Who may call the server: TLS (server certificate, optionally clients' certificates checked
// against a CA: mutual TLS) for every endpoint, and an optional bearer token checked on every call
// but health and metrics (those too with protect_health).
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace grpc {
class ServerCredentials;
}

namespace flow::serving {

// PEM files; no certificate: plain TCP.
struct TlsFiles {
  std::string cert_file;       // the server's certificate chain
  std::string key_file;        // its private key
  std::string client_ca_file;  // set: clients must present a certificate this CA signed

  bool enabled() const { return !cert_file.empty(); }
  // Throws flow::Error naming the file that is missing or unreadable, or a key without a
  // certificate (or the reverse).
  void check() const;
};

// gRPC's server credentials for `tls` (insecure when it is not enabled).
std::shared_ptr<grpc::ServerCredentials> grpc_server_credentials(const TlsFiles& tls);

// A bearer token, compared in constant time (as SHA-256 digests, so not even its length leaks).
class BearerToken {
 public:
  // Throws flow::Error for an empty token.
  explicit BearerToken(std::string_view token);
  // The token of the file's first line (spaces around it dropped). Throws flow::Error naming the
  // file when it cannot be read or holds no token.
  static BearerToken from_file(const std::string& path);

  // Whether an Authorization field's value ("Bearer <token>") carries this token.
  bool accepts(std::string_view authorization) const;

 private:
  std::array<unsigned char, 32> digest_;
};

// What a server checks: none set, every caller is served.
struct AccessPolicy {
  std::optional<BearerToken> token;
  bool protect_health = false;  // health (gRPC and REST) and /metrics need the token too

  // Whether a call with this Authorization value (none: absent) may go on; `health` for the
  // health and metrics endpoints.
  bool allows(const std::optional<std::string_view>& authorization, bool health) const;
};

}  // namespace flow::serving

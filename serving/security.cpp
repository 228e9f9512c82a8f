#include "serving/security.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "core/error.h"
#include "serving/text_file.h"

namespace flow::serving {
namespace {

std::array<unsigned char, 32> sha256(std::string_view text) {
  std::array<unsigned char, 32> digest;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

std::string_view trimmed(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

}  // namespace

void TlsFiles::check() const {
  if (cert_file.empty() != key_file.empty()) fail("serving", "TLS needs both a certificate and a private key file");
  if (cert_file.empty() && !client_ca_file.empty()) fail("serving", "a client CA (mutual TLS) needs the server's certificate and key");
  for (const auto& [path, what] : {std::pair{cert_file, "TLS certificate"}, {key_file, "TLS private key"}, {client_ca_file, "TLS client CA"}}) {
    if (!path.empty()) read_text_file("serving", path, what);
  }
}

std::shared_ptr<grpc::ServerCredentials> grpc_server_credentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(tls.client_ca_file.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                                       : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!tls.client_ca_file.empty()) options.pem_root_certs = read_text_file("serving", tls.client_ca_file, "TLS client CA");
  options.pem_key_cert_pairs.push_back(
      {read_text_file("serving", tls.key_file, "TLS private key"), read_text_file("serving", tls.cert_file, "TLS certificate")});
  return grpc::SslServerCredentials(options);
}

BearerToken::BearerToken(std::string_view token) : digest_(sha256(token)) {
  if (token.empty()) fail("serving", "the bearer token is empty");
}

BearerToken BearerToken::from_file(const std::string& path) {
  return BearerToken(first_line_of("serving", path, "bearer token"));
}

bool BearerToken::accepts(std::string_view authorization) const {
  constexpr std::string_view kScheme = "Bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != std::tolower(static_cast<unsigned char>(kScheme[i]))) return false;
  }
  const auto given = sha256(trimmed(authorization.substr(kScheme.size())));
  return CRYPTO_memcmp(given.data(), digest_.data(), digest_.size()) == 0;
}

bool AccessPolicy::allows(const std::optional<std::string_view>& authorization, bool health) const {
  if (!token || (health && !protect_health)) return true;
  return authorization && token->accepts(*authorization);
}

}  // namespace flow::serving
